"""The ``symshape`` command: subcommands live in their own modules.

Each subcommand module defines ``register(subparsers)`` (adding its parser
with ``set_defaults(run=...)``).  Errors that are the user's (bad spec,
missing file, a program that raises) print one line and exit 2.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from shapes.errors import SymshapeError

SUBCOMMANDS = ["cli.trace_cmd", "cli.explain", "cli.flops", "cli.dinfer", "cli.check", "cli.serve.command"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="symshape", description="Symbolic shape reasoning for PyTorch programs.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name == name:
                continue  # subcommand not built yet
            raise
        mod.register(sub)
    return p


def _run(argv, parser) -> int:
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    try:
        return int(args.run(args) or 0)
    except SymshapeError as e:
        print(f"{parser.prog}: error: {_one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted", file=sys.stderr)
        return 130


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


def main(argv=None, prog: str = "symshape") -> int:
    parser = build_parser()
    parser.prog = prog
    return _run(argv, parser)


def dinfer_main(argv=None) -> int:
    """The ``dinfer`` command: same as ``symshape dinfer``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    return main(["dinfer"] + argv, prog="dinfer")


if __name__ == "__main__":
    sys.exit(main())
