"""``symshape check [FILE]``: verify the shape contracts in a contract file; exit 0 if all hold, 1 if not.

FILE defaults to ``symshape.toml``, else ``pyproject.toml`` (``[tool.symshape]``);
see :mod:`cli.contracts` for the format.  A failing expectation prints the
user line of the guard, assert or error that breaks it, the smallest
counterexample sizes and a suggested fix.  ``--update`` rewrites the file
with what the programs do now, so that a change which narrows a range
shows up as a diff in review.

Examples::

    symshape check                                   # symshape.toml or pyproject.toml
    symshape check examples/symshape.toml --format github
    symshape check examples/symshape.toml --format junit -o contracts.xml
    symshape check examples/symshape.toml --update
"""
from __future__ import annotations

import dataclasses
import os
import sys

from . import check_report
from .contracts import default_contract_file, load_contracts, write_contracts
from .loader import CliError


def register(sub):
    p = sub.add_parser("check", help="verify shape contracts (symshape.toml or [tool.symshape]); exit 1 on failure",
                       description="Verify every shape contract entry: valid ranges, output shapes, "
                                   "specialization, guard counts and FLOP formulas.")
    p.add_argument("file", nargs="?", help="contract file (default: symshape.toml, else pyproject.toml)")
    p.add_argument("--format", choices=check_report.FORMATS, default="text",
                   help="text (default), json, junit (XML) or github (workflow annotations)")
    p.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE (a summary still goes to stdout)")
    p.add_argument("--name", action="append", metavar="NAME", help="check only these entries (repeatable)")
    p.add_argument("--update", action="store_true",
                   help="rewrite the contract file with the current facts instead of checking")
    p.add_argument("--time-budget", type=float, default=60.0, metavar="S",
                   help="seconds dinfer may search per entry for `valid` (default 60)")
    p.set_defaults(run=run)


def run(args) -> int:
    from .verify import verify  # torch loads only when a check runs
    if not args.time_budget > 0:
        raise CliError(f"--time-budget must be positive, got {args.time_budget:g}")
    path = args.file or default_contract_file()
    contracts = load_contracts(path)
    if args.name:
        unknown = [n for n in args.name if n not in {c.name for c in contracts}]
        if unknown:
            raise CliError(f"{path} has no entry named {', '.join(unknown)} (entries: "
                           f"{', '.join(c.name for c in contracts)})")
        contracts = [c for c in contracts if c.name in args.name]
    results = [verify(c, time_budget=args.time_budget, facts=args.update) for c in contracts]
    if args.update:
        return _update(path, contracts, results, args.name)
    report = check_report.render(results, args.format)
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(report)
        except OSError as e:
            raise CliError(f"cannot write {args.output}: {e.strerror}") from None
        print(check_report.text(results).splitlines()[-1] + f"  (report: {os.path.abspath(args.output)})")
    else:
        sys.stdout.write(report)
    return 0 if all(r.ok for r in results) else 1


def _update(path, contracts, results, only) -> int:
    new, kept = [], []
    for c, r in zip(contracts, results):
        if not r.facts or "error" in r.facts or any(f.expectation == "program" for f in r.findings):
            kept.append(c.name)
            new.append(c)
            continue
        new.append(dataclasses.replace(c, expectations=dict(r.facts)))
    if only:  # keep the entries not asked about as they are
        by_name = {c.name: c for c in new}
        new = [by_name.get(c.name, c) for c in load_contracts(path)]
    write_contracts(path, new)
    print(f"wrote the current facts of {len(contracts) - len(kept)} contract(s) to {path}"
          + (f"; kept {', '.join(kept)} unchanged (they could not be checked)" if kept else ""))
    return 1 if kept else 0
