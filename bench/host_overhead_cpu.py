"""Host microseconds per call of a compiled real model on the CPU, split into dynamo's share and ours.

The GPU suite's small models are host-bound: what a call costs the host decides their speed.
This runs :mod:`bench.gpu_models`'s tiny configs (C++ target, fp32, tiny sizes, so kernels
take little of the time) through eager, ``compiler.compile``, ``backend="symshape"``,
``backend_inner`` (what the backend returned, called with dynamo's arguments: no frame, no
guards) and ``dynamo_only`` (dynamo's frame and guards, the outputs cached), prints us per
call side by side, and with ``--profile`` a cProfile of the compiled modes' calls.

Usage::

    OMP_NUM_THREADS=1 python bench/host_overhead_cpu.py --model bert --profile

Example (the timer)::

    >>> best_us(lambda: None, n=10, reps=2) >= 0
    True
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import compiler  # noqa: E402

compiler.register()


def best_us(fn, n=200, reps=5) -> float:
    """The fastest of ``reps`` means of ``n`` calls, in microseconds (the host's noise removed)."""
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


def _fn(mode, prog, specs):
    if mode == "eager":
        return prog
    if mode == "symshape":
        return compiler.compile(prog, *specs, target="cpp")
    if mode == "backend":
        return torch.compile(prog, backend="symshape", dynamic=True)
    import gpu_host_probe as hp
    return hp._split_backend(prog, inner=(mode == "backend_inner"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="bert")
    ap.add_argument("--point", default="2x8", help="BxT")
    ap.add_argument("--modes", default="eager,symshape,backend,backend_inner,dynamo_only")
    ap.add_argument("--profile", action="store_true", help="cProfile of 200 calls per compiled mode")
    ap.add_argument("-n", type=int, default=200)
    a = ap.parse_args(argv)
    import gpu_models as gm
    case = next(c for c in gm.CASES if c.name == a.model)
    torch.manual_seed(0)
    prog = case.make(True).eval()
    specs = tuple(s.replace("{dt}", "f32") for s in case.specs)
    b, t = (int(x) for x in a.point.split("x"))
    args = case.inputs(b, t, "cpu", torch.float32, torch.Generator().manual_seed(1), True)
    rows = []
    with torch.no_grad():
        ref = prog(*args)
        for mode in a.modes.split(","):
            torch._dynamo.reset()
            f = _fn(mode, prog, specs)
            out = f(*args)
            if isinstance(out, (list, tuple)):  # backend_inner: the graph's output list
                out = out[0]
            ok = out.shape == ref.shape and torch.allclose(out, ref, atol=1e-4, rtol=1e-4)
            us = best_us(lambda: f(*args), n=a.n)
            rows.append((mode, us, ok))
            if a.profile and mode != "eager":
                pr = cProfile.Profile()
                pr.enable()
                for _ in range(a.n):
                    f(*args)
                pr.disable()
                s = io.StringIO()
                pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(22)
                print(f"\n---- cProfile {mode}, {a.n} calls ----")
                print("\n".join(ln for ln in s.getvalue().splitlines()[6:] if ln.strip()))
    print(f"\n{a.model} fp32 {a.point} on the CPU (C++ target), torch {torch.__version__}: host us per call")
    for mode, us, ok in rows:
        print(f"  {mode:<14} {us:9.1f} us   matches eager: {ok}")


if __name__ == "__main__":
    main()
