"""Explain a traced program's guards: where each came from, what it costs, how to avoid it.

:func:`explain` turns a :class:`~shapes.program.TracedProgram` into an
:class:`Explanation`: a summary (which input dims stayed dynamic, which were
specialized or unified and why, how many records come from the user's code
and how many from inside torch) and one :class:`Entry` per guard,
specialization and runtime assert.  Given a concrete point (``at``) it also
says which records fail there and what that means for the call.

The reports (:mod:`guards.report_text`, :mod:`guards.report_json`,
:mod:`guards.report_html`) only render an Explanation; every judgement is
made here, once.

Example::

    >>> import shapes, guards
    >>> def f(x):
    ...     if x.shape[0] > 16:
    ...         return x * 2
    ...     return x + 1
    >>> tp = shapes.trace(f, "x: f32[B]", dims={"B": 32})
    >>> ex = guards.explain(tp, at={"B": 4})
    >>> ex.entries[0].user_expr, ex.entries[0].origin
    ('x.shape[0] > 16', 'user_code')
    >>> ex.at.verdict
    'recompile'
    >>> print(ex.at.reasons[0].splitlines()[0])  # doctest: +ELLIPSIS
    this call would recompile because x.shape[0] > 16 is false at B=4 ...
"""
from __future__ import annotations

import linecache
import math
from dataclasses import dataclass, field
from typing import Mapping, Optional, Union

import sympy

from shapes.data_names import data_name, data_names

from shapes.guard import Decision, Guard, GuardKind, StepKind
from shapes.paths import TracedPaths, path_of

from . import report_html, report_json, report_text
from .explain_at import AtResult, ExplainError, evaluate_at  # noqa: F401 - ExplainError is part of this API
from .explanation import (  # noqa: F401 - the records are part of this module's API
    COST_RECOMPILE, COST_RUNTIME_ERROR, COST_SPECIALIZED, ORIGINS, SNIPPET_CONTEXT, DimInfo, DimStatus, Entry,
    ExplanationModel)
from .for_people import people_conjunction, solve_atom, without_unit_mod
from .render import render_conjunction, short_path, source_names, to_python
from .suggestions import INPUT_SPEC, TORCH_OP, TORCH_PYTHON, USER_CODE, suggest


@dataclass
class Explanation(ExplanationModel):
    """What :func:`explain` returns; render it with :meth:`text`, :meth:`to_dict` or :meth:`html`."""

    def text(self, width: int = 80) -> str:
        """The plain-text report, every line at most ``width`` columns."""
        return report_text.render(self, width=width)

    def to_dict(self) -> dict:
        """The JSON report as a dict (it validates against ``guards/report.schema.json``)."""
        return report_json.to_dict(self)

    def json(self, indent: int = 2) -> str:
        return report_json.dumps(self, indent=indent)

    def html(self) -> str:
        """The HTML report: one self-contained page (inline CSS and JS, no network)."""
        return report_html.render(self)


# ----------------------------------------------------------------------------- expressions

_FLIP = {sympy.Lt: sympy.Gt, sympy.Le: sympy.Ge, sympy.Gt: sympy.Lt, sympy.Ge: sympy.Le,
         sympy.Eq: sympy.Eq, sympy.Ne: sympy.Ne}


