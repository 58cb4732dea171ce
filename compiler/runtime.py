"""Compiled programs: guard checks, size binding, buffers, kernels and externs.

:func:`compile` traces a program once and returns a callable.  A call binds
the input sizes to the dim symbols, picks the compiled variant whose guards
hold (retracing and compiling a new variant only when none does), allocates
buffers from the symbolic shapes and runs the steps: fused kernels (C++ or
Triton) and ATen calls for everything the compiler does not lower.

Example::

    >>> import torch, compiler
    >>> f = compiler.compile(lambda x: torch.softmax(x * 2, -1), "x: f32[B, T]")
    >>> x = torch.randn(3, 5)
    >>> torch.allclose(f(x), torch.softmax(x * 2, -1), atol=1e-6)
    True
    >>> f(torch.randn(7, 33)).shape, f.stats["variants"]
    (torch.Size([7, 33]), 1)
"""
from __future__ import annotations

import builtins
import functools
import math
import operator
import os
import time
import warnings
from dataclasses import dataclass
from typing import Any, Optional

import sympy
import torch
from torch.utils import _pytree as pytree

import shapes
from shapes.errors import GuardViolation, SpecError, SymshapeError
from shapes.example_sizes import trace_general
from shapes.devices import DeviceMismatch
from shapes.guard import GuardKind
from shapes.layout_reads import strided_input
from shapes.program import violation_message
from shapes.spec import Dim, DimExpr, check_declared_values, parse_dims, parse_spec

from . import mask_proofs, sized_masks
from .attention import fuse_causal_attention
from .branch_sizes import branch_sizes
from .sdpa_calls import tune_calls
from .codegen import TARGETS
from .repeated_shapes import repeated_shape
from .exprs import compile_exprs
from .ir import BufferKind, Kernel, contiguous_strides
from .lowered import Ref, RefKind, Unsupported
from .lowering import lower
from .scheduler import schedule
from .separable_resize import resize_modes
from .padded_linear import padded_steps
from .row_buckets import bucketed_steps
from .view_folding import fold_views
from .view_chains import find_chains, traced_layouts
from .shared_masks import add_additive_forms, share_masks
from .wrapper import (DEVICE, Alloc, BufSlot, ExternStep, KernelStep, Owned, SizeSlot, bind_launches, launch_ats,
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


def _guard_fn(exprs, symbols):
    if not exprs:
        return lambda *a: True
    f = compile_exprs([sympy.And(*exprs)], symbols)
    return lambda *a: bool(f(*a)[0])


class Variant:
    """One trace compiled for the sizes where its guards hold."""

    def __init__(self, tp, target: str, host_rewrites: bool = True, cpp_calls: bool = True):
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
        env = tp.env
        self.symbols = [env.symbols[n] for n in sorted(env.symbols)]
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
            self.eager = True
            self.eager_reason = f"{type(e).__name__}: {e}"
            STATS["eager_variants"] += 1
            return
        self.kernels = [s for s in self.steps if isinstance(s, Kernel)]
        STATS["kernels"] += len(self.kernels)
        t1 = time.perf_counter()
        self.launchers = TARGETS[target].make_launchers(self.lp, self.steps)
        # Where compile seconds go (lowering + scheduling, kernel sources, kernel builds: warm_s).
        STATS["lower_s"] = STATS.get("lower_s", 0.0) + t1 - t0
        STATS["codegen_s"] = STATS.get("codegen_s", 0.0) + time.perf_counter() - t1
        # Every size class of every kernel is built now, in parallel: a later call at a new
        # size finds its kernels compiled (no stall at the first call of a size).  In worker
        # processes, those of the traced sizes (this call's) first, the rest in the background.
        t0 = time.perf_counter()
        STATS["warmed"] += TARGETS[target].warm(self.launchers, self._example_sizes())
        STATS["warm_s"] += time.perf_counter() - t0
        self._plan()

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
        # Half-precision CUDA matmuls at few row counts where enabled (compiler.row_buckets).
        plan = bucketed_steps(plan, getattr(self.tp.device, "type", None))
        # Reshapes of contiguous tensors as direct views (compiler.wrapper.straight_line): their shapes
        # and contiguous strides are size slots, made before the mask classes' slots follow them.
        self.views = _view_slots(plan, lp, slot)
        # Chains of views made as one direct view each (compiler.view_chains): their layouts' slots too.
        self._layouts = traced_layouts(self.tp.graph.nodes, lp.symbols)
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
        self._reader = None  # made at the first call (compiler.runtime._module_reader)

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
                             skip=frozenset(skip) | dropped, cpu_allocs=self.cpp_calls, views=views)

    def plan_at(self, classes: tuple) -> tuple:
        """``(plan, skip)``: the plan at these mask classes (dropped masks not passed) and the
        indices of its steps that only made them."""
        plan = sized_masks.without_masks(self.plan, self.masks, classes)
        return plan, sized_masks.droppable(plan, template_buffers(list(self.outputs), set()), self.masks, classes)


