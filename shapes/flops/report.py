"""Symbolic FLOP and memory-traffic counts of a PyTorch program.

:func:`count_flops` traces the program once at symbolic sizes and returns a
:class:`FlopReport` whose totals are closed forms over the named dims; at any
concrete sizes on the traced path they equal what
``torch.utils.flop_counter.FlopCounterMode`` reports for that run.

Example::

    >>> import torch
    >>> import shapes
    >>> r = shapes.count_flops(torch.nn.Linear(64, 32), "x: f32[B, 64]")
    >>> r.total
    4096*B
    >>> r.evaluate({"B": 8})
    32768

Conventions (those of ``torch.utils.flop_counter``; the formulas are in
:mod:`shapes.flops.formulas`):

* a multiply-add is 2 FLOPs; only the matmul family (``mm``, ``addmm``,
  ``bmm``, ``baddbmm``, ``_scaled_mm``), convolution (forward and backward,
  transposed and grouped) and the fused scaled-dot-product-attention kernels
  have FLOPs.  Every other op counts 0 FLOPs by this convention; the report
  lists them (``zero_by_convention``) rather than hiding them, and points out
  matrix ops that torch does not count either (``mv``, ``dot``, ...).
* an op that torch's FlopCounterMode has a formula for but symshape has not
  is listed in ``uncounted`` (and shown in the table): never silently 0.
* bytes moved: for every op, ``numel * itemsize`` of each tensor argument
  (read) plus each tensor output (written).  Views (``view``, ``transpose``,
  ``expand``, ``split``, ``_unsafe_view``, ...) and allocations without
  initialisation (``empty``) move 0 bytes.  Sizes are logical, so a broadcast
  (expanded) argument counts its full logical size.  Arithmetic intensity is
  FLOPs per byte moved, per op.

Which ops are seen, and why totals agree with FlopCounterMode: the tracer
records the ATen ops that reach a ``TorchDispatchMode`` when the program runs
on meta tensors, i.e. after CompositeImplicitAutograd decomposition.
FlopCounterMode is a dispatch mode too, and decomposes composite ops it has
no formula for (``aten.linear``, ``aten.matmul``, ``aten.einsum``) into the
same ``mm``/``addmm``/``bmm`` calls.  The one device-dependent decomposition
is ``F.scaled_dot_product_attention``: on meta tensors (symshape's trace, and
FlopCounterMode on meta) it decomposes into its math form, whose two
``bmm`` calls are exactly the SDPA formula; on CPU tensors it runs the fused
``_scaled_dot_product_flash_attention_for_cpu`` kernel, which torch's
FlopCounterMode does not count (it reports 0 for attention on CPU) and
symshape counts with the SDPA formula.  To compare with FlopCounterMode on CPU
tensors, give it ``custom_mapping=shapes.flops.formulas.torch_cpu_mapping()``.

Training steps (``mode="train"``, :mod:`shapes.flops.train`) trace
``loss.backward()`` through torch's autograd, so backward ops are counted by
the same formulas; ``useful`` (:mod:`shapes.flops.useful`) counts causal
attention at the score entries it keeps; :meth:`FlopReport.check` proves a
hand-written formula (:mod:`shapes.flops.check`); :meth:`FlopReport.mfu`
gives achieved FLOP/s and MFU (:mod:`shapes.flops.mfu`).

Known divergence: the tracer runs torch's Python decompositions (as
``torch.compile`` and ``torch.export`` do), and its ``matmul`` folds a vector
times a batch of matrices (``[K] @ [B, K, N]``) into ``aten.mv``, which
torch's convention counts as 0 FLOPs; eager ATen usually runs ``aten.bmm``
there (which it counts), depending on strides and ``requires_grad``.  Such
``mv`` calls are listed in ``matmul_like_uncounted`` and in the table.
"""
from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import sympy
import torch
import torch.fx
from torch.utils import _pytree as pytree

from . import formulas as ff
from .exprs import nice, sum_exprs
from ..errors import GuardViolation, SpecError, SymshapeError
from ..program import TracedProgram

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


