"""Render guard expressions as Python, in dim names or in the user's terms.

Example::

    >>> import sympy
    >>> from guards.render import to_python
    >>> B = sympy.Symbol("B", integer=True)
    >>> to_python(sympy.Eq(B % 8, 0))
    'B % 8 == 0'
    >>> to_python(B > 16, names={B: "x.shape[0]"})
    'x.shape[0] > 16'
    >>> to_python(B - 1 < 128)
    'B - 1 < 128'
"""
from __future__ import annotations

from typing import Mapping, Optional

import sympy
from sympy.printing.str import StrPrinter

from shapes.functions import FloorDiv, PyMod, TrueDiv

_REL = {"==": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_PREC_MUL = 50


class PythonPrinter(StrPrinter):
    """sympy -> Python source, with symbols optionally renamed."""

    printmethod = "_symshape_python"  # bypass the functions' own _sympystr

    def __init__(self, names: Optional[Mapping] = None):
        super().__init__({"order": "none"})
        self.names = dict(names or {})

    def _as_ordered_terms(self, expr, order=None):
        # A sum reads "T - 1", not sympy's "-1 + T": numeric terms go last.
        terms = super()._as_ordered_terms(expr, order=order)
        if expr.is_Add:
            terms = [t for t in terms if not t.is_number] + [t for t in terms if t.is_number]
        return terms

    def _print_Symbol(self, s):
        return self.names.get(s, s.name)

    def _print_Relational(self, e):
        op = {"Eq": "==", "Ne": "!=", "Lt": "<", "Le": "<=", "Gt": ">", "Ge": ">="}
        name = type(e).__name__
        sym = op.get(name) or {"StrictLessThan": "<", "LessThan": "<", "StrictGreaterThan": ">",
                               "GreaterThan": ">=", "Equality": "==", "Unequality": "!="}.get(name, e.rel_op)
        if name == "LessThan":
            sym = "<="
        return f"{self._bare(e.lhs)} {sym} {self._bare(e.rhs)}"

    def _paren(self, x):
        s = self._print(x)
        if x.is_Atom or isinstance(x, (sympy.Function, FloorDiv, PyMod, TrueDiv, sympy.Mod)):
            return s  # atoms, calls, and // % (already parenthesized)
        return f"({s})"

    # // and % are always printed inside parentheses: next to * or unary minus
    # Python would otherwise group them differently (2*(N + 2)//3 is not
    # 2*((N + 2)//3)).  _bare() drops the outer pair where nothing can bind.
    def _print_FloorDiv(self, e):
        return f"({self._paren(e.args[0])} // {self._paren(e.args[1])})"

    def _print_PyMod(self, e):
        return f"({self._paren(e.args[0])} % {self._paren(e.args[1])})"

    def parenthesize(self, item, level, strict=False):
        if isinstance(item, (FloorDiv, PyMod, TrueDiv, sympy.Mod)):
            return self._print(item)  # prints its own parentheses
        return super().parenthesize(item, level, strict)

    def _bare(self, x):
        s = self._print(x)
        if isinstance(x, (FloorDiv, PyMod, TrueDiv, sympy.Mod)) and s.startswith("(") and s.endswith(")"):
            return s[1:-1]
        return s

    # sympy's Mod has Python's sign convention (the divisor's sign): same text.
    _print_Mod = _print_PyMod

    def _print_TrueDiv(self, e):
        return f"({self._paren(e.args[0])} / {self._paren(e.args[1])})"

    def _print_ToFloat(self, e):
        return f"float({self._print(e.args[0])})"

    def _print_TruncToInt(self, e):
        return f"int({self._print(e.args[0])})"

    def _print_Where(self, e):
        return f"({self._print(e.args[1])} if {self._print(e.args[0])} else {self._print(e.args[2])})"

    def _print_Min(self, e):
        return "min(" + ", ".join(self._print(a) for a in e.args) + ")"

    def _print_Max(self, e):
        return "max(" + ", ".join(self._print(a) for a in e.args) + ")"

    def _print_Not(self, e):
        a = e.args[0]
        return f"not ({self._print(a)})"

    def _print_And(self, e):
        return " and ".join(self._bool_paren(a) for a in e.args)

    def _print_Or(self, e):
        return " or ".join(self._bool_paren(a) for a in e.args)

    def _bool_paren(self, a):
        s = self._print(a)
        return f"({s})" if isinstance(a, (sympy.And, sympy.Or)) else s

    def _print_BooleanTrue(self, e):
        return "True"

    def _print_BooleanFalse(self, e):
        return "False"

    def _print_Pow(self, e, rational=False):
        b, x = e.args
        return f"{self._paren(b)}**{self._print(x)}"


def to_python(expr, names: Optional[Mapping] = None) -> str:
    """``expr`` as a Python expression; ``names`` renames symbols (e.g. to ``x.shape[0]``)."""
    expr = sympy.sympify(expr)
    return PythonPrinter(names)._bare(expr)


def source_names(env) -> dict:
    """Symbol -> the first user-visible place it came from (``x.shape[0]``)."""
    out = {}
    for s, srcs in env.sources.items():
        if srcs:
            out[s] = srcs[0]
    return out


def render_guard(guard, env, *, user_terms: bool = True) -> str:
    """A guard's condition in the user's terms (``x.shape[0] > 16``) or dim names (``B > 16``)."""
    return to_python(guard.expr, source_names(env) if user_terms else None)
