"""Sound interval bounds for the expressions the engine builds.

``bound(expr, ranges)`` returns a :class:`ValueRange` that contains every value
``expr`` can take when each free symbol lies in its range.  It may be wider
than the true range (imprecise) but never narrower (unsound); the fuzzer in
:mod:`validation.fuzz` checks exactly that against Z3 and brute force.

Example::

    >>> import sympy
    >>> from shapes.value_ranges import ValueRange, bound
    >>> from shapes.functions import FloorDiv
    >>> B = sympy.Symbol("B", integer=True)
    >>> bound(FloorDiv(B - 3, 2) + 1, {B: ValueRange(4, 10)})
    ValueRange(1, 4)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Mapping, Union

import sympy

from .functions import FloorDiv, PyMod, ToFloat, TrueDiv, TruncToInt, Where

INF = math.inf
Number = Union[int, Fraction, float]  # float only for +-inf


def _num(x) -> Number:
    """A sympy number as an exact Python number (floats become Fractions)."""
    if isinstance(x, sympy.Integer):
        return int(x)
    if isinstance(x, sympy.Rational):
        return Fraction(int(x.p), int(x.q))
    if x is sympy.oo:
        return INF
    if x is sympy.S.NegativeInfinity:
        return -INF
    if isinstance(x, sympy.Float):
        return Fraction(float(x))
    raise TypeError(f"not a number: {x!r}")


def _floor(x: Number) -> Number:
    return x if isinstance(x, float) else math.floor(x)


def _ceil(x: Number) -> Number:
    return x if isinstance(x, float) else math.ceil(x)


def _mul(a: Number, b: Number) -> Number:
    # 0 * inf is 0 here: interval endpoints bound finite values.
    if a == 0 or b == 0:
        return 0
    return a * b


@dataclass(frozen=True)
class ValueRange:
    """Closed interval ``[lower, upper]``; bounds may be ``-inf``/``inf``.

    Boolean expressions use ``is_bool=True`` with bounds in ``{0, 1}``.
    """

    lower: Number
    upper: Number
    is_bool: bool = False

    def __post_init__(self):
        if self.lower > self.upper:
            raise ValueError(f"empty ValueRange [{self.lower}, {self.upper}]")

    def __repr__(self) -> str:
        if self.is_bool:
            return f"BoolRange({bool(self.lower)}, {bool(self.upper)})"
        return f"ValueRange({self.lower}, {self.upper})"

    @staticmethod
    def unknown() -> "ValueRange":
        return ValueRange(-INF, INF)

    @staticmethod
    def point(v: Number) -> "ValueRange":
        return ValueRange(v, v)

    @staticmethod
    def boolean(lo: bool = False, hi: bool = True) -> "ValueRange":
        return ValueRange(int(lo), int(hi), True)

    @property
    def is_singleton(self) -> bool:
        return self.lower == self.upper

    def contains(self, v: Number) -> bool:
        return self.lower <= v <= self.upper

    def issubset(self, other: "ValueRange") -> bool:
        return other.lower <= self.lower and self.upper <= other.upper

    def intersect(self, other: "ValueRange") -> "ValueRange":
        return ValueRange(max(self.lower, other.lower), min(self.upper, other.upper), self.is_bool)

    def union(self, other: "ValueRange") -> "ValueRange":
        return ValueRange(min(self.lower, other.lower), max(self.upper, other.upper), self.is_bool)

    def known_bool(self):
        """True/False when a boolean range is a single value, else None."""
        if self.is_singleton:
            return bool(self.lower)
        return None


# --- interval arithmetic -------------------------------------------------------


def _corners(a: ValueRange, b: ValueRange, op):
    vals = [op(x, y) for x in (a.lower, a.upper) for y in (b.lower, b.upper)]
    return ValueRange(min(vals), max(vals))


def add(a: ValueRange, b: ValueRange) -> ValueRange:
    return ValueRange(a.lower + b.lower, a.upper + b.upper)


def mul(a: ValueRange, b: ValueRange) -> ValueRange:
    return _corners(a, b, _mul)


def neg(a: ValueRange) -> ValueRange:
    return ValueRange(-a.upper, -a.lower)


def _div_real(x: Number, y: Number) -> Number:
    if isinstance(y, float):  # y is +-inf
        return 0 if not isinstance(x, float) else (INF if (x > 0) == (y > 0) else -INF)
    if isinstance(x, float):
        return x if y > 0 else -x
    return Fraction(x) / y


def truediv(a: ValueRange, b: ValueRange) -> ValueRange:
    if b.contains(0):
        return ValueRange.unknown()
    return _corners(a, b, _div_real)


def floordiv(a: ValueRange, b: ValueRange) -> ValueRange:
    q = truediv(a, b)
    return ValueRange(_floor(q.lower), _floor(q.upper))


def mod(a: ValueRange, b: ValueRange) -> ValueRange:
    """Bounds of Python's ``a % b`` on integers."""
    return _mod(a, b, 1)


