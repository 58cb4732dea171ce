"""CPU training steps timed side by side: eager, Inductor dynamic and symshape in turn.

:mod:`bench.train_compare` times each mode's run of random lengths apart (medians over
steps, one mode after another): on this shared 2-core machine its ratios move by 1.5x
between runs.  This bench builds the same models (:func:`bench.train_compare.build`, CPU
sizes), compiles each mode once, warms every mode at each length, then runs the modes in
turn (round robin) ``--reps`` times per length and keeps each mode's fastest step: a slow
spell of the machine hits every mode alike.  A step is forward (the model's loss) and
backward under ``--dtype`` autocast; gradients are zeroed, no optimizer.

``--ab`` adds ``sym_generic``: symshape with C++ kernels' buffers from ``torch.empty_strided``
and sizes passed to each launch (:data:`compiler.runtime.HOST_REWRITES` ``cpp_calls`` off),
measured in the same rounds as the default ``symshape``.

Usage::

    OMP_NUM_THREADS=1 python bench/train_interleaved_cpu.py --models gpt2,llama,bert --lengths 257,700

Example::

    >>> sorted(fastest({"a": lambda: None, "b": lambda: None}, 2))
    ['a', 'b']
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import compiler  # noqa: E402
from bench import train_compare as tc  # noqa: E402
from bench.cpu_compare import geomean  # noqa: E402

MODES = ("eager", "ind_dyn", "symshape")


def fastest(steps: dict, reps: int) -> dict:
    """{mode: fastest of ``reps`` runs in ms}, the modes' ``steps()`` run in turn, neighbours
    swapped every other round (a b c d, b a d c, ...): a mode right after one running the same
    C++ kernels (symshape's two modes) finds them in warm caches, so each of the two follows
    the other in half the rounds, and no mode ever follows itself."""
    best = dict.fromkeys(steps, float("inf"))
    items = list(steps.items())
    swapped = [m for i in range(0, len(items), 2) for m in items[i:i + 2][::-1]]
    for r in range(reps):
        for mode, step in (items if r % 2 == 0 else swapped):
            t0 = time.perf_counter()
            step()
            best[mode] = min(best[mode], time.perf_counter() - t0)
    return {mode: t * 1e3 for mode, t in best.items()}


def _step(fn, model, batch, dtype):
    with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
        loss = fn(**batch).loss
    loss.backward()
    model.zero_grad(set_to_none=True)


def run_model(name, lengths, reps, dtype, modes=MODES) -> dict:
    """{length: {mode: ms}} for one model."""
    from compiler import runtime
    compiled = {}
    for mode in modes:
        model, batch = tc.build(name, "cpu", max(lengths) + 1)
        if mode == "eager":
            fn = model
        elif mode == "ind_dyn":
            fn = torch.compile(model, dynamic=True)
        else:
            compiler.register()
            # Options make a backend object of its own: dynamo never serves one symshape mode's
            # cache entry to the other.
            fn = torch.compile(model, backend="symshape", dynamic=True,
                               options={"target": "cpp"} if mode == "sym_generic" else None)
        compiled[mode] = (fn, model)
    g = torch.Generator().manual_seed(0)
    batches = {L: batch(L, g) for L in lengths}
    failed = []
    for mode, (fn, model) in compiled.items():  # compile (and warm) every mode at every length first
        runtime.HOST_REWRITES["cpp_calls"] = mode != "sym_generic"  # read when a program is made
        try:  # each length twice, in turn: Inductor's failure on HF ViT shows on a length's second step
            for L in [*lengths, *lengths]:
                _step(fn, model, batches[L], dtype)
        except Exception as e:  # a mode that cannot train this model (Inductor on HF ViT): its row says so
            print(f"  {name}: {mode} FAILED ({type(e).__name__}: {' '.join(str(e).split())[:160]})", flush=True)
            failed.append(mode)
        finally:
            runtime.HOST_REWRITES["cpp_calls"] = True
    for mode in failed:
        del compiled[mode]
    return {L: {**fastest({mode: (lambda f=fn, m=model, b=batches[L]: _step(f, m, b, dtype))
                           for mode, (fn, model) in compiled.items()}, reps), **dict.fromkeys(failed, math.nan)}
            for L in lengths}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gpt2,llama,bert")
    ap.add_argument("--lengths", default="257,700")
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--ab", action="store_true", help="also time symshape with the generic C++ calls")
    a = ap.parse_args(argv)
    modes = MODES + ("sym_generic",) if a.ab else MODES
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    lengths = [int(v) for v in a.lengths.split(",")]
    print(f"torch={torch.__version__} threads={torch.get_num_threads()} {a.dtype} reps={a.reps} "
          f"sizes={tc._sizes('cpu')} load average at start: {os.getloadavg()[0]:.1f}")
    extra = f" {'generic/sym':>11}" if a.ab else ""
    print(f"{'model':<6} {'L':>5} " + " ".join(f"{m + ' ms':>12}" for m in modes) + f" {'sym/eager':>10} {'sym/ind':>8}"
          + extra)
    rows = []
    for name in a.models.split(","):
        for L, ms in run_model(name, lengths, a.reps, dtype, modes).items():
            rows.append(ms)
            print(f"{name:<6} {L:>5} " + " ".join(f"{ms[m]:>12.2f}" for m in modes)
                  + f" {ms['eager'] / ms['symshape']:>9.2f}x {ms['ind_dyn'] / ms['symshape']:>7.2f}x"
                  + (f" {ms['sym_generic'] / ms['symshape']:>10.3f}x" if a.ab else ""), flush=True)
    def ratios(mode):  # over the rows where both modes ran
        return [r[mode] / r["symshape"] for r in rows if not math.isnan(r[mode] / r["symshape"])] or [math.nan]

    print(f"geomean symshape: vs eager {geomean(ratios('eager')):.2f}x, "
          f"vs Inductor dynamic {geomean(ratios('ind_dyn')):.2f}x"
          + (f", generic C++ calls / symshape {geomean([r['sym_generic'] / r['symshape'] for r in rows]):.3f}x"
             if a.ab else "") + "; "
          f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
