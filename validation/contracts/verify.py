"""Checking one contract entry: each expectation proved, refuted with a counterexample, or undecided.

The program is given already loaded (the CLI and the server load it, each with its
own rules for paths); :func:`verify` runs every expectation the entry states and
never lets a symshape failure read as a pass or as the program's error.

Example::

    >>> from validation.contracts.contract import Contract
    >>> c = Contract(name="rows", program="v", inputs=["x: f32[N]"], dims={"N": (1, 64)},
    ...              expectations={"valid": True})
    >>> f = verify(c, lambda x: x.view(-1, 4)).findings[0]
    >>> str(f.status), f.counterexample
    ('fail', {'N': 1})
"""
from __future__ import annotations

import os
import time
import traceback
from typing import Optional

import sympy

from guards.explanation import DimStatus
from shapes.errors import SymshapeError
from shapes.guard import GuardKind

from .contract import EXPECTATIONS, Contract
from .costs import check_comm, check_flops
from .expectations import check_max_guards, check_no_specialization, check_output, explained, shape_fact
from .facts import ProgramFacts
from .findings import ERROR, FAIL, UNDECIDED, EntryResult, Finding, location
from .pyexpr import ExprError
from .valid import check_valid, valid_region_text

CHECKS = {"output": check_output, "valid": check_valid, "no_specialization": check_no_specialization,
          "max_guards": check_max_guards, "flops": check_flops, "comm": check_comm}


def verify(contract: Contract, program, time_budget: float = 60.0, facts: bool = False,
           started: Optional[float] = None) -> EntryResult:
    """Check every expectation of ``contract`` on ``program`` (a function or nn.Module).

    With ``facts=True`` also record the current facts (output, valid region,
    specialization, guard count, FLOPs) in :attr:`EntryResult.facts`.
    ``started`` is when the caller began (loading the program counts in the time).
    """
    t0 = time.monotonic() if started is None else started
    res = EntryResult(contract=contract)
    f = ProgramFacts(contract, program, time_budget)
    for k in EXPECTATIONS:
        if k in contract.expectations:
            res.findings.append(_guarded(k, CHECKS[k], f, contract))
    if facts:
        try:
            res.facts = current_facts(f)
        except SymshapeError as e:  # best effort: the findings say what failed
            res.facts = {"error": f"{type(e).__name__}: {e}"}
    res.elapsed = time.monotonic() - t0
    return res


def error_finding(expectation: str, e: BaseException, contract: Contract) -> Finding:
    """The entry itself could not be checked (``e`` says why, on one line)."""
    return Finding(expectation=expectation, status=ERROR,
                   message=" ".join(str(e).split()), file=contract.source, line=contract.line)


def _guarded(k, check, facts: ProgramFacts, contract) -> Finding:
    from shapes import TraceError
    try:
        return check(facts, contract.expectations[k])
    except ExprError as e:
        return error_finding(k, e, contract)
    except TraceError as e:
        p = e.provenance
        exc = e.exc if e.exc is not None else e
        file, line = location(getattr(p, "filename", None), getattr(p, "lineno", None))
        return Finding(expectation=k, status=FAIL,
                       message=f"the program raises at every traced point: {type(exc).__name__}: "
                       f"{str(exc).splitlines()[0] if str(exc) else ''}",
                       file=file, line=line, code=getattr(p, "code", ""))
    except SymshapeError as e:
        return Finding(expectation=k, status=UNDECIDED,
                       message=f"symshape could not decide: {' '.join(str(e).split())}")
    except Exception as e:  # a symshape bug must not read as a pass or as the program's error
        tb = traceback.extract_tb(e.__traceback__)[-1]
        return Finding(expectation=k, status=UNDECIDED, message=f"symshape failed ({type(e).__name__}: {e} at "
                       f"{os.path.basename(tb.filename)}:{tb.lineno}); not decided")


def current_facts(f: ProgramFacts) -> dict:
    """What the program does now, in contract form (what ``--update`` writes)."""
    from guards.render import to_python
    out = {}
    try:
        tp = f.traced
    except SymshapeError:  # the program does not trace: no output fact
        tp = None
    if tp is not None:
        out["output"] = shape_fact(tp.output_shapes)
    region = valid_region_text(f.space)
    out["valid"] = True if region == "True" else region
    if tp is not None:
        ex = explained(f)
        out["no_specialization"] = not any(d.status is DimStatus.SPECIALIZED for d in ex.dims)
        out["max_guards"] = sum(1 for e in ex.entries if e.kind is GuardKind.GUARD)
        out["flops"] = to_python(sympy.sympify(f.report_of(tp).total))
    return out
