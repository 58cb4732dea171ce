"""The kinds of expression the engine builds, and one visitor that dispatches on them.

Every analysis over the engine's sympy expressions (value ranges, Z3
translation, concrete evaluation, the FX graph builder, the printers) is an
:class:`ExprVisitor`: it names one ``visit_<kind>`` method per kind it
handles, and meets any other kind with :class:`~shapes.errors.UnhandledExprKind`
instead of a silent default.  ``tests/test_expr_kinds.py`` runs every kind
through every analysis.

Example::

    >>> import sympy
    >>> from shapes.expr_kinds import Kind, ExprVisitor, classify
    >>> from shapes.functions import FloorDiv
    >>> N = sympy.Symbol("N", integer=True)
    >>> classify(FloorDiv(N, 2))
    <Kind.FLOOR_DIV: 'floor_div'>
    >>> class Depth(ExprVisitor):
    ...     analysis = "depth"
    ...     def visit_symbol(self, e):
    ...         return 0
    ...     visit_integer = visit_symbol
    ...     def visit_floor_div(self, e):
    ...         return 1 + max(self.visit(a) for a in e.args)
    >>> Depth().visit(FloorDiv(FloorDiv(N, 2), 3))
    2
    >>> Depth().visit(N + 1)
    Traceback (most recent call last):
    ...
    shapes.errors.UnhandledExprKind: symshape: depth has no rule for expression kind ADD in `N + 1`. ...
"""
from __future__ import annotations

import enum
from typing import Callable, ClassVar, Optional

import sympy
from sympy.logic.boolalg import BooleanFalse, BooleanTrue

from .errors import UnhandledExprKind
from .functions import FloorDiv, PyMod, ToFloat, TrueDiv, TruncToInt, Where


class Kind(enum.Enum):
    """One kind of node in the engine's expressions (the value names the visit method)."""

    # atoms
    INTEGER = "integer"
    RATIONAL = "rational"      # a non-integer exact fraction (3/2)
    FLOAT = "float"            # a float constant (0.5, SDPA's scale exponent)
    INFINITY = "infinity"      # oo or -oo: only as a range bound
    SYMBOL = "symbol"
    TRUE = "true"
    FALSE = "false"
    # arithmetic
    ADD = "add"
    MUL = "mul"
    POW = "pow"
    FLOOR_DIV = "floor_div"    # shapes.functions.FloorDiv: Python's //
    PY_MOD = "py_mod"          # shapes.functions.PyMod: Python's %
    MOD = "mod"                # sympy.Mod (``expr % k`` on sympy objects): the divisor's sign, as Python
    TRUE_DIV = "true_div"      # shapes.functions.TrueDiv: Python's /
    TO_FLOAT = "to_float"      # float(x)
    TRUNC_TO_INT = "trunc_to_int"  # int(x)
    FLOOR = "floor"            # math.floor of a float
    CEILING = "ceiling"        # math.ceil of a float
    ABS = "abs"                # abs() of a float (an int's abs is Max(x, -x))
    MIN = "min"
    MAX = "max"
    WHERE = "where"            # torch.sym_ite
    # relations
    EQ = "eq"
    NE = "ne"
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    # logic
    NOT = "not"
    AND = "and"
    OR = "or"
    EQUIVALENT = "equivalent"  # a == b on booleans: translation validation's claims

    @property
    def family(self) -> Optional[str]:
        """The method a visitor may define for the whole family (``visit_relational``)."""
        return _FAMILY.get(self)


RELATIONS = (Kind.EQ, Kind.NE, Kind.LT, Kind.LE, Kind.GT, Kind.GE)
_FAMILY = {k: "relational" for k in RELATIONS}

