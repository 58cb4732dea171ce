"""Per-op and per-module costs of a traced graph: FLOPs by formula, bytes moved, ops classified.

Each ATen call of the graph is classified as *counted* (a formula of
:mod:`shapes.flops.formulas`), *uncounted* (torch counts it, symshape has no
formula), *zero* (0 FLOPs by torch's convention) or a *view* (no data
moves), and its FLOPs and bytes are summed per op, module and phase.
:class:`~shapes.flops.report.FlopReport` is built on the result.
"""
from __future__ import annotations

import enum
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
import torch.fx
from torch.utils import _pytree as pytree

from . import formulas as ff
from .exprs import nice, sum_exprs
from .train import PHASES
from ..errors import SymshapeError
from ..limits import expr_of

aten = torch.ops.aten

# Size queries and symbolic arithmetic in the graph are not tensor ops.
_SCALAR_OPS = frozenset(p for p in (
    aten.sym_size, aten.sym_stride, aten.sym_numel, aten.sym_storage_offset,
    getattr(aten, "_assert_scalar", None), getattr(aten, "sym_constrain_range", None),
    getattr(aten, "sym_constrain_range_for_size", None),
) if p is not None)

# Ops that alias their input without an alias annotation in their schema, or
# change only metadata in place: no data moves.
_VIEW_LIKE = frozenset(p for p in (
    aten._unsafe_view, getattr(aten, "_reshape_alias", None), aten.squeeze_, aten.unsqueeze_, aten.transpose_,
    aten.t_, aten.as_strided_, aten.detach_, getattr(aten, "swapdims_", None), getattr(aten, "lift_fresh", None),
) if p is not None)

# Allocations that write nothing.
_ALLOCATIONS = frozenset(p for p in (
    aten.empty, aten.empty_strided, aten.empty_like, aten.new_empty, aten.new_empty_strided,
) if p is not None)


def is_view(func) -> bool:
    """Does ``func`` move no data (a view, or a metadata-only in-place op)?"""
    packet = func._overloadpacket
    if packet in _VIEW_LIKE:
        return True
    rets = func._schema.returns
    # A view returns an alias of an input that it does not write; in-place ops
    # (alias with is_write) read and write data.
    return bool(rets) and all(r.alias_info is not None and not r.alias_info.is_write for r in rets)


class CostKind(str, enum.Enum):
    """How an op's FLOPs are known (listed in this order in tables).

    >>> CostKind("view") is CostKind.VIEW, str(CostKind.COUNTED)
    (True, 'counted')
    """

    COUNTED = "counted"      # a formula of shapes.flops.formulas
    UNCOUNTED = "uncounted"  # torch counts it, symshape has no formula (or it failed): never silently 0
    ZERO = "zero"            # 0 FLOPs by torch's convention
    VIEW = "view"            # 0 FLOPs and 0 bytes: no data moves

    def __str__(self) -> str:
        return self.value


@dataclass
class OpCost:
    """Totals for one ATen op (all its calls).

    ``flops`` and ``bytes`` are sympy expressions over the program's dims;
    ``kind`` is a :class:`CostKind`: counted (has a formula), uncounted (torch
    counts it, symshape has no formula), zero (0 FLOPs by convention) or a
    view (0 FLOPs, 0 bytes).
    """

    op: str
    calls: int = 0
    flops: Any = sympy.Integer(0)
    bytes: Any = sympy.Integer(0)
    kind: CostKind = CostKind.ZERO

    @property
    def intensity(self):
        """FLOPs per byte moved (a sympy expression; ``nan`` when nothing moves)."""
        if self.bytes == 0:
            return sympy.nan
        return self.flops / self.bytes


@dataclass
class ModuleCost:
    """Totals for one nn.Module (its ops and its children's).

    ``name`` is the qualified name (``"h.0.attn"``; ``""`` is the root),
    ``by_op`` maps op names to FLOP expressions.
    """

    name: str
    cls: str
    flops: Any = sympy.Integer(0)
    bytes: Any = sympy.Integer(0)
    by_op: dict = field(default_factory=dict)
    #: nesting depth in the module call stack (the root is 0); containers
    #: that never run forward (``ModuleList``) are not levels.
    depth: int = 0

    @property
    def intensity(self):
        """FLOPs per byte moved (a sympy expression; ``nan`` when nothing moves)."""
        if self.bytes == 0:
            return sympy.nan
        return sympy.cancel(self.flops / self.bytes)


