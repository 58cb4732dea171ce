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
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import sympy
import torch
import torch.fx

from .comm import count_comm
from .costs import CostKind, ModuleCost, OpCost, count_graph
from .exprs import formula_text
from .tables import render_modules, render_table
from ..errors import GuardViolation, SpecError, SymshapeError, UnhandledExprKind
from ..program import TracedProgram

class FlopEvaluationError(SpecError):
    """Sizes given to :meth:`FlopReport.evaluate` are missing, unknown or invalid."""


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
        costs = count_graph(traced)
        self.ops: dict[str, OpCost] = costs.ops
        self.by_module: dict[str, ModuleCost] = costs.by_module
        self.by_op: dict[str, Any] = costs.by_op
        self.uncounted: dict[str, int] = costs.uncounted
        self.zero_by_convention: dict[str, int] = costs.zero_by_convention
        self.matmul_like_uncounted: dict[str, int] = costs.matmul_like_uncounted
        self.beyond_torch: dict[str, int] = costs.beyond_torch
        self.errors: dict[str, str] = costs.errors
        self.total = costs.total
        self.total_bytes = costs.total_bytes
        #: per-rank bytes sent by each collective kind (:mod:`shapes.flops.comm`); empty without collectives
        self.comm = count_comm(traced)
        #: how a sharded program's world size was traced ("" without one; see shapes.distributed.mesh)
        self.world_method = "" if traced.world is None else (
            f"traced at {traced.world.name}={traced.world.size}" if traced.world.concrete
            else f"symbolic world size {traced.world.name}")
        #: world size -> its report, for a program traced per world size (shapes.flops.worlds); else empty
        self.per_world: dict = {}
        #: reports of the other paths evaluated so far (see :meth:`piece_at`)
        self.pieces: list["FlopReport"] = []
        #: "forward", or "train" when the trace recorded a training step.
        self.mode = "train" if any("phase" in n.meta for n in traced.graph.nodes) else "forward"
        #: phase ("forward", "backward", "optimizer") -> FLOPs; only "forward" unless mode == "train".
        self.phase_totals: dict[str, Any] = costs.phase_totals
        #: phase -> bytes moved.
        self.phase_bytes: dict[str, Any] = costs.phase_bytes
        #: graph node -> its FLOPs (nodes with FLOPs only).
        self.node_flops: dict[torch.fx.Node, Any] = costs.node_flops
        from .useful import analyze
        analyze(self)

    # -- evaluation -----------------------------------------------------------------
    @property
    def dims(self) -> list[str]:
        """The named dims of the program's inputs, in spec order (then the world size, and the rank
        where a count depends on it: see :mod:`shapes.distributed`)."""
        from ..spec import dim_names
        names = []
        for s in self.traced.specs:
            for d in dim_names(s.dims):
                if d not in names:
                    names.append(d)
        world = getattr(self.traced, "world", None)
        if world is not None and self.per_world:
            names += self._world_names()  # the counts are joined over them (shapes.flops.worlds)
        elif world is not None:
            used = set().union(*(sympy.sympify(e).free_symbols for e in (self.total, self.total_bytes,
                                                                          self.comm.total)))
            for sym in (world.size, world.rank):
                if isinstance(sym, sympy.Symbol) and sym.name not in names and (sym is world.size or sym in used):
                    names.append(sym.name)
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

    def _world_names(self) -> list:
        """The size names a report joined over world sizes is joined over (``W``, or a mesh's ``D``, ``T``)."""
        w = self.traced.world
        return [v for _, v, _ in w.mesh] if w.mesh else [w.name]

    def _off_world(self, given: dict) -> dict:
        """``given`` without the world sizes, for a report joined over them (its pieces have none)."""
        if not self.per_world:
            return given
        return {k: v for k, v in given.items() if k not in self._world_names()}

    def _subs(self, given: dict) -> dict:
        env = self.traced.env
        # A report joined over world sizes: each world size's own trace has no world symbol.
        return {env.symbols[k]: sympy.Integer(v) for k, v in given.items()}

    def piece_at(self, sizes: Mapping) -> "FlopReport":
        """The report of the path the program takes at ``sizes``: this one, or
        (where this trace's guards fail) a trace at those sizes, made once and
        kept in :attr:`pieces`.  Raises :class:`~shapes.errors.GuardViolation`
        where the program raises or a dim's range excludes the sizes."""
        from .pieces import piece_for
        given = self._given(sizes)
        if self.per_world:
            key = tuple(given[n] for n in self._world_names())
            rep = self.per_world.get(key)
            if rep is None:
                raise GuardViolation(f"{self.name} raises at {', '.join(f'{n}={given[n]}' for n in self._world_names())}"
                                     f" (or was not traced there)", values=given)
            return piece_for(rep, self._off_world(given))
        return piece_for(self, given)

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
            try:
                value = formula_text(v)
            except UnhandledExprKind:  # sympy's simplify may leave a kind the printer has no rule for
                value = str(v)
            raise SymshapeError(f"the count {formula_text(expr)} is {value} at these sizes: it depends on data "
                                f"({what})")
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
        if self.per_world:
            # That world size's own report, its own counts (the joined forms are the same there).
            same = {id(self.total): piece.total, id(self.useful): piece.useful, id(self.total_bytes): piece.total_bytes}
            return piece.evaluate(self._off_world(given), expr=None if expr is None else same.get(id(expr), expr))
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
            return piece.at(self._off_world(given))
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
            >>> f"{r.mfu({'N': 8192}, 0.001, 'a100:bf16').mfu:.3f}"
            '0.055'
        """
        from .mfu import mfu
        return mfu(self, sizes, seconds, peak_flops, count)

    def roofline(self, sizes: Mapping, peak_flops, link_bytes_per_s: float, model_flops=None):
        """A sharded step's time bound and MFU per device and global at ``sizes`` (the world size among
        them): :func:`shapes.flops.roofline.roofline`, whose module doc states each convention."""
        from .roofline import roofline
        return roofline(self, sizes, peak_flops, link_bytes_per_s, model_flops=model_flops)

    @property
    def compute_dtype(self):
        """The dtype of the program's FLOPs: that of its matmuls and convolutions (the first
        one's output), else of its first floating-point op; None without one.

        >>> import torch, shapes
        >>> shapes.count_flops(torch.nn.Linear(4, 4), "x: f32[N, 4]").compute_dtype
        torch.float32
        """
        heavy = ("mm", "bmm", "addmm", "baddbmm", "convolution", "_scaled_dot_product", "matmul", "linear")
        first = None
        for n in self.traced.graph.nodes:
            val = n.meta.get("val") if n.op == "call_function" else None
            if not isinstance(val, torch.Tensor) or not val.dtype.is_floating_point:
                continue
            if any(h in str(n.target) for h in heavy):
                return val.dtype
            first = first or val.dtype
        return first

    # -- presentation ---------------------------------------------------------------
    def table(self, sizes=None, width: int = 80) -> str:
        """A readable table (``width`` columns) of the ops as closed forms; with
        ``sizes`` (a dict, or a list of dicts), their values and intensity there."""
        return render_table(self, sizes, width)

    def module_table(self, sizes: Optional[Mapping] = None, depth: int = 2, width: int = 80) -> str:
        """FLOPs and bytes per module, down to ``depth`` levels below the root."""
        return render_modules(self, sizes, depth, width)

    def to_dict(self, sizes_list=()) -> dict:
        """A JSON-ready dict: expressions as strings, and exact values at each of ``sizes_list``."""
        d = {
            "program": self.name,
            "inputs": [str(s) for s in self.traced.specs],
            "dims": self.dims,
            "total_flops": formula_text(self.total),
            "total_bytes": formula_text(self.total_bytes),
            "mode": self.mode,
            "phases": {p: {"flops": formula_text(f), "bytes": formula_text(self.phase_bytes[p])} for p, f in self.phase_totals.items()},
            "useful_flops": formula_text(self.useful),
            "masked_attention": [{"where": m.where, "how": m.how, "mask": m.mask, "kept": formula_text(m.kept),
                                  "entries": formula_text(m.entries), "matmuls": len(m.nodes)} for m in self.masked_attention],
            "useful_notes": list(self.useful_notes),
            "ops": [{"op": c.op, "calls": c.calls, "kind": c.kind.value, "flops": formula_text(c.flops), "bytes": formula_text(c.bytes)}
                    for c in self.ops_in_order()],
            "by_module": {n: {"class": m.cls, "flops": formula_text(m.flops), "bytes": formula_text(m.bytes),
                              "intensity": _formula_or_none(m.intensity),
                              "by_op": {k: formula_text(v) for k, v in m.by_op.items()}} for n, m in self.by_module.items()},
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

    def ops_in_order(self) -> list:
        """The :class:`OpCost` s, counted ones first (then uncounted, zero, views), by name within each."""
        order = list(CostKind)
        return sorted(self.ops.values(), key=lambda c: (order.index(c.kind), c.op))

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return f"<FlopReport {self.name}: {formula_text(self.total)} FLOPs, {len(self.ops)} ops>"


def _formula_or_none(e):
    # JSON has no nan: a module that moves no bytes has no intensity (as ``_finite`` at a point).
    return None if e is sympy.nan else formula_text(e)


def _finite(x: float):
    return None if isinstance(x, float) and math.isnan(x) else x


def count_flops(program, *specs, dims=None, specialize_zero_one: bool = False, mode: str = "forward",
                optimizer=None, requires_grad=None, world=None) -> FlopReport:
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
        world: a symbolic world size's name (see :mod:`shapes.distributed`):
            FLOPs are then per rank, and :attr:`FlopReport.comm` counts the
            bytes each rank sends (:mod:`shapes.flops.comm`).

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
        from ..distributed import PerWorld
        if world is not None and isinstance(program, PerWorld):
            from .worlds import per_world_report
            return per_world_report(program, specs, dims, world, FlopReport, name=_name_of(program),
                                    specialize_zero_one=specialize_zero_one, **kw)
        traced = trace(program, *specs, dims=dims, specialize_zero_one=specialize_zero_one, world=world, **kw)
    return FlopReport(traced, name=_name_of(program))


def _name_of(program) -> str:
    if isinstance(program, torch.nn.Module):
        return type(program).__name__
    return getattr(program, "__name__", None) or type(program).__name__