#: sympy class -> kind; subclasses (sympy's One, Zero, Half, Dummy ...) resolve through their MRO.
_BY_CLASS: dict[type, Kind] = {
    sympy.Integer: Kind.INTEGER, sympy.Rational: Kind.RATIONAL, sympy.Float: Kind.FLOAT,
    sympy.core.numbers.Infinity: Kind.INFINITY, sympy.core.numbers.NegativeInfinity: Kind.INFINITY,
    sympy.Symbol: Kind.SYMBOL, BooleanTrue: Kind.TRUE, BooleanFalse: Kind.FALSE,
    sympy.Add: Kind.ADD, sympy.Mul: Kind.MUL, sympy.Pow: Kind.POW,
    FloorDiv: Kind.FLOOR_DIV, PyMod: Kind.PY_MOD, sympy.Mod: Kind.MOD, TrueDiv: Kind.TRUE_DIV,
    ToFloat: Kind.TO_FLOAT, TruncToInt: Kind.TRUNC_TO_INT, sympy.floor: Kind.FLOOR, sympy.ceiling: Kind.CEILING,
    sympy.Abs: Kind.ABS, sympy.Min: Kind.MIN, sympy.Max: Kind.MAX, Where: Kind.WHERE,
    sympy.Eq: Kind.EQ, sympy.Ne: Kind.NE, sympy.Lt: Kind.LT, sympy.Le: Kind.LE, sympy.Gt: Kind.GT,
    sympy.Ge: Kind.GE, sympy.Not: Kind.NOT, sympy.And: Kind.AND, sympy.Or: Kind.OR,
    sympy.Equivalent: Kind.EQUIVALENT,
}
# Classes seen so far, including subclasses resolved once through their MRO.
_KIND_OF_TYPE: dict[type, Optional[Kind]] = dict(_BY_CLASS)


def classify(e) -> Kind:
    """The :class:`Kind` of ``e``; raises :class:`UnhandledExprKind` for anything the engine never builds.

    >>> classify(sympy.Integer(1)), classify(sympy.Rational(1, 2)), classify(sympy.Symbol("x") < 2)
    (<Kind.INTEGER: 'integer'>, <Kind.RATIONAL: 'rational'>, <Kind.LT: 'lt'>)
    """
    k = kind_or_none(e)
    if k is None:
        raise UnhandledExprKind(None, "symshape's expression language", e, "the engine never builds it")
    return k


def kind_or_none(e) -> Optional[Kind]:
    """The :class:`Kind` of ``e``, or None for anything the engine never builds."""
    t = type(e)
    k = _KIND_OF_TYPE.get(t, _UNSEEN)
    if k is _UNSEEN:
        k = next((_BY_CLASS[c] for c in t.__mro__ if c in _BY_CLASS), None)
        _KIND_OF_TYPE[t] = k
    return k


_UNSEEN = object()


class ExprVisitor:
    """Base of every analysis over the engine's expressions: dispatch by :class:`Kind`.

    A subclass defines ``visit_<kind value>`` (``visit_floor_div``) for each kind
    it handles, or ``visit_relational`` for all six relations; :meth:`visit`
    raises :attr:`error` (a subclass of :class:`UnhandledExprKind`) for the others.
    :meth:`handles` says which kinds a visitor covers.

    >>> class Leaves(ExprVisitor):
    ...     def visit_symbol(self, e):
    ...         return 1
    ...     def visit_add(self, e):
    ...         return sum(self.visit(a) for a in e.args)
    >>> N, M = sympy.symbols("N M", integer=True)
    >>> Leaves().visit(N + M), Leaves.handles(Kind.ADD), Leaves.handles(Kind.MUL)
    (2, True, False)
    """

    #: The analysis's name in error messages ("the Z3 translation").
    analysis: ClassVar[str] = "an analysis"
    #: The exception raised for a kind with no rule.
    error: ClassVar[type] = UnhandledExprKind
    _dispatch: ClassVar[dict[Kind, Callable]] = {}

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        table = {}
        for k in Kind:
            fn = getattr(cls, f"visit_{k.value}", None)
            if fn is None and k.family is not None:
                fn = getattr(cls, f"visit_{k.family}", None)
            if fn is not None:
                table[k] = fn
        cls._dispatch = table

    @classmethod
    def handles(cls, kind: Kind) -> bool:
        """Whether this visitor has a rule for ``kind``."""
        return kind in cls._dispatch

    def visit(self, e):
        """Apply this visitor's rule for the kind of ``e``."""
        kind = kind_or_none(e)
        fn = self._dispatch.get(kind)
        if fn is None:
            raise self.unhandled(e, kind)
        return fn(self, e)

    def unhandled(self, e, kind: Optional[Kind] = None, detail: str = "") -> UnhandledExprKind:
        """The error to raise for ``e`` (a kind with no rule, or a case of a kind this visitor lacks)."""
        kind = kind_or_none(e) if kind is None else kind
        return self.error(kind, self.analysis, e, detail or ("" if kind else "the engine never builds it"))
