"""A compiled variant: one trace of a program, lowered, scheduled and code-generated for the sizes
where its guards hold.

:class:`Variant` holds the trace, its plan (fused kernels and ATen calls), the compiled wrapper that
runs the plan, and the checks a call at new sizes needs (guards, runtime asserts, the device);
:class:`~compiler.runtime.CompiledProgram` picks the variant whose guards hold at a call's sizes.

Example::

    >>> import torch, compiler
    >>> f = compiler.compile(lambda x: (x * 2).relu(), "x: f32[N]")
    >>> v = f.variants[0]
    >>> v.covers((5,)), len(v.plan) >= 1
    (True, True)
"""
from __future__ import annotations

import builtins
import functools
import operator
import time
from typing import Any, Optional

import sympy
import torch
from torch.utils import _pytree as pytree

from shapes.errors import GuardViolation
from shapes.devices import DeviceMismatch
from shapes.guard import GuardKind
from shapes.program import violation_message

from . import mask_proofs, row_buckets, sized_masks
from .attention import fuse_causal_attention
from .sdpa_calls import tune_calls
from .codegen import TARGETS
from .exprs import compile_exprs
from .ir import BufferKind, Kernel, contiguous_strides
from .lowered import Ref, RefKind, Unsupported
from .lowering import lower
from .scheduler import schedule
from .padded_linear import padded_steps
from .half_gemm import training_matmuls
from .view_folding import fold_views
from .view_chains import find_chains, traced_dense, traced_layouts
from .shared_masks import add_additive_forms, share_masks
from .wrapper import (DEVICE, Alloc, BufSlot, ExternStep, KernelStep, SizeSlot, bind_launches, launch_ats,
                      launches_from, linear_calls, straight_line, template_buffers)

#: Whether programs compiled from now on get the host-time rewrites (compiler.view_folding,
#: compiler.shared_masks) by default; off only to measure them against the plain plan in one
#: process (bench/host_ab.py).  Each program keeps the value it was made with.
#: ``cpp_calls``: C++ variants allocate kernel buffers with the CPU allocator (no dispatcher) and
#: bind their launches' size arrays once per shape (compiler.codegen.cpp); off only to measure
#: that against the generic calls in one process (bench/train_interleaved_cpu.py --ab).
HOST_REWRITES = {"on": True, "cpp_calls": True}

#: Process-wide counters: traces, compiled variants, kernels built, calls.
STATS = {"traces": 0, "variants": 0, "kernels": 0, "calls": 0, "eager_variants": 0, "warmed": 0, "warm_s": 0.0}


def _attr_reader(target: str):
    """``mod -> mod.<target>`` for a parameter or buffer path (``blocks.0.fc.weight``).

    The module holding it is found once per root module; each call then reads its
    ``_parameters``/``_buffers`` dict, so a parameter replaced or moved later is seen,
    without ``nn.Module.__getattr__`` at every level of the path on every call.
    """
    *path, leaf = target.split(".")
    owner = operator.attrgetter(".".join(path)) if path else (lambda m: m)
    memo: dict = {}

    def read(mod):
        got = memo.get(id(mod))
        if got is None or got[0] is not mod:
            got = memo[id(mod)] = (mod, owner(mod))
        holder = got[1]
        d = holder.__dict__
        v = d["_parameters"].get(leaf) if "_parameters" in d else None
        if v is None and "_buffers" in d:
            v = d["_buffers"].get(leaf)
        return v if v is not None else getattr(holder, leaf)
    return read