def tidy(expr):
    """An equivalent relation that reads better: constants on the right, no leading minus.

    Only exact rewrites over integers: ``T - 1 < 128`` becomes ``T <= 128``,
    ``16 < B`` becomes ``B > 16``; ``K == K2`` and ``N % 8 == 0`` are kept.

    >>> T = sympy.Symbol("T", integer=True)
    >>> tidy(T - 1 < 128)
    T <= 128
    """
    if not isinstance(expr, sympy.Rel) or type(expr) not in _FLIP:
        return expr
    lhs, rhs = expr.lhs, expr.rhs
    if not (lhs.is_integer and rhs.is_integer):
        return expr
    lhs_const = lhs.as_coeff_Add()[0] != 0
    rhs_const = rhs.as_coeff_Add()[0] != 0
    if rhs.is_number and not lhs_const:
        return expr
    if lhs.is_number and not rhs_const:
        return _FLIP[type(expr)](rhs, lhs)
    if not (lhs_const or rhs_const or lhs.is_number or rhs.is_number):
        return expr  # K == K2: nothing to move
    d = sympy.expand(lhs - rhs)
    c, p = d.as_coeff_Add()
    if p == 0:
        return expr
    op = type(expr)
    if all(t.as_coeff_Mul()[0] < 0 for t in sympy.Add.make_args(p)):
        p, c, op = -p, -c, _FLIP[op]
    k = -c  # p op k
    if op is sympy.Lt:
        op, k = sympy.Le, k - 1
    elif op is sympy.Gt:
        op, k = sympy.Ge, k + 1
    return op(p, k)


def _negate(expr):
    return tidy(sympy.Not(expr)) if isinstance(expr, sympy.Rel) else sympy.Not(expr)


# ----------------------------------------------------------------------------- paths and source

def _snippet(filename: str, lineno: int, context: int = SNIPPET_CONTEXT):
    if not filename or filename.startswith("<") or lineno <= 0:
        return lineno, []
    lines = linecache.getlines(filename)
    if not lines or lineno > len(lines):
        return lineno, []
    start = max(1, lineno - context)
    end = min(len(lines), lineno + context)
    return start, [lines[i - 1].rstrip("\n").rstrip() for i in range(start, end + 1)]


# ----------------------------------------------------------------------------- explain

def explain(traced, at: Union[None, str, Mapping] = None) -> Explanation:
    """Explain every guard, specialization and runtime assert of ``traced``.

    Args:
        traced: a :class:`~shapes.program.TracedProgram` (from :func:`shapes.trace`).
        at: optionally a concrete point, ``{"B": 1, "T": 7}`` or ``"B=1,T=7"``,
            naming every dim of the program; the result's ``at`` then says
            which records fail there and whether the call would recompile or
            fail at run time.

    Raises :class:`ExplainError` when ``at`` names unknown dims, misses some,
    or gives a negative size.

    Example::

        >>> import shapes, guards
        >>> tp = shapes.trace(lambda x: x.view(-1, 8), "x: f32[N]")
        >>> e = guards.explain(tp).entries[0]
        >>> str(e.kind), e.user_expr, e.op
        ('runtime_assert', 'x.shape[0] % 8 == 0', 'aten.view.default')
        >>> e.suggestion.split(";")[0]
        'pad x.shape[0] to a multiple of 8 (for example x = F.pad(x, ...)) or only pass sizes that are multiples of 8'
    """
    paths = path_of(traced)
    if len(paths) > 1:
        return _explain_paths(paths, at)
    env = traced.env
    names = source_names(env)
    entries = [_entry(traced, g, names) for g in env.records]
    dims = _dims(traced, entries)
    dd = [{"name": data_name(env, s), "what": str(source)} for s, source in env.unbacked.items()]
    counts = _counts(entries)
    # Distinct conditions: the engine asks many of them more than once.
    static = len({e.before for e in env.log if e.kind is StepKind.STATIC})
    ex = Explanation(
        program=_program_name(traced.program),
        inputs=[str(s) for s in traced.specs],
        example_sizes=dict(traced.hints),
        dims=dims,
        data_dependent=dd,
        counts=counts,
        static_decisions=static,
        entries=entries,
        specialize_zero_one=env.specialize_zero_one,
        device=str(getattr(traced, "device", "cpu")),
        device_reads=list(getattr(traced, "device_reads", [])),
    )
    if at is not None:
        ex.at = evaluate_at(traced, ex, at)
        failing = set(ex.at.failing)
        undecided = set(ex.at.undecided)
        for e in entries:
            e.fails_at_point = None if e.index in undecided else e.index in failing
    return ex


