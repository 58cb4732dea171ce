"""Size expressions and conditions printed as Python source, in dim names or the user's names.

The one printer every layer uses for what a person reads (:mod:`guards.render`
re-exports it): ``B % 8 == 0``, not sympy's ``Eq(Mod(B, 8), 0)``.

Example::

    >>> import sympy
    >>> from shapes.python_syntax import to_python
    >>> B = sympy.Symbol("B", integer=True)
    >>> to_python(sympy.Eq(B % 8, 0))
    'B % 8 == 0'
    >>> to_python(B > 16, names={B: "x.shape[0]"})
    'x.shape[0] > 16'
    >>> to_python(B - 1 < 128)
    'B - 1 < 128'
    >>> to_python(sympy.Or(sympy.Eq(B, 1), sympy.Eq(B, 4)))
    'B in (1, 4)'
"""
from __future__ import annotations

from typing import Mapping, Optional

import sympy
from sympy.printing.str import StrPrinter

from .functions import FloorDiv, PyMod, TrueDiv


class PythonPrinter(StrPrinter):
    """sympy -> Python source, with symbols optionally renamed.

    >>> N = sympy.Symbol("N", integer=True)
    >>> PythonPrinter({N: "x.shape[0]"}).doprint(sympy.Ne(FloorDiv(N, 4), 0))
    'x.shape[0] // 4 != 0'
    """

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
        vals = same_symbol(e.args, sympy.Ne)
        if vals:  # N != 1 and N != 2  ->  N not in (1, 2)
            return f"{self._print(vals[0])} not in ({', '.join(map(str, vals[1]))})"
        return " and ".join(self._bool_paren(a) for a in e.args)

    def _print_Or(self, e):
        vals = same_symbol(e.args, sympy.Eq)
        if vals:  # N == 1 or N == 2  ->  N in (1, 2)
            return f"{self._print(vals[0])} in ({', '.join(map(str, vals[1]))})"
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


def same_symbol(args, rel):
    """``(symbol, sorted ints)`` when every arg is ``symbol rel int`` for one symbol.

    >>> N = sympy.Symbol("N", integer=True)
    >>> same_symbol([sympy.Eq(N, 4), sympy.Eq(N, 1)], sympy.Eq)
    (N, [1, 4])
    """
    if len(args) < 2 or not all(isinstance(a, rel) for a in args):
        return None
    syms = {a.lhs for a in args}
    if len(syms) != 1 or not all(a.rhs.is_Integer for a in args):
        return None
    return next(iter(syms)), sorted(int(a.rhs) for a in args)


def to_python(expr, names: Optional[Mapping] = None) -> str:
    """``expr`` as a Python expression; ``names`` renames symbols (e.g. to ``x.shape[0]``)."""
    expr = sympy.sympify(expr)
    return PythonPrinter(names)._bare(expr)
