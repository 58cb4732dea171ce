"""Translate the engine's sympy expressions to Z3.

Every expression kind the engine builds (:class:`shapes.expr_kinds.Kind`) has a
rule here, except infinity; anything else raises :class:`UntranslatableExpression`
(an :class:`~shapes.errors.UnhandledExprKind`) naming the kind, never a silent skip.

Integer division and modulo follow Python (floor) semantics, negative
operands included; Z3's own ``/`` and ``%`` are Euclidean, so they are
adjusted for negative divisors.  Where an operand is a float (a real here),
``a // b`` is ``floor(a / b)`` and ``a % b`` is ``a - b * floor(a / b)`` on
exact reals, as Python computes them up to rounding.

Example::

    >>> import sympy, z3
    >>> from shapes.functions import FloorDiv
    >>> from validation.z3_translate import Z3Translator
    >>> a = sympy.Symbol("a", integer=True)
    >>> tr = Z3Translator()
    >>> s = z3.Solver(); s.add(tr.to_z3(sympy.Eq(FloorDiv(a, -2), 3)))
    >>> s.check() == z3.sat
    True
"""
from __future__ import annotations

import z3
import sympy

from shapes.errors import UnhandledExprKind
from shapes.expr_kinds import ExprVisitor


class UntranslatableExpression(UnhandledExprKind):
    """An expression kind (or a case of one) with no Z3 rule; the kind is named in the message."""


def py_floordiv(a, b):
    """Python's ``a // b`` on Z3 integers."""
    return z3.If(b > 0, a / b, z3.If(b < 0, (-a) / (-b), a / b))


def py_mod(a, b):
    """Python's ``a % b`` on Z3 integers (sign of b)."""
    return a - b * py_floordiv(a, b)


def _to_real(x):
    return z3.ToReal(x) if z3.is_int(x) else x


def real_floordiv(a, b):
    """Python's ``a // b`` where an operand is a float: ``floor(a / b)`` on exact reals."""
    return z3.ToInt(_to_real(a) / _to_real(b))


def real_mod(a, b):
    """Python's ``a % b`` on floats: ``a - b * floor(a / b)`` (sign of b), on exact reals."""
    a, b = _to_real(a), _to_real(b)
    return a - b * z3.ToReal(z3.ToInt(a / b))


def _reals_if_any(args):
    """Z3 terms of one sort: all reals as soon as one is (Python's int-float promotion)."""
    return [_to_real(a) for a in args] if any(z3.is_real(a) for a in args) else args


def _relation(op):
    def visit(self, e):
        a, b = self.to_z3(e.lhs), self.to_z3(e.rhs)
        if z3.is_real(a) != z3.is_real(b):
            a, b = _to_real(a), _to_real(b)
        return op(a, b)
    return visit


def _pick(better):
    def visit(self, e):
        args = _reals_if_any([self.to_z3(a) for a in e.args])
        r = args[0]
        for a in args[1:]:
            r = z3.If(better(a, r), a, r)
        return r
    return visit


class Z3Translator(ExprVisitor):
    """Maps sympy symbols to Z3 constants (one per symbol) and expressions to Z3 terms."""

    analysis = "the Z3 translation"
    error = UntranslatableExpression

    def __init__(self, ctx=None):
        self.ctx = ctx
        self.vars: dict[sympy.Symbol, z3.ExprRef] = {}
        self._cache: dict = {}

    def var(self, s: sympy.Symbol):
        v = self.vars.get(s)
        if v is None:
            if s.is_integer:
                v = z3.Int(s.name)
            elif s.is_Boolean:
                v = z3.Bool(s.name)
            else:
                v = z3.Real(s.name)
            self.vars[s] = v
        return v

    def to_z3(self, e):
        e = sympy.sympify(e)
        r = self._cache.get(e)
        if r is None:
            r = self.visit(e)
            self._cache[e] = r
        return r

    def visit_true(self, e):
        return z3.BoolVal(True)

    def visit_false(self, e):
        return z3.BoolVal(False)

    def visit_integer(self, e):
        return z3.IntVal(int(e))

    def visit_rational(self, e):
        return z3.RealVal(f"{e.p}/{e.q}")

    def visit_float(self, e):
        return z3.RealVal(str(sympy.Rational(e)))

    def visit_symbol(self, e):
        return self.var(e)

    def visit_add(self, e):
        args = _reals_if_any([self.to_z3(a) for a in e.args])
        return z3.Sum(*args) if len(args) > 2 else args[0] + args[1]

    def visit_mul(self, e):
        args = _reals_if_any([self.to_z3(a) for a in e.args])
        r = args[0]
        for a in args[1:]:
            r = r * a
        return r

    def visit_pow(self, e):
        base, ex = e.args
        if not ex.is_Integer:
            raise self.unhandled(e, detail="a non-integer exponent")
        n = int(ex)
        b = self.to_z3(base)
        if n == 0:
            return z3.IntVal(1)
        if n > 0:
            r = b
            for _ in range(n - 1):
                r = r * b
            return r
        rb = _to_real(b)
        r = rb
        for _ in range(-n - 1):
            r = r * rb
        return 1 / r

    def visit_floor_div(self, e):
        a, b = self.to_z3(e.args[0]), self.to_z3(e.args[1])
        if z3.is_real(a) or z3.is_real(b):
            return real_floordiv(a, b)
        return py_floordiv(a, b)

    def visit_py_mod(self, e):
        # sympy's Mod on integers also takes the sign of the divisor.
        a, b = self.to_z3(e.args[0]), self.to_z3(e.args[1])
        if z3.is_real(a) or z3.is_real(b):
            return real_mod(a, b)
        return py_mod(a, b)

    visit_mod = visit_py_mod

    def visit_true_div(self, e):
        return _to_real(self.to_z3(e.args[0])) / _to_real(self.to_z3(e.args[1]))

    def visit_to_float(self, e):
        return _to_real(self.to_z3(e.args[0]))

    def visit_trunc_to_int(self, e):
        x = _to_real(self.to_z3(e.args[0]))
        return z3.If(x >= 0, z3.ToInt(x), -z3.ToInt(-x))

    def visit_floor(self, e):
        return z3.ToInt(_to_real(self.to_z3(e.args[0])))

    def visit_ceiling(self, e):
        return -z3.ToInt(-_to_real(self.to_z3(e.args[0])))

    def visit_where(self, e):
        c, a, b = (self.to_z3(x) for x in e.args)
        if z3.is_real(a) or z3.is_real(b):
            a, b = _to_real(a), _to_real(b)
        return z3.If(c, a, b)

    visit_min = _pick(lambda a, r: a < r)
    visit_max = _pick(lambda a, r: a > r)

    def visit_abs(self, e):
        x = self.to_z3(e.args[0])
        return z3.If(x >= 0, x, -x)

    visit_eq = _relation(lambda a, b: a == b)
    visit_ne = _relation(lambda a, b: a != b)
    visit_lt = _relation(lambda a, b: a < b)
    visit_le = _relation(lambda a, b: a <= b)
    visit_gt = _relation(lambda a, b: a > b)
    visit_ge = _relation(lambda a, b: a >= b)

    def visit_not(self, e):
        return z3.Not(self.to_z3(e.args[0]))

    def visit_and(self, e):
        return z3.And(*[self.to_z3(a) for a in e.args])

    def visit_or(self, e):
        return z3.Or(*[self.to_z3(a) for a in e.args])

    def visit_equivalent(self, e):
        args = [self.to_z3(a) for a in e.args]
        return z3.And(*[args[0] == a for a in args[1:]])