def _explain_paths(paths, at) -> Explanation:
    """The report of the path a point takes (the first path without ``at``), listing every path."""
    conds = [render_conjunction(list(sympy.And.make_args(c))) or "True" for c in TracedPaths(paths).conditions()]
    first = explain(paths[0], at)
    chosen, index = first, 0
    if first.at is not None and first.at.verdict != "ok":
        for i, p in enumerate(paths[1:], 1):
            ex = explain(p, at)
            if ex.at.verdict == "ok":
                chosen, index = ex, i
                break
    chosen.paths, chosen.path_index = conds, index
    return chosen


def _program_name(program) -> str:
    if hasattr(program, "__qualname__") and not hasattr(program, "forward"):
        return program.__qualname__
    return type(program).__name__


def _origin(g: Guard):
    if g.decided_by is Decision.ZERO_ONE:
        return INPUT_SPEC, "the input spec: the example size chose a 0/1 specialization"
    op = g.op
    if op is None:
        return USER_CODE, "your code (a branch, comparison or torch._check on a size)"
    if op.startswith("aten.") or op.startswith("prims."):
        return TORCH_OP, f"inside torch, by the op {op} (called from your line)"
    return TORCH_PYTHON, f"inside torch, by {op} (torch Python code, called from your line)"


def _hint_text(traced, syms) -> str:
    vals = [f"{s}={traced.env.hints[s]}" for s in syms if s in traced.env.hints]
    return ", ".join(vals)


def _ranges(traced) -> dict:
    """Dim name -> the sizes it takes (the range given, else ``0..``), for solving per dim."""
    out = {}
    for n in traced.dim_symbols:
        d = traced.dims.get(n)
        lo = 1 if d is None or d.min is None else int(d.min)  # a dim's range starts at 1 unless given
        hi = math.inf if d is None or d.max is None or d.max == math.inf else int(d.max)
        out[n] = (lo, hi)
    return out


def _solved(c, ranges):
    """``c`` solved per dim (``H // 2 >= 2`` is ``H >= 4``) where that gives one relation."""
    s = solve_atom(c, ranges)
    return s if isinstance(s, sympy.Rel) else c


def _entry(traced, g: Guard, names) -> Entry:
    env = traced.env
    ranges = _ranges(traced)
    t, neg = _solved(tidy(g.expr), ranges), _solved(_negate(g.expr), ranges)
    user = people_conjunction([t], names, ranges, always="True", never="False")
    dim_expr = people_conjunction([t], data_names(env), ranges, always="True", never="False")
    neg_user = people_conjunction([neg], names, ranges, always="True", never="False")
    # The dims a record is about: those of its final condition, plus dims of the
    # original question that were since replaced (unified or specialized), which
    # the final form no longer names.
    orig = g.original.free_symbols if g.original is not None else set()
    syms = sorted(g.expr.free_symbols | {s for s in orig if s in env.replacements}, key=str)
    input_dims = [str(s) for s in syms if s in env.hints]
    unbacked = [data_name(env, s) for s in syms if s in env.unbacked]
    origin, origin_text = _origin(g)
    prov = g.provenance
    start, lines = _snippet(prov.filename, prov.lineno)
    file, line, code, function = prov.filename, prov.lineno, prov.code, prov.function
    if origin == INPUT_SPEC:
        # The engine's provenance here is whoever called trace() (under the CLI,
        # the console script): not a cause.  The cause is the spec's example size.
        file, line, function, start, lines = "<input spec>", 0, "", 0, []
        code = ", ".join(str(src) for s in syms for src in env.sources.get(s, []))
    hints = _hint_text(traced, [s for s in syms if s in env.hints])

    if g.decided_by is Decision.HINT:
        decision = f"by the example sizes ({hints}): {user} held there" if hints else \
            f"by the example sizes: {user} held there"
    elif g.decided_by is Decision.ZERO_ONE:
        decision = f"by the 0/1 specialization policy: the example size is {hints}"
    elif g.decided_by is Decision.USER_CHECK:
        who = "your torch._check" if origin == USER_CODE else f"a torch._check inside {g.op}"
        decision = f"assumed, not decided: {who} asserts it (checked at run time)"
    elif g.decided_by is Decision.INT_CONVERSION:
        decision = f"by converting a size to a Python int at the example sizes ({hints})"
    else:
        decision = f"by {g.decided_by.value.replace('_', ' ')}"

    if g.kind is GuardKind.GUARD:
        cost = COST_RECOMPILE
        cost_text = f"a recompile: calls where {neg_user} do not match this trace"
    elif g.kind is GuardKind.RUNTIME_ASSERT:
        cost = COST_RUNTIME_ERROR
        cost_text = f"an error at run time when {neg_user}; never a recompile"
    else:
        cost = COST_SPECIALIZED
        cost_text = f"the trace is only valid where {user}; any other size recompiles"

    return Entry(
        index=g.index, kind=g.kind, expr=dim_expr, user_expr=user,
        raw=to_python(without_unit_mod(g.expr), data_names(env)),
        original=to_python(g.original, data_names(env)) if g.original is not None else dim_expr,
        negation=neg_user, dims=input_dims, data_dependent=unbacked,
        file=file, line=line, code=code, function=function,
        snippet_start=start, snippet=lines, op=g.op, origin=origin, origin_text=origin_text,
        decided_by=g.decided_by.value, decision_text=decision, cost=cost, cost_text=cost_text,
        suggestion=suggest(traced, g, t, names, origin, user, neg_user), message=g.message,
        stack=list(prov.stack),
    )


