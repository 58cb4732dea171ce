"""``symshape dinfer FILE.py:NAME -i SPEC --dim B=1..4096``: which input sizes a program accepts.

Prints the summary first (``valid iff H >= 8 and W >= 8``, then each
error's region, message and user line), a suggested torch.export spec,
then one row per class of sizes (the condition, ok or the error, the
smallest example) and whether Z3 proved the classes cover every size in
the ranges; ``--json`` prints the same for tools.  Progress goes to stderr
on a terminal (``--progress`` shows it anywhere, ``-q`` nowhere).

Example::

    $ dinfer examples/shape_zoo.py:size_branch -i "x: f32[N]" --dim N=1..64
"""
from __future__ import annotations

import argparse
import sys

from .args import (SPEC_HELP, add_program_arguments, add_progress_arguments, positive_int, positive_seconds,
                   world_options)

DEFAULT_RANGE_TEXT = "1..4096"  # validation.dinfer.DEFAULT_RANGE, kept here so --help imports nothing heavy


def register(sub):
    p = sub.add_parser(
        "dinfer", help="enumerate the input sizes a program accepts and how it behaves on each",
        description="Trace the program at points chosen by Z3 until every size in the ranges falls in a "
                    "known class (ok, an error, or data-dependent).",
        epilog=SPEC_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_program_arguments(
        p, example="x: f32[B, 768]",
        dim_help=f"range of a dim (NAME=LO..HI, or NAME=LO.. for no upper bound); NAME=N pins the dim to N; "
                 f"dims without one are searched over {DEFAULT_RANGE_TEXT}")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--detail", action="store_true",
                   help="list every class of sizes (the search's split), not one row per outcome")
    p.add_argument("--max-classes", type=positive_int, default=64, metavar="N",
                   help="stop after N classes (default 64)")
    p.add_argument("--time-budget", type=positive_seconds, default=60.0, metavar="S",
                   help="the whole run's time in seconds, traces included (default 60)")
    p.add_argument("--specialize-zero-one", action="store_true",
                   help="PyTorch's 0/1 policy: give sizes 0 and 1 classes of their own")
    p.add_argument("--no-specialize-zero-one", action="store_true", help=argparse.SUPPRESS)  # the default now
    add_progress_arguments(p)
    p.set_defaults(run=run)


class _Progress:
    """One line per trace on stderr; on a terminal the line is redrawn in place."""

    def __init__(self, stream):
        self.stream = stream
        self.tty = stream.isatty()
        self.width = 0

    def __call__(self, event):
        text = f"{event}  [{event.elapsed:.1f} s]"
        if self.tty:
            self.stream.write("\r" + text.ljust(self.width))
            self.width = max(self.width, len(text))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self):
        if self.tty and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()


def run(args) -> int:
    from .progress import Status, wanted

    show = wanted(args)
    with Status(enabled=show) as status:
        status.phase(f"loading {args.target}")
        from validation.dinfer import dinfer

        from .loader import load_program, with_arguments

        prog = with_arguments(load_program(args.target), args.arg)
        status.close()
    progress = _Progress(sys.stderr) if show else None
    try:
        dims, world = world_options(args)
        space = dinfer(prog, *args.input, dims=dims, max_classes=args.max_classes,
                       time_budget=args.time_budget, specialize_zero_one=args.specialize_zero_one,
                       progress=progress, trace_timeout=args.trace_timeout, device=args.device, world=world)
    finally:
        if progress is not None:
            progress.close()
    _say_validation(space)
    space.program_name = args.target
    if space.timed_out and not space.classes:
        from .loader import CliError

        raise CliError(space.reason + "; raise --trace-timeout if it is just slow")
    if args.json:
        print(space.to_json(indent=2))
    else:
        print(space.table(detail=args.detail))
    if space.timed_out:
        print(f"dinfer: {space.reason}", file=sys.stderr)
        return 3
    return 0


def _say_validation(space) -> None:
    """With ``SYMSHAPE_TRANSLATION_VALIDATION=1`` each trace that ran to the end had its decision log
    replayed by Z3 (an unsound step stops dinfer with an error): say so on stderr."""
    import os
    if os.environ.get("SYMSHAPE_TRANSLATION_VALIDATION", "") in ("", "0", "false", "False"):
        return
    n = len(space.ok_classes)
    print(f"translation validation: Z3 replayed the decision log of each of the {n} trace(s) that ran to the end "
          f"(one per ok class): no unsound step (any step Z3 could not decide is warned about above)",
          file=sys.stderr)
