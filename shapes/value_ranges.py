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

from .errors import UnhandledExprKind
from .expr_kinds import ExprVisitor

INF = math.inf
Number = Union[int, Fraction, float]  # float only for +-inf


class UnsupportedExpression(TypeError):
    """The range analysis has no rule for this expression (a kind, or a case of one): the typed
    signal callers take as "cannot bound" (a plain TypeError is a bug, never caught for this)."""


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
    raise UnsupportedExpression(f"not a number: {x!r}")


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
    raise UnsupportedExpression(f"unknown relation {rel}")


# --- the analysis ---------------------------------------------------------------


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
    return RangeRules(ranges, {} if _cache is None else _cache).bound(sympy.sympify(expr))


class UnboundedKind(UnhandledExprKind, UnsupportedExpression):
    """An expression kind (or a case of one) with no range rule."""


def _rounded(fn):
    def visit(self, e):
        x = self.bound(e.args[0])
        return ValueRange(fn(x.lower), fn(x.upper))
    return visit


def _logic(pick):
    def visit(self, e):
        rs = [self.bound(a) for a in e.args]
        return ValueRange(pick(r.lower for r in rs), pick(r.upper for r in rs), True)
    return visit


class RangeRules(ExprVisitor):
    """The range rule of each expression kind; ``bound`` caches per expression.

    >>> N = sympy.Symbol("N", integer=True)
    >>> RangeRules({N: ValueRange(2, 9)}, {}).bound(sympy.Min(N, 4) * 2)
    ValueRange(4, 8)
    """

    analysis = "the value-range analysis"
    error = UnboundedKind

    def __init__(self, ranges: Mapping[sympy.Symbol, ValueRange], cache: dict):
        self.ranges = ranges
        self.cache = cache

    def bound(self, e) -> ValueRange:
        r = self.cache.get(e)
        if r is None:
            r = self._bound_uncached(e)
            self.cache[e] = r
        return r

    def _bound_uncached(self, e) -> ValueRange:
        r = self.ranges.get(e)
        if r is not None and not e.is_Symbol:
            # A compound atom with a known range (a fact like H//2 >= 2): use both.
            s = self.visit(e)
            return r.intersect(s) if _overlap(r, s) else r
        return self.visit(e)

    def visit_true(self, e):
        return _T

    def visit_false(self, e):
        return _F

    def visit_integer(self, e):
        return ValueRange.point(_num(e))

    visit_rational = visit_float = visit_infinity = visit_integer

    def visit_symbol(self, e):
        r = self.ranges.get(e)
        if r is not None:
            return r
        return ValueRange.boolean() if e.is_Boolean else ValueRange.unknown()

    # The interval operations are module functions looked up at each call: tests
    # swap one for a deliberately wrong version and expect the fuzzer to notice.
    def _fold(self, e, op, r):
        for a in e.args:
            r = op(r, self.bound(a))
        return r

    def visit_add(self, e):
        return self._fold(e, add, ValueRange.point(0))

    def visit_mul(self, e):
        return self._fold(e, mul, ValueRange.point(1))

    def visit_pow(self, e):
        base, ex = e.args
        if ex.is_Integer:
            return power(self.bound(base), int(ex))
        if ex.is_number:
            return real_power(self.bound(base), float(ex), e)
        raise self.unhandled(e, detail="a symbolic exponent")

    def visit_floor_div(self, e):
        return floordiv(self.bound(e.args[0]), self.bound(e.args[1]))

    def visit_py_mod(self, e):
        a, b = e.args
        if a.is_integer is True and b.is_integer is True:
            return mod(self.bound(a), self.bound(b))
        return real_mod(self.bound(a), self.bound(b))

    visit_mod = visit_py_mod
    def visit_true_div(self, e):
        return truediv(self.bound(e.args[0]), self.bound(e.args[1]))

    def visit_to_float(self, e):
        return self.bound(e.args[0])

    visit_trunc_to_int = _rounded(_trunc)
    visit_floor = _rounded(_floor)
    visit_ceiling = _rounded(_ceil)

    def visit_abs(self, e):
        x = self.bound(e.args[0])
        if x.lower >= 0:
            return x
        if x.upper <= 0:
            return neg(x)
        return ValueRange(0, max(-x.lower, x.upper))

    def visit_min(self, e):
        return self._fold(e, minimum, self.bound(e.args[0]))

    def visit_max(self, e):
        if len(e.args) == 2 and e.args[0] == -e.args[1]:
            # Max(x, -x) is how the engine spells abs() of an int: never negative.
            return self.visit_abs(e)
        return self._fold(e, maximum, self.bound(e.args[0]))

    def visit_where(self, e):
        c = self.bound(e.args[0]).known_bool()
        if c is True:
            return self.bound(e.args[1])
        if c is False:
            return self.bound(e.args[2])
        return self.bound(e.args[1]).union(self.bound(e.args[2]))

    def visit_relational(self, e):
        return compare(type(e), self.bound(e.lhs - e.rhs))

    def visit_not(self, e):
        x = self.bound(e.args[0])
        return ValueRange(1 - x.upper, 1 - x.lower, True)

    visit_and = _logic(min)
    visit_or = _logic(max)

    def visit_equivalent(self, e):
        rs = [self.bound(a).known_bool() for a in e.args]
        if None in rs:
            return _U
        return _T if len(set(rs)) == 1 else _F


def _overlap(a, b):
    return max(a.lower, b.lower) <= min(a.upper, b.upper)