class FlopEvaluationError(SpecError):
    """Sizes given to :meth:`FlopReport.evaluate` are missing, unknown or invalid."""


def _is_view(func) -> bool:
    packet = func._overloadpacket
    if packet in _VIEW_LIKE:
        return True
    rets = func._schema.returns
    # A view returns an alias of an input that it does not write; in-place ops
    # (alias with is_write) read and write data.
    return bool(rets) and all(r.alias_info is not None and not r.alias_info.is_write for r in rets)


@dataclass
class OpCost:
    """Totals for one ATen op (all its calls).

    ``flops`` and ``bytes`` are sympy expressions over the program's dims;
    ``kind`` is ``"counted"`` (has a formula), ``"uncounted"`` (torch counts
    it, symshape has no formula), ``"zero"`` (0 FLOPs by convention) or
    ``"view"`` (0 FLOPs, 0 bytes).
    """

    op: str
    calls: int = 0
    flops: Any = sympy.Integer(0)
    bytes: Any = sympy.Integer(0)
    kind: str = "zero"

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
class FlopValues:
    """A :class:`FlopReport` evaluated at concrete sizes (all exact ints)."""

    sizes: dict
    flops: int
    bytes: int
    ops: dict  # op -> (calls, flops, bytes)
    by_module: dict  # name -> (flops, bytes)
    useful: Optional[int] = None  # useful FLOPs (causal attention at the entries it keeps)
    phases: dict = field(default_factory=dict)  # phase -> (flops, bytes)

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else float("nan")