@dataclass
class GraphCosts:
    """FLOPs and bytes of every op of a traced graph, by op, module and phase (closed forms)."""

    ops: dict = field(default_factory=dict)  # op name -> OpCost
    by_module: dict = field(default_factory=dict)  # qualified name -> ModuleCost
    by_op: dict = field(default_factory=dict)  # op name -> FLOPs, ops with FLOPs only
    uncounted: dict = field(default_factory=dict)
    zero_by_convention: dict = field(default_factory=dict)
    matmul_like_uncounted: dict = field(default_factory=dict)
    beyond_torch: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)
    total: Any = sympy.Integer(0)
    total_bytes: Any = sympy.Integer(0)
    phase_totals: dict = field(default_factory=dict)
    phase_bytes: dict = field(default_factory=dict)
    node_flops: dict = field(default_factory=dict)  # graph node -> its FLOPs (nodes with FLOPs only)


def count_graph(traced) -> GraphCosts:
    """The costs of ``traced`` (a :class:`~shapes.program.TracedProgram`), op by op.

    Example::

        >>> import torch, shapes
        >>> c = count_graph(shapes.trace(torch.nn.Linear(4, 3), "x: f32[B, 4]"))
        >>> c.total, sorted(c.by_op)
        (24*B, ['aten.addmm'])
    """
    counter = _Counter(traced)
    for node in traced.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            counter.add(node)
    return counter.finish()