# ----------------------------------------------------------------------------- summary

def _dims(traced, entries) -> list:
    env = traced.env
    out = []
    for name, hint in traced.hints.items():
        sym = env.symbols[name]
        rng = env.ranges.get(sym)
        lo = rng.lower if rng is not None else 0
        hi = rng.upper if rng is not None else None
        d = DimInfo(name=name, sources=[str(src) for src in env.sources.get(sym, [])], example=hint, status=DimStatus.DYNAMIC,
                    range=(_int_or_none(lo), _int_or_none(hi)))
        if sym in env.replacements:
            target = env.replacements[sym]
            idx = env.replacement_reasons.get(sym, -1)
            d.record = idx if idx is not None and idx >= 0 else None
            why = ""
            if d.record is not None:
                e = entries[d.record]
                why = f"record #{e.index} ({e.expr}, {e.kind} at {short_path(e.file)}:{e.line})"
            if target.is_number:
                d.status = DimStatus.SPECIALIZED
                d.value = int(target)
                d.range = (d.value, d.value)
                if d.record is not None and entries[d.record].decided_by == Decision.ZERO_ONE.value:
                    d.reason = f"specialized to {d.value}: its example size is {d.value} (0/1 policy)"
                elif d.record is not None:
                    d.reason = f"specialized to {d.value} by {why}"
                else:
                    d.reason = f"specialized to {d.value}"
            else:
                d.status = DimStatus.UNIFIED
                d.unified_with = to_python(target)
                tr = _range_of(env, target)
                d.range = tr
                d.reason = f"unified with {d.unified_with}" + (f" by {why}" if why else "")
        out.append(d)
    return out


def _range_of(env, e):
    from shapes.value_ranges import bound
    try:
        r = bound(e, env.ranges)
    except TypeError:
        return (None, None)
    return (_int_or_none(r.lower), _int_or_none(r.upper))


def _int_or_none(v):
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    if f in (float("inf"), float("-inf")):
        return None
    return int(v)


def _counts(entries) -> dict:
    by_kind = {k.value: 0 for k in GuardKind}
    by_origin = {o: 0 for o in ORIGINS}
    by_op: dict = {}
    for e in entries:
        by_kind[e.kind] += 1
        by_origin[e.origin] += 1
        if e.op:
            by_op[e.op] = by_op.get(e.op, 0) + 1
    return {"total": len(entries), "by_kind": by_kind, "by_origin": by_origin,
            "by_op": dict(sorted(by_op.items(), key=lambda kv: (-kv[1], kv[0])))}
