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
from shapes.printers import GuardPythonPrinter


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
            "math": math, "__builtins__": {
                "min": min, "max": max, "abs": abs, "bool": bool, "int": int}}


def _strict(fn):
    def visit(self, e):
        return f"{fn}(" + ", ".join(self.visit(a) for a in e.args) + ")"
    return visit


class ConcreteSource(GuardPythonPrinter):
    """Python source computing an expression exactly; symbols are read from ``names``.

    The guard-code printer with exact numbers: constants and ``/`` as
    :class:`~fractions.Fraction`, ``float(x)`` as ``x`` itself, and strict
    ``and``/``or``/``where`` (each operand is a computed value in the graph, so
    each one's division by zero counts).

    >>> from shapes.functions import TrueDiv
    >>> a = sympy.Symbol("a", integer=True)
    >>> ConcreteSource({a: "a"}).doprint(TrueDiv(a, 2) + sympy.Rational(1, 3))
    '_td(a, 2) + Fraction(1, 3)'
    """

    analysis = "concrete evaluation"
    error = UnevaluableExpression

    def visit_rational(self, e):
        return f"Fraction({int(e.p)}, {int(e.q)})"

    def visit_float(self, e):
        return self.visit_rational(sympy.Rational(e))

    def visit_symbol(self, e):
        try:
            return self.names[e]
        except KeyError:
            raise self.unhandled(e, detail="the symbol has no value") from None

    def visit_mul(self, e):
        # Not sympy's layout: it writes a rational coefficient as "3*N/2", a float division.
        return "(" + " * ".join(self.paren(a) for a in e.args) + ")"

    def visit_pow(self, e):
        if not e.args[1].is_Integer:
            raise self.unhandled(e, detail="a non-integer exponent")
        return f"_pow({self.visit(e.args[0])}, {int(e.args[1])})"

    def visit_true_div(self, e):
        return f"_td({self.visit(e.args[0])}, {self.visit(e.args[1])})"

    def visit_to_float(self, e):
        # Parenthesized: the printer sets a call's text next to operators without a pair of its own.
        return f"({self.visit(e.args[0])})"

    visit_where = _strict("_ite")
    visit_and = _strict("_and")
    visit_or = _strict("_or")


def compile_expr(e, symbols: Sequence[sympy.Symbol]) -> Callable:
    """A Python function of the values of ``symbols`` (in order) computing ``e``.

    Raises :class:`UnevaluableExpression` for a kind with no rule.
    """
    names = {s: f"_v{i}" for i, s in enumerate(symbols)}
    body = ConcreteSource(names).doprint(e)
    args = ", ".join(names[s] for s in symbols)
    return eval(f"lambda {args}: {body}", _GLOBALS)  # noqa: S307 - source built above from a whitelist


def evaluate(e, values: Mapping[sympy.Symbol, object]):
    """``e`` at ``values`` (symbol -> int, Fraction or bool); raises ZeroDivisionError where undefined."""
    syms = sorted(sympy.sympify(e).free_symbols, key=str)
    return compile_expr(e, syms)(*[values[s] for s in syms])
