"""Integer functions the engine builds expressions from.

sympy's own ``floor(a / b)`` and ``Mod`` do not carry Python's semantics for
negative operands in every version and simplify in ways the engine cannot
log.  These functions only fold constants on construction; every rewrite of
them happens in :mod:`shapes.simplify`, where it is recorded in the decision
log so that :mod:`validation` can check it.

Example::

    >>> import sympy
    >>> from shapes.functions import FloorDiv, PyMod
    >>> FloorDiv(sympy.Integer(-7), sympy.Integer(2))
    -4
    >>> PyMod(sympy.Integer(-7), sympy.Integer(2))
    1
"""
from __future__ import annotations

import functools
import math

import sympy


def _is_int_const(x) -> bool:
    return isinstance(x, sympy.Integer)


def _exact(x):
    """A sympy number as an exact Fraction (a Float is the double it holds)."""
    from fractions import Fraction
    if isinstance(x, sympy.Float):
        return Fraction(float(x))
    return Fraction(int(x.p), int(x.q))


def _number(v, floaty: bool):
    """A Python number back as sympy: a Float where an operand was a Float."""
    if floaty:
        return sympy.Float(float(v))
    return sympy.Rational(v.numerator, v.denominator) if hasattr(v, "numerator") else sympy.Integer(v)


def _is_int(x) -> bool:
    """Known integer-valued (floats like ``N / 2`` are not, ``3.0`` is)."""
    return x.is_integer is True


