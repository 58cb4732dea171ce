"""Small helpers for the count's closed forms: sums, the form that reads best, and its text.

Example::

    >>> import sympy
    >>> from shapes.functions import FloorDiv
    >>> B = sympy.Symbol("B")
    >>> nice(8*B*3 + 8*B), sum_exprs([B, B])
    (32*B, 2*B)
    >>> formula_text(4*FloorDiv(B - 3, 2) - 1)
    '4*((B - 3) // 2) - 1'
"""
from __future__ import annotations

import sympy

from ..printers import to_python


def sum_exprs(terms):
    """The expanded sum of ``terms`` (0 for none)."""
    terms = list(terms)
    if not terms:
        return sympy.Integer(0)
    return sympy.expand(sympy.Add(*terms))


def nice(e):
    """The shorter of the expanded and the factored form (ties: expanded).

    Products of output sizes (``N*(H//2 + 1)*(W//2 + 1)``) read best factored,
    sums of weight and activation bytes (``384*B + 8320``) expanded.
    """
    if e.is_number:
        return e
    f = sympy.factor(e)
    return f if len(str(f)) < len(str(e)) else e


def formula_text(e) -> str:
    """A count's closed form as people read it: Python syntax (``T - 1``, ``T // 2``,
    ``max(a, b)``), never sympy's own text; ``"-"`` for ``nan`` (no bytes moved).

    >>> T = sympy.Symbol("T", integer=True)
    >>> formula_text(sympy.Max(T - 1, 0) * 2), formula_text(sympy.nan)
    ('2*max(0, T - 1)', '-')
    """
    if e is sympy.nan:
        return "-"
    return to_python(sympy.sympify(e))
