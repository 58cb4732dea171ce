"""Normal forms of size conditions.

``canonical_condition`` is the readable form the engine records (constants on
the right, ``T - 1 < 128`` as ``T <= 128``); ``normal_form`` is the
``d <= 0`` / ``d == 0`` form static reasoning compares facts in.
"""
from __future__ import annotations

from typing import Optional

import sympy

from .value_ranges import ValueRange


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