class _Counter:
    """The running sums of :func:`count_graph`, one op node at a time."""

    def __init__(self, traced):
        self.c = GraphCosts()
        self.repl = traced.env.replacements
        self.counted_by_torch = ff.torch_counted()
        self.op_terms: dict[str, list] = defaultdict(list)
        self.byte_terms: dict[str, list] = defaultdict(list)
        self.mod_terms: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
        self.mod_bytes: dict[str, list] = defaultdict(list)
        self.mod_cls: dict[str, str] = {}
        self.mod_depth: dict[str, int] = {}
        self.is_module = isinstance(traced.program, torch.nn.Module)
        self.phase_flops: dict[str, list] = defaultdict(list)
        self.phase_bytes: dict[str, list] = defaultdict(list)

    def fix(self, e):
        e = sympy.sympify(e)
        return e.xreplace(self.repl) if self.repl else e

    def value(self, a):
        if isinstance(a, torch.fx.Node):
            v = a.meta.get("val")
            if isinstance(v, torch.Tensor):
                return ff.TensorArg(tuple(self.fix(expr_of(s)) for s in v.shape), v.dtype)
            if "expr" in a.meta:
                return self.fix(a.meta["expr"])
            if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                return self.fix(v.node.expr)
            return v
        return a

    def out_value(self, v):
        if isinstance(v, torch.Tensor):
            return ff.TensorArg(tuple(self.fix(expr_of(s)) for s in v.shape), v.dtype)
        if isinstance(v, (tuple, list)):
            return type(v)(self.out_value(x) for x in v)
        return v

    def add(self, node) -> None:
        """Count one op node: its FLOPs by formula, its bytes, its module and phase."""
        func = node.target
        packet = func._overloadpacket
        if packet in _SCALAR_OPS:
            return
        args = torch.fx.node.map_aggregate(node.args, self.value)
        kwargs = torch.fx.node.map_aggregate(node.kwargs, self.value)
        out = self.out_value(node.meta.get("val"))
        ins = [x for x in pytree.tree_leaves((args, kwargs)) if isinstance(x, ff.TensorArg)]
        outs = [x for x in pytree.tree_leaves(out) if isinstance(x, ff.TensorArg)]
        if not ins and not outs:
            return
        name = str(packet)
        cost = self.c.ops.get(name)
        if cost is None:
            cost = self.c.ops[name] = OpCost(name)
        cost.calls += 1
        flops = self._flops(cost, func, args, kwargs, out)
        if is_view(func) or packet in _ALLOCATIONS:
            nbytes = sympy.Integer(0)
        else:
            nbytes = sympy.Add(*[t.nbytes for t in ins], *[t.nbytes for t in outs])
        if flops != 0:
            self.op_terms[name].append(flops)
            self.c.node_flops[node] = flops
        self.byte_terms[name].append(nbytes)
        ph = node.meta.get("phase") or "forward"
        self.phase_flops[ph].append(flops)
        self.phase_bytes[ph].append(nbytes)
        if self.is_module:
            # A module on the stack twice (recursion) counts once, as in
            # torch's ModuleTracker.
            for depth, (qual, cls) in enumerate(dict.fromkeys(node.meta.get("module_path", ()))):
                self.mod_cls.setdefault(qual, cls)
                self.mod_depth[qual] = min(depth, self.mod_depth.get(qual, depth))
                if flops != 0:
                    self.mod_terms[qual][name].append(flops)
                self.mod_bytes[qual].append(nbytes)

    def _flops(self, cost, func, args, kwargs, out):
        """The op's FLOPs by its formula (0 without one), with ``cost.kind`` set to how it was counted."""
        c, name, packet = self.c, cost.op, func._overloadpacket
        flops = sympy.Integer(0)
        formula = ff.formula_for(packet)
        if formula is not None:
            try:
                flops = sympy.sympify(formula(ff.bind(func, args, kwargs), out))
                cost.kind = CostKind.COUNTED
            except (KeyError, IndexError, TypeError, ValueError, AttributeError, SymshapeError) as e:
                # A formula that cannot read these arguments: said in the report (errors, uncounted).
                c.errors[name] = f"{type(e).__name__}: {e}"
                cost.kind = CostKind.UNCOUNTED
                c.uncounted[name] = c.uncounted.get(name, 0) + 1
            if packet in ff.BEYOND_TORCH:
                c.beyond_torch[name] = c.beyond_torch.get(name, 0) + 1
        elif packet in self.counted_by_torch:
            cost.kind = CostKind.UNCOUNTED
            c.uncounted[name] = c.uncounted.get(name, 0) + 1
        elif is_view(func):
            cost.kind = CostKind.VIEW
        else:
            cost.kind = CostKind.ZERO
            c.zero_by_convention[name] = c.zero_by_convention.get(name, 0) + 1
            if packet in ff.MATMUL_LIKE_UNCOUNTED:
                c.matmul_like_uncounted[name] = c.matmul_like_uncounted.get(name, 0) + 1
        return flops

    def finish(self) -> GraphCosts:
        """The totals: per op, overall, per phase and per module, in their nicest closed forms."""
        c = self.c
        for name, cost in c.ops.items():
            cost.flops = sum_exprs(self.op_terms.get(name, ()))
            cost.bytes = sum_exprs(self.byte_terms.get(name, ()))
        c.total = nice(sum_exprs(c.flops for c in c.ops.values()))
        c.total_bytes = nice(sum_exprs(c.bytes for c in c.ops.values()))
        for cost in c.ops.values():
            cost.flops, cost.bytes = nice(cost.flops), nice(cost.bytes)
        c.by_op = {n: c.flops for n, c in c.ops.items() if c.flops != 0}
        for ph in PHASES:
            if ph in self.phase_bytes:
                c.phase_totals[ph] = nice(sum_exprs(self.phase_flops[ph]))
                c.phase_bytes[ph] = nice(sum_exprs(self.phase_bytes[ph]))
        # First-run order: parents before children, in execution order.
        for qual in self.mod_cls:
            by_op = {n: sum_exprs(ts) for n, ts in self.mod_terms[qual].items()}
            c.by_module[qual] = ModuleCost(qual, self.mod_cls[qual], sum_exprs(by_op.values()),
                                           sum_exprs(self.mod_bytes[qual]), by_op, self.mod_depth[qual])
        return c
