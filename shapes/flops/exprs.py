"""Small helpers for the count's closed forms: sums, and the form that reads best.

Example::

    >>> import sympy
    >>> B = sympy.Symbol("B")
    >>> nice(8*B*3 + 8*B), sum_exprs([B, B])
    (32*B, 2*B)
"""
from __future__ import annotations

import sympy


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
