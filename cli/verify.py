"""Checking one contract entry from the CLI or the server: load its program, then prove it.

The proving is the library's (:mod:`validation.contracts.verify`); this module
loads the program the entry names, under the CLI's rules for paths (relative to
the contract's folder) or the server's (inside its roots), and reports a program
that does not load as the entry's ``error`` finding.

Example::

    >>> from validation.contracts.contract import Contract
    >>> c = Contract(name="rows", program="examples/mlp.py:tokens_to_blocks", inputs=["x: f32[B, T, 64]"],
    ...              dims={"B": (1, 8), "T": (1, 64)}, expectations={"valid": True})
    >>> r = verify(c, ["."])
    >>> f = r.findings[0]
    >>> str(f.status), f.counterexample, f.line > 0
    ('fail', {'B': 1, 'T': 1}, True)
"""
from __future__ import annotations

import time

from shapes.errors import SymshapeError
from validation.contracts import verify as library
from validation.contracts.contract import Contract
from validation.contracts.findings import EntryResult

from .contracts import load_target


def verify(contract: Contract, roots=None, time_budget: float = 60.0, facts: bool = False) -> EntryResult:
    """Check every expectation of ``contract``.  Its program path is relative to the contract's
    folder; with ``roots`` (the server) it must lie inside one of them.

    With ``facts=True`` also record the current facts (output, valid region,
    specialization, guard count, FLOPs) in :attr:`EntryResult.facts`.
    """
    t0 = time.monotonic()
    restrict = roots is not None
    roots = list(roots) if roots is not None else [contract.base_dir]
    try:
        program = load_target(contract.program, roots, contract.factory, contract.factory_args, restrict)
    except SymshapeError as e:  # CliError included: the entry's program does not load
        res = EntryResult(contract=contract, findings=[library.error_finding("program", e, contract)])
        res.elapsed = time.monotonic() - t0
        return res
    return library.verify(contract, program, time_budget, facts, started=t0)
