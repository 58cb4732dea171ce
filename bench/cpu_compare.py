"""Eager vs Inductor CPU (static and dynamic) vs symshape's C++ path, in one process.

The programs and sizes are bench/compiler_bench.py's.  For each program:

* symshape: ``compiler.compile`` once; its first call (trace + lowering +
  codegen + gcc) is the compile time; every size then runs the same object
  (``variants`` counts compiled variants: 1 = never recompiled).
* Inductor static: ``torch.compile(dynamic=False)`` compiled afresh for each
  size (``torch._dynamo.reset()`` between sizes): its compile time is the sum
  of the first calls, one compile per size by construction.
* Inductor dynamic: ``torch.compile(dynamic=True)`` once; recompiles are the
  graphs Dynamo compiled beyond the first (``torch._dynamo.utils.counters``).

Both compilers start cold (fresh ``SYMSHAPE_CACHE`` and ``TORCHINDUCTOR_CACHE_DIR``
in a temporary folder) so compile times include every C++ build.  Run times
are medians of ``--reps`` calls after warm-up; results are checked against
eager first.  The machine's load average is printed: on a shared machine the
timings are noisy, compare columns within one run only.

Usage::

    python bench/cpu_compare.py            # 2 sizes per program
    python bench/cpu_compare.py --full     # 3 larger sizes per program
    python bench/cpu_compare.py --only softmax --reps 20
    python bench/cpu_compare.py --threads 1   # all three single-threaded (steadier on a loaded machine)
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time

_TMP = tempfile.mkdtemp(prefix="cpu_compare_")
os.environ.setdefault("SYMSHAPE_CACHE", os.path.join(_TMP, "symshape"))
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_TMP, "inductor"))
if "--threads" in sys.argv[:-1]:  # before torch and the kernels' OpenMP runtime start their thread pools
    os.environ["OMP_NUM_THREADS"] = sys.argv[sys.argv.index("--threads") + 1]

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import compiler  # noqa: E402
from compiler_bench import SHORT, programs  # noqa: E402


def rep_times(fn, args, reps) -> list:
    """Seconds of each of ``reps`` calls after 2 warm-up calls (shared with bench/cpu_models.py).

    >>> len(rep_times(lambda: None, (), 3))
    3
    """
    for _ in range(2):
        fn(*args)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(*args)
        ts.append(time.perf_counter() - t0)
    return ts


def median_time(fn, args, reps):
    ts = rep_times(fn, args, reps)
    MINS[(fn, tuple(a.shape for a in args))] = min(ts)
    return statistics.median(ts)


#: Fastest rep per (callable, shapes): on a loaded machine the least disturbed run.
MINS: dict = {}


def first_call(fn, args):
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


def graphs():
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


def check(out, ref, what):
    err = (out.float() - ref.float()).abs().max().item()
    if not err <= 1e-3 * max(1.0, ref.float().abs().max().item()):
        raise SystemExit(f"{what}: max error {err:.2e} against eager")
    return err


def geomean(xs):
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="bench/compiler_bench.py's full sizes (slow)")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--dtype", choices=["f32", "f16", "bf16"], default="f32")
    ap.add_argument("--only", default=None, help="run programs whose name contains this")
    ap.add_argument("--threads", type=int, default=None, help="threads for eager, Inductor and symshape")
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    dtype = {v: k for k, v in SHORT.items()}[a.dtype]
    torch.manual_seed(0)
    print(f"torch={torch.__version__} threads={torch.get_num_threads()} dtype={a.dtype} reps={a.reps} "
          f"load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    rows, comp, mins = [], [], []
    with torch.no_grad():
        for name, prog, specs, make, sizes in programs("cpu", not a.full, dtype):
            if a.only and a.only not in name:
                continue
            inputs = [make(B, T) for B, T in sizes]
            refs = [prog(*x) for x in inputs]
            t_eager = [median_time(prog, x, a.reps) for x in inputs]
            m_eager = [MINS[(prog, tuple(t.shape for t in x))] for x in inputs]
            # symshape: one compile, every size
            t0 = time.perf_counter()
            f = compiler.compile(prog, *specs)
            first_call(f, inputs[0])
            sym_compile = time.perf_counter() - t0
            errs = [check(f(*x), ref, f"{name} symshape") for x, ref in zip(inputs, refs)]
            t_sym = [median_time(f, x, a.reps) for x in inputs]
            m_sym = [MINS[(f, tuple(t.shape for t in x))] for x in inputs]
            # Inductor static: one fresh compile per size (a reset drops every compiled frame)
            stat_compile, t_stat, m_stat = 0.0, [], []
            for x, ref in zip(inputs, refs):
                torch._dynamo.reset()
                g = torch.compile(prog, dynamic=False)
                out, t = first_call(g, x)
                check(out, ref, f"{name} inductor static")
                stat_compile += t
                t_stat.append(median_time(g, x, a.reps))
                m_stat.append(MINS[(g, tuple(t.shape for t in x))])
            # Inductor dynamic: one compile; graphs beyond the first are recompiles
            torch._dynamo.reset()
            g0 = graphs()
            dyn = torch.compile(prog, dynamic=True)
            dyn_compile = 0.0
            for x, ref in zip(inputs, refs):
                out, t = first_call(dyn, x)
                check(out, ref, f"{name} inductor dynamic")
                dyn_compile += t
            dyn_recompiles = graphs() - g0 - 1
            t_dyn = [median_time(dyn, x, a.reps) for x in inputs]
            m_dyn = [MINS[(dyn, tuple(t.shape for t in x))] for x in inputs]
            torch._dynamo.reset()
            for i, (B, T) in enumerate(sizes):
                rows.append((name, f"{B},{T}", t_eager[i], t_stat[i], t_dyn[i], t_sym[i], errs[i]))
                mins.append((m_eager[i], m_stat[i], m_dyn[i], m_sym[i]))
            comp.append((name, sym_compile, stat_compile, len(sizes), dyn_compile, dyn_recompiles,
                         f.stats["variants"] - 1, f.stats["traces"]))
    hdr = (f"{'program':<18} {'B,T':<8} {'eager ms':>9} {'ind.static':>10} {'ind.dyn':>9} {'symshape':>9} "
           f"{'vs static':>9} {'vs dyn':>7} {'vs eager':>8} {'max err':>8}")
    print(hdr)
    print("-" * len(hdr))
    for name, sz, te, ti, td, tsym, err in rows:
        print(f"{name:<18} {sz:<8} {te * 1e3:>9.3f} {ti * 1e3:>10.3f} {td * 1e3:>9.3f} {tsym * 1e3:>9.3f} "
              f"{ti / tsym:>8.2f}x {td / tsym:>6.2f}x {te / tsym:>7.2f}x {err:>8.1e}")
    print(f"geomean speedup of symshape: vs Inductor static {geomean([r[3] / r[5] for r in rows]):.2f}x, "
          f"vs Inductor dynamic {geomean([r[4] / r[5] for r in rows]):.2f}x, "
          f"vs eager {geomean([r[2] / r[5] for r in rows]):.2f}x")
    print(f"same from the fastest rep of each (least load noise): vs Inductor static "
          f"{geomean([m[1] / m[3] for m in mins]):.2f}x, vs Inductor dynamic {geomean([m[2] / m[3] for m in mins]):.2f}x, "
          f"vs eager {geomean([m[0] / m[3] for m in mins]):.2f}x")
    print()
    hdr = (f"{'program':<18} {'symshape s':>10} {'ind.static s':>12} {'(compiles)':>10} {'ind.dyn s':>9} "
           f"{'dyn recompiles':>14} {'sym recompiles':>14} {'sym/static':>10}")
    print(hdr)
    print("-" * len(hdr))
    for name, sc, st, n, dc, dr, sr, traces in comp:
        print(f"{name:<18} {sc:>10.2f} {st:>12.2f} {n:>10} {dc:>9.2f} {dr:>14} {sr:>14} {sc / st:>10.2f}")
    tot_sym, tot_stat, tot_dyn = (sum(c[i] for c in comp) for i in (1, 2, 4))
    print(f"total compile: symshape {tot_sym:.1f}s, Inductor static {tot_stat:.1f}s "
          f"(ratio {tot_sym / tot_stat:.2f}), Inductor dynamic {tot_dyn:.1f}s (ratio {tot_sym / tot_dyn:.2f})")
    print(f"load average at end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
