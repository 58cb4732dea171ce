"""Size 1 is a size (issue 11): what the default policy costs and saves, side by side
with PyTorch's 0/1 specialization (``specialize_zero_one=True``) and torch.export.

    python bench/size_one_bench.py            # dinfer of (x @ y) @ z, conv net record counts
    python bench/size_one_bench.py --zero-one # also the 0/1 policy's dinfer run (about 70 s)

Prints one table per experiment; nothing is asserted (tests/test_size_one*.py check
the answers).
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import shapes  # noqa: E402
from validation import dinfer  # noqa: E402


def chain(x, y, z):
    return (x @ y) @ z


def bench_dinfer(zero_one: bool):
    print("dinfer (x @ y) @ z, dims A..F in 1..4")
    print(f"  {'policy':<22}{'classes':>8}{'complete':>10}{'seconds':>9}")
    runs = [("size 1 is a size", False)] + ([("0/1 specialized", True)] if zero_one else [])
    for label, szo in runs:
        t = time.perf_counter()
        sp = dinfer(chain, "x: f32[A, B]", "y: f32[C, D]", "z: f32[E, F]", dims={n: (1, 4) for n in "ABCDEF"},
                    specialize_zero_one=szo, time_budget=70)
        print(f"  {label:<22}{len(sp.classes):>8}{str(sp.complete):>10}{time.perf_counter() - t:>9.2f}")


def bench_convnets():
    from tests.test_size_one_convnets import NETS, SPEC, exported
    print("\nconv nets, B, H, W symbolic: guards + runtime asserts")
    print(f"  {'model':<14}{'symshape':>9}{'0/1 policy':>11}{'torch.export':>13}")
    for name, make in NETS.items():
        torch.manual_seed(0)
        model = make().eval()
        counts = []
        for szo in (False, True):
            tp = shapes.trace(model, SPEC, dims={"H": 64, "W": 96}, specialize_zero_one=szo)
            counts.append(len(tp.guards) + len(tp.runtime_asserts))
        theirs, _ = exported(model)
        print(f"  {name:<14}{counts[0]:>9}{counts[1]:>11}{theirs:>13}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zero-one", action="store_true", help="also run dinfer under the 0/1 policy (slow)")
    ap.add_argument("--no-convnets", action="store_true", help="skip the conv net table")
    args = ap.parse_args()
    bench_dinfer(args.zero_one)
    if not args.no_convnets:
        bench_convnets()
