"""Benchmark dinfer: per program, classes found, traces run, completeness, time.

Run::

    python bench/dinfer_bench.py            # the shape zoo, a conv net, GPT-2 (tiny config)
    python bench/dinfer_bench.py --wide     # the zoo again with every range widened to 1..4096

The target is under 5 s for each small program.  One throwaway trace runs
first so that torch's one-time dispatcher warm-up is not charged to the
first program.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import shapes  # noqa: E402
from validation import dinfer  # noqa: E402

TARGET_S = 5.0


def _zoo():
    spec = importlib.util.spec_from_file_location("shape_zoo", os.path.join(ROOT, "examples", "shape_zoo.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def cases(wide: bool):
    zoo = _zoo()
    out = []
    for name, prog, specs, dims in zoo.CASES:
        if isinstance(prog, type):
            torch.manual_seed(0)
            prog = prog().eval()
        if wide:
            dims = {k: (1, 4096) for k in dims}
        out.append((name, prog, specs, dims))
    out.append(("conv3x3", nn.Conv2d(3, 8, 3).eval(), ["x: f32[N, 3, H, W]"],
                {"N": (1, 64), "H": (1, 1024), "W": (1, 1024)}))
    try:
        import transformers
        transformers.utils.logging.set_verbosity_error()
        torch.manual_seed(0)
        cfg = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, n_positions=16, vocab_size=50)
        out.append(("gpt2_tiny", transformers.GPT2Model(cfg).eval(), ["ids: i64[B, T]"],
                    {"B": (1, 4), "T": (1, 40)}))
    except ImportError:
        print("(transformers not installed: GPT-2 skipped)", file=sys.stderr)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wide", action="store_true", help="widen the zoo's ranges to 1..4096")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    shapes.trace(lambda x: x.view(-1, 2), "x: f32[N]")  # warm-up, not timed
    rows = []
    for name, prog, specs, dims in cases(args.wide):
        t0 = time.perf_counter()
        space = dinfer(prog, *specs, dims=dims)
        dt = time.perf_counter() - t0
        ranges = " ".join(f"{k}={lo}..{hi}" for k, (lo, hi) in dims.items())
        rows.append((name, ranges, len(space.classes), space.traces, space.complete, dt))
    w = max(len(r[0]) for r in rows)
    wr = max(len(r[1]) for r in rows)
    print(f"{'program':<{w}}  {'dims':<{wr}}  classes  traces  complete  time (s)")
    for name, ranges, ncls, ntr, complete, dt in rows:
        flag = "" if dt < TARGET_S else "  (over target)"
        print(f"{name:<{w}}  {ranges:<{wr}}  {ncls:>7}  {ntr:>6}  {str(complete):>8}  {dt:>8.2f}{flag}")
    slow = [r for r in rows if r[5] >= TARGET_S]
    print(f"{len(rows)} programs, {sum(r[4] for r in rows)} complete; "
          f"{'all under' if not slow else f'{len(slow)} over'} the {TARGET_S:g} s target; "
          f"total {sum(r[5] for r in rows):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