def _module_reader(targets, fixed_at):
    """``read(mod, fixed) -> list``: each of ``targets`` (parameter/buffer paths, ``None`` at the
    positions ``fixed_at`` that take ``fixed[i]``) read from ``mod`` in one generated function.

    Each submodule on a path is looked up in its parent's ``_modules`` dict and each leaf in its
    holder's ``_parameters`` or ``_buffers`` dict (where it was when the reader was made), at
    every call: a parameter replaced, a buffer moved by ``.to()``, a submodule swapped are all
    seen, at about 40 ns a lookup where ``_attr_reader`` pays about 1 us a path (71 paths in a
    4-layer BERT: 150 us of the H100 host's time per call).  A lookup that fails (a leaf moved
    elsewhere or set to ``None``, a module gone) raises ``LookupError``: the caller then reads
    with ``_attr_reader``, as before.

    >>> m = torch.nn.Sequential(torch.nn.Linear(2, 3))
    >>> read = _module_reader(["0.weight", None, "0.bias"], {1})
    >>> [getattr(t, "shape", t) for t in read(m, [None, "k", None])]
    [torch.Size([3, 2]), 'k', torch.Size([3])]
    >>> m[0].bias = torch.nn.Parameter(torch.zeros(3)); read(m, [None, 0, None])[2].tolist()
    [0.0, 0.0, 0.0]
    """
    lines, names, made = ["def read(m, F):"], {}, {(): "m"}

    def holder(path):
        if path not in made:
            parent = holder(path[:-1])
            made[path] = name = f"h{len(made)}"
            lines.append(f"    {name} = {parent}._modules[{path[-1]!r}]")
        return made[path]

    items = []
    for i, t in enumerate(targets):
        if i in fixed_at or t is None:
            items.append(f"F[{i}]")
            continue
        *path, leaf = t.split(".")
        h = holder(tuple(path))
        names.setdefault(t, f"v{len(names)}")
        lines.append(f"    {names[t]} = {h}.__dict__['_parameters'].get({leaf!r})")
        lines.append(f"    if {names[t]} is None: {names[t]} = {h}.__dict__['_buffers'][{leaf!r}]")
        lines.append(f"    if {names[t]} is None: raise LookupError({t!r})")
        items.append(names[t])
    lines.append(f"    return [{', '.join(items)}]")
    ns: dict = {}
    # builtins.compile: this module's own compile() is symshape's.
    exec(builtins.compile("\n".join(lines) + "\n", "<symshape module reader>", "exec"), ns)  # noqa: S102
    return ns["read"]


def view_as_traced(x, size):
    """ATen's ``view`` as a compiled program's extern: a view where the layout allows one,
    else a copy in that shape.  The trace takes layouts from torch's meta kernels; an
    eager kernel may return another (``native_batch_norm_backward`` keeps its input's
    strides), where ``view`` would fail on values the trace shows it can reshape.

    >>> view_as_traced(torch.arange(6).reshape(2, 3).t(), [6]).tolist()
    [0, 3, 1, 4, 2, 5]
    """
    return x.reshape(size)


def _template(a, slot):
    """An extern argument with its :class:`Ref` s as plan slots (sizes through ``slot(expr)``)."""
    if isinstance(a, Ref):
        if a.kind is RefKind.SIZE:
            return SizeSlot(slot(a.value))
        if a.kind is RefKind.BUF:
            return BufSlot(a.value)
        return DEVICE
    if isinstance(a, (list, tuple)) and not hasattr(a, "_fields"):
        return type(a)(_template(x, slot) for x in a)
    if isinstance(a, dict):
        return {k: _template(v, slot) for k, v in a.items()}
    return a


def _view_slots(plan, lp, slot) -> dict:
    """Per output of a ``view_as_traced`` step whose traced shape is known in the kernels' size
    symbols: ``(shape slots, contiguous stride slots)`` (``slot(expr)`` gives an expression's slot)."""
    known = set(lp.symbols)
    out = {}
    for st in plan:
        if not isinstance(st, ExternStep) or getattr(st.target, "__name__", None) != "view_as_traced":
            continue
        buf = lp.buffers.get(st.out)
        shape = getattr(buf, "shape", None)
        if shape is None or not all(isinstance(d, (int, sympy.Expr)) and sympy.sympify(d).free_symbols <= known
                                    for d in shape):
            continue
        out[st.out] = (tuple(slot(d) for d in shape), tuple(slot(x) for x in contiguous_strides(shape)))
    return out


def flat_unflatten(spec):
    """``leaves -> structure`` for pytree ``spec``: direct for one leaf or a flat tuple or list.

    >>> import torch.utils._pytree as pytree
    >>> leaves, spec = pytree.tree_flatten((1, 2, 3))
    >>> flat_unflatten(spec)([4, 5, 6]), flat_unflatten(pytree.tree_flatten([1, (2,)])[1])([7, 8])
    ((4, 5, 6), [7, (8,)])
    """
    if spec.is_leaf():
        return lambda leaves: leaves[0]
    # torch 2.13 deprecates ``children_specs`` for ``children()``; 2.11 (the GPU machine's) may lack the method.
    children = spec.children() if callable(getattr(spec, "children", None)) else spec.children_specs
    if all(c.is_leaf() for c in children):
        if spec.type is tuple:
            return tuple
        if spec.type is list:
            return list
    return lambda leaves: pytree.tree_unflatten(leaves, spec)


