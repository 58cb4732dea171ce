"""Evaluate the engine's sympy expressions at concrete sizes, with Python semantics.

This is the brute-force side of validation: the fuzzer evaluates random
expressions at many points, and translation validation confirms a Z3
counterexample by evaluating the unsound step at it.  Expressions are
compiled once into a Python function (``compile_expr``) because sympy's own
substitution is far too slow for tens of thousands of points.

Semantics are Python's on exact numbers: ``//`` and ``%`` floor (negative
operands included), true division gives an exact :class:`~fractions.Fraction`,
and a division by zero raises :class:`ZeroDivisionError` (the expression is
undefined there).  Every argument is evaluated (``And``, ``Or`` and ``Where``
are strict), as in the traced graph, where each operand is a computed value.

Example::

    >>> import sympy
    >>> from shapes.functions import FloorDiv
    >>> from validation.concrete import evaluate
    >>> a = sympy.Symbol("a", integer=True)
    >>> evaluate(FloorDiv(a, 2) < 0, {a: -1})
    True
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Callable, Mapping, Sequence

import sympy

from shapes.functions import FloorDiv, PyMod, ToFloat, TrueDiv, TruncToInt, Where


class UnevaluableExpression(TypeError):
    """An expression kind with no concrete evaluation rule (the kind is named)."""


def _td(a, b):
    return Fraction(a) / Fraction(b)


def _ite(c, a, b):
    return a if c else b


def _and(*xs):
    return all(xs)


def _or(*xs):
    return any(xs)


def _pow(a, n):
    if n >= 0:
        return a ** n
    return Fraction(1) / Fraction(a) ** (-n)


_GLOBALS = {"Fraction": Fraction, "_td": _td, "_ite": _ite, "_and": _and, "_or": _or, "_pow": _pow,
            "_floor": math.floor, "_ceil": math.ceil, "_trunc": math.trunc, "__builtins__": {
                "min": min, "max": max, "abs": abs, "len": len, "bool": bool, "int": int}}


def _src(e, names: Mapping[sympy.Symbol, str]) -> str:
    """Python source computing ``e``; symbols are read from ``names``."""
    s = lambda x: _src(x, names)  # noqa: E731
    if e is sympy.true:
        return "True"
    if e is sympy.false:
        return "False"
    if e.is_Integer:
        return f"({int(e)})"
    if e.is_Rational:
        return f"Fraction({int(e.p)}, {int(e.q)})"
    if e.is_Float:
        r = sympy.Rational(e)
        return f"Fraction({int(r.p)}, {int(r.q)})"
    if e.is_Symbol:
        try:
            return names[e]
        except KeyError:
            raise UnevaluableExpression(f"symbol {e} has no value") from None
    if e.is_Add:
        return "(" + " + ".join(s(a) for a in e.args) + ")"
    if e.is_Mul:
        return "(" + " * ".join(s(a) for a in e.args) + ")"
    if e.is_Pow:
        if not e.args[1].is_Integer:
            raise UnevaluableExpression(f"Pow with non-integer exponent: {e}")
        return f"_pow({s(e.args[0])}, {int(e.args[1])})"
    if isinstance(e, FloorDiv):
        return f"({s(e.args[0])} // {s(e.args[1])})"
    if isinstance(e, (PyMod, sympy.Mod)):
        return f"({s(e.args[0])} % {s(e.args[1])})"
    if isinstance(e, TrueDiv):
        return f"_td({s(e.args[0])}, {s(e.args[1])})"
    if isinstance(e, ToFloat):
        return s(e.args[0])
    if isinstance(e, TruncToInt):
        return f"_trunc({s(e.args[0])})"
    if isinstance(e, sympy.floor):
        return f"_floor({s(e.args[0])})"
    if isinstance(e, sympy.ceiling):
        return f"_ceil({s(e.args[0])})"
    if isinstance(e, sympy.Abs):
        return f"abs({s(e.args[0])})"
    if isinstance(e, sympy.Min):
        return "min(" + ", ".join(s(a) for a in e.args) + ")"
    if isinstance(e, sympy.Max):
        return "max(" + ", ".join(s(a) for a in e.args) + ")"
    if isinstance(e, (Where, sympy.ITE)):
        return f"_ite({s(e.args[0])}, {s(e.args[1])}, {s(e.args[2])})"
    if isinstance(e, sympy.Rel):
        op = {sympy.Eq: "==", sympy.Ne: "!=", sympy.Lt: "<", sympy.Le: "<=", sympy.Gt: ">",
              sympy.Ge: ">="}.get(type(e))
        if op is None:
            raise UnevaluableExpression(f"no concrete rule for relation {type(e).__name__}: {e}")
        return f"({s(e.lhs)} {op} {s(e.rhs)})"
    if isinstance(e, sympy.Not):
        return f"(not {s(e.args[0])})"
    if isinstance(e, sympy.And):
        return "_and(" + ", ".join(s(a) for a in e.args) + ")"
    if isinstance(e, sympy.Or):
        return "_or(" + ", ".join(s(a) for a in e.args) + ")"
    if isinstance(e, sympy.Implies):
        return f"((not {s(e.args[0])}) or {s(e.args[1])})"
    if isinstance(e, sympy.Xor):
        return "((" + " + ".join(f"int({s(a)})" for a in e.args) + ") % 2 == 1)"
    if isinstance(e, sympy.Equivalent):
        return "(len({" + ", ".join(f"bool({s(a)})" for a in e.args) + "}) == 1)"
    raise UnevaluableExpression(f"no concrete evaluation for expression kind {type(e).__name__} (in {e})")


def compile_expr(e, symbols: Sequence[sympy.Symbol]) -> Callable:
    """A Python function of the values of ``symbols`` (in order) computing ``e``.

    Raises :class:`UnevaluableExpression` for a kind with no rule.
    """
    names = {s: f"_v{i}" for i, s in enumerate(symbols)}
    body = _src(sympy.sympify(e), names)
    args = ", ".join(names[s] for s in symbols)
    return eval(f"lambda {args}: {body}", _GLOBALS)  # noqa: S307 - source built above from a whitelist


def evaluate(e, values: Mapping[sympy.Symbol, object]):
    """``e`` at ``values`` (symbol -> int, Fraction or bool); raises ZeroDivisionError where undefined."""
    syms = sorted(sympy.sympify(e).free_symbols, key=str)
    return compile_expr(e, syms)(*[values[s] for s in syms])
