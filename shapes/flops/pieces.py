"""FLOP counts where the program takes another path: one closed form per path.

A :class:`~shapes.flops.FlopReport` holds the closed form of the path its
trace took.  Sizes whose guards fail there (a size 1 the program broadcasts,
a user branch on ``T > 1``) take another path: :func:`piece_for` traces the
program there once and counts that path, so ``evaluate`` answers at every
size the program runs at.  :class:`PiecewiseCount` lists the paths found,
each with the condition that selects it (``T == 1: ...; T >= 2: ...``).

Example::

    >>> import torch, shapes
    >>> def f(x, w):
    ...     return x @ w if x.shape[0] > 1 else (x @ w) @ w.t() @ w
    >>> r = shapes.count_flops(f, "x: f32[B, 4]", "w: f32[4, 4]")
    >>> r.evaluate({"B": 1}), r.evaluate({"B": 3})
    (96, 96)
    >>> print(r.piecewise())
    B >= 2: 32*B; B == 1: 96
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import sympy

from ..conditions import simplify_conjunction
from ..errors import GuardViolation, SymshapeError
from .. import printers
from ..functions import FloorDiv, PyMod
from ..guard import Decision, GuardKind
from ..spec import Dim

#: At most this many dims get every combination of size-1 corners explored.
_CORNER_DIMS = 4


def piece_for(report, given: dict):
    """The report (``report`` or one of its pieces) whose path ``given`` takes.

    Raises :class:`GuardViolation` when ``given`` lies outside a dim's range
    or fails a runtime assert on its path (no path of the program counts there).
    """
    for piece in [report] + report.pieces:
        bad = piece.traced.failing_guards(given)
        if not bad:
            return piece
        outside = [g for g in bad if g.index < 0 and g.decided_by not in (Decision.ZERO_ONE, Decision.EAGER_LIMIT)]
        if outside:
            _refuse(report, given, outside[0])
        if all(g.kind is GuardKind.RUNTIME_ASSERT for g in bad):
            _refuse(report, given, bad[0])  # on this path, and the program raises there
    return _trace_piece(report, given)


def _refuse(report, given, g):
    at = ", ".join(f"{k}={v}" for k, v in given.items())
    if g.index < 0:
        raise GuardViolation(f"at {at} the input constraint {to_python(g.expr)} fails ({g.message}), so "
                             f"no count applies; count with a range that includes these sizes (dims=...)",
                             guard=g, values=given)
    raise GuardViolation(f"at {at} the program fails its check {to_python(g.expr)} from {g.provenance}: "
                         f"it raises there, so there is no count", guard=g, values=given)


def _trace_piece(report, given):
    from ..tracer import trace
    tp = report.traced
    dims = {}
    for n, v in given.items():
        d = tp.dims.get(n, Dim())
        dims[n] = Dim(min(d.min, v), d.max, v) if d.min > v and tp.env.specialize_zero_one else Dim(d.min, d.max, v)
    try:
        traced = trace(tp.program, *tp.specs, dims=dims, specialize_zero_one=tp.env.specialize_zero_one,
                       **getattr(tp, "trace_options", {}))
    except SymshapeError as e:
        at = ", ".join(f"{k}={v}" for k, v in given.items())
        g = tp.failing_guards(given)[0]
        raise GuardViolation(f"at {at} the guard {to_python(g.expr)} from {g.provenance} fails, and the path "
                             f"taken there has no count: {str(e).splitlines()[0]}", guard=g, values=given) from e
    piece = type(report)(traced, name=report.name)
    if piece.traced.failing_guards(given):  # never count a path the sizes do not take
        raise SymshapeError(f"symshape: the trace at {given} does not hold at its own sizes")
    report.pieces.append(piece)
    return piece


@dataclass
class PiecewiseCount:
    """FLOPs as one closed form per path: ``[(condition, total), ...]``.

    ``condition`` is a sympy boolean over the dims (the path's guards);
    ``str()`` prints ``cond: total; cond: total`` in Python syntax.
    """

    pieces: list

    def __str__(self) -> str:
        return "; ".join(f"{to_python(c)}: {to_python(e)}" for c, e in self.pieces)

    def __len__(self) -> int:
        return len(self.pieces)


def piecewise(report) -> PiecewiseCount:
    """Trace the size-1 corners of ``report``'s dims and list each path's count."""
    dims = report.dims
    hints = dict(report.traced.hints)
    small = {n: [v for v in (1, 0) if report.traced.dims.get(n, Dim()).min <= v] for n in dims}
    combos = []
    if len(dims) <= _CORNER_DIMS:
        for k in range(1, len(dims) + 1):
            combos += list(itertools.combinations(dims, k))
    else:
        combos = [(n,) for n in dims]
    for combo in combos:
        for values in itertools.product(*[small[n] for n in combo]):
            point = dict(hints)
            point.update(zip(combo, values))
            try:
                piece_for(report, point)
            except GuardViolation:
                continue  # the program raises there (or a range excludes it): no count
    out = []
    for piece in [report] + report.pieces:
        cond = path_condition(piece)
        fixed = {c.lhs: c.rhs for c in sympy.And.make_args(cond)
                 if isinstance(c, sympy.Eq) and c.lhs.is_Symbol and c.rhs.is_Integer}
        out.append((cond, sympy.expand(piece.total.xreplace(fixed)) if fixed else piece.total))
    return PiecewiseCount(out)


def path_condition(piece):
    """The guards of a piece's path as one condition, bounds on one dim merged."""
    return traced_path_condition(piece.traced)


def traced_path_condition(traced):
    """The guards of a traced program's path as one condition, bounds on one dim merged.

    >>> import shapes
    >>> traced_path_condition(shapes.trace(lambda x: x if x.shape[0] > 1 else x * 2, "x: f32[B]"))
    B >= 2
    """
    env = traced.env
    # Under the declared ranges: env.ranges are already narrowed by these very guards.
    # A dim a guard fixed (B*T == B with B >= 2 fixes T = 1) is stated as such, so that
    # the conjunction reads T == 1 rather than the guard it was learned from.
    fixed = [sympy.Eq(s, v) for s, v in env.replacements.items() if v.is_Integer
             and env.replacement_reasons.get(s, -1) >= 0
             and env.records[env.replacement_reasons[s]].kind is not GuardKind.RUNTIME_ASSERT]
    conds = simplify_conjunction(fixed + [g.expr for g in env.guards if g.expr.free_symbols], env.declared_ranges)
    if conds == [sympy.false]:
        return sympy.false
    by_sym: dict = {}
    rest = []
    for c in conds:
        syms = c.free_symbols
        if len(syms) == 1 and isinstance(c, sympy.Rel) and not c.has(FloorDiv, PyMod):
            by_sym.setdefault(next(iter(syms)), []).append(c)
        else:
            rest.append(c)
    parts = []
    for s, cs in by_sym.items():
        r = env.declared_ranges.get(s)
        lo = r.lower if r is not None else 0
        try:
            st = sympy.And(*cs).as_set().intersect(sympy.Interval(lo, sympy.oo))
        except NotImplementedError:  # sympy cannot solve it as a set: keep the guards as they are
            parts.extend(cs)
            continue
        parts.append(_interval_condition(s, st, cs))
    parts += rest
    return sympy.And(*parts) if parts else sympy.true


def _interval_condition(s, st, fallback):
    if isinstance(st, sympy.Interval):
        lo = st.start if st.start.is_infinite else math.ceil(st.start + (1 if st.left_open and st.start.is_Integer else 0))
        hi = st.end if st.end.is_infinite else math.floor(st.end - (1 if st.right_open and st.end.is_Integer else 0))
        if not st.end.is_infinite and lo == hi:
            return sympy.Eq(s, lo)
        if st.end.is_infinite:
            return sympy.Ge(s, lo)
        return sympy.And(sympy.Ge(s, lo), sympy.Le(s, hi))
    if isinstance(st, sympy.FiniteSet) and len(st) == 1:
        return sympy.Eq(s, next(iter(st)))
    return sympy.And(*fallback)


def to_python(e) -> str:
    """A condition or count in Python syntax (``T >= 2 and B == 1``, ``H // 2``); ``always`` for true."""
    return "always" if e is sympy.true else printers.to_python(e)
