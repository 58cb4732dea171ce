"""Size expressions and conditions written in Python syntax, as engine expressions.

Contracts state FLOP formulas (``"512*B*T*(T + 384)"``), output dims
(``"T // 8"``) and valid regions (``"T <= 128 and T % 8 == 0"``) as Python
over the dim names.  This parses them with :mod:`ast` (never ``eval``) into
sympy built from the engine's own :class:`~shapes.functions.FloorDiv` and
:class:`~shapes.functions.PyMod`, so ``//`` and ``%`` keep Python's meaning
and :class:`~validation.z3_translate.Z3Translator` can prove things about them.

Example::

    >>> e = parse_expr("B * (T // 8) + 1", ["B", "T"])
    >>> e.subs({s: {"B": 2, "T": 17}[s.name] for s in e.free_symbols})
    5
    >>> c = parse_condition("1 <= T <= 128 and T % 8 == 0", ["T"])
    >>> [bool(c.subs({s: t for s in c.free_symbols})) for t in (64, 65)]
    [True, False]
"""
from __future__ import annotations

import ast
import operator

import sympy

from shapes.errors import SymshapeError
from shapes.functions import FloorDiv, PyMod


class ExprError(SymshapeError, ValueError):
    """A contract expression that is not a size expression or condition over the dims."""


def _symbols(names) -> dict:
    """``names`` is a list of dim names or a mapping name -> the engine's symbol."""
    if isinstance(names, dict):
        return dict(names)
    return {n: sympy.Symbol(n, integer=True) for n in names}


_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.FloorDiv: FloorDiv, ast.Mod: PyMod}
_CMP = {ast.Lt: sympy.Lt, ast.LtE: sympy.Le, ast.Gt: sympy.Gt, ast.GtE: sympy.Ge,
        ast.Eq: sympy.Eq, ast.NotEq: sympy.Ne}


def _parse(text: str, names, want: str, rational: bool = False):
    if not isinstance(text, str) or not text.strip():
        raise ExprError(f"expected a {want} in Python syntax over {', '.join(names) or 'no dims'}, got {text!r}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise ExprError(f"{text!r} is not Python syntax ({e.msg})") from None
    syms = _symbols(names)

    def num(node):
        return conv(node, boolean=False)

    def conv(node, boolean):
        if isinstance(node, ast.Constant) and isinstance(node.value, bool):
            return sympy.true if node.value else sympy.false
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return sympy.Integer(node.value)
        if isinstance(node, ast.Name):
            if node.id not in syms:
                raise ExprError(f"{node.id!r} in {text!r} is not a dim (dims: {', '.join(names) or 'none'})")
            return syms[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -num(node.operand)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return sympy.Not(conv(node.operand, True))
        if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
            return _BIN[type(node.op)](num(node.left), num(node.right))
        if rational and isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            return num(node.left) / num(node.right)  # exact (a ring all-reduce sends 2*(W-1)/W of a tensor)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            exp = num(node.right)
            if not (exp.is_Integer and exp >= 0):
                raise ExprError(f"only non-negative integer powers are sizes, in {text!r}")
            return num(node.left) ** exp
        if isinstance(node, ast.BoolOp):
            parts = [conv(v, True) for v in node.values]
            return sympy.And(*parts) if isinstance(node.op, ast.And) else sympy.Or(*parts)
        if isinstance(node, ast.Compare):
            parts, left = [], num(node.left)
            for op, right_node in zip(node.ops, node.comparators):
                if type(op) not in _CMP:
                    raise ExprError(f"unsupported comparison in {text!r}; use < <= > >= == !=")
                right = num(right_node)
                parts.append(_CMP[type(op)](left, right))
                left = right
            return sympy.And(*parts)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max") \
                and len(node.args) >= 2 and not node.keywords:
            f = sympy.Min if node.func.id == "min" else sympy.Max
            return f(*[num(a) for a in node.args])
        raise ExprError(f"unsupported syntax {ast.unparse(node)!r} in {text!r}: use dims, integers, "
                        f"+ - * // % **, min/max, comparisons, and/or/not")

    try:
        out = conv(tree.body, want == "condition")
    except ZeroDivisionError:
        raise ExprError(f"division by zero in {text!r}") from None
    # A bare Symbol is a sympy Boolean too: only comparisons and connectives are conditions.
    is_bool = isinstance(out, (sympy.core.relational.Relational, sympy.logic.boolalg.BooleanFunction,
                               sympy.logic.boolalg.BooleanAtom))
    if want == "condition" and not is_bool:
        raise ExprError(f"{text!r} is not a condition (expected a comparison like T <= 128)")
    if want == "expression" and is_bool:
        raise ExprError(f"{text!r} is a condition, expected a size expression")
    return out


def parse_expr(text: str, names, rational: bool = False) -> sympy.Expr:
    """A size expression over ``names`` (``"B*T*768"``, ``"T // 8"``) as sympy; with ``rational``, ``/`` is
    exact division too (communication bytes averaged over ranks).

    >>> parse_expr("8*N*(W - 1)/W", ["N", "W"], rational=True)
    8*N*(W - 1)/W
    """
    return _parse(text, names if isinstance(names, dict) else list(names), "expression", rational)


def parse_condition(text: str, names) -> sympy.Basic:
    """A condition over ``names`` (``"T <= 128 and B % 2 == 0"``) as a sympy boolean."""
    return _parse(text, names if isinstance(names, dict) else list(names), "condition")
