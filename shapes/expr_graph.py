"""Size expressions as FX graph nodes: the tracer's graph builder over the expression kinds.

A traced graph computes every symbolic size it uses from its inputs'
``sym_size`` nodes; :class:`FxExprBuilder` emits the Python/torch call for
each kind (``//`` as ``operator.floordiv``, ``Where`` as ``torch.sym_ite``).
Its ``builder`` is the tracer's graph builder: it gives a node per symbol
(``symbol_node``) and a node or constant per sub-expression (``expr_node``,
which caches and simplifies).

Example::

    >>> import operator, sympy, torch.fx
    >>> from shapes.expr_graph import FxExprBuilder
    >>> from shapes.functions import FloorDiv
    >>> class Inputs:  # the tracer's builder, reduced to what the example needs
    ...     graph = torch.fx.Graph()
    ...     N = graph.placeholder("N")
    ...     def symbol_node(self, e):
    ...         return self.N
    ...     def expr_node(self, e):
    ...         return int(e) if e.is_Integer else FxExprBuilder(self).visit(e)
    >>> node = FxExprBuilder(Inputs()).visit(FloorDiv(sympy.Symbol("N", integer=True), 2))
    >>> node.target is operator.floordiv, node.args[1]
    (True, 2)
"""
from __future__ import annotations

import math
import operator

import torch
import torch.fx

from .errors import UnhandledExprKind, UnsupportedOpError
from .expr_kinds import ExprVisitor


class GraphEmitLimitation(UnhandledExprKind, UnsupportedOpError):
    """A size expression the tracer cannot emit as graph nodes (a limitation of symshape)."""


def _call(fn):
    def visit(self, e):
        return self.emit(e, fn, [self.builder.expr_node(a) for a in e.args])
    return visit


def _fold(fn):
    def visit(self, e):
        args = [self.builder.expr_node(a) for a in e.args]
        acc = args[0]
        for a in args[1:]:
            acc = self.builder.graph.call_function(fn, (acc, a))
        return self.tag(acc, e)
    return visit


class FxExprBuilder(ExprVisitor):
    """Emit one expression as FX nodes; sub-expressions go back through ``builder.expr_node``."""

    analysis = "the FX graph builder"
    error = GraphEmitLimitation

    def __init__(self, builder):
        self.builder = builder

    def emit(self, e, fn, args):
        return self.tag(self.builder.graph.call_function(fn, tuple(args)), e)

    @staticmethod
    def tag(node, e):
        if isinstance(node, torch.fx.Node):
            node.meta["expr"] = e
        return node

    def visit_symbol(self, e):
        return self.builder.symbol_node(e)

    visit_add = _fold(operator.add)

    def visit_mul(self, e):
        if any(a.is_Rational and not a.is_Integer for a in e.args):
            raise self.unhandled(e, detail="a fractional coefficient")
        return _fold(operator.mul)(self, e)

    visit_pow = _call(operator.pow)
    visit_floor_div = _call(operator.floordiv)
    visit_py_mod = _call(operator.mod)
    visit_mod = _call(operator.mod)
    visit_true_div = _call(operator.truediv)
    visit_min = _fold(torch.sym_min)
    visit_max = _fold(torch.sym_max)
    visit_to_float = _call(torch.sym_float)
    visit_trunc_to_int = _call(torch.sym_int)
    visit_floor = _call(math.floor)
    visit_ceiling = _call(math.ceil)
    visit_abs = _call(abs)
    visit_where = _call(torch.sym_ite)
    visit_eq = _call(operator.eq)
    visit_ne = _call(operator.ne)
    visit_lt = _call(operator.lt)
    visit_le = _call(operator.le)
    visit_gt = _call(operator.gt)
    visit_ge = _call(operator.ge)
    visit_not = _call(torch.sym_not)
    visit_and = _fold(operator.and_)
    visit_or = _fold(operator.or_)
