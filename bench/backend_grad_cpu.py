"""A forward call with and without autograd recording: what the backend pays for grad mode on the CPU.

:mod:`bench.cpu_models` times every mode under ``torch.no_grad``.  A user who calls a compiled
module outside ``no_grad`` (its parameters require grad) gets the training path instead: dynamo
hands AOTAutograd's forward graph to symshape, which runs it inside an autograd Function and
keeps the saved activations.  For each model (the bench size of :mod:`bench.cpu_models`, its
first point) this times eager, ``compiler.compile(target="cpp")`` (values only, either way),
``backend="symshape"`` and Inductor dynamic, grad off and grad on, the four modes called in
turn (:func:`bench.cpu_models.interleaved_ms`), and prints ms and backend/Inductor.

Usage::

    python bench/backend_grad_cpu.py --threads 2 --only vit,bert,gpt2 --reps 40

Example (the ratio column)::

    >>> ratio({"ind_dyn": 4.0, "backend": 5.0})
    0.8
"""
from __future__ import annotations

import argparse
import copy
import os
import sys

if "--threads" in sys.argv[:-1]:  # before torch and the kernels' OpenMP runtime start their thread pools
    os.environ["OMP_NUM_THREADS"] = sys.argv[sys.argv.index("--threads") + 1]

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import compiler  # noqa: E402
from bench import cpu_models as CM  # noqa: E402

MODES = ("eager", "compile", "backend", "ind_dyn")


def ratio(ms: dict) -> float:
    """Inductor dynamic's ms over the backend's: above 1 the backend is faster."""
    return ms["ind_dyn"] / ms["backend"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--only", default="vit,bert,gpt2", help="models whose name contains one of these")
    ap.add_argument("--reps", type=int, default=40)
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    compiler.register()
    print(f"torch={torch.__version__} threads={torch.get_num_threads()} fp32 reps={a.reps} "
          f"load average at start: {os.getloadavg()[0]:.1f}")
    print(f"{'model':<16} {'point':<6} {'grad':<5} " + " ".join(f"{m + ' ms':>11}" for m in MODES) + "  bk/ind")
    for case, points in CM.cases(False):
        if not any(o in case.name for o in a.only.split(",")):
            continue
        B, T = points[0]
        m = case.module()
        x = case.inputs({"B": B, "T": T})
        fns = {"eager": m, "compile": compiler.compile(m, *case.specs, target="cpp"),
               "backend": torch.compile(copy.deepcopy(m), backend="symshape", dynamic=True),
               "ind_dyn": torch.compile(copy.deepcopy(m), dynamic=True)}
        for grad in (False, True):
            with torch.set_grad_enabled(grad):
                ms = CM.interleaved_ms(fns, x, a.reps)
            print(f"{case.name:<16} {f'{B},{T}' if T else B!s:<6} {'on' if grad else 'off':<5} "
                  + " ".join(f"{ms[k]:>11.3f}" for k in MODES) + f"  {ratio(ms):.2f}x", flush=True)
        torch._dynamo.reset()
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