def real_mod(a: ValueRange, b: ValueRange) -> ValueRange:
    """Bounds of Python's ``a % b`` where an operand is a float.

    On reals ``a % b`` lies in ``[0, b)`` for ``b > 0`` (``(b, 0]`` for
    ``b < 0``); only integers have ``b - 1`` as the largest value.
    """
    return _mod(a, b, 0)


def _mod(a: ValueRange, b: ValueRange, one: int) -> ValueRange:  # closed intervals: a real a % b only approaches b
    if b.lower > 0:
        if b.is_singleton and not isinstance(b.lower, float):
            k = b.lower
            if a.lower > -INF and a.upper < INF and a.lower // k == a.upper // k:
                return ValueRange(a.lower % k, a.upper % k)
            if a.lower >= 0:
                return ValueRange(0, min(a.upper, k - one))
            return ValueRange(0, k - one)
        hi = b.upper - one
        if a.lower >= 0:
            hi = min(hi, a.upper)
        return ValueRange(0, hi)
    if b.upper < 0:
        lo = b.lower + one
        if a.upper <= 0:
            lo = max(lo, a.lower)
        return ValueRange(lo, 0)
    return ValueRange(min(b.lower + one, 0), max(b.upper - one, 0))


def power(a: ValueRange, n: int) -> ValueRange:
    if n == 0:
        return ValueRange.point(1)
    if n < 0:
        return truediv(ValueRange.point(1), power(a, -n))
    lo, hi = a.lower, a.upper
    plo, phi = lo**n, hi**n
    if n % 2 == 1:
        return ValueRange(plo, phi)
    if lo <= 0 <= hi:
        return ValueRange(0, max(plo, phi))
    return ValueRange(min(plo, phi), max(plo, phi))


def minimum(a: ValueRange, b: ValueRange) -> ValueRange:
    return ValueRange(min(a.lower, b.lower), min(a.upper, b.upper))


def maximum(a: ValueRange, b: ValueRange) -> ValueRange:
    return ValueRange(max(a.lower, b.lower), max(a.upper, b.upper))


def _trunc(x: Number) -> Number:
    return x if isinstance(x, float) else math.trunc(x)


# --- comparisons ----------------------------------------------------------------

_T = ValueRange.boolean(True, True)
_F = ValueRange.boolean(False, False)
_U = ValueRange.boolean(False, True)


def compare(rel: type, diff: ValueRange) -> ValueRange:
    """Bound ``lhs REL rhs`` given the range of ``lhs - rhs``."""
    lo, hi = diff.lower, diff.upper
    if rel is sympy.Lt or rel is sympy.StrictLessThan:
        return _T if hi < 0 else _F if lo >= 0 else _U
    if rel is sympy.Le or rel is sympy.LessThan:
        return _T if hi <= 0 else _F if lo > 0 else _U
    if rel is sympy.Gt or rel is sympy.StrictGreaterThan:
        return _T if lo > 0 else _F if hi <= 0 else _U
    if rel is sympy.Ge or rel is sympy.GreaterThan:
        return _T if lo >= 0 else _F if hi < 0 else _U
    if rel is sympy.Eq:
        return _T if lo == hi == 0 else _F if (lo > 0 or hi < 0) else _U
    if rel is sympy.Ne:
        return _F if lo == hi == 0 else _T if (lo > 0 or hi < 0) else _U
    raise TypeError(f"unknown relation {rel}")


# --- the analysis ---------------------------------------------------------------


class UnsupportedExpression(TypeError):
    """An expression kind the range analysis does not know (never silently skipped)."""


def real_power(x: ValueRange, p: float, e=None) -> ValueRange:
    """``x ** p`` for a real exponent over a non-negative base, rounded outward.

    Monotone on ``[0, inf)``: increasing for ``p > 0``, decreasing for ``p < 0``.
    """
    if x.lower < 0 or (p < 0 and x.lower <= 0):
        raise UnsupportedExpression(f"power with a real exponent of a base that may be negative or 0: {e}")

    def pw(v, toward):
        if v in (INF, -INF):
            return INF if p > 0 else 0.0
        return math.nextafter(float(v) ** p, toward)

    if p > 0:
        return ValueRange(pw(x.lower, -math.inf), pw(x.upper, math.inf))
    return ValueRange(pw(x.upper, -math.inf), pw(x.lower, math.inf))


