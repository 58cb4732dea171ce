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

import math  # noqa: F401 -- in __all__
import operator  # noqa: F401 -- in __all__
import os
import warnings
from typing import Optional

import sympy
import torch

import shapes
from shapes.errors import GuardViolation, SizeConflict, SpecError, SymshapeError
from shapes.example_sizes import trace_general
from shapes.layout_reads import strided_input
from shapes.spec import Dim, DimExpr, check_declared_values, parse_dims, parse_spec

from .branch_sizes import branch_sizes
from .repeated_shapes import repeated_shape
from .separable_resize import resize_modes
from .wrapper import Owned
from .variant import HOST_REWRITES, STATS, Variant


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
        #: ``traces``: every trace; of them ``retraces`` (the first trace again at larger automatic
        #: sizes, shapes.example_sizes) and ``branch_traces`` (sizes the program branches on,
        #: traced at compile time); the others are calls' sizes no variant served.
        self.stats = {"traces": 0, "variants": 0, "calls": 0, "retraces": 0, "branch_traces": 0}
        #: Where the program read a layout while traced (shapes.layout_reads), or None.
        self._layout_reads = None
        #: Where the program set torch's random generator while traced (shapes.rng_writes), or None.
        self._rng_write = None
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
        self.stats["retraces"] = max(0, self.stats["traces"] - 1)
        if _tp is None:
            before = self.stats["traces"]
            self._branches_ahead(device)
            self.stats["branch_traces"] = self.stats["traces"] - before

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
                self._add(self._trace(values, device), ahead=True)
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

    def _call_program(self, tensors, why: str, category):
        """The program itself on ``tensors`` (a call its trace does not serve: ``why``), said once."""
        self.stats["program_calls"] = self.stats.get("program_calls", 0) + 1
        if self.stats["program_calls"] == 1:
            warnings.warn(why, category, stacklevel=3)
        return self.program(*tensors)

    def _layout_fallback(self, tensors, name: str):
        return self._call_program(
            tensors, f"input {name} is not laid out as the trace's inputs are (contiguous, at offset 0) and the "
                     f"program read a layout while traced ({self._layout_reads.text()}): such calls run the "
                     f"program itself, uncompiled", LayoutFallback)

    def _rng_fallback(self, tensors):
        return self._call_program(
            tensors, f"the program sets torch's random generator ({self._rng_write.text()}), which its graph "
                     f"does not replay: every call runs the program itself, uncompiled, so its random values "
                     f"are eager's", RngFallback)

    def _add(self, tp, ahead: bool = False) -> Variant:
        """Compile ``tp`` as a new variant (``ahead``: traced before any call needs it, its
        kernel builds queued behind the others')."""
        if tp.layout_reads and self.__dict__.get("_layout_reads") is None:
            self._layout_reads = tp.layout_reads[0]
        if tp.rng_writes and self.__dict__.get("_rng_write") is None:
            self._rng_write = tp.rng_writes[0]
        v = Variant(tp, self.target, self.host_rewrites, self.cpp_calls, ahead=ahead)
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
                    raise SizeConflict(f"{s.name} has size {shape[k]} where the spec `{s}` fixes {d}")
            for k, i in named:
                n = shape[k]
                got = vals[i]
                if got is None:
                    vals[i] = int(n)
                elif got != n:
                    raise SizeConflict(f"dim {self.names[i]} is {got} and {n} in one call")
            for k, d in exprs:
                derived.append((d, int(shape[k]), f"{s.name}.shape[{k}]", s))
        if self._solve:
            by_symbol = self.variants[0].tp.bind_sizes(tensors)
            return tuple(int(by_symbol[sympy.Symbol(n, integer=True)]) for n in self.names)
        for d, n, where, s in derived:
            known = {m: vals[self.names.index(m)] for m in d.names}
            if d.evaluate(known) != n:
                given = ", ".join(f"{m}={v}" for m, v in known.items())
                raise SizeConflict(f"{where} is {n} but the spec `{s}` says it is {d} = {d.evaluate(known)} "
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
        if self._rng_write is not None:
            return self._rng_fallback(tensors)
        if self._layout_reads is not None:
            strided = strided_input(tensors, self.specs)
            if strided is not None:
                return self._layout_fallback(tensors, strided)
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


class RngFallback(UserWarning):
    """A compiled program runs its calls as the program itself: it set torch's random generator
    while traced (``torch.manual_seed``), which no node of its graph replays.

    >>> issubclass(RngFallback, UserWarning)
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


__all__ = ["compile", "CompiledProgram", "LayoutFallback", "RngFallback", "Variant", "STATS", "default_device", "math", "operator"]
