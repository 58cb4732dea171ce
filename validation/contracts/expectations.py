"""The ``output``, ``no_specialization`` and ``max_guards`` expectations of a contract.

``output`` is proved in every ok class dinfer finds; ``no_specialization`` and
``max_guards`` are about the one trace at the example sizes.

Example::

    >>> import sympy
    >>> B = sympy.Symbol("B", integer=True, positive=True)
    >>> shape_fact([(B, sympy.Integer(8))]), shape_fact([(B,), (2,)])
    (['B', 8], [['B'], [2]])
"""
from __future__ import annotations

import sympy

from guards.explanation import DimStatus
from shapes.guard import GuardKind

from .contract import toml_value
from .findings import FAIL, PASS, UNDECIDED, Finding, incomplete, location
from .points import Undecided, differs, z3box
from .pyexpr import parse_expr


def ok_classes(facts):
    """dinfer's ok classes, each with a Z3 term for its sizes (facts hold per class, not per trace)."""
    sp = facts.space
    z = z3box(sp)
    return sp, z, [(c, z.conj(c.conditions)) for c in sp.ok_classes]


def shape_fact(output_shapes):
    """Output shapes in contract form: ints where constant, else the dim's Python text."""
    from guards.render import to_python
    shapes = [[int(e) if getattr(e, "is_Integer", False) or isinstance(e, int) else to_python(e) for e in s]
              for s in output_shapes]
    return shapes[0] if len(shapes) == 1 else shapes


def output_fix(sp, c) -> str:
    """The ``output`` the contract could state: the one formula of every ok class (the summary's
    ok row, e.g. ``[B, T, 32]`` and not ``[1, 1, 32]`` of the smallest class), if there is one."""
    rows = [r for r in (sp.summary.rows if getattr(sp, "summary", None) is not None else ())
            if r.ok]
    if len(rows) == 1 and rows[0].outputs:
        return f"output = {toml_value(shape_fact(rows[0].outputs))}"
    if len(rows) > 1:
        return ("the output shape differs between sizes (" + "; ".join(
            f"{r.output_text()} where {r.region.text()}" for r in rows) + "): narrow `dims` to one of them")
    return f"output = {toml_value(shape_fact(c.output_shapes))}"


def _shapes_text(shapes) -> str:
    from guards.render import to_python
    return "; ".join("[" + ", ".join(to_python(e) for e in s) + "]" for s in shapes)


def check_output(facts, want) -> Finding:
    """The output shape(s) equal the contract's in every ok class (Z3 where they differ in form)."""
    wants = want if want and all(isinstance(s, list) for s in want) else [want]
    sp, z, classes = ok_classes(facts)
    if not classes:
        return Finding(expectation="output", status=FAIL,
                       message="no size in the ranges runs, so there is no output shape",
                       fix="see the `valid` expectation")
    wexprs = [[sympy.Integer(d) if isinstance(d, int) else parse_expr(d, sp.symbols) for d in w] for w in wants]
    try:
        for c, term in classes:
            bad = _class_output(sp, z, c, term, wants, wexprs)
            if bad is not None:
                return bad
    except Undecided as e:
        return Finding(expectation="output", status=UNDECIDED, message=str(e))
    shapes = {_shapes_text(c.output_shapes) for c, _ in classes}
    if not sp.complete:
        return incomplete("output", sp, len(classes))
    return Finding(expectation="output", status=PASS,
                   message=f"output shape(s) match the contract in all {len(classes)} ok class(es)"
                   + (f" ({next(iter(shapes))})" if len(shapes) == 1 else ""))


def _class_output(sp, z, c, term, wants, wexprs):
    """The failing finding of class ``c``'s outputs, or None when they match the contract."""
    from guards.render import to_python
    got = [list(s) for s in c.output_shapes]
    if len(wants) != len(got):
        return Finding(expectation="output", status=FAIL,
                       message=f"the program returns {len(got)} tensor(s) ({_shapes_text(got)}) where "
                       f"{c.describe()}; the contract lists {len(wants)}", counterexample=dict(c.example),
                       fix=output_fix(sp, c))
    for i, (w, we, g) in enumerate(zip(wants, wexprs, got)):
        if len(w) != len(g):
            return Finding(expectation="output", status=FAIL,
                           message=f"output {i} is [{', '.join(map(to_python, g))}] (rank {len(g)}) "
                           f"where {c.describe()}; the contract says rank {len(w)}",
                           counterexample=dict(c.example), fix=output_fix(sp, c))
        for j, (wd, wx, gd) in enumerate(zip(w, we, g)):
            pt = differs(z, sp, term, gd, wx)
            if pt is not None:
                at = ", ".join(f"{k}={v}" for k, v in pt.items())
                return Finding(expectation="output", status=FAIL,
                               message=f"output {i} dim {j} is {to_python(gd)} where {c.describe()}, "
                               f"the contract says {wd} (at {at})", counterexample=pt,
                               fix=output_fix(sp, c))
    return None


def explained(facts):
    """The explanation of the trace at the example sizes."""
    from guards.explain import explain
    return explain(facts.traced)


def check_no_specialization(facts, want: bool) -> Finding:
    """No dim is fixed to a constant by the trace at the example sizes."""
    ex = explained(facts)
    spec = [d for d in ex.dims if d.status is DimStatus.SPECIALIZED]
    if not want:
        return Finding(expectation="no_specialization", status=PASS, message="not required")
    if not spec:
        return Finding(expectation="no_specialization", status=PASS, message="no dim is fixed to a constant")
    d = spec[0]
    e = ex.entries[d.record] if d.record is not None and d.record < len(ex.entries) else None
    rng = facts.c.dims.get(d.name)
    cex = None
    if isinstance(rng, tuple):
        other = rng[0] if rng[0] != d.value else rng[0] + 1
        if other <= rng[1]:
            cex = {d.name: other}
    file, line = location(e.file, e.line) if e else (None, None)
    return Finding(expectation="no_specialization", status=FAIL,
                   message=f"{d.name} is specialized to {d.value}: {d.reason}", file=file, line=line,
                   code=e.code if e else "", counterexample=cex,
                   fix=(e.suggestion if e and e.suggestion else f"keep {d.name} symbolic at that line"))


def check_max_guards(facts, want: int) -> Finding:
    """The trace at the example sizes has at most ``want`` guards (recompile conditions)."""
    ex = explained(facts)
    guards = [e for e in ex.entries if e.kind is GuardKind.GUARD]
    if len(guards) <= want:
        return Finding(expectation="max_guards", status=PASS, message=f"{len(guards)} guard(s), at most {want} allowed")
    extra = guards[want]
    file, line = location(extra.file, extra.line)
    return Finding(expectation="max_guards", status=FAIL,
                   message=f"{len(guards)} guards, the contract allows {want}; guard {want + 1}: "
                           f"{extra.expr} ({extra.user_expr})", file=file, line=line, code=extra.code,
                   fix=extra.suggestion or f"raise max_guards to {len(guards)} if these recompiles are intended")
