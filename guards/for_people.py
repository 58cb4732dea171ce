"""Conditions for people: each condition a person reads, solved per dim where it can be.

The engine keeps conditions in the form the program asked them
(``H // 2 >= 1``, ``64 <= C and C <= 64``, ``1 % (N - 1) != 0``); a person
reads bounds on dims (``H >= 2``, ``C == 64``, ``N >= 3``).  Every rewrite
here is exact on the sizes in the dims' ranges:

* an atom over one dim whose sides are monotone in it (sums, products of
  non-negative terms, ``//`` and ``min``/``max`` of such) is solved by a
  binary search for the size where it switches (``H // 4 == 7`` is
  ``28 <= H <= 31``); an atom the search cannot settle is kept as written;
* ``1 % e != 0`` for a size expression ``e >= 0`` is ``e >= 2``;
* bounds on one dim merge into one chained comparison, ``a <= X <= a``
  reads ``X == a``;
* an empty condition and ``True``/``False`` are said in words.

Example::

    >>> import sympy
    >>> from shapes.functions import FloorDiv
    >>> H, C = sympy.symbols("H C", integer=True, positive=True)
    >>> people_conjunction([sympy.Ge(FloorDiv(H, 2), 1)])
    'H >= 2'
    >>> people_conjunction([sympy.Eq(FloorDiv(H, 4), 7)])
    '28 <= H <= 31'
    >>> people_conjunction([sympy.Ge(C, 64), sympy.Le(C, 64)])
    'C == 64'
    >>> people_conjunction([], always="every size in the ranges runs")
    'every size in the ranges runs'
"""
from __future__ import annotations

import math
import re
from typing import Mapping, Optional

import sympy

from shapes.functions import FloorDiv, PyMod
from shapes.printers import to_python

#: The largest size the search for a switch point looks at when a dim has no upper bound.
SEARCH_CAP = 2 ** 40

_RELS = (sympy.Ge, sympy.Gt, sympy.Le, sympy.Lt, sympy.Eq, sympy.Ne)


def _range(sym, ranges: Optional[Mapping]):
    """The sizes ``sym`` takes: its range when given; ``0..`` for a dim when no ranges are
    given; None for a data-dependent value (the engine names those ``u0``, ``u1``, ...),
    whose sign is unknown, and for a symbol ``ranges`` does not name."""
    name = getattr(sym, "name", None)
    if ranges:
        r = ranges.get(name)
        if r is None:
            return None
    elif name is None or re.fullmatch(r"u\d+", name):
        return None
    else:
        r = (0, math.inf)
    lo, hi = r
    lo = 0 if lo is None or lo == -math.inf else int(lo)
    hi = math.inf if hi is None or hi == math.inf else int(hi)
    return lo, hi


def _value(e, s, v):
    x = e.xreplace({s: sympy.Integer(v)})
    return x if x.is_Integer else None


def _monotone(e, s, lo) -> Optional[int]:
    """+1 when ``e`` never decreases as ``s`` grows from ``lo``, -1 when it never increases,
    0 when it does not depend on ``s``, None when this cannot tell."""
    if s not in e.free_symbols:
        return 0
    if e == s:
        return 1
    if isinstance(e, sympy.Add):
        ds = {_monotone(a, s, lo) for a in e.args}
        if None in ds or ds >= {1, -1}:
            return None
        return 1 if 1 in ds else -1
    if isinstance(e, sympy.Mul):
        coeff, rest = e.as_coeff_Mul()
        if coeff != 1:
            d = _monotone(rest, s, lo)
            if d is None or not coeff.is_number:
                return None
            return d if coeff > 0 else -d
        for f in e.args:  # a product of non-negative non-decreasing factors
            v = _value(f, s, lo)
            if _monotone(f, s, lo) not in (0, 1) or v is None or v < 0:
                return None
        return 1
    if isinstance(e, FloorDiv) and e.args[1].is_Integer and int(e.args[1]) > 0:
        return _monotone(e.args[0], s, lo)
    if isinstance(e, (sympy.Min, sympy.Max)):
        ds = {_monotone(a, s, lo) for a in e.args} - {0}
        return ds.pop() if len(ds) == 1 and None not in ds else None
    if isinstance(e, sympy.Pow) and e.exp.is_Integer and int(e.exp) > 0:
        v = _value(e.base, s, lo)
        return 1 if _monotone(e.base, s, lo) == 1 and v is not None and v >= 0 else None
    return None