def default_device(target: str) -> torch.device:
    """The device a program compiled for ``target`` is first traced for: CUDA for Triton
    where a GPU runs it (not under ``TRITON_INTERPRET=1``), else the CPU.  A call on
    another device traces again for that device (:meth:`CompiledProgram.variant_for`).

    >>> default_device("cpp")
    device(type='cpu')
    """
    if target == "triton" and torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class CompiledProgram:
    """A callable serving every input size; see :func:`compile`.

    Each variant is traced for one device: the trace records where the program makes
    its tensors (``torch.arange(n, device=x.device)`` says ``cuda:0`` in a CUDA trace)
    and which device-dependent branches it took, so a variant serves only calls on its
    own device; inputs on another one get a variant traced for theirs.
    """

    def __init__(self, program, specs, dims, target, _tp=None, device=None, host_rewrites=None):
        self.program = program
        self.host_rewrites = HOST_REWRITES["on"] if host_rewrites is None else host_rewrites
        self.cpp_calls = HOST_REWRITES["cpp_calls"]
        self.specs = [parse_spec(s) for s in specs]
        self.dims = dict(dims or {})
        self.target = target
        self.variants: list[Variant] = []
        self.stats = {"traces": 0, "variants": 0, "calls": 0}
        #: Where the program read a layout while traced (shapes.layout_reads), or None.
        self._layout_reads = None
        # (shape, dtype, device) per input -> (variant, size values, bound launches, the dim values
        # while its sizes-only masks are not classified yet, else None).
        self._bound: dict = {}
        #: Indices of the inputs whose (shape, dtype) key the binding cache (None: all); a caller
        #: that has checked the others itself (the dynamo backend's guards) narrows it.
        self.key_inputs: Optional[list] = None
        names = []
        for s in self.specs:
            for d in s.dims:
                for n in (d.names if isinstance(d, DimExpr) else (d,) if isinstance(d, str) else ()):
                    if n not in names:
                        names.append(n)
        self.names = sorted(names)
        self._valued = [i for i, s in enumerate(self.specs) if s.values is not None]
        # Per spec, its dims by kind (bind() runs at every new shape: every decode step):
        # (rank, fixed (position, size), named (position, name index), expressions (position, DimExpr)).
        self._bind = [(len(s.dims), tuple((k, d) for k, d in enumerate(s.dims) if isinstance(d, int)),
                       tuple((k, self.names.index(d)) for k, d in enumerate(s.dims) if isinstance(d, str)),
                       tuple((k, d) for k, d in enumerate(s.dims) if isinstance(d, DimExpr)))
                      for s in self.specs]
        # Names that only expression dims give (T in "x: f32[B, 2*T]" alone) are solved for
        # by the trace's binder; the others are read directly and the expressions checked.
        plain = {d for s in self.specs for d in s.dims if isinstance(d, str)}
        self._solve = any(n not in plain for n in self.names)
        device = torch.device(device) if device is not None else default_device(target)
        if target == "cpp" and device.type != "cpu":
            raise SpecError(f"target 'cpp' builds kernels for CPU tensors; device={str(device)!r} needs "
                            f"target='triton'")
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", 0)  # what a CUDA tensor reports
        self._add(_tp if _tp is not None else self._trace(None, device))
        if _tp is None:
            self._branches_ahead(device)

    def _branches_ahead(self, device) -> None:
        """Trace now the variants for the sizes the program itself branches on.

        A size needs no variant of its own unless the program asks about it: transformers'
        masks ask ``if batch_size != position_ids.shape[0]`` (the guard ``B != 1``) and HF's ViT
        whether the image has exactly its trained patch count (``(H // 16) * (W // 16) != 196``),
        so a call at B = 1 or at 224 x 224 takes another Python path and needs another trace.
        Tracing it here (:mod:`compiler.branch_sizes` solves the guards), at the first variant's
        other sizes, moves that trace (seconds on a real model) from the call to compile time,
        where the first variant's kernels are being built anyway.  At most two; a program that
        refuses such a size is left to say so at a call there.
        """
        v0 = self.variants[0]
        hints = v0.tp.hints
        if any(m not in hints for m in self.names):
            return
        parsed = parse_dims(self.dims, self.names)
        bounds = {n: (d.min, d.max) for n, d in parsed.items()}
        for values in branch_sizes([g.expr for g in v0.tp.guards], list(self.names), hints, bounds):
            if any(v.tp.device == device and v.covers(values) for v in self.variants):
                continue
            try:
                self._add(self._trace(values, device))
            except SymshapeError:
                continue  # refused there (by the program or by symshape): a call there says why

    def _trace(self, values: Optional[tuple], device: torch.device):
        dims = dict(self.dims)
        parsed = parse_dims(self.dims, self.names)
        if values is not None:
            for n, v in zip(self.names, values):
                d = parsed.get(n, Dim(0))  # an undeclared dim takes any size, 0 included
                if not (d.min <= v <= d.max):
                    raise GuardViolation(f"dim {n} = {v} lies outside its range [{d.min}, {d.max}]")
        # Size 1 is a size: one trace serves B = 1 and B = 8 alike (shapes.size_oblivious answers
        # layout-only questions without a guard; a semantic one, such as broadcasting a size-1
        # dim, stays a guard and a call it rejects traces again).  Size 0 keeps its own variant:
        # kernels are not built for empty launches, so a general trace starts its ranges at 1.
        zero = values is not None and 0 in values
        for k, n in enumerate(self.names):
            d = parsed.get(n, Dim(0) if zero else Dim())
            v = None if values is None else values[k]
            if zero:
                dims[n] = Dim(d.min, d.max, v)
            elif d.min == 0 or v is not None:
                dims[n] = Dim(max(d.min, 1), d.max, d.hint if v is None else v)
        if values is None:
            # The first trace, at automatic example sizes: traced again at larger ones where those
            # pin a derived size to 0 or 1 (ViT's H // 16 at H=16), a variant no real call would use.
            # Each trace is counted; only the last one is compiled.
            return trace_general(self.program, *self.specs, dims=dims, specialize_zero_one=False, device=device,
                                 trace=self._counted_trace)
        return self._counted_trace(self.program, *self.specs, dims=dims, specialize_zero_one=zero, device=device)

    def _counted_trace(self, *args, **kw):
        STATS["traces"] += 1
        self.stats["traces"] += 1
        # Resizes traced as the matmuls they equal, not as torch's sixteen-gather decomposition.
        return shapes.trace(*args, function_modes=resize_modes(), **kw)

    def _call_program(self, tensors):
        """The program itself on ``tensors`` (a strided input where the program read a layout while
        traced: its trace holds for contiguous inputs only, :mod:`shapes.layout_reads`), said once."""
        self.stats["program_calls"] = self.stats.get("program_calls", 0) + 1
        if self.stats["program_calls"] == 1:
            name = strided_input(tensors, self.specs)
            warnings.warn(f"input {name} is not laid out as the trace's inputs are (contiguous, at offset 0) and "
                          f"the program read a layout while traced ({self._layout_reads.text()}): such calls run "
                          f"the program itself, uncompiled",
                          LayoutFallback, stacklevel=3)
        return self.program(*tensors)

    def _add(self, tp) -> Variant:
        if tp.layout_reads and self.__dict__.get("_layout_reads") is None:
            self._layout_reads = tp.layout_reads[0]
        v = Variant(tp, self.target, self.host_rewrites, self.cpp_calls)
        self.variants.append(v)
        STATS["variants"] += 1
        self.stats["variants"] += 1
        return v

    def bind(self, tensors) -> tuple:
        """The dim values of a call, in ``self.names`` order; expression dims checked or solved.

        >>> import torch, compiler
        >>> f = compiler.compile(lambda x, y: x[:, ::2] + y, "x: f32[B, 2*T]", "y: f32[B, T]")
        >>> f.bind((torch.randn(3, 8), torch.randn(3, 4)))
        (3, 4)
        """
        if len(tensors) != len(self.specs):
            raise SpecError(f"expected {len(self.specs)} input(s), got {len(tensors)}")
        vals = [None] * len(self.names)
        derived = []
        keyed = self.key_inputs
        # Inputs outside key_inputs were checked by the caller (dynamo's guards) and hold no dim.
        pairs = zip(tensors, self.specs, self._bind) if keyed is None else (
            (tensors[i], self.specs[i], self._bind[i]) for i in keyed)
        for t, s, (rank, fixed, named, exprs) in pairs:
            if not isinstance(t, torch.Tensor) or t.dim() != rank or t.dtype != s.dtype:
                raise SpecError(f"input {s.name} does not match the spec `{s}` "
                                f"(got {getattr(t, 'dtype', type(t).__name__)} {list(getattr(t, 'shape', []))})")
            shape = t.shape
            for k, d in fixed:
                if shape[k] != d:
                    raise GuardViolation(f"{s.name} has size {shape[k]} where the spec `{s}` fixes {d}")
            for k, i in named:
                n = shape[k]
                got = vals[i]
                if got is None:
                    vals[i] = int(n)
                elif got != n:
                    raise GuardViolation(f"dim {self.names[i]} is {got} and {n} in one call")
            for k, d in exprs:
                derived.append((d, int(shape[k]), f"{s.name}.shape[{k}]", s))
        if self._solve:
            by_symbol = self.variants[0].tp.bind_sizes(tensors)
            return tuple(int(by_symbol[sympy.Symbol(n, integer=True)]) for n in self.names)
        for d, n, where, s in derived:
            known = {m: vals[self.names.index(m)] for m in d.names}
            if d.evaluate(known) != n:
                given = ", ".join(f"{m}={v}" for m, v in known.items())
                raise GuardViolation(f"{where} is {n} but the spec `{s}` says it is {d} = {d.evaluate(known)} "
                                     f"({given})")
        return tuple(vals)

    def variant_for(self, values, device: Optional[torch.device] = None) -> Variant:
        """The variant serving dim ``values`` on ``device`` (default: the first variant's
        device), traced and compiled if none does."""
        device = self.variants[0].tp.device if device is None else device
        for v in self.variants:
            if v.tp.device == device and v.covers(values):
                return v
        return self._add(self._trace(values, device))

    def __call__(self, *tensors):
        if len(tensors) == 1 and tensors[0].__class__ is Owned:
            tensors = tensors[0]  # handed over: the run frees each input at its last use
        self.stats["calls"] += 1
        STATS["calls"] += 1
        if self._layout_reads is not None and strided_input(tensors, self.specs) is not None:
            return self._call_program(tensors)
        try:
            keyed = self.key_inputs
            # The device is part of the key: a binding checked for CPU tensors never serves CUDA ones.
            key = tuple([(t.shape, t.dtype, t.device) for t in tensors] if keyed is None else
                        [(tensors[i].shape, tensors[i].dtype, tensors[i].device) for i in keyed])
        except (AttributeError, IndexError):
            key = None  # not all tensors: bind() says what is wrong
        if self._valued and len(tensors) == len(self.specs):
            for i in self._valued:  # declared value ranges hold at every call, not a shape's first only
                if isinstance(tensors[i], torch.Tensor):
                    check_declared_values(self.specs[i], tensors[i])
        hit = self._bound.get(key)
        if hit is not None:
            # Guards, asserts and sizes depend on the shapes alone: computed once per shape.
            v, sizes, launches, pending, repeated = hit
            if not repeated:
                if pending is not None:
                    # The shape came back: now worth binding its launches and classifying its
                    # sizes-only masks (one sync).
                    sizes, bound = v.bind_sizes(pending)
                    launches = bound if launches is None else launches
                self._bound[key] = (v, sizes, launches, None, True)
                return v.run_bound(tensors, sizes, launches)
            if self.target != "triton":
                return v.run_bound(tensors, sizes, launches)
            # A shape met twice before: kernels that plan per shape (cuDNN's attention) may run.
            with repeated_shape():
                return v.run_bound(tensors, sizes, launches)
        values = self.bind(tensors)
        device = _device_of(tensors)
        # C++ builds take CPU tensors only (Variant.check_device refuses others, with no trace
        # for them); Triton variants are traced per device they run on.
        if self.target == "cpp" or device is None or device.type not in ("cpu", "cuda"):
            device = None
        v = self.variant_for(values, device)
        # A shape's first call passes masks as they are: classifying them costs a sync and
        # pays only where the shape repeats (a decoder's cache length never does).
        if v.eager:
            return v.run(tensors, values, classify=False)
        v.check_device(tensors)
        v.check_asserts(values)
        # A shape's first call computes its sizes once (kept for the shape's later calls) and
        # launches unbound (a training loop meets a new length at every step, a decode a new cache
        # length at every token); launches are bound where the shape comes back.
        unbound = v.launches_at(tuple(values[i] for i in v.sym_index))
        if unbound is not None:
            sizes, kept, later = v.sizes_at(tuple(values[i] for i in v.sym_index), classify=False), None, values
            out = v.run_bound(tensors, sizes, unbound)
        else:
            sizes, kept = v.bind_sizes(values, classify=False)
            later = values if v.masks and not v.all_proven else None
            out = v.run_bound(tensors, sizes, kept)
        if key is not None and len(self._bound) < 4096:
            self._bound[key] = (v, sizes, kept, later, False)
        return out


