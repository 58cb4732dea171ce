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

from shapes.errors import UnhandledExprKind
from shapes.expr_kinds import ExprVisitor


class UnevaluableExpression(UnhandledExprKind):
    """An expression kind (or a case of one) with no concrete evaluation rule (the kind is named)."""


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


def _call(fmt):
    def visit(self, e):
        return fmt.format(*(self.visit(a) for a in e.args))
    return visit


def _joined(fmt, sep):
    def visit(self, e):
        return fmt.format(sep.join(self.visit(a) for a in e.args))
    return visit


class ConcreteSource(ExprVisitor):
    """Python source computing an expression exactly; symbols are read from ``names``.

    >>> from shapes.functions import TrueDiv
    >>> a = sympy.Symbol("a", integer=True)
    >>> ConcreteSource({a: "a"}).visit(TrueDiv(a, 2) + 1)
    '((1) + _td(a, (2)))'
    """

    analysis = "concrete evaluation"
    error = UnevaluableExpression

    def __init__(self, names: Mapping[sympy.Symbol, str]):
        self.names = names

    def visit_true(self, e):
        return "True"

    def visit_false(self, e):
        return "False"

    def visit_integer(self, e):
        return f"({int(e)})"

    def visit_rational(self, e):
        return f"Fraction({int(e.p)}, {int(e.q)})"

    def visit_float(self, e):
        return self.visit_rational(sympy.Rational(e))

    def visit_symbol(self, e):
        try:
            return self.names[e]
        except KeyError:
            raise self.unhandled(e, detail="the symbol has no value") from None

    visit_add = _joined("({})", " + ")
    visit_mul = _joined("({})", " * ")

    def visit_pow(self, e):
        if not e.args[1].is_Integer:
            raise self.unhandled(e, detail="a non-integer exponent")
        return f"_pow({self.visit(e.args[0])}, {int(e.args[1])})"

    visit_floor_div = _call("({} // {})")
    visit_py_mod = visit_mod = _call("({} % {})")
    visit_true_div = _call("_td({}, {})")
    visit_to_float = _call("{}")
    visit_trunc_to_int = _call("_trunc({})")
    visit_floor = _call("_floor({})")
    visit_ceiling = _call("_ceil({})")
    visit_abs = _call("abs({})")
    visit_min = _joined("min({})", ", ")
    visit_max = _joined("max({})", ", ")
    visit_where = _call("_ite({}, {}, {})")
    visit_eq = _call("({} == {})")
    visit_ne = _call("({} != {})")
    visit_lt = _call("({} < {})")
    visit_le = _call("({} <= {})")
    visit_gt = _call("({} > {})")
    visit_ge = _call("({} >= {})")
    visit_not = _call("(not {})")
    visit_and = _joined("_and({})", ", ")
    visit_or = _joined("_or({})", ", ")

    def visit_equivalent(self, e):
        return "(len({" + ", ".join(f"bool({self.visit(a)})" for a in e.args) + "}) == 1)"


def compile_expr(e, symbols: Sequence[sympy.Symbol]) -> Callable:
    """A Python function of the values of ``symbols`` (in order) computing ``e``.

    Raises :class:`UnevaluableExpression` for a kind with no rule.
    """
    names = {s: f"_v{i}" for i, s in enumerate(symbols)}
    body = ConcreteSource(names).visit(sympy.sympify(e))
    args = ", ".join(names[s] for s in symbols)
    return eval(f"lambda {args}: {body}", _GLOBALS)  # noqa: S307 - source built above from a whitelist


def evaluate(e, values: Mapping[sympy.Symbol, object]):
    """``e`` at ``values`` (symbol -> int, Fraction or bool); raises ZeroDivisionError where undefined."""
    syms = sorted(sympy.sympify(e).free_symbols, key=str)
    return compile_expr(e, syms)(*[values[s] for s in syms])
