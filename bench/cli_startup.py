"""How fast the CLI answers when it has nothing heavy to do.

``symshape --help``, ``--version`` and argument errors must answer in under
0.3 s wall (issue 15): they import neither torch, sympy nor z3.  Each
command runs ``--runs`` times (default 10) as a fresh process; the table
gives the median and 90th percentile wall time next to ``python -c pass``
on the same interpreter (what any Python command pays before its first
line: interpreter start and site-packages' .pth files).

Usage::

    python bench/cli_startup.py               # the fast paths
    python bench/cli_startup.py --with-trace  # plus one real trace, for scale
    python bench/cli_startup.py --runs 20
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIMIT_S = 0.3


def _script(name: str) -> list[str]:
    # The installed console script (what a user types), else the same entry point via -c.
    path = os.path.join(os.path.dirname(sys.executable), name)
    if os.path.isfile(path):
        return [path]
    entry = "main" if name == "symshape" else "dinfer_main"
    return [sys.executable, "-c", f"import sys; from cli.main import {entry}; sys.exit({entry}())"]


def _time(argv, runs, env) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out.append(time.perf_counter() - t0)
    return out


def _p90(xs) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.9 * (len(xs) - 1))))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10, help="processes per command (default 10)")
    ap.add_argument("--with-trace", action="store_true", help="also time one real `symshape trace` (3 runs)")
    args = ap.parse_args(argv)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    sym, dinfer = _script("symshape"), _script("dinfer")
    cases = [
        ("python -c pass (baseline)", [sys.executable, "-c", "pass"], False),
        ("symshape --help", sym + ["--help"], True),
        ("symshape --version", sym + ["--version"], True),
        ("symshape trace --help", sym + ["trace", "--help"], True),
        ("symshape frobnicate (bad command)", sym + ["frobnicate"], True),
        ("symshape trace F:G (no -i)", sym + ["trace", "examples/mlp.py:MLP"], True),
        ("symshape trace --dim B=x (bad value)", sym + ["trace", "examples/mlp.py:MLP", "-i", "x: f32[B, 64]",
                                                       "--dim", "B=x"], True),
        ("dinfer --help", dinfer + ["--help"], True),
    ]
    if args.with_trace:
        cases.append(("symshape trace mlp.py:MLP (real work)",
                      sym + ["trace", "examples/mlp.py:MLP", "-i", "x: f32[B, T, 64]"], None))
    print(f"{sys.executable}, {args.runs} runs each, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    head = f"{'command':40} {'median':>8} {'p90':>8} {'- baseline':>11}  under {LIMIT_S} s"
    print(head)
    print("-" * len(head))
    base = None
    ok = True
    for label, argv_, limited in cases:
        ts = _time(argv_, 3 if limited is None else args.runs, env)
        med = statistics.median(ts)
        base = med if base is None else base
        verdict = "" if not limited else ("yes" if med < LIMIT_S else "NO")
        ok &= verdict != "NO"
        print(f"{label:40} {med:7.3f}s {_p90(ts):7.3f}s {med - base:+10.3f}s  {verdict}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