class LayoutFallback(UserWarning):
    """A compiled program ran a call as the program itself: a strided input, and a program that
    read a layout while traced (its trace holds for contiguous inputs only).

    >>> issubclass(LayoutFallback, UserWarning)
    True
    """


def _device_of(tensors) -> Optional[torch.device]:
    for t in tensors:
        if isinstance(t, torch.Tensor):
            return t.device
    return None


def compile(program, *specs, dims=None, target: str = "cpp", device=None) -> CompiledProgram:
    """Compile ``program`` for inputs matching ``specs`` (``"x: f32[B, T, 64]"``).

    ``target``: ``"cpp"`` (CPU tensors) or ``"triton"`` (CUDA tensors, or CPU
    under ``TRITON_INTERPRET=1``).  The result checks the guards of its trace
    on every call and retraces only when they fail; ``.stats`` counts traces
    and compiled variants.  ``device``: the device the program is first traced
    for (default :func:`default_device`); a call on another device traces again.
    """
    if target not in ("cpp", "triton"):
        raise ValueError(f"target must be 'cpp' or 'triton', got {target!r}")
    return CompiledProgram(program, specs, dims, target, device=device)


__all__ = ["compile", "CompiledProgram", "LayoutFallback", "Variant", "STATS", "default_device", "math", "operator"]