class FlopReport:
    """FLOPs and bytes moved of a traced program, as closed forms.

    Attributes:
        total: total FLOPs (sympy expression over the named dims).
        total_bytes: total bytes moved.
        by_op: op name (``"aten.addmm"``) -> FLOP expression, for ops with FLOPs
            (the same keys FlopCounterMode reports).
        ops: op name -> :class:`OpCost` for every tensor op the program ran.
        by_module: qualified module name -> :class:`ModuleCost` (children
            included); ``""`` is the root module.  Empty for a plain function.
        uncounted: op name -> calls, for ops torch counts but symshape has no
            formula for.  Empty when the totals are complete.
        zero_by_convention: op name -> calls, for non-view ops without FLOPs by
            torch's convention (elementwise, reductions, norms, ...).
        matmul_like_uncounted: the subset of those that do matrix arithmetic
            which torch's convention does not count (``aten.mv``, ...).
        beyond_torch: op name -> calls, for ops symshape counts but torch's
            FlopCounterMode has no formula for (see :mod:`shapes.flops`).
        errors: op name -> why its formula could not read its arguments (the
            op is then in ``uncounted``).
        traced: the :class:`~shapes.program.TracedProgram`.
        mode: ``"forward"`` or ``"train"`` (forward, backward and optimizer
            step: see :mod:`shapes.flops.train`).
        phase_totals, phase_bytes: phase -> FLOPs / bytes.
        useful: FLOPs with causal and triangular-masked attention counted at
            the score entries the mask keeps (see :mod:`shapes.flops.useful`);
            equal to ``total`` when no such attention is recognized.
        useful_by_op: op name -> useful FLOPs.
        masked_attention: the attentions counted so, each with where, which
            mask and what fraction (:class:`~shapes.flops.useful.MaskedAttention`).
        useful_notes: masked attentions counted in full, and why.

    Example::

        >>> import torch, shapes
        >>> r = shapes.count_flops(lambda a, b: a @ b, "a: f32[M, K]", "b: f32[K, N]")
        >>> r.total
        2*K*M*N
        >>> r.evaluate({"M": 2, "K": 3, "N": 4})
        48
    """

    def __init__(self, traced: TracedProgram, name: str = "program"):
        self.traced = traced
        self.name = name
        self.ops: dict[str, OpCost] = {}
        self.by_module: dict[str, ModuleCost] = {}
        self.uncounted: dict[str, int] = {}
        self.zero_by_convention: dict[str, int] = {}
        self.matmul_like_uncounted: dict[str, int] = {}
        self.beyond_torch: dict[str, int] = {}
        self.errors: dict[str, str] = {}
        self.total = sympy.Integer(0)
        self.total_bytes = sympy.Integer(0)
        #: reports of the other paths evaluated so far (see :meth:`piece_at`)
        self.pieces: list["FlopReport"] = []
        #: "forward", or "train" when the trace recorded a training step.
        self.mode = "train" if any("phase" in n.meta for n in traced.graph.nodes) else "forward"
        #: phase ("forward", "backward", "optimizer") -> FLOPs; only "forward" unless mode == "train".
        self.phase_totals: dict[str, Any] = {}
        #: phase -> bytes moved.
        self.phase_bytes: dict[str, Any] = {}
        #: graph node -> its FLOPs (nodes with FLOPs only).
        self.node_flops: dict[torch.fx.Node, Any] = {}
        self._collect()
        from .useful import analyze
        analyze(self)

    # -- building -------------------------------------------------------------------
    def _collect(self):
        env = self.traced.env
        repl = env.replacements

        def fix(e):
            e = sympy.sympify(e)
            return e.xreplace(repl) if repl else e

        def value(a):
            if isinstance(a, torch.fx.Node):
                v = a.meta.get("val")
                if isinstance(v, torch.Tensor):
                    return ff.TensorArg(tuple(fix(_expr_of(s)) for s in v.shape), v.dtype)
                if "expr" in a.meta:
                    return fix(a.meta["expr"])
                if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                    return fix(v.node.expr)
                return v
            return a

        def out_value(v):
            if isinstance(v, torch.Tensor):
                return ff.TensorArg(tuple(fix(_expr_of(s)) for s in v.shape), v.dtype)
            if isinstance(v, (tuple, list)):
                return type(v)(out_value(x) for x in v)
            return v

        counted_by_torch = ff.torch_counted()
        op_terms: dict[str, list] = defaultdict(list)
        byte_terms: dict[str, list] = defaultdict(list)
        mod_terms: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
        mod_bytes: dict[str, list] = defaultdict(list)
        mod_cls: dict[str, str] = {}
        mod_depth: dict[str, int] = {}
        is_module = isinstance(self.traced.program, torch.nn.Module)
        phase_flops: dict[str, list] = defaultdict(list)
        phase_bytes: dict[str, list] = defaultdict(list)

        for node in self.traced.graph.nodes:
            if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
                continue
            func = node.target
            packet = func._overloadpacket
            if packet in _SCALAR_OPS:
                continue
            args = torch.fx.node.map_aggregate(node.args, value)
            kwargs = torch.fx.node.map_aggregate(node.kwargs, value)
            out = out_value(node.meta.get("val"))
            ins = [x for x in pytree.tree_leaves((args, kwargs)) if isinstance(x, ff.TensorArg)]
            outs = [x for x in pytree.tree_leaves(out) if isinstance(x, ff.TensorArg)]
            if not ins and not outs:
                continue
            name = str(packet)
            cost = self.ops.get(name)
            if cost is None:
                cost = self.ops[name] = OpCost(name)
            cost.calls += 1

            flops = sympy.Integer(0)
            formula = ff.formula_for(packet)
            view = _is_view(func)
            if formula is not None:
                try:
                    flops = sympy.sympify(formula(ff.bind(func, args, kwargs), out))
                    cost.kind = "counted"
                except Exception as e:  # a formula that cannot read these arguments: say so
                    self.errors[name] = f"{type(e).__name__}: {e}"
                    cost.kind = "uncounted"
                    self.uncounted[name] = self.uncounted.get(name, 0) + 1
                if packet in ff.BEYOND_TORCH:
                    self.beyond_torch[name] = self.beyond_torch.get(name, 0) + 1
            elif packet in counted_by_torch:
                cost.kind = "uncounted"
                self.uncounted[name] = self.uncounted.get(name, 0) + 1
            elif view:
                cost.kind = "view"
            else:
                cost.kind = "zero"
                self.zero_by_convention[name] = self.zero_by_convention.get(name, 0) + 1
                if packet in ff.MATMUL_LIKE_UNCOUNTED:
                    self.matmul_like_uncounted[name] = self.matmul_like_uncounted.get(name, 0) + 1

            if view or packet in _ALLOCATIONS:
                nbytes = sympy.Integer(0)
            else:
                nbytes = sympy.Add(*[t.nbytes for t in ins], *[t.nbytes for t in outs])
            if flops != 0:
                op_terms[name].append(flops)
                self.node_flops[node] = flops
            byte_terms[name].append(nbytes)
            ph = node.meta.get("phase") or "forward"
            phase_flops[ph].append(flops)
            phase_bytes[ph].append(nbytes)

            if is_module:
                # A module on the stack twice (recursion) counts once, as in
                # torch's ModuleTracker.
                for depth, (qual, cls) in enumerate(dict.fromkeys(node.meta.get("module_path", ()))):
                    mod_cls.setdefault(qual, cls)
                    mod_depth[qual] = min(depth, mod_depth.get(qual, depth))
                    if flops != 0:
                        mod_terms[qual][name].append(flops)
                    mod_bytes[qual].append(nbytes)

        for name, cost in self.ops.items():
            cost.flops = sum_exprs(op_terms.get(name, ()))
            cost.bytes = sum_exprs(byte_terms.get(name, ()))
        self.total = nice(sum_exprs(c.flops for c in self.ops.values()))
        self.total_bytes = nice(sum_exprs(c.bytes for c in self.ops.values()))
        for cost in self.ops.values():
            cost.flops, cost.bytes = nice(cost.flops), nice(cost.bytes)
        self.by_op = {n: c.flops for n, c in self.ops.items() if c.flops != 0}
        from .train import PHASES
        for ph in PHASES:
            if ph in phase_bytes:
                self.phase_totals[ph] = nice(sum_exprs(phase_flops[ph]))
                self.phase_bytes[ph] = nice(sum_exprs(phase_bytes[ph]))
        # First-run order: parents before children, in execution order.
        for qual in mod_cls:
            by_op = {n: sum_exprs(ts) for n, ts in mod_terms[qual].items()}
            self.by_module[qual] = ModuleCost(qual, mod_cls[qual], sum_exprs(by_op.values()), sum_exprs(mod_bytes[qual]),
                                              by_op, mod_depth[qual])

    # -- evaluation -----------------------------------------------------------------
    @property
    def dims(self) -> list[str]:
        """The named dims of the program's inputs, in spec order."""
        from ..spec import dim_names
        names = []
        for s in self.traced.specs:
            for d in dim_names(s.dims):
                if d not in names:
                    names.append(d)
        return names

    def _given(self, sizes: Mapping) -> dict:
        """``sizes`` checked: every dim of the program, each a non-negative int."""
        if not isinstance(sizes, Mapping):
            raise FlopEvaluationError(f"sizes must be a dict of dim name -> int, got {type(sizes).__name__}")
        dims = self.dims
        given: dict[str, int] = {}
        for k, v in sizes.items():
            key = k.name if isinstance(k, sympy.Symbol) else k
            if key not in dims:
                raise FlopEvaluationError(
                    f"unknown dim {key!r}: the program's dims are {', '.join(dims) or '(none)'}")
            if isinstance(v, bool) or not isinstance(v, (int, sympy.Integer)) or int(v) < 0:
                raise FlopEvaluationError(f"size of {key} must be a non-negative int, got {v!r}")
            given[key] = int(v)
        missing = [d for d in dims if d not in given]
        if missing:
            raise FlopEvaluationError(
                f"no size given for dim(s) {', '.join(missing)}; evaluating needs a size for every dim "
                f"of the program: {', '.join(dims)}")
        return given

    def _subs(self, given: dict) -> dict:
        env = self.traced.env
        return {env.symbols[k]: sympy.Integer(v) for k, v in given.items()}

    def piece_at(self, sizes: Mapping) -> "FlopReport":
        """The report of the path the program takes at ``sizes``: this one, or
        (where this trace's guards fail) a trace at those sizes, made once and
        kept in :attr:`pieces`.  Raises :class:`~shapes.errors.GuardViolation`
        where the program raises or a dim's range excludes the sizes."""
        from .pieces import piece_for
        return piece_for(self, self._given(sizes))

    def piecewise(self):
        """FLOPs as one closed form per path (a :class:`~shapes.flops.pieces.PiecewiseCount`),
        after tracing the corners where dims are 1 (and 0, where their range has it).

        Example::

            >>> import torch, shapes
            >>> print(shapes.count_flops(torch.nn.Linear(4, 3), "x: f32[B, 4]").piecewise())
            always: 24*B
        """
        from .pieces import piecewise
        return piecewise(self)

    def _eval(self, expr, subs) -> int:
        v = sympy.sympify(expr).xreplace(subs)
        if not v.is_Integer:
            v = sympy.simplify(v)
        if not v.is_Integer:
            free = ", ".join(sorted(map(str, v.free_symbols)))
            env = self.traced.env
            what = "; ".join(f"{s} = {env.describe_symbol(s)}" for s in sorted(v.free_symbols, key=str)
                             if s in env.unbacked) or free
            raise SymshapeError(f"the count {expr} is {v} at these sizes: it depends on data ({what})")
        return int(v)

    def evaluate(self, sizes: Mapping, expr=None) -> int:
        """Total FLOPs (or ``expr``, e.g. ``report.total_bytes``) at ``sizes``, exactly.

        ``sizes`` maps every dim name to an int.  Sizes where the program
        takes another path than the traced one (a guard fails there) are
        counted on that path (:meth:`piece_at`).  Raises
        :class:`FlopEvaluationError` for missing or unknown dims and
        :class:`~shapes.errors.GuardViolation` where the program raises, the
        sizes lie outside a dim's range, or ``expr`` is given for sizes off
        this path.

        Example::

            >>> import torch, shapes
            >>> shapes.count_flops(torch.nn.Linear(4, 3), "x: f32[B, 4]").evaluate({"B": 5})
            120
        """
        given = self._given(sizes)
        piece = self.piece_at(given)
        if expr is not None and piece is not self:
            from .pieces import to_python
            bad = self.traced.failing_guards(given)[0]
            raise GuardViolation(
                f"at {', '.join(f'{k}={v}' for k, v in given.items())} the program takes another path (the guard "
                f"{to_python(bad.expr)} from {bad.provenance} fails), where this expression does not apply; "
                f"use report.piece_at(sizes) for that path's expressions", guard=bad, values=given)
        return piece._eval(piece.total if expr is None else expr, piece._subs(given))

    def at(self, sizes: Mapping) -> FlopValues:
        """Every count of the report at ``sizes`` (a :class:`FlopValues`)."""
        given = self._given(sizes)
        piece = self.piece_at(given)
        if piece is not self:
            return piece.at(given)
        subs = self._subs(given)
        ops = {n: (c.calls, self._eval(c.flops, subs), self._eval(c.bytes, subs)) for n, c in self.ops.items()}
        mods = {n: (self._eval(m.flops, subs), self._eval(m.bytes, subs)) for n, m in self.by_module.items()}
        phases = {p: (self._eval(f, subs), self._eval(self.phase_bytes[p], subs)) for p, f in self.phase_totals.items()}
        return FlopValues({s.name: int(v) for s, v in subs.items()}, self._eval(self.total, subs),
                          self._eval(self.total_bytes, subs), ops, mods, self._eval(self.useful, subs), phases)

    def check(self, formula, consts: Optional[Mapping] = None, of: str = "total"):
        """Is the hand-written ``formula`` (a string in Python syntax over the dims
        and ``consts``, or a sympy expression) equal to this count?

        Returns a :class:`~shapes.flops.check.CheckResult`: *equal* (proved),
        *equal for sizes where ...*, *different* with the smallest counterexample
        and both values, or *unknown*.  ``of`` picks the count: ``"total"``,
        ``"useful"`` or a phase (``"forward"``, ``"backward"``).

        Example::

            >>> import torch, shapes
            >>> r = shapes.count_flops(lambda a, b: a @ b, "a: f32[M, K]", "b: f32[K, N]")
            >>> r.check("2*M*N*K").outcome
            'equal'
        """
        from .check import check
        return check(self, formula, consts, of)

    def mfu(self, sizes: Mapping, seconds: float, peak_flops, count: str = "useful"):
        """Achieved FLOP/s and model FLOPs utilization of a step measured at ``sizes``.

        ``peak_flops`` is a FLOP/s number or a name from the documented table
        (``"h100-sxm"``, ``"a100:tf32"``; see :mod:`shapes.flops.mfu`), never
        guessed.  ``count`` is ``"useful"`` (default: causal attention at the
        entries it keeps) or ``"total"`` (torch's convention).

        Example::

            >>> import torch, shapes
            >>> r = shapes.count_flops(torch.nn.Linear(1024, 1024), "x: f32[N, 1024]")
            >>> f"{r.mfu({'N': 8192}, 0.001, 'a100').mfu:.3f}"
            '0.055'
        """
        from .mfu import mfu
        return mfu(self, sizes, seconds, peak_flops, count)

    # -- presentation ---------------------------------------------------------------
    def table(self, sizes=None, width: int = 80) -> str:
        """A readable table (``width`` columns) of the ops as closed forms; with
        ``sizes`` (a dict, or a list of dicts), their values and intensity there."""
        from .tables import render_table
        return render_table(self, sizes, width)

    def module_table(self, sizes: Optional[Mapping] = None, depth: int = 2, width: int = 80) -> str:
        """FLOPs and bytes per module, down to ``depth`` levels below the root."""
        from .tables import render_modules
        return render_modules(self, sizes, depth, width)

    def to_dict(self, sizes_list=()) -> dict:
        """A JSON-ready dict: expressions as strings, and exact values at each of ``sizes_list``."""
        d = {
            "program": self.name,
            "inputs": [str(s) for s in self.traced.specs],
            "dims": self.dims,
            "total_flops": str(self.total),
            "total_bytes": str(self.total_bytes),
            "mode": self.mode,
            "phases": {p: {"flops": str(f), "bytes": str(self.phase_bytes[p])} for p, f in self.phase_totals.items()},
            "useful_flops": str(self.useful),
            "masked_attention": [{"where": m.where, "how": m.how, "mask": m.mask, "kept": str(m.kept),
                                  "entries": str(m.entries), "matmuls": len(m.nodes)} for m in self.masked_attention],
            "useful_notes": list(self.useful_notes),
            "ops": [{"op": c.op, "calls": c.calls, "kind": c.kind, "flops": str(c.flops), "bytes": str(c.bytes)}
                    for c in self._ordered_ops()],
            "by_module": {n: {"class": m.cls, "flops": str(m.flops), "bytes": str(m.bytes),
                              "intensity": str(m.intensity),
                              "by_op": {k: str(v) for k, v in m.by_op.items()}} for n, m in self.by_module.items()},
            "uncounted": dict(self.uncounted),
            "zero_by_convention": dict(self.zero_by_convention),
            "matmul_like_uncounted": dict(self.matmul_like_uncounted),
            "beyond_torch": dict(self.beyond_torch),
            "formula_errors": dict(self.errors),
            "conventions": "torch.utils.flop_counter: multiply-add = 2 FLOPs; matmul family, convolution and "
                           "SDPA counted; other ops 0 FLOPs; bytes = tensor inputs read + outputs written, "
                           "views 0",
        }
        ats = []
        for sizes in sizes_list:
            v = self.at(sizes)
            ats.append({
                "sizes": v.sizes, "flops": v.flops, "bytes": v.bytes, "useful_flops": v.useful,
                "phases": {p: {"flops": f, "bytes": b} for p, (f, b) in v.phases.items()},
                "intensity": _finite(v.intensity),
                "ops": [{"op": n, "calls": c, "flops": f, "bytes": b,
                         "intensity": _finite(f / b if b else float("nan"))} for n, (c, f, b) in v.ops.items()],
                "by_module": {n: {"flops": f, "bytes": b} for n, (f, b) in v.by_module.items()},
            })
        if ats:
            d["at"] = ats
        return d

    def to_json(self, sizes_list=(), indent: int = 2) -> str:
        return json.dumps(self.to_dict(sizes_list), indent=indent)

    def _ordered_ops(self):
        order = {"counted": 0, "uncounted": 1, "zero": 2, "view": 3}
        return sorted(self.ops.values(), key=lambda c: (order[c.kind], c.op))

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return f"<FlopReport {self.name}: {self.total} FLOPs, {len(self.ops)} ops>"


