"""Normal forms of size conditions.

``canonical_condition`` is the readable form the engine records (constants on
the right, ``T - 1 < 128`` as ``T <= 128``); ``normal_form`` is the
``d <= 0`` / ``d == 0`` form static reasoning compares facts in.
"""
from __future__ import annotations

from typing import Optional

import sympy

from .functions import factor
from .value_ranges import UnsupportedExpression, ValueRange, bound


def canonical_condition(e):
    """Readable normal form of an integer comparison: constants on the right,
    strict bounds made inclusive (``T - 1 < 128`` -> ``T <= 128``)."""
    if isinstance(e, sympy.Not) and isinstance(e.args[0], sympy.Rel):
        e = sympy.Not(e.args[0])  # sympy already flips relationals; this keeps Eq/Ne simple
    if not isinstance(e, sympy.Rel) or not (e.lhs.is_integer and e.rhs.is_integer):
        return e
    lhs, rhs = e.lhs, e.rhs
    if isinstance(e, (sympy.Eq, sympy.Ne)) and lhs.is_Symbol and rhs.is_Symbol and rhs.name < lhs.name:
        return type(e)(rhs, lhs)  # symmetric: name order, so A == C reads the same every time
    if lhs.is_number and not rhs.is_number:
        e = e.reversed
        lhs, rhs = e.lhs, e.rhs
    c, rest = lhs.as_coeff_Add()
    moved = c != 0 and rhs.is_number and not rest.is_number
    if moved:
        lhs, rhs = rest, rhs - c
    rel = type(e)
    if moved and rhs.is_Integer:
        if rel is sympy.Lt:
            rel, rhs = sympy.Le, rhs - 1
        elif rel is sympy.Gt:
            rel, rhs = sympy.Ge, rhs + 1
    if rhs.is_Integer:
        k, x = lhs.as_coeff_Mul()
        if k.is_Integer and k > 1:
            k, r = int(k), int(rhs)
            if rel in (sympy.Eq, sympy.Ne) and r % k == 0:
                lhs, rhs = x, sympy.Integer(r // k)
            elif rel in (sympy.Le, sympy.Lt, sympy.Ge, sympy.Gt):
                # k*x <= r  <=>  x <= floor(r/k); k*x >= r  <=>  x >= ceil(r/k)
                if rel is sympy.Lt:
                    rel, r = sympy.Le, r - 1
                elif rel is sympy.Gt:
                    rel, r = sympy.Ge, r + 1
                lhs, rhs = x, sympy.Integer(r // k if rel is sympy.Le else -((-r) // k))
    out = rel(lhs, rhs)
    return out if isinstance(out, sympy.Rel) else e


def normal_form(rel):
    """``rel`` as ``(d, op)`` meaning ``d op 0`` with op in {"<=", "=="};
    strict integer inequalities become ``d + 1 <= 0``. None if not integer."""
    if not isinstance(rel, sympy.Rel):
        return None
    lhs, rhs = rel.lhs, rel.rhs
    if not (lhs.is_integer and rhs.is_integer):
        return None
    if isinstance(rel, sympy.Eq):
        return sympy.expand(lhs - rhs), "=="
    if isinstance(rel, sympy.Ne):
        return sympy.expand(lhs - rhs), "!="
    if isinstance(rel, sympy.Le):
        return sympy.expand(lhs - rhs), "<="
    if isinstance(rel, sympy.Lt):
        return sympy.expand(lhs - rhs + 1), "<="
    if isinstance(rel, sympy.Ge):
        return sympy.expand(rhs - lhs), "<="
    if isinstance(rel, sympy.Gt):
        return sympy.expand(rhs - lhs + 1), "<="
    return None


def decide_normal(r: ValueRange, op: str) -> Optional[bool]:
    if op == "<=":
        return True if r.upper <= 0 else False if r.lower > 0 else None
    if op == "==":
        return True if r.lower == r.upper == 0 else False if (r.lower > 0 or r.upper < 0) else None
    if op == "!=":
        return False if r.lower == r.upper == 0 else True if (r.lower > 0 or r.upper < 0) else None
    return None


def simplify_conjunction(conds, ranges) -> list:
    """The conditions of a conjunction, each simplified under the others and the ranges.

    A dim fixed by one condition (``T == 1``) is put into the others, bounds
    on one dim narrow its range, and a condition these decide true is
    dropped; one decided false makes the whole conjunction ``[false]``.  The
    conjunction keeps its meaning: nothing is assumed beyond ``ranges``
    (facts on every size the conditions are asked about) and the conditions.

    >>> B, T = sympy.symbols("B T", integer=True)
    >>> from shapes.functions import PyMod
    >>> simplify_conjunction([sympy.Eq(B * T, B), sympy.Ne(PyMod(T, 64), 0), sympy.Eq(T, 1), sympy.Eq(T, 1)],
    ...                      {B: ValueRange(1, 10), T: ValueRange(1, 128)})
    [Eq(T, 1)]
    >>> simplify_conjunction([sympy.Eq(T, 1), sympy.Ge(B, 2 * T)], {B: ValueRange(1, 10), T: ValueRange(1, 128)})
    [Eq(T, 1), B >= 2]
    """
    # Once each: two copies of T == 1 would each put T = 1 into the other and both go.
    conds = list(dict.fromkeys(c for c in conds if c is not sympy.true))
    changed = True
    while changed:
        changed = False
        for i, c in enumerate(conds):
            others = conds[:i] + conds[i + 1:]
            fixed = {o.lhs: o.rhs for o in others
                     if isinstance(o, sympy.Eq) and o.lhs.is_Symbol and o.rhs.is_Integer}
            try:
                new = c.xreplace(fixed) if fixed else c
            except ZeroDivisionError:
                new = c  # undefined at the fixed sizes: decided elsewhere, keep it as it reads
            if new is not sympy.false and new is not sympy.true and isinstance(new, sympy.Rel):
                v = _decided_by_ranges(new, _narrowed(ranges, others, fixed))
                new = {True: sympy.true, False: sympy.false}.get(v, new)
            if new is sympy.false:
                return [sympy.false]
            if new is not c:
                conds = others if new is sympy.true else conds[:i] + [new] + conds[i + 1:]
                changed = True
                break
    return conds


def _narrowed(ranges, conds, fixed) -> dict:
    """``ranges`` narrowed by the bounds on one dim among ``conds``."""
    out = dict(ranges)
    for s, v in fixed.items():
        out[s] = ValueRange.point(v)
    for c in conds:
        if not (isinstance(c, (sympy.Le, sympy.Lt, sympy.Ge, sympy.Gt)) and c.lhs.is_Symbol and c.rhs.is_Integer
                and c.lhs.is_integer):
            continue
        s, k = c.lhs, int(c.rhs)
        r = out.get(s, ValueRange.unknown())
        lo, hi = r.lower, r.upper
        if isinstance(c, sympy.Ge):
            lo = max(lo, k)
        elif isinstance(c, sympy.Gt):
            lo = max(lo, k + 1)
        elif isinstance(c, sympy.Le):
            hi = min(hi, k)
        else:
            hi = min(hi, k - 1)
        if lo <= hi:
            out[s] = ValueRange(lo, hi)
    return out


def _decided_by_ranges(rel, ranges) -> Optional[bool]:
    nf = normal_form(rel)
    try:
        if nf is not None:
            d, op = nf
            v = decide_normal(bound(d, ranges), op)
            if v is None and factor(d) != d:
                v = decide_normal(bound(factor(d), ranges), op)
            return v
        return bound(rel, ranges).known_bool()
    except (UnsupportedExpression, ZeroDivisionError):
        return None
