"""The ``symshape`` command: subcommands live in their own modules.

Startup is kept light so ``symshape --help`` and argument errors answer at
once: this module imports only the standard library, and a subcommand's
module is imported only when that subcommand is named on the command line.
Each subcommand module defines ``register(subparsers)`` (adding its parser
with ``set_defaults(run=...)``) and imports torch, sympy and z3 inside
``run``, never at module level, so ``symshape NAME --help`` is fast too.
Adding a subcommand is one line in :data:`SUBCOMMANDS`.

Errors that are the user's (bad spec, missing file, a program that raises)
print one line and exit 2; so do argument errors.

>>> main(["--version"])  # doctest: +ELLIPSIS
symshape ...
0
"""
from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module, one-line help shown by ``symshape --help``).
SUBCOMMANDS = {
    "trace": ("cli.trace_cmd", "trace a program at symbolic sizes and list its output shapes and guards"),
    "explain": ("cli.explain", "explain every guard, specialization and runtime assert: where, why, cost, fix"),
    "flops": ("cli.flops", "count FLOPs and bytes moved as closed forms over the named dims"),
    "dinfer": ("cli.dinfer", "enumerate the input sizes a program accepts and how it behaves on each"),
    "check": ("cli.check", "verify the shape contracts in symshape.toml or pyproject.toml (exit 1 on a breach)"),
    "serve": ("cli.serve.command", "serve shape questions over HTTP with a web page (runs the named programs)"),
}


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr (exit 2), pointing at ``--help``.

    >>> import contextlib, io
    >>> err = io.StringIO()
    >>> with contextlib.redirect_stderr(err):
    ...     main(["trace", "--bogus"])
    2
    >>> print(err.getvalue(), end="")
    symshape trace: error: the following arguments are required: target, -i/--input (see symshape trace --help)
    """

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)\n")


def version() -> str:
    """The symshape version."""
    from . import __version__
    return __version__


class _Version(argparse.Action):
    """``--version``: looks the version up only when asked (the lookup costs startup time)."""

    def __init__(self, option_strings, dest, **kw):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="print the symshape version and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog} {version()}")
        parser.exit()


def _command_in(argv) -> str | None:
    # The top-level parser has only flags, so the first non-flag word is the command.
    for a in argv:
        if not a.startswith("-"):
            return a
    return None


def build_parser(argv=None, prog: str = "symshape") -> argparse.ArgumentParser:
    """The parser for ``argv``: only the subcommand it names is imported (``argv=None``: every one)."""
    p = OneLineParser(prog=prog, description="Symbolic shape reasoning for PyTorch programs.",
                      epilog=f"Run '{prog} COMMAND --help' for a command's options.")
    p.add_argument("--version", action=_Version)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    wanted = _command_in(argv) if argv is not None else None
    for name, (module, help_text) in SUBCOMMANDS.items():
        if argv is None or name == wanted:
            importlib.import_module(module).register(sub)
        else:
            sub.add_parser(name, help=help_text, add_help=False)
    return p


class _Standalone:
    """Lets a subcommand's ``register`` build a top-level parser (the ``dinfer`` command)."""

    def __init__(self, prog):
        self.prog = prog
        self.parser = None

    def add_parser(self, name, help=None, **kw):
        self.parser = OneLineParser(prog=self.prog, **kw)
        self.parser.add_argument("--version", action=_Version)
        return self.parser


def _run(argv, parser) -> int:
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version, or an argument error already printed
        return e.code if isinstance(e.code, int) else 2
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # the CLI process's boundary: one line and an exit status, never a traceback
        # symshape's errors are only importable once a command ran (they live with torch).
        errors = sys.modules.get("shapes.errors")
        if errors is not None and isinstance(e, errors.TracerLimitation):
            # symshape's own limit, not the program's error: say so once (the message's
            # "symshape: " prefix would repeat the program name).
            print(f"{parser.prog}: limitation: {' '.join(e.detail.split())}", file=sys.stderr)
            return 2
        if errors is not None and isinstance(e, errors.SymshapeError):
            print(f"{parser.prog}: error: {_one_line(e)}", file=sys.stderr)
            return 2
        raise


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


def main(argv=None, prog: str = "symshape") -> int:
    """Run ``symshape ARGS``; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    return _run(argv, build_parser(argv, prog))


def dinfer_main(argv=None) -> int:
    """The ``dinfer`` command: same as ``symshape dinfer``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    module = importlib.import_module(SUBCOMMANDS["dinfer"][0])
    standalone = _Standalone("dinfer")
    module.register(standalone)
    return _run(argv, standalone.parser)


if __name__ == "__main__":
    sys.exit(main())
