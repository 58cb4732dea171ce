"""``symshape flops FILE.py:NAME -i SPEC [--at B=8,T=1024] [--json]``: symbolic FLOP counts.

Prints the total FLOPs and bytes moved as closed forms over the named dims,
per ATen op, and (with ``--at``) their exact values and arithmetic intensity
at concrete sizes.  Conventions are torch.utils.flop_counter's (see
:mod:`shapes.flops`).

Example::

    symshape flops examples/mlp.py:MLP -i "x: f32[B, T, 64]" --at B=8,T=1024
"""
from __future__ import annotations

import argparse

from .args import SPEC_HELP, add_program_arguments, add_progress_arguments


def register(sub):
    p = sub.add_parser(
        "flops", help="count FLOPs and bytes moved as closed forms over the named dims",
        description="Count FLOPs and bytes moved as closed forms over the named dims.  Conventions are "
                    "torch.utils.flop_counter's: a multiply-add is 2 FLOPs; the matmul family, convolution and "
                    "scaled-dot-product attention have FLOPs, other ops count 0 (listed, never hidden; ops torch "
                    "counts but symshape cannot are marked UNCOUNTED). Bytes moved: tensor inputs read plus "
                    "outputs written per op; views move 0 bytes.",
        epilog=SPEC_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_program_arguments(p, example="ids: i64[B, T]")
    p.add_argument("--at", action="append", metavar="B=8,T=1024",
                   help="also evaluate at these sizes (every dim; repeatable)")
    p.add_argument("--json", action="store_true", help="print JSON (expressions as strings, exact ints)")
    p.add_argument("--modules", action="store_true", help="also print the per-module breakdown")
    p.add_argument("--depth", type=int, default=2, help="module levels shown with --modules (default 2)")
    p.add_argument("--width", type=int, default=80, help="table width in columns (default 80)")
    add_progress_arguments(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from .progress import Status, wanted

    with Status(enabled=wanted(args)) as status:
        status.phase(f"loading {args.target}")
        from shapes.flops import count_flops

        from .loader import parse_point, trace_target

        points = [parse_point(a) for a in args.at or []]
        _, traced = trace_target(args, status, points)
        status.phase("counting FLOPs")
        report = count_flops(traced)
        if args.json:
            # Evaluate before printing anything, so a bad --at is one error line.
            out = report.to_json(points)
        else:
            tables = [report.table(points or None, width=args.width)]
            if args.modules:
                if points:
                    tables += [report.module_table(pt, depth=args.depth, width=args.width) for pt in points]
                else:
                    tables.append(report.module_table(depth=args.depth, width=args.width))
            out = "\n\n".join(tables)
    print(out)
    return 0