def _dense_values(layouts: dict) -> frozenset:
    """Names of the values the trace saw contiguous (``layouts``: :func:`traced_layouts`): where one
    is a caller's strided input or its view, the ATen ops reading it take it dense
    (:func:`compiler.wrapper.straight_line`).

    >>> N = sympy.Symbol("N", positive=True)
    >>> sorted(_dense_values({"x": ((N, 4), (4, 1), 0), "xt": ((4, N), (1, 4), 0)}))
    ['x']
    """
    return frozenset(n for n, (shape, strides, _) in layouts.items() if traced_dense(shape, strides))


def _guard_fn(exprs, symbols):
    if not exprs:
        return lambda *a: True
    f = compile_exprs([sympy.And(*exprs)], symbols)
    return lambda *a: bool(f(*a)[0])


class Variant:
    """One trace compiled for the sizes where its guards hold."""

    def __init__(self, tp, target: str, host_rewrites: bool = True, cpp_calls: bool = True, ahead: bool = False):
        self.tp = tp
        self.target = target
        self.host_rewrites = host_rewrites
        #: C++ kernels' buffers from the CPU allocator, their launches bound once per shape.
        self.cpp_calls = cpp_calls and target == "cpp"
        #: The device type this variant's kernels were built for; None: the tensors' own (Triton
        #: compiles per device at launch).  C++ kernels read host memory, so they take CPU tensors
        #: only.  A property of the build, checked by :meth:`run` (the uncached path): the binding
        #: cache's key holds the device, so a cached call never needs the check.
        self.device_type = "cpu" if target == "cpp" else None
        #: A training step's graph (AOTAutograd's forward or backward): run under no_grad, its
        #: outputs are saved activations and gradients, never views a caller's autograd tracks.
        self.training = row_buckets.planning_training()
        env = tp.env
        # The input dims, in the order the caller binds them (CompiledProgram.names): a symbol
        # for data (``.item()``, ``nonzero``'s count) is no argument of the guards or sizes.
        self.symbols = [env.symbols[n] for n in sorted(env.symbols) if env.symbols[n] not in env.unbacked]
        guards = [g.expr for g in env.constraints + env.records if g.kind is not GuardKind.RUNTIME_ASSERT
                  and g.expr.free_symbols <= set(self.symbols)]
        # The program's own asserts and eager's size limits (storage size within int64):
        # where one fails eager raises, so the compiled program refuses those sizes too.
        asserts = [g for g in env.records + env.limits if g.kind is GuardKind.RUNTIME_ASSERT
                   and g.expr.free_symbols <= set(self.symbols)]
        self.holds = _guard_fn(guards, self.symbols)
        self.asserts = [(g, _guard_fn([g.expr], self.symbols)) for g in asserts]
        self.eager = False
        #: Why this variant runs its graph with ATen rather than compiled kernels (None: it does not).
        self.eager_reason = None
        self.fused_attention = fuse_causal_attention(tp)
        self.sdpa_calls = tune_calls(tp, target)
        TARGETS[target].prestart()  # kernel-build workers start while the program lowers
        t0 = time.perf_counter()
        try:
            self.lp = lower(tp)
            # A boolean mask shared by SDPA calls: its additive form stored by the kernel that makes
            # it (compiler.shared_masks), where the shared form is used (Triton, with the host rewrites).
            self.additive = add_additive_forms(self.lp) if target == "triton" and host_rewrites else {}
            self.steps = schedule(self.lp)
        except (Unsupported, ZeroDivisionError) as e:
            # Data-dependent sizes, or a variant specialized to size 0 whose index remaps
            # divide by that 0 (nothing to compute): run the graph with ATen (still correct).
            self._run_with_aten(e)
            return
        self.kernels = [s for s in self.steps if isinstance(s, Kernel)]
        t1 = time.perf_counter()
        try:
            self.launchers = TARGETS[target].make_launchers(self.lp, self.steps)
        except ZeroDivisionError as e:  # the same, met where kernel sources print their indexes
            self._run_with_aten(e)
            return
        STATS["kernels"] += len(self.kernels)
        # Where compile seconds go (lowering + scheduling, kernel sources, kernel builds: warm_s).
        STATS["lower_s"] = STATS.get("lower_s", 0.0) + t1 - t0
        STATS["codegen_s"] = STATS.get("codegen_s", 0.0) + time.perf_counter() - t1
        # Every size class of every kernel is built now, in parallel: a later call at a new
        # size finds its kernels compiled (no stall at the first call of a size).  In worker
        # processes, those of the traced sizes (this call's) first, the rest in the background.
        # A variant traced ahead of any call (``ahead``: a size the program branches on) has no
        # call waiting: its builds queue behind the ones already there, none first.
        t0 = time.perf_counter()
        STATS["warmed"] += TARGETS[target].warm(self.launchers, None if ahead else self._example_sizes())
        STATS["warm_s"] += time.perf_counter() - t0
        self._plan()

    def _run_with_aten(self, why: Exception) -> None:
        self.eager = True
        self.eager_reason = f"{type(why).__name__}: {why}"
        STATS["eager_variants"] += 1

    def _example_sizes(self):
        """The kernels' size symbols at the traced sizes (the call being compiled), or None."""
        try:
            return tuple(int(self.tp.env.hint_of(s)) for s in self.lp.symbols)
        except (TypeError, ValueError):  # a size that depends on data: no priority
            return None

    # -- planning: everything symbolic is turned into index lookups once --------------
    def _plan(self):
        lp = self.lp
        exprs: dict[Any, int] = {}

        def slot(e):
            e = sympy.sympify(e)
            if e not in exprs:
                exprs[e] = len(exprs)
            return exprs[e]

        def tmpl(a):
            return _template(a, slot)

        plan = []
        for s in self.steps:
            if isinstance(s, Kernel):
                names = self.launchers[s.name][0]
                # A store may see its buffer permuted (the scheduler loops in memory order):
                # the allocation keeps the buffer's own shape and strides.
                writes = [lp.buffers.get(b.name, b) for b, *_ in s.inner_stores + s.row_stores]
                allocs = [Alloc(b.name, tuple(slot(x) for x in b.shape), tuple(slot(x) for x in b.strides), b.dtype)
                          for b in writes]
                contig = tuple(lp.buffers[n].kind is not BufferKind.KERNEL for n in names)
                plan.append(KernelStep(self.launchers[s.name][1], tuple(names), tuple(allocs), contig, kernel=s))
            else:
                out = s.out.name if hasattr(s.out, "name") else s.out.value
                target = TARGETS[self.target].extern_call(s.target, getattr(s.out, "dtype", None))
                if target is torch.ops.aten.view.default:
                    target = view_as_traced
                plan.append(ExternStep(target, tmpl(s.args), tmpl(s.kwargs), out))
        self.outputs = [tmpl(o) for o in lp.outputs]
        plan = linear_calls(plan, self.outputs)
        # Repeated views made once, reshape chains as one reshape (compiler.view_folding).
        if self.host_rewrites:
            plan = fold_views(plan, self.outputs)
        # Half-precision linears of odd static width run on a padded weight (compiler.padded_linear).
        plan = padded_steps(plan, lp.buffers, getattr(self.tp.device, "type", None))
        # Training graphs' half-precision CUDA matmuls at few row counts (compiler.row_buckets), or on
        # the Triton GEMM where opted in (compiler.half_gemm).
        plan = training_matmuls(plan, getattr(self.tp.device, "type", None))
        # Reshapes of contiguous tensors as direct views (compiler.wrapper.straight_line): their shapes
        # and contiguous strides are size slots, made before the mask classes' slots follow them.
        self.views = _view_slots(plan, lp, slot)
        # Chains of views made as one direct view each (compiler.view_chains): their layouts' slots too.
        self._layouts = traced_layouts(self.tp.graph.nodes, lp.symbols)
        self._dense_as_traced = _dense_values(self._layouts)
        self._starts = {b.name for b in lp.inputs} | {b.name for b, _ in lp.consts}
        find_chains(plan, self.outputs, self._layouts, self._starts, slot)
        self._slots = exprs
        # SDPA masks made from sizes alone: classified per size, then causal or dropped
        # (compiler.sized_masks); their classes follow the size slots in the sizes tuple.
        outside = {b.name for b in lp.inputs} | {b.name for b, _ in lp.consts}
        self.masks = sized_masks.find(plan, outside, lp.buffers, slot)
        self.plan = plan = sized_masks.rewrite(plan, self.masks, len(exprs))
        sdpa = TARGETS[self.target].extern_call(torch.ops.aten.scaled_dot_product_attention.default, None)
        if self.host_rewrites and getattr(sdpa, "__name__", None) == "sdpa_without_cudnn":
            # One boolean mask read by several SDPA steps: converted once per run (compiler.shared_masks,
            # which mirrors ATen's conversion for the kernels SDPA chooses among without cuDNN).
            # A sizes-only mask's kernel may be skipped (compiler.sized_masks): its form is not passed.
            sized = {m.mask for m in self.masks}
            plan = self.plan = share_masks(plan, lp.buffers, sdpa,
                                           {m: a for m, a in self.additive.items() if m not in sized})
        self._classifier = None
        # Masks whose class holds at every size (compiler.mask_proofs) need no classification:
        # a decode step runs unmasked attention at its first call, without a sync.
        self.proven = mask_proofs.proven_classes(self.tp, self.masks, list(exprs))
        #: The classes a shape's first call runs at: the proved ones, else KEEP (the mask as it is).
        self.fixed_classes = tuple(sized_masks.MaskClass.KEEP if c is None else c for c in self.proven)
        self.all_proven = all(c is not None for c in self.proven)
        #: The size slots' expressions (slot i is ``size_exprs[i]``), and their compiled function.
        self.size_exprs = list(exprs)
        self.size_fn = compile_exprs(self.size_exprs, lp.symbols)
        self.sym_index = [self.symbols.index(s) for s in lp.symbols]
        self.source, self.fn = self._straight(plan)
        self._fns = {(sized_masks.MaskClass.KEEP,) * len(self.masks): self.fn}
        # Trace-time constants are fixed (moved to a device once); parameters and buffers are
        # read from the module on every call, so updates and moves are seen.
        self.const_getters = [(self.tp.constants.get(t), _attr_reader(t)) for _, t in lp.consts]
        self.const_cache: dict = {}
        self._reader = None  # made at the first call (_module_reader)

    def consts(self, device) -> list:
        """The program's constants and parameters on ``device``, in the lowered program's order."""
        return self._consts(device)

    def _consts(self, device):
        fixed = self.const_cache.get(device)
        if fixed is None:
            fixed = self.const_cache[device] = [c.to(device) if c is not None else None
                                                for c, _ in self.const_getters]
            self.all_fixed = all(c is not None for c in fixed)
        if self.all_fixed:
            return fixed
        mod = self.tp.program if isinstance(self.tp.program, torch.nn.Module) else None
        if mod is not None:
            if self._reader is None:
                self._reader = _module_reader([t for _, t in self.lp.consts],
                                              {i for i, (c, _) in enumerate(self.const_getters) if c is not None})
            try:
                return self._reader(mod, fixed)
            except (LookupError, AttributeError, TypeError):
                pass  # a path the reader's lookups do not find: read it as nn.Module's getattr does
        return [f if f is not None else get(mod) for f, (_, get) in zip(fixed, self.const_getters)]

    def covers(self, values: tuple) -> bool:
        """Whether this variant's guards hold at ``values`` (in ``self.symbols`` order)."""
        try:
            return bool(self.holds(*values))
        except ZeroDivisionError:  # see run(): the engine's evaluation decides
            bad = self.tp.failing_guards(dict(zip(self.symbols, values)))
            return not [g for g in bad if g.kind is not GuardKind.RUNTIME_ASSERT]

    def check_asserts(self, values: tuple):
        """Raise :class:`GuardViolation` where a runtime assert fails at ``values``."""
        for g, ok in self.asserts:
            try:
                held = ok(*values)
            except ZeroDivisionError:
                # Python's and/or ran in printed order into a zero divisor: decide it the
                # engine's way (a defined operand decides; undefined otherwise, so it fails).
                held = g not in self.tp.failing_guards(dict(zip(self.symbols, values)), constraints=False)
            if not held:
                at = dict(zip(self.symbols, values))
                raise GuardViolation(violation_message(g, at), guard=g, values=at)

    def check_device(self, tensors) -> None:
        """Refuse tensors on a device other than the one this variant was built for (a CUDA
        or meta tensor read by C++ kernels through a device pointer), with a typed error."""
        if self.device_type is None:
            return
        if self.device_type == "cpu" and all(t.is_cpu for t in tensors if isinstance(t, torch.Tensor)):
            return  # the common case, without a device object per tensor (~1 us each)
        for t, spec in zip(tensors, self.tp.specs):
            if isinstance(t, torch.Tensor) and t.device.type != self.device_type:
                raise DeviceMismatch(
                    f"input {spec.name} is on {t.device}, but this program was compiled for target "
                    f"'{self.target}', whose kernels run on {self.device_type.upper()} tensors: pass "
                    f"{self.device_type.upper()} tensors, or compile with target='triton' for {t.device.type} tensors")

    def run(self, tensors, values: tuple, classify: bool = True):
        """Run on real tensors; ``values`` are the dim values in ``self.symbols`` order
        (``classify``: see :meth:`sizes_at`)."""
        self.check_device(tensors)
        self.check_asserts(values)
        if self.eager:
            return self.tp.run(*tensors)
        return self.run_bound(tensors, *self.bind_sizes(values, classify))

    def bind_sizes(self, values: tuple, classify: bool = True) -> tuple:
        """``(size values, launches)`` at dim ``values``: what :meth:`run_bound` takes."""
        kvals = tuple(values[i] for i in self.sym_index)
        return self.sizes_at(kvals, classify), bind_launches(self.plan, kvals, bound=self.cpp_calls or self.target != "cpp")

    def launches_at(self, kvals: tuple) -> Optional[tuple]:
        """One ``launch(buffers)`` per kernel step at the kernels' dim values ``kvals``, unbound
        (:func:`~compiler.wrapper.unbound_launches`): for a shape's first call, since a training
        loop or a decode meets a new shape at nearly every call.  None where a kernel has no such
        launch (C++ kernels)."""
        return launches_from(self._launch_ats, lambda: kvals)

    @functools.cached_property
    def _launch_ats(self) -> Optional[tuple]:
        return launch_ats(self.plan)

    def sizes_at(self, kvals: tuple, classify: bool = True) -> tuple:
        """The sizes tuple at the kernels' dim values ``kvals``: the size slots, then the class
        of each sizes-only mask (computed once per size; all ``KEEP`` without ``classify``)."""
        sizes = self.size_fn(*kvals)
        if not self.masks:
            return sizes
        if not classify or self.all_proven:
            return (*sizes, *self.fixed_classes)
        if self._classifier is None:
            self._classifier = sized_masks.MaskClassifier(self.plan, self.masks, self.tp.device)
        got = self._classifier.classes(kvals, sizes)
        return (*sizes, *(c if p is None else p for p, c in zip(self.proven, got)))

    def run_bound(self, tensors, sizes, launches):
        """Run with the size values and bound launches of :meth:`bind_sizes` (asserts checked)."""
        device = tensors[0].device if tensors else torch.device("cpu")
        fn = self.fn if not self.masks else self._fn_for(sizes[len(sizes) - len(self.masks):])
        leaves = fn(tensors, sizes, launches, self._consts(device), device)
        return self.unflatten(leaves)

    @functools.cached_property
    def unflatten(self):
        """The outputs' structure from the leaves a run returns: a flat tuple or list of tensors
        (a training graph's ~50 outputs) or one tensor without pytree's per-leaf recursion
        (about 1.3 us a leaf on this machine's host), else ``pytree.tree_unflatten``."""
        return flat_unflatten(self.tp.out_spec)

    def _fn_for(self, classes: tuple):
        """The straight-line run at these mask classes: the steps that only made dropped masks left out."""
        fn = self._fns.get(classes)
        if fn is None:
            plan, skip = self.plan_at(classes)
            fn = self._fns[classes] = self._straight(plan, skip)[1]
        return fn

    def _straight(self, plan, skip=frozenset()) -> tuple:
        """:func:`~compiler.wrapper.straight_line` of ``plan``, its view chains made as direct views."""
        lp = self.lp
        plan, ends, dropped = find_chains(plan, self.outputs, self._layouts, self._starts,
                                          lambda e: self._slots[sympy.sympify(e)])
        views = dict(self.views)
        views.update({name: (e.layout.shape, e.layout.strides) + ((e.layout.offset,) if e.layout.offset is not None
                                                                   else ()) for name, e in ends.items()})
        return straight_line(plan, [b.name for b in lp.inputs], [b.name for b, _ in lp.consts], self.outputs,
                             skip=frozenset(skip) | dropped, cpu_allocs=self.cpp_calls, views=views,
                             untracked_outputs=self.training,
                             # AOTAutograd traced a training graph at its inputs' own strides: the
                             # layout steps eager takes for them are nodes of it, and a dense copy
                             # would take another kernel path (embedding_bag's: other output sizes).
                             dense_as_traced=frozenset() if self.training else self._dense_as_traced)

    def plan_at(self, classes: tuple) -> tuple:
        """``(plan, skip)``: the plan at these mask classes (dropped masks not passed) and the
        indices of its steps that only made them."""
        plan = sized_masks.without_masks(self.plan, self.masks, classes)
        return plan, sized_masks.droppable(plan, template_buffers(list(self.outputs), set()), self.masks, classes)


__all__ = ["Variant", "STATS", "HOST_REWRITES", "view_as_traced", "flat_unflatten"]
