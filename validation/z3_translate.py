"""Translate the engine's sympy expressions to Z3.

Every expression kind the engine builds has a rule here; anything else raises
:class:`UntranslatableExpression` naming the kind, never a silent skip.

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

from shapes.functions import ENGINE_FUNCTIONS, FloorDiv, PyMod, ToFloat, TrueDiv, TruncToInt, Where


class UntranslatableExpression(TypeError):
    """An expression kind with no Z3 rule (the kind is named in the message)."""


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


class Z3Translator:
    """Maps sympy symbols to Z3 constants (one per symbol) and expressions to Z3 terms."""

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
            r = self._translate(e)
            self._cache[e] = r
        return r

    def _translate(self, e):
        t = self.to_z3
        if e is sympy.true:
            return z3.BoolVal(True)
        if e is sympy.false:
            return z3.BoolVal(False)
        if e.is_Integer:
            return z3.IntVal(int(e))
        if e.is_Rational:
            return z3.RealVal(f"{e.p}/{e.q}")
        if e.is_Float:
            return z3.RealVal(str(sympy.Rational(e)))
        if e is sympy.oo or e is sympy.S.NegativeInfinity:
            raise UntranslatableExpression(f"infinity appears in {e}")
        if e.is_Symbol:
            return self.var(e)
        if e.is_Add:
            args = [t(a) for a in e.args]
            if any(z3.is_real(a) for a in args):
                args = [_to_real(a) for a in args]
            return z3.Sum(*args) if len(args) > 2 else args[0] + args[1]
        if e.is_Mul:
            args = [t(a) for a in e.args]
            if any(z3.is_real(a) for a in args):
                args = [_to_real(a) for a in args]
            r = args[0]
            for a in args[1:]:
                r = r * a
            return r
        if e.is_Pow:
            base, ex = e.args
            if not ex.is_Integer:
                raise UntranslatableExpression(f"Pow with non-integer exponent: {e}")
            n = int(ex)
            b = t(base)
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
        if isinstance(e, FloorDiv):
            a, b = t(e.args[0]), t(e.args[1])
            if z3.is_real(a) or z3.is_real(b):
                return real_floordiv(a, b)
            return py_floordiv(a, b)
        if isinstance(e, (PyMod, sympy.Mod)):
            # sympy's Mod on integers also takes the sign of the divisor.
            a, b = t(e.args[0]), t(e.args[1])
            if z3.is_real(a) or z3.is_real(b):
                return real_mod(a, b)
            return py_mod(a, b)
        if isinstance(e, TrueDiv):
            return _to_real(t(e.args[0])) / _to_real(t(e.args[1]))
        if isinstance(e, ToFloat):
            return _to_real(t(e.args[0]))
        if isinstance(e, TruncToInt):
            x = _to_real(t(e.args[0]))
            return z3.If(x >= 0, z3.ToInt(x), -z3.ToInt(-x))
        if isinstance(e, sympy.floor):
            return z3.ToInt(_to_real(t(e.args[0])))
        if isinstance(e, sympy.ceiling):
            return -z3.ToInt(-_to_real(t(e.args[0])))
        if isinstance(e, (Where, sympy.ITE)):
            c, a, b = (t(x) for x in e.args)
            if z3.is_real(a) or z3.is_real(b):
                a, b = _to_real(a), _to_real(b)
            return z3.If(c, a, b)
        if isinstance(e, (sympy.Min, sympy.Max)):
            args = [t(a) for a in e.args]
            if any(z3.is_real(a) for a in args):
                args = [_to_real(a) for a in args]
            r = args[0]
            for a in args[1:]:
                r = z3.If(a < r, a, r) if isinstance(e, sympy.Min) else z3.If(a > r, a, r)
            return r
        if isinstance(e, sympy.Abs):
            x = t(e.args[0])
            return z3.If(x >= 0, x, -x)
        if isinstance(e, sympy.Rel):
            a, b = t(e.lhs), t(e.rhs)
            if z3.is_real(a) != z3.is_real(b):
                a, b = _to_real(a), _to_real(b)
            if isinstance(e, sympy.Eq):
                return a == b
            if isinstance(e, sympy.Ne):
                return a != b
            if isinstance(e, sympy.Lt):
                return a < b
            if isinstance(e, sympy.Le):
                return a <= b
            if isinstance(e, sympy.Gt):
                return a > b
            if isinstance(e, sympy.Ge):
                return a >= b
        if isinstance(e, sympy.Not):
            return z3.Not(t(e.args[0]))
        if isinstance(e, sympy.And):
            return z3.And(*[t(a) for a in e.args])
        if isinstance(e, sympy.Or):
            return z3.Or(*[t(a) for a in e.args])
        if isinstance(e, sympy.Implies):
            return z3.Implies(t(e.args[0]), t(e.args[1]))
        if isinstance(e, sympy.Xor):
            args = [t(a) for a in e.args]
            r = args[0]
            for a in args[1:]:
                r = z3.Xor(r, a)
            return r
        if isinstance(e, sympy.Equivalent):
            args = [t(a) for a in e.args]
            return z3.And(*[args[0] == a for a in args[1:]])
        raise UntranslatableExpression(
            f"no Z3 translation for expression kind {type(e).__name__} (in {e}); "
            f"engine functions covered: {', '.join(f.__name__ for f in ENGINE_FUNCTIONS)}"
        )