class FloorDiv(sympy.Function):
    """``a // b`` with Python semantics (rounds toward negative infinity).

    The operands may be floats (``7.5 // 2`` is ``3.0``): the value is
    ``floor(a / b)`` on exact reals, an integer either way.
    """

    # sympy's printers parenthesize x*(a % b) by this: these bind like multiplication.
    precedence = 50

    is_integer = True
    nargs = 2

    @classmethod
    def eval(cls, a, b):
        if b == 0:
            raise ZeroDivisionError(f"symbolic floor division {a} // 0")
        if _is_int_const(a) and _is_int_const(b):
            return sympy.Integer(int(a) // int(b))
        if a.is_Number and b.is_Number and a.is_finite and b.is_finite:
            return sympy.Integer(math.floor(_exact(a) / _exact(b)))
        if b == 1 and _is_int(a):
            return a
        if a == 0:
            return sympy.Integer(0)
        return None

    def _sympystr(self, printer):
        a, b = self.args
        return f"({printer.parenthesize(a, 40)}//{printer.parenthesize(b, 40)})"


class PyMod(sympy.Function):
    """``a % b`` with Python semantics (result has the sign of ``b``).

    On floats it is ``a - b * floor(a / b)`` on exact reals: ``3.5 % 1`` is
    ``0.5``, so ``x % 1 == 0`` folds to true only for an integer ``x``.
    """

    # sympy's printers parenthesize x*(a % b) by this: these bind like multiplication.
    precedence = 50

    is_real = True
    nargs = 2

    @classmethod
    def eval(cls, a, b):
        if b == 0:
            raise ZeroDivisionError(f"symbolic modulo {a} % 0")
        if _is_int_const(a) and _is_int_const(b):
            return sympy.Integer(int(a) % int(b))
        if a.is_Number and b.is_Number and a.is_finite and b.is_finite:
            return _number(_exact(a) % _exact(b), a.is_Float or b.is_Float)
        if a == 0 or ((b == 1 or b == -1) and _is_int(a)):
            return sympy.Integer(0)
        return None

    def _eval_is_integer(self):
        a, b = self.args
        if a.is_integer and b.is_integer:
            return True
        return None

    def _sympystr(self, printer):
        a, b = self.args
        return f"({printer.parenthesize(a, 40)} % {printer.parenthesize(b, 40)})"


class TrueDiv(sympy.Function):
    """``a / b`` on integers giving a real number (Python's ``/``)."""

    # sympy's printers parenthesize x*(a % b) by this: these bind like multiplication.
    precedence = 50

    is_real = True
    nargs = 2

    @classmethod
    def eval(cls, a, b):
        if b == 0:
            raise ZeroDivisionError(f"symbolic division {a} / 0")
        if a.is_number and b.is_number:
            return sympy.Float(float(a) / float(b))
        return None

    def _sympystr(self, printer):
        a, b = self.args
        return f"({printer.parenthesize(a, 40)}/{printer.parenthesize(b, 40)})"


class ToFloat(sympy.Function):
    """An integer expression used as a float (``float(s)``)."""

    is_real = True
    nargs = 1

    @classmethod
    def eval(cls, a):
        if a.is_number:
            return sympy.Float(float(a))
        return None


class TruncToInt(sympy.Function):
    """``int(x)`` of a real expression: truncation toward zero."""

    is_integer = True
    nargs = 1

    @classmethod
    def eval(cls, a):
        if a.is_Number and a.is_finite:
            return sympy.Integer(math.trunc(_exact(a)))
        return None


class Where(sympy.Function):
    """``c ? a : b`` (``torch.sym_ite``)."""

    nargs = 3

    @classmethod
    def eval(cls, c, a, b):
        if c is sympy.true:
            return a
        if c is sympy.false:
            return b
        if a == b:
            return a
        return None

    def _eval_is_integer(self):
        return self.args[1].is_integer and self.args[2].is_integer


def divisors(expr) -> list:
    """The divisors in ``expr`` that are not constants: where one is 0, ``expr`` is undefined.

    >>> B, T = sympy.symbols("B T", integer=True)
    >>> divisors(384 * B * FloorDiv(B * T, B) + TrueDiv(T, B + 1))
    [B, B + 1]
    """
    out = []
    for f in sympy.preorder_traversal(expr):
        if isinstance(f, (FloorDiv, PyMod, TrueDiv)):
            d = f.args[1]
        elif isinstance(f, sympy.Pow) and f.exp.is_negative:
            d = f.base
        else:
            continue
        if not d.is_number and d not in out:
            out.append(d)
    return sorted(out, key=sympy.default_sort_key)


def is_number(e) -> bool:
    """``e.is_number``, remembered for compound expressions (sympy walks every
    argument each time it is asked, and the tracer asks of every size it touches).

    >>> N = sympy.Symbol("N", integer=True)
    >>> is_number(N + 1), is_number(sympy.Integer(2) * 3)
    (False, True)
    """
    return e.is_number if e.is_Atom else _compound_is_number(e)


@functools.lru_cache(maxsize=65536)
def _compound_is_number(e) -> bool:
    return e.is_number


@functools.lru_cache(maxsize=16384)
def factor(e):
    """``sympy.factor(e)``, remembered: the decision procedure factors the same
    differences of sizes again and again (a pure function of ``e``).

    >>> B, T = sympy.symbols("B T", integer=True)
    >>> factor(B * T - B)
    B*(T - 1)
    """
    return sympy.factor(e)


def substitute(cond, subs):
    """``cond.xreplace(subs)`` with ``and``/``or`` evaluated as eager's C++ and Python do:
    an operand that decides the result decides it even where another divides by zero.

    eager checks ``(n > 0 && m % n == 0) || m == n`` and never computes
    ``m % n`` at ``n == 0``; plain substitution would raise there.  Raises
    :class:`ZeroDivisionError` only where no defined operand decides.

    >>> m, n = sympy.symbols("m n", integer=True)
    >>> cond = sympy.Or(sympy.And(n > 0, sympy.Eq(PyMod(m, n), 0)), sympy.Eq(m, n))
    >>> substitute(cond, {m: sympy.Integer(0), n: sympy.Integer(0)})
    True
    """
    if isinstance(cond, (sympy.And, sympy.Or)):
        decisive = sympy.true if isinstance(cond, sympy.Or) else sympy.false
        parts, undefined = [], None
        for a in cond.args:
            try:
                v = substitute(a, subs)
            except ZeroDivisionError as e:
                undefined = e
                continue
            if v is decisive:
                return v
            parts.append(v)
        if undefined is not None:
            raise undefined
        return type(cond)(*parts)
    if isinstance(cond, sympy.Not):
        return sympy.Not(substitute(cond.args[0], subs))
    return cond.xreplace(subs)


#: Every function class the engine may put into an expression; validation
#: must translate each of these (and says so explicitly when it cannot).
ENGINE_FUNCTIONS = (FloorDiv, PyMod, TrueDiv, ToFloat, TruncToInt, Where)