def bound(expr, ranges: Mapping[sympy.Symbol, ValueRange], _cache=None) -> ValueRange:
    """Sound bounds of ``expr`` with each symbol in ``ranges`` (missing: unbounded)."""
    cache = {} if _cache is None else _cache
    return _bound(sympy.sympify(expr), ranges, cache)


def _bound(e, ranges, cache) -> ValueRange:
    r = cache.get(e)
    if r is not None:
        return r
    r = _bound_uncached(e, ranges, cache)
    cache[e] = r
    return r


def _bound_uncached(e, ranges, cache) -> ValueRange:
    if e is sympy.true:
        return _T
    if e is sympy.false:
        return _F
    if e.is_Number:
        v = _num(e)
        return ValueRange(v, v)
    r = ranges.get(e)
    if r is not None and not e.is_Symbol:
        # A compound atom with a known range (a fact like H//2 >= 2): use both.
        return r.intersect(_bound_structural(e, ranges, cache)) if _overlap(r, _bound_structural(e, ranges, cache)) else r
    if e.is_Symbol:
        r = ranges.get(e)
        if r is not None:
            return r
        return ValueRange.boolean() if e.is_Boolean else ValueRange.unknown()
    return _bound_structural(e, ranges, cache)


def _overlap(a, b):
    return max(a.lower, b.lower) <= min(a.upper, b.upper)


def _bound_structural(e, ranges, cache) -> ValueRange:
    b = lambda x: _bound(x, ranges, cache)  # noqa: E731
    if e.is_Add:
        r = ValueRange.point(0)
        for a in e.args:
            r = add(r, b(a))
        return r
    if e.is_Mul:
        r = ValueRange.point(1)
        for a in e.args:
            r = mul(r, b(a))
        return r
    if e.is_Pow:
        base, ex = e.args
        if ex.is_Integer:
            return power(b(base), int(ex))
        if ex.is_number:
            return real_power(b(base), float(ex), e)
        raise UnsupportedExpression(f"power with non-integer exponent: {e}")
    if isinstance(e, FloorDiv):
        return floordiv(b(e.args[0]), b(e.args[1]))
    if isinstance(e, PyMod):
        if e.args[0].is_integer is True and e.args[1].is_integer is True:
            return mod(b(e.args[0]), b(e.args[1]))
        return real_mod(b(e.args[0]), b(e.args[1]))
    if isinstance(e, TrueDiv):
        return truediv(b(e.args[0]), b(e.args[1]))
    if isinstance(e, ToFloat):
        return b(e.args[0])
    if isinstance(e, TruncToInt):
        x = b(e.args[0])
        return ValueRange(_trunc(x.lower), _trunc(x.upper))
    if isinstance(e, sympy.floor):
        x = b(e.args[0])
        return ValueRange(_floor(x.lower), _floor(x.upper))
    if isinstance(e, sympy.ceiling):
        x = b(e.args[0])
        return ValueRange(_ceil(x.lower), _ceil(x.upper))
    if isinstance(e, sympy.Abs):
        x = b(e.args[0])
        if x.lower >= 0:
            return x
        if x.upper <= 0:
            return neg(x)
        return ValueRange(0, max(-x.lower, x.upper))
    if isinstance(e, sympy.Min):
        rs = [b(a) for a in e.args]
        r = rs[0]
        for x in rs[1:]:
            r = minimum(r, x)
        return r
    if isinstance(e, sympy.Max):
        if len(e.args) == 2 and e.args[0] == -e.args[1]:
            # Max(x, -x) is how the engine spells abs() of an int: never negative.
            return _bound_structural(sympy.Abs(e.args[0], evaluate=False), ranges, cache)
        rs = [b(a) for a in e.args]
        r = rs[0]
        for x in rs[1:]:
            r = maximum(r, x)
        return r
    if isinstance(e, Where):
        c = b(e.args[0]).known_bool()
        if c is True:
            return b(e.args[1])
        if c is False:
            return b(e.args[2])
        return b(e.args[1]).union(b(e.args[2]))
    if isinstance(e, sympy.Rel):
        return compare(type(e), b(e.lhs - e.rhs))
    if isinstance(e, sympy.Not):
        x = b(e.args[0])
        return ValueRange(1 - x.upper, 1 - x.lower, True)
    if isinstance(e, sympy.And):
        rs = [b(a) for a in e.args]
        return ValueRange(min(r.lower for r in rs), min(r.upper for r in rs), True)
    if isinstance(e, sympy.Or):
        rs = [b(a) for a in e.args]
        return ValueRange(max(r.lower for r in rs), max(r.upper for r in rs), True)
    raise UnsupportedExpression(f"no range rule for {type(e).__name__}: {e}")
