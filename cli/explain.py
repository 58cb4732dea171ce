"""``symshape explain FILE.py:NAME -i SPEC ...``: why each guard, specialization and assert exists.

Examples::

    symshape explain examples/mlp.py:tokens_to_blocks -i "x: f32[B, T, 64]" --dim T=32
    symshape explain model.py:Net -i "x: f32[B, T]" --at B=1,T=7
    symshape explain model.py:Net -i "x: f32[B, T]" -o /tmp/report.html
    symshape explain model.py:Net -i "x: f32[B, T]" --dim T=1..512 --cuda-graphs

The text report fits 80 columns; ``--format json`` follows
``guards/report.schema.json``; ``--format html`` writes one self-contained
page.  Without ``--format`` the format follows ``-o``'s suffix (``.html``,
``.json``, ``.txt``), and is text otherwise.  With ``--at`` the report says which records fail at that point and
whether the call would recompile or fail at run time.
"""
from __future__ import annotations

import argparse

from .args import SPEC_HELP, add_program_arguments, add_progress_arguments, output_format

FORMATS = ("text", "json", "html")


def register(sub):
    p = sub.add_parser(
        "explain", help="explain every guard, specialization and runtime assert: where, why, cost, fix",
        description="Trace a program and explain each guard, specialization and runtime assert: the user "
                    "line and op that asked, how it was decided, what it costs, and how to avoid it.",
        epilog=SPEC_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_program_arguments(p)
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="report format (default: from -o's suffix .txt/.json/.html, else text)")
    p.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE instead of stdout")
    p.add_argument("--at", metavar="B=1,T=7",
                   help="evaluate the guards at these sizes (every dim) and say which fail there")
    p.add_argument("--width", type=int, default=80, help="text report width in columns (default: 80)")
    p.add_argument("--cuda-graphs", action="store_true",
                   help="instead of the guards: which dims may be padded to a bucket for CUDA graphs, why "
                        "others cannot (op, line, the mask that would make it safe), buckets, memory per graph")
    add_progress_arguments(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from .progress import Status, wanted

    with Status(enabled=wanted(args)) as status:
        status.phase(f"loading {args.target}")
        from guards.explain import ExplainError, explain

        from .loader import CliError, parse_point, trace_target

        try:
            fmt = output_format(args.format, args.output)
        except ValueError as e:
            raise CliError(str(e)) from e
        if args.width < 40:
            raise CliError(f"--width {args.width} is too narrow; use at least 40 columns")
        point = parse_point(args.at) if args.at is not None else None
        if args.at is not None and not point:
            raise CliError(f"--at {args.at!r} names no sizes; give NAME=INT pairs, e.g. --at B=1,T=7")
        _, tp = trace_target(args, status, [point] if point else [])
        if not args.cuda_graphs:
            status.phase("tracing the paths sizes 1 take")
            from shapes.paths import join_size_one

            tp = join_size_one(tp)
        if args.cuda_graphs:
            if fmt != "text":
                raise CliError("--cuda-graphs writes a text report; leave out --format or use a .txt output")
            status.phase("analyzing padding")
            from compiler.cuda_graphs import explain_cuda_graphs

            out = explain_cuda_graphs(tp)
        else:
            status.phase("explaining")
            try:
                ex = explain(tp, at=point)
            except ExplainError as e:
                raise CliError(str(e)) from e
            ex.program = args.target
            from validation.dinfer.path import trace_summary

            ex.valid_iff, ex.covers = trace_summary(tp)
            if fmt == "json":
                out = ex.json()
            elif fmt == "html":
                out = ex.html()
            else:
                out = ex.text(width=args.width)
    rc = _write(args, fmt, out)
    if not args.cuda_graphs and point and ex.at is not None and ex.at.verdict == "runtime_error":
        import sys
        print(f"symshape explain: a call at {args.at} fails at run time (see the report)", file=sys.stderr)
        return 1  # scripts can tell a size that fails from one that runs
    return rc


def _write(args, fmt, out) -> int:
    import os
    import sys

    from .loader import CliError

    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(out)
        except OSError as e:
            raise CliError(f"cannot write {args.output}: {e.strerror}") from e
        print(f"wrote {fmt} report to {os.path.abspath(args.output)}", file=sys.stderr)
    else:
        sys.stdout.write(out)
    return 0
