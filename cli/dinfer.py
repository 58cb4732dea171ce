"""``symshape dinfer FILE.py:NAME -i SPEC --dim B=1..4096``: which input sizes a program accepts.

Prints the summary first (``valid iff H >= 8 and W >= 8``, then each
error's region, message and user line), a suggested torch.export spec,
then one row per class of sizes (the condition, ok or the error, the
smallest example) and whether Z3 proved the classes cover every size in
the ranges; ``--json`` prints the same for tools.  Progress goes to stderr
(by default only on a terminal).

Example::

    $ dinfer examples/shape_zoo.py:size_branch -i "x: f32[N]" --dim N=1..64
"""
from __future__ import annotations

import sys

from validation.dinfer import DEFAULT_RANGE, dinfer

from .loader import CliError, load_program, parse_dim_args


def register(sub):
    p = sub.add_parser(
        "dinfer", help="enumerate the input sizes a program accepts and how it behaves on each",
        description="Trace the program at points chosen by Z3 until every size in the ranges falls in a "
                    "known class (ok, an error, or data-dependent).")
    p.add_argument("target", help="FILE.py:NAME (a function, an nn.Module instance or class)")
    p.add_argument("-i", "--input", action="append", required=True, metavar="SPEC",
                   help='input spec, one per positional input, e.g. "x: f32[B, 768]"')
    p.add_argument("--dim", action="append", metavar="NAME=LO..HI",
                   help=f"range of a dim (NAME=LO..HI, or NAME=LO.. for no upper bound); NAME=N pins the dim "
                        f"to N; dims without one are searched over {DEFAULT_RANGE[0]}..{DEFAULT_RANGE[1]}")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--max-classes", type=int, default=64, metavar="N", help="stop after N classes (default 64)")
    p.add_argument("--time-budget", type=float, default=60.0, metavar="S",
                   help="the whole run's time in seconds, traces included (default 60)")
    p.add_argument("--trace-timeout", type=float, default=30.0, metavar="S",
                   help="stop when one trace runs longer than S seconds, e.g. a program that loops "
                        "forever (default 30)")
    p.add_argument("--no-specialize-zero-one", action="store_true",
                   help="keep sizes 0 and 1 in the symbolic range instead of giving them classes of their own")
    p.add_argument("--progress", dest="progress", action="store_true", default=None,
                   help="show each trace on stderr (default: on when stderr is a terminal)")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress display")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress display on stderr")
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
    if args.max_classes < 1:
        raise CliError(f"--max-classes must be at least 1, got {args.max_classes}")
    if not args.time_budget > 0:
        raise CliError(f"--time-budget must be positive, got {args.time_budget:g}")
    if not args.trace_timeout > 0:
        raise CliError(f"--trace-timeout must be positive, got {args.trace_timeout:g}")
    dims = parse_dim_args(args.dim)
    prog = load_program(args.target)
    show = sys.stderr.isatty() if args.progress is None else args.progress
    progress = _Progress(sys.stderr) if show and not args.quiet else None
    try:
        space = dinfer(prog, *args.input, dims=dims, max_classes=args.max_classes,
                       time_budget=args.time_budget, specialize_zero_one=not args.no_specialize_zero_one,
                       progress=progress, trace_timeout=args.trace_timeout)
    finally:
        if progress is not None:
            progress.close()
    space.program_name = args.target
    if space.timed_out and not space.classes:
        raise CliError(space.reason + "; raise --trace-timeout if it is just slow")
    if args.json:
        print(space.to_json(indent=2))
    else:
        print(space.table())
    if space.timed_out:
        print(f"dinfer: {space.reason}", file=sys.stderr)
        return 3
    return 0