def _first(pred, lo, hi) -> Optional[int]:
    """The smallest size in ``lo..hi`` where the monotone (False, then True) ``pred`` holds."""
    if not pred(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def solve_atom(c, ranges: Optional[Mapping] = None):
    """``c`` over one dim as bounds on that dim (exact inside its range), else ``c`` itself.

    >>> N = sympy.Symbol("N", integer=True, positive=True)
    >>> people_conjunction([solve_atom(sympy.Ne(FloorDiv(N, 2), 3))])
    'N <= 5 or N >= 8'
    >>> solve_atom(sympy.Ge(FloorDiv(N, 4), 9), {"N": (1, 16)})
    False
    """
    c = without_unit_mod(c, ranges)
    if not isinstance(c, _RELS) or len(c.free_symbols) != 1 or (c.lhs.is_Symbol and c.rhs.is_Integer):
        return c  # already a bound on a dim, as the program wrote it
    (s,) = c.free_symbols
    if _range(s, ranges) is None:
        return c
    lo, hi = _range(s, ranges)
    e = c.lhs - c.rhs
    d = _monotone(e, s, lo)
    if d is None or d == 0:
        return c
    top = hi if hi != math.inf else SEARCH_CAP
    up = (lambda v: e.xreplace({s: sympy.Integer(v)})) if d == 1 else (lambda v: -e.xreplace({s: sympy.Integer(v)}))
    # f = d*e never decreases in s: find where f >= 0 and f > 0 start.
    ge0 = _first(lambda v: up(v) >= 0, lo, top)
    gt0 = _first(lambda v: up(v) > 0, lo, top)
    if hi == math.inf and ((ge0 is None) or (gt0 is None)):
        return c  # the switch may lie past the cap: keep the condition as written
    big = hi + 1 if hi != math.inf else math.inf
    ge0 = big if ge0 is None else ge0
    gt0 = big if gt0 is None else gt0
    kind = type(c)
    if d == -1:  # d*e = -(lhs - rhs): flip the relation
        kind = {sympy.Ge: sympy.Le, sympy.Gt: sympy.Lt, sympy.Le: sympy.Ge, sympy.Lt: sympy.Gt}.get(kind, kind)
    if kind is sympy.Ge:
        return _interval(s, ge0, hi, lo, hi)
    if kind is sympy.Gt:
        return _interval(s, gt0, hi, lo, hi)
    if kind is sympy.Le:
        return _interval(s, lo, gt0 - 1, lo, hi)
    if kind is sympy.Lt:
        return _interval(s, lo, ge0 - 1, lo, hi)
    inside = _interval(s, ge0, gt0 - 1, lo, hi)
    if kind is sympy.Eq:
        return inside
    if inside is sympy.false:
        return sympy.true
    parts = [p for p in (_interval(s, lo, ge0 - 1, lo, hi), _interval(s, gt0, hi, lo, hi)) if p is not sympy.false]
    return sympy.Or(*parts, evaluate=False) if len(parts) > 1 else (parts[0] if parts else sympy.false)


def without_unit_mod(c, ranges: Optional[Mapping] = None):
    """``1 % e != 0`` as ``e >= 2`` and ``1 % e == 0`` as ``e == 1``, for a size expression ``e``
    (never negative; at ``e == 0`` both sides are outside); else ``c``.

    >>> W = sympy.Symbol("W", integer=True)
    >>> to_python(without_unit_mod(sympy.Eq(PyMod(1, FloorDiv(W, 4)), 0)))
    'W // 4 == 1'
    """
    if isinstance(c, (sympy.Eq, sympy.Ne)) and isinstance(c.lhs, PyMod) and c.lhs.args[0] == 1 and c.rhs == 0:
        e = c.lhs.args[1]
        if _nonneg(e, ranges):
            return sympy.Eq(e, 1) if isinstance(c, sympy.Eq) else sympy.Ge(e, 2)
    return c


def _interval(s, a, b, lo, hi):
    if a > b or a > hi or b < lo:
        return sympy.false
    a, b = max(a, lo), min(b, hi)
    if a == lo and b == hi:
        return sympy.true
    if a == b:
        return sympy.Eq(s, a)
    if a == lo:
        return sympy.Le(s, b)
    if b == hi:
        return sympy.Ge(s, a)
    return sympy.And(sympy.Ge(s, a), sympy.Le(s, b))


def _nonneg(e, ranges) -> bool:
    """``e`` is >= 0 wherever its dims lie in their ranges (a sum and product of dims and
    floor divisions of them by positive constants, or sympy says so)."""
    if e.is_nonnegative:
        return True
    for s in e.free_symbols:
        if _range(s, ranges) is None or _range(s, ranges)[0] < 0 or _monotone(e, s, _range(s, ranges)[0]) != 1:
            return False
    lows = {s: sympy.Integer(_range(s, ranges)[0]) for s in e.free_symbols}
    v = e.xreplace(lows)
    return bool(v.is_Integer and v >= 0)


def for_people(conds, ranges: Optional[Mapping] = None) -> list:
    """``conds`` (a conjunction) solved per dim: atoms rewritten by :func:`solve_atom`,
    bounds on one dim merged, ``True`` dropped; ``[sympy.false]`` when one is False.

    >>> H, W = sympy.symbols("H W", integer=True, positive=True)
    >>> for_people([sympy.Ge(H, 2), sympy.Ge(FloorDiv(H, 2), 3), sympy.Le(W, 9)])
    [H >= 6, W <= 9]
    """
    flat = []
    for c in conds:
        c = solve_atom(c, ranges)
        for a in (c.args if isinstance(c, sympy.And) else (c,)):
            a = solve_atom(a, ranges)
            flat.extend(a.args if isinstance(a, sympy.And) else (a,))
    if any(c is sympy.false for c in flat):
        return [sympy.false]
    bounds, order, rest, written = {}, [], [], {}
    for c in flat:
        if c is sympy.true:
            continue
        b = _bound(c)
        if b is None:
            rest.append(c)
            continue
        s, lo, hi = b
        written.setdefault(s, []).append(c)
        if s not in bounds:
            bounds[s] = [-math.inf, math.inf]
            order.append(("b", s))
        bounds[s][0], bounds[s][1] = max(bounds[s][0], lo), min(bounds[s][1], hi)
        continue
    out = []
    for c in list(rest):  # T <= 64 and T != 64 is T <= 63
        if isinstance(c, sympy.Ne) and c.lhs.is_Symbol and c.rhs.is_Integer and c.lhs in bounds:
            lo, hi = bounds[c.lhs]
            k = int(c.rhs)
            if k in (lo, hi) or k < lo or k > hi:
                bounds[c.lhs] = [lo + (k == lo), hi - (k == hi)]
                written[c.lhs] = []
                rest.remove(c)
    for _, s in order:
        lo, hi = bounds[s]
        if lo > hi:
            return [sympy.false]
        r = _range(s, ranges) if ranges else None
        if r is not None:  # a bound the range already gives says nothing
            if lo > r[1] or hi < r[0]:
                return [sympy.false]
            if max(lo, r[0]) == min(hi, r[1]):
                out.append(sympy.Eq(s, max(lo, r[0])))  # B <= 1 where B starts at 1 is B == 1
                continue
            lo = -math.inf if lo <= r[0] else lo
            hi = math.inf if hi >= r[1] else hi
            if lo == -math.inf and hi == math.inf:
                continue
            written[s] = [c for c in written[s] if _bound(c)[1:] != (-math.inf, r[1]) and _bound(c)[1:] != (r[0], math.inf)]
        if lo == hi:
            out.append(sympy.Eq(s, lo))
            continue
        if len(written[s]) == 1 and not isinstance(written[s][0], sympy.Eq) and written[s][0].lhs.is_Symbol:
            out.append(written[s][0])  # one bound, as the program wrote it (B > 16)
            continue
        if lo == hi:
            out.append(sympy.Eq(s, lo))
            continue
        if lo != -math.inf:
            out.append(sympy.Ge(s, lo))
        if hi != math.inf:
            out.append(sympy.Le(s, hi))
    return out + [c for c in rest if c not in out]


def _bound(c):
    if not isinstance(c, (sympy.Ge, sympy.Gt, sympy.Le, sympy.Lt, sympy.Eq)):
        return None
    lhs, rhs, kind = c.lhs, c.rhs, type(c)
    if lhs.is_Integer and rhs.is_Symbol:
        lhs, rhs = rhs, lhs
        kind = {sympy.Ge: sympy.Le, sympy.Gt: sympy.Lt, sympy.Le: sympy.Ge, sympy.Lt: sympy.Gt}.get(kind, kind)
    if not (lhs.is_Symbol and rhs.is_Integer):
        return None
    k = int(rhs)
    return {sympy.Eq: (lhs, k, k), sympy.Ge: (lhs, k, math.inf), sympy.Gt: (lhs, k + 1, math.inf),
            sympy.Le: (lhs, -math.inf, k), sympy.Lt: (lhs, -math.inf, k - 1)}[kind]


def people_conjunction(conds, names: Optional[Mapping] = None, ranges: Optional[Mapping] = None, *,
                       always: str = "every size", never: str = "no size") -> str:
    """A conjunction as a person reads it: solved per dim (:func:`for_people`), one chained
    comparison per dim, ``always``/``never`` in words for a condition that is True/False.

    >>> B, T = sympy.symbols("B T", integer=True, positive=True)
    >>> people_conjunction([sympy.Ge(T, 2), sympy.Le(T, 8), sympy.Ge(B * T, 2)], ranges={"B": (1, 4)})
    '2 <= T <= 8 and B*T >= 2'
    >>> people_conjunction([sympy.true])
    'every size'
    """
    conds = for_people([c for c in conds if c is not sympy.true], ranges)
    if not conds:
        return always
    if conds == [sympy.false]:
        return never
    parts, i = [], 0
    while i < len(conds):
        c, nxt = conds[i], conds[i + 1] if i + 1 < len(conds) else None
        if (isinstance(c, sympy.Ge) and isinstance(nxt, sympy.Le) and c.lhs.is_Symbol
                and nxt.lhs == c.lhs and c.rhs.is_Integer and nxt.rhs.is_Integer):
            parts.append(f"{c.rhs} <= {to_python(c.lhs, names)} <= {nxt.rhs}")
            i += 2
            continue
        s = _text(c, names)
        parts.append(f"({s})" if isinstance(c, sympy.Or) and " or " in s and len(conds) > 1 else s)
        i += 1
    return " and ".join(parts)


def _text(c, names):
    """``c`` as Python; the parts of an ``or`` of bounds from the smallest sizes up."""
    if isinstance(c, sympy.Or) and all(_bound(a) is not None for a in c.args):
        return " or ".join(to_python(a, names) for a in sorted(c.args, key=lambda a: (
            _bound(a)[1], _bound(a)[2])))
    return to_python(c, names)


def people_dnf(dnf, names: Optional[Mapping] = None, ranges: Optional[Mapping] = None, *,
               always: str = "every size", never: str = "no size") -> str:
    """A disjunction of conjunctions (``[(a, b), (c,)]``) as a person reads it.

    >>> H, W = sympy.symbols("H W", integer=True, positive=True)
    >>> people_dnf([(sympy.Le(FloorDiv(H, 2), 3),), (sympy.Le(W, 7),)])
    'H <= 7 or W <= 7'
    >>> people_dnf([], never="no size in the ranges")
    'no size in the ranges'
    """
    terms = []
    for d in dnf:
        solved = for_people(list(d), ranges)
        if not solved:
            return always
        if solved != [sympy.false]:
            terms.append(solved)
    if not terms:
        return never
    if len(terms) == 1:
        return people_conjunction(terms[0], names, ranges, always=always, never=never)
    return " or ".join(f"({people_conjunction(t, names, ranges)})" if len(t) > 1 or isinstance(t[0], sympy.And)
                       else people_conjunction(t, names, ranges) for t in terms)


def wrap_tokens(text: str, width: int, indent: str = "") -> list:
    """``text`` in lines of at most ``width`` characters, broken only at spaces outside
    parentheses (a formula is never broken inside ``(H // 4)``), else at any space.

    >>> wrap_tokens("2*B*T*(3*D + T) + 4*(H // 4)*(W // 4)", 20)
    ['2*B*T*(3*D + T) +', '4*(H // 4)*(W // 4)']
    """
    words, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == " " and depth == 0:
            words.append(cur)
            cur = ""
        else:
            cur += ch
    words.append(cur)
    lines, line = [], ""
    for w in words:
        cand = f"{line} {w}" if line else w
        if len(indent) + len(cand) > width and line:
            lines.append(indent + line if lines else line)
            line = w
        else:
            line = cand
    lines.append(indent + line if lines else line)
    return lines
