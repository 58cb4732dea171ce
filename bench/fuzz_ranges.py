"""Long-mode fuzzing of the engine's range analysis, rewrites and static decisions.

Random expressions over symbols with ranges (and sometimes facts) are
checked against brute-force evaluation at many points and, on a sample,
against Z3 (see :mod:`validation.fuzz`).  The mix holds integer expressions,
float-valued ones (true division, float constants, ``%`` and ``//`` on
floats, ``Min``/``Max`` with floats) and seeded edge cases (nested ``//`` and
``%`` with negative divisors, rounding of quotients); the table counts each.
Imprecise answers are allowed; unsound ones never: the script exits with
status 1 if it finds any.

Run::

    python bench/fuzz_ranges.py                 # 100,000 expressions, seed 0
    python bench/fuzz_ranges.py -n 20000 --seed 7 --z3-every 5
    python bench/fuzz_ranges.py --jobs 16       # the same count split over 16 processes

With ``--jobs N`` the expressions are split into N chunks, each with its own
seed (:func:`validation.fuzz.run_fuzz_jobs`; ``--jobs 1`` is the single-process
run), run side by side, and merged into one table.
"""
from __future__ import annotations

import argparse
import sys

from validation.fuzz import run_fuzz_jobs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--expressions", type=int, default=100_000, help="expressions to check")
    ap.add_argument("--seed", type=int, default=0, help="random seed (runs are reproducible)")
    ap.add_argument("--z3-every", type=int, default=20, help="check every n-th expression with Z3 too")
    ap.add_argument("--z3-timeout-ms", type=int, default=500, help="per-query Z3 timeout")
    ap.add_argument("--validate-every", type=int, default=10,
                    help="replay every n-th scenario's whole decision log with translation validation")
    ap.add_argument("--max-depth", type=int, default=3, help="expression depth")
    ap.add_argument("--show", type=int, default=10, help="how many findings to print")
    ap.add_argument("--time-limit", type=float, default=None,
                    help="stop after this many seconds (the table says how many expressions were checked)")
    ap.add_argument("--jobs", type=int, default=1, help="processes to split the expressions over")
    args = ap.parse_args(argv)

    kw = dict(z3_every=args.z3_every, z3_timeout_ms=args.z3_timeout_ms, validate_every=args.validate_every,
              max_depth=args.max_depth, time_limit_s=args.time_limit)
    res, seeds = run_fuzz_jobs(args.expressions, args.jobs, seed=args.seed, **kw)
    if len(seeds) > 1:
        print(f"{len(seeds)} jobs, chunk seeds {', '.join(map(str, seeds))}")
    print(res.table())
    for title, items in (("unsound", res.unsound), ("translation mismatches", res.translation_mismatches),
                         ("errors", res.errors)):
        if items:
            print(f"\n{title} (first {min(args.show, len(items))} of {len(items)}):")
            for c in items[:args.show]:
                print(f"  {c}")
    return 1 if res.unsound or res.translation_mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
