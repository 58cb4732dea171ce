"""The ``valid`` expectation: every size of the region runs, else the smallest size that does not.

Example::

    >>> from validation import dinfer
    >>> sp = dinfer(lambda x: x.view(-1, 4), "x: f32[N]", dims={"N": (1, 64)})
    >>> valid_region_text(sp)
    'N % 4 == 0'
"""
from __future__ import annotations

import math

import sympy
import z3

from .findings import FAIL, PASS, UNDECIDED, Finding, location
from .points import Undecided, smallest, z3box
from .pyexpr import parse_condition


def check_valid(facts, want) -> Finding:
    """``valid = true`` (every size in the ranges) or ``valid = "REGION"``, over dinfer's classes."""
    try:
        return _valid(facts, want)
    except Undecided as e:
        return Finding(expectation="valid", status=UNDECIDED,
                       message=f"{e}; whether every size in the region runs is not known")


def _valid(facts, want) -> Finding:
    from validation.input_space import Status
    sp = facts.space
    z = z3box(sp)
    if want is True:
        region, region_text = sympy.true, "every size in the ranges"
    else:
        region = parse_condition(want, sp.symbols)
        region_text = f"the region {want}"
    rterm = z.term(region) if region is not sympy.true else z3.BoolVal(True)
    ranked = sorted(sp.classes, key=lambda c: ({Status.ERROR: 0, Status.DATA_DEPENDENT: 1}.get(c.status, 2),
                                              sum(c.example.values())))
    for c in ranked:
        if c.status is Status.OK:
            continue
        point = smallest(z.tr, z.domain, z3.And(z.conj(c.conditions), rterm), sp.symbols)
        if point is not None:
            return _not_valid(sp, c, want, region_text, point)
    if not sp.complete:
        rest = z3.And(*[z3.Not(z.conj(c.conditions)) for c in sp.classes], rterm)
        point = smallest(z.tr, z.domain, rest, sp.symbols)
        if point is not None:
            return Finding(expectation="valid", status=UNDECIDED,
                           message=f"dinfer did not classify every size ({sp.reason}); "
                           f"for example {point} is unexplored", counterexample=point,
                           fix="raise the time budget (--time-budget) or narrow the dims")
    return Finding(expectation="valid", status=PASS,
                   message=f"{region_text} is accepted ({len(sp.ok_classes)} ok class(es), "
                   f"proved complete by Z3)")


def _not_valid(sp, c, want, region_text: str, point: dict) -> Finding:
    """The finding for a class of the region that does not run: it raises (fail) or sizes alone
    do not decide it (undecided)."""
    from validation.input_space import Status
    at = ", ".join(f"{k}={v}" for k, v in point.items())
    if c.status is Status.ERROR:
        file, line = location(c.error.filename, c.error.lineno)
        return Finding(expectation="valid", status=FAIL,
                       message=f"the contract says {region_text} is accepted, but at {at} the program "
                       f"raises {c.error.type}: {c.error.message}",
                       file=file, line=line, code=c.error.code, counterexample=point,
                       fix=_valid_fix(sp, c, want))
    what = c.message or (c.decision.message if c.decision else "the engine could not trace it")
    d = c.decision or c.error
    file, line = location(d.filename, d.lineno) if d else (None, None)
    return Finding(expectation="valid", status=UNDECIDED,
                   message=f"at {at} sizes alone do not decide whether the program runs "
                   f"({c.outcome()}: {what})",
                   file=file, line=line, code=getattr(d, "code", ""), counterexample=point)


def _valid_fix(sp, bad_class, want) -> str:
    """Change the user line that raises, or narrow the ranges (when that is exact), or state the region."""
    from guards.explain import short_path
    fixes = []
    err = bad_class.error
    if err is not None and err.filename and not err.filename.startswith("<") \
            and "site-packages" not in err.filename:
        fixes.append(f"change {short_path(err.filename)}:{err.lineno} (`{err.code.strip()}`) so that it "
                     f"accepts these sizes")
    narrowed = {n: r for n, r in (sp.valid_ranges or {}).items()
                if r is not None and tuple(r) != tuple(sp.dims[n])}
    region = valid_region_text(sp)
    if narrowed and region != "False" and " or " not in region:
        fixes.append("narrow the dims to " + ", ".join(
            f'{n} = "{lo}..{"inf" if hi == math.inf else hi}"' for n, (lo, hi) in narrowed.items()))
    elif region not in ("False", "True") and len(region) <= 160:
        fixes.append(f'state the region it accepts: valid = "{region}"')
    elif region == "False":
        fixes.append("no size in the ranges runs")
    return "; or ".join(fixes) or "state a narrower region in `valid`"


def valid_region_text(sp) -> str:
    """The sizes the program accepts as one Python condition: the ``valid iff`` summary when dinfer
    provides one, else the box narrowed to each dim's valid range when Z3 proves that exact, else
    the union of the ok classes."""
    summary = getattr(getattr(sp, "summary", None), "valid_iff", None)
    if isinstance(summary, str) and summary and sp.complete:
        return summary
    oks = sp.ok_classes
    if not oks:
        return "False"
    if len(oks) == len(sp.classes) and sp.complete:
        return "True"
    z = z3box(sp, 5.0)
    union = z3.Or(*[z.conj(c.conditions) for c in oks])
    parts, box = [], []
    for n, r in (sp.valid_ranges or {}).items():
        if r is None:
            box = None
            break
        lo, hi = r
        blo, bhi = sp.dims[n]
        v = z.vars[n]
        box += [v >= lo] + ([v <= hi] if hi != math.inf else [])
        if lo > blo and hi < bhi:
            parts.append(f"{lo} <= {n} <= {hi}")
        elif lo > blo:
            parts.append(f"{n} >= {lo}")
        elif hi < bhi:
            parts.append(f"{n} <= {hi}")
    if box is not None and sp.complete:
        s = z.solver()
        s.add(z3.And(*box) != union)
        if s.check() == z3.unsat:
            return " and ".join(parts) or "True"
    return " or ".join(f"({c.describe()})" for c in oks)