def _finite(x: float):
    return None if isinstance(x, float) and math.isnan(x) else x


def _expr_of(s):
    if isinstance(s, torch.SymInt):
        return s.node.expr
    return sympy.Integer(int(s))


# --------------------------------------------------------------------------- tables

def count_flops(program, *specs, dims=None, specialize_zero_one: bool = False, mode: str = "forward",
                optimizer=None, requires_grad=None) -> FlopReport:
    """Count the FLOPs and bytes moved of ``program`` as closed forms over its dims.

    Args:
        program: a function or nn.Module (traced with :func:`shapes.trace`), or
            an already traced :class:`~shapes.program.TracedProgram` (then no
            specs).
        *specs: input specs, e.g. ``"ids: i64[B, T]"``.
        dims: example sizes / ranges of the dims, as for :func:`shapes.trace`;
            the closed form holds for the sizes that take the same path (the
            trace's guards), which :meth:`FlopReport.evaluate` checks.
        specialize_zero_one: PyTorch's 0/1 specialization policy (sizes
            are then assumed >= 2).  Off by default: the count holds at
            size 1 too, or says where size 1 counts differently.
        mode: ``"forward"``, or ``"train"``: the program returns the loss
            (a scalar; a tensor is summed; a model output's ``.loss``), and the
            count covers forward, ``loss.backward()`` (traced through torch's
            autograd, see :mod:`shapes.flops.train`) and the optimizer step.
        optimizer: with ``mode="train"``, a callable that takes the trainable
            parameters and returns a ``torch.optim.Optimizer`` whose ``step()``
            is counted too (0 FLOPs by torch's convention; its bytes count).
        requires_grad: with ``mode="train"``, names of inputs that require grad;
            default: none for an nn.Module (its parameters do), every
            floating-point input for a plain function.

    Returns a :class:`FlopReport`.  Conventions are torch.utils.flop_counter's:
    see :mod:`shapes.flops`.

    Example::

        >>> import torch, shapes
        >>> r = shapes.count_flops(torch.nn.Conv2d(3, 8, 3), "x: f32[N, 3, 32, 32]")
        >>> r.total
        388800*N
    """
    if mode not in ("forward", "train"):
        raise SpecError(f"mode must be 'forward' or 'train', got {mode!r}")
    if mode != "train" and (optimizer is not None or requires_grad is not None):
        raise SpecError("optimizer= and requires_grad= apply to mode='train' only")
    if isinstance(program, TracedProgram):
        if mode == "train" and not any("phase" in n.meta for n in program.graph.nodes):
            raise SpecError("count_flops got a forward-only TracedProgram with mode='train'; pass the program "
                            "and its specs instead")
        if specs:
            raise SpecError("count_flops got a TracedProgram and input specs; the program is already traced")
        traced = program
        program = traced.program
    else:
        from ..tracer import trace
        kw = {}
        if mode == "train":
            from .train import check_requires_grad, default_requires_grad, training_step
            kw = {"backward": training_step(optimizer),
                  "requires_grad": tuple(default_requires_grad(program, specs) if requires_grad is None
                                         else check_requires_grad(requires_grad, specs))}
        traced = trace(program, *specs, dims=dims, specialize_zero_one=specialize_zero_one, **kw)
    return FlopReport(traced, name=_name_of(program))


def _name_of(program) -> str:
    if isinstance(program, torch.nn.Module):
        return type(program).__name__
    return getattr(program, "__name__", None) or type(program).__name__
