"""Every process-wide change symshape makes to torch while it traces, entered by one context manager.

A trace runs inside thread-local torch machinery (the Python dispatcher, the
recorder's dispatch mode, the creation mode): that needs no patch.  What
follows is *process-wide*: module flags, kernel tables and function
bindings every thread of the process sees.  :func:`tracing` applies all of
them, and only under :data:`LOCK`, a re-entrant process-wide lock, so two
traces in two threads run one after the other (each correct) and a trace
started inside a trace (same thread) just nests.  Code running eagerly in
*another* thread during a trace sees the patches too (they are
process-wide): is_compiling() is True there, for example.

| patch | why | since torch | undone by |
| --- | --- | --- | --- |
| ``torch.compiler._is_compiling_flag``, ``_is_exporting_flag`` (:func:`as_exporting`) | libraries take their trace-safe path (no ``.item()`` fast paths, ``torch._check`` rather than ``raise``) when ``is_compiling()``/``is_exporting()`` is True, as torch.export sets them | 2.11 | restoring the flags |
| ``torch.compiler.is_compiling``, ``is_exporting`` (:func:`as_exporting`) | wrapped to count the reads made from outside torch (:func:`library_flag_reads`): a trace that raises in a library's compile path after such a read is traced again on eager's path (``shapes.tracer.trace``) | 2.11 | rebinding the functions |
| ``OpOverload.py_kernels`` of the ops in ``eager_checks.dispatch.PY_KERNELS`` (:func:`eager_kernels`) | the Python kernels torch registers in front of the tracer differ from eager's kernel (shapes, checks); eager's take their place; ``scaled_dot_product_attention`` (CompositeImplicitAutograd) gets one that hands it whole to the tracer's mode (its math decomposition is not what eager runs), however the program bound the function | 2.11 | restoring each entry, clearing the dispatch cache |
| Meta ``py_kernels`` of composite ops with a decomposition, backward traces only (:func:`composite_autograd_on_meta`) | autograd must see the composite's decomposition, not a Meta kernel with no derivative | 2.11 | restoring them |
| the builtin ``scaled_dot_product_attention`` wherever a module bound it (``torch.nn.functional``, ``from torch.nn.functional import ...``) (:func:`sdpa_bool_flags`) | a decided size comparison passed as ``is_causal`` is a SymBool where eager has a bool; torch's argument parser rejects it *before* any TorchFunctionMode or dispatch mode sees the call, so only a Python wrapper bound where the program looks the name up can pass its value | 2.11 | rebinding the builtin |
| ``torch.Tensor.device``, ``is_cuda``, ``is_cpu``, ``is_meta``, ``get_device``, ``__repr__`` (``devices.ReportedDevice``, entered by the tracer inside :func:`tracing`) | the trace's meta tensors report the device the program will run on to the program's code (library code branches on it), as torch.export's fake tensors do; torch's kernels still see ``meta`` | 2.11 | restoring the class attributes |
| ``torch.Tensor.tolist`` on meta tensors (:func:`tolist_by_items`) | ``tolist()`` copies storage in C++, below the dispatcher, and a meta tensor has none; read element by element (``.item()``, which the tracer records as data reads) it gives the values symbolically, as torch.export's fake tensors do | 2.11 | rebinding the method |
| ``torch._debug_has_internal_overlap`` on meta tensors (:func:`overlap_by_strides`) | ``copy_``'s meta kernel asks it whether the written-to tensor overlaps itself; its C++ answers through contiguity templates whose size tests (``sizes[a] < 2``) reach the engine from ``SymInt.h``, unrecognizable as layout questions, so a slice assignment guarded ``B >= 2`` (Wan's rotary ``out[..., 0::2] = ...``); the same answer asked stride first (``stride == 0 and size > 1``) needs no size guard | 2.13 | rebinding the function |
| ``torch.fx.experimental._config.backed_size_oblivious``, off where a user set it (:func:`own_size_obliviousness`) | it is for torch's ShapeEnv; with it on, torch's reference kernels (``expand``) ask a SymInt's node for a hint through helpers that accept torch's ``SymNode`` only, and raise on symshape's | 2.11 | the config's own patch |
| global ``nn.Module`` forward hooks (``recorder.ModuleScope``, entered by the tracer inside :func:`tracing`) | which module emitted each node | 2.11 | removing the hooks |
| ``torch.distributed`` (and ``distributed_c10d``) ``is_initialized``, ``get_world_size``, ``get_rank``, the five modeled collectives, ``barrier``, the unmodeled c10d calls, ``_get_default_group``; ``_functional_collectives``' five; ``DeviceMesh.__init__`` and DTensor's ``OpDispatcher.dispatch`` (``shapes.distributed.open_world``, entered by the tracer inside :func:`tracing` for ``trace(..., world=)`` only) | the program runs against a symbolic world size in one process; what is not modeled raises a TracerLimitation rather than touching a real process group | 2.11 | restoring each attribute |

Example::

    >>> import torch
    >>> from shapes.torch_patches import tracing
    >>> with tracing():
    ...     torch.compiler.is_compiling()
    True
    >>> torch.compiler.is_compiling(), torch.nn.functional.scaled_dot_product_attention is SDPA
    (False, True)
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import types

import torch
import torch.compiler
from torch._C import DispatchKey

from .eager_checks.dispatch import PY_KERNELS

#: Held for the whole of every trace (re-entrant: a trace inside a trace nests).
LOCK = threading.RLock()

#: torch's builtin, whatever name a program bound it to.
SDPA = torch._C._nn.scaled_dot_product_attention

# The flags torch.export sets (torch >= 2.11 has both; older names are skipped).
_FLAGS = ("_is_compiling_flag", "_is_exporting_flag")
_MISSING = object()


@contextlib.contextmanager
def tracing(*, backward: bool = False, compile_path: bool = True):
    """Apply every patch of the table above (with ``backward``, the backward-only one too), under :data:`LOCK`.

    ``compile_path=False`` leaves torch's "am I compiled?" flags as eager has them (see :func:`as_exporting`).

    >>> with tracing():
    ...     with tracing():          # re-entrant in one thread
    ...         torch.compiler.is_exporting()
    True
    >>> with tracing(compile_path=False):
    ...     torch.compiler.is_exporting()
    False
    """
    with LOCK, contextlib.ExitStack() as stack:
        if compile_path:
            stack.enter_context(as_exporting())
        stack.enter_context(eager_kernels())
        stack.enter_context(sdpa_bool_flags())
        stack.enter_context(tolist_by_items())
        stack.enter_context(overlap_by_strides())
        if backward:
            stack.enter_context(composite_autograd_on_meta())
        stack.enter_context(own_size_obliviousness())
        yield


@contextlib.contextmanager
def own_size_obliviousness():
    """``torch.fx.experimental._config.backed_size_oblivious`` off while tracing.

    The flag tells torch's own ShapeEnv to treat backed sizes of 1 like unbacked ones; a user
    sets it so that dynamo captures one graph for size 1 and the other sizes.  torch's
    reference kernels (``expand``, views) then ask each SymInt's node for a hint through
    helpers that only know torch's ``SymNode`` and raise on any other node, symshape's
    :class:`~shapes.symnode.SymExprNode` included.  symshape answers size-1 questions its own
    way (:mod:`shapes.size_oblivious`), so the flag has nothing to do inside a trace; dynamo's
    capture, which it is for, has finished before a backend traces the captured graph.

    >>> import torch.fx.experimental._config as fx_config
    >>> with fx_config.patch(backed_size_oblivious=True), own_size_obliviousness():
    ...     fx_config.backed_size_oblivious
    False
    """
    from torch.fx.experimental import _config as fx_config
    if not getattr(fx_config, "backed_size_oblivious", False):
        yield
        return
    with fx_config.patch(backed_size_oblivious=False):
        yield


@contextlib.contextmanager
def as_exporting():
    """Answer torch's "am I being compiled/exported?" predicates with True.

    Libraries ask whether they are being traced and then take a trace-safe path
    (no ``.all()`` on a mask, no ``.item()`` for a fast path, ``torch._check``
    instead of ``if ...: raise``).  transformers' ``is_tracing`` /
    ``is_torchdynamo_compiling``, diffusers, and torch itself
    (``torch._dynamo.is_compiling``, ``torch._utils.is_compiling``) all end in
    ``torch.compiler.is_compiling()`` and ``torch.compiler.is_exporting()``,
    which read two module flags.  ``torch.export`` sets exactly those flags for
    the duration of a trace (``torch/_export/utils.py``,
    ``_compiling_state_context``); so does symshape, and restores them after.
    It does not claim ``torch.jit.is_tracing()`` or FX proxies: code behind
    those checks expects a TorchScript tracer or ``torch.fx.Proxy`` objects,
    which torch.export does not provide either.

    >>> with as_exporting():
    ...     torch.compiler.is_compiling(), torch.compiler.is_exporting()
    (True, True)
    >>> torch.compiler.is_compiling()
    False
    """
    mod = torch.compiler
    saved = {f: getattr(mod, f) for f in _FLAGS if hasattr(mod, f)}
    readers = {name: getattr(mod, name) for name in _READERS if hasattr(mod, name)}
    try:
        for f in saved:
            setattr(mod, f, True)
        for name, fn in readers.items():
            setattr(mod, name, _counted_read(fn))
        yield
    finally:
        for f, v in saved.items():
            setattr(mod, f, v)
        for name, fn in readers.items():
            setattr(mod, name, fn)


# The predicates libraries call; torch's own calls (nn.Module.__call__ reads one at every call) are not counted.
_READERS = ("is_compiling", "is_exporting")
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_library_reads = [0]


def _counted_read(fn):
    def read() -> bool:
        if not sys._getframe(1).f_code.co_filename.startswith(_TORCH_DIR):
            _library_reads[0] += 1
        return fn()
    read.__wrapped__ = fn
    return read


def library_flag_reads() -> int:
    """How many times code outside torch has asked ``torch.compiler.is_compiling()`` or ``is_exporting()``
    under :func:`as_exporting`, in this process so far.  A difference across a trace says the program's
    libraries chose a path by it (their compile path, which eager does not take).

    >>> before = library_flag_reads()
    >>> with as_exporting():
    ...     _ = torch.compiler.is_compiling()
    >>> library_flag_reads() - before
    1
    """
    return _library_reads[0]


@contextlib.contextmanager
def eager_kernels():
    """While tracing, the Python kernels of :data:`~shapes.eager_checks.dispatch.PY_KERNELS` are eager's.

    >>> op = torch.ops.aten.native_batch_norm.default
    >>> with eager_kernels():
    ...     DispatchKey.Autograd in op.py_kernels
    False
    """
    saved = []
    try:
        for op, table in PY_KERNELS.items():
            for key, fn in table.items():
                saved.append((op, key, op.py_kernels.get(key, _MISSING)))
                if fn is None:
                    op.py_kernels.pop(key, None)
                else:
                    op.py_kernels[key] = fn
            op._dispatch_cache.clear()
        yield
    finally:
        for op, key, fn in reversed(saved):
            if fn is _MISSING:
                op.py_kernels.pop(key, None)
            else:
                op.py_kernels[key] = fn
            op._dispatch_cache.clear()


@contextlib.contextmanager
def composite_autograd_on_meta():
    """Let autograd differentiate composite ops on meta tensors under the Python dispatcher.

    torch registers Python meta kernels for some CompositeImplicitAutograd ops
    (``nll_loss``, ...).  The Python dispatcher then resolves AutogradMeta to
    the autograd fallback instead of the composite kernel (it sees a "backend
    kernel"), so the op gets no backward formula and its gradient is silently
    lost.  While recording a backward pass those Meta kernels are set aside, so
    the composite decomposes above autograd as it does in eager mode.

    >>> op = torch.ops.aten.nll_loss.default
    >>> with composite_autograd_on_meta():
    ...     DispatchKey.Meta in op.py_kernels
    False
    >>> DispatchKey.Meta in op.py_kernels
    True
    """
    from torch._decomp import global_decomposition_table
    removed = []
    ops = {op for table in global_decomposition_table.values() for op in table}
    for op in ops:
        if (isinstance(op, torch._ops.OpOverload) and DispatchKey.Meta in op.py_kernels
                and torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")):
            removed.append((op, op.py_kernels.pop(DispatchKey.Meta)))
            _clear_dispatch_cache(op)
    try:
        yield
    finally:
        for op, fn in removed:
            op.py_kernels[DispatchKey.Meta] = fn
            _clear_dispatch_cache(op)


def _clear_dispatch_cache(op):
    cache = getattr(op, "_dispatch_cache", None)
    if cache is not None:
        cache.clear()


def sdpa_with_bool_flags(*args, **kwargs):
    """``scaled_dot_product_attention`` with a decided size comparison as ``is_causal`` passed as its bool.

    ``T > 1 and mask is None`` is a Python bool in eager, but with a symbolic
    ``T`` that is 1 Python's ``and`` returns the (false) comparison itself, a
    SymBool, which torch's argument parser rejects.  The comparison was
    already decided (a guard), so passing its value is what eager does.
    With other arguments it is the builtin itself.
    """
    if len(args) > 5 and isinstance(args[5], torch.SymBool):
        args = (*args[:5], bool(args[5]), *args[6:])
    if isinstance(kwargs.get("is_causal"), torch.SymBool):
        kwargs["is_causal"] = bool(kwargs["is_causal"])
    return SDPA(*args, **kwargs)


class _Bindings:
    """Where modules bound the builtin :data:`SDPA` (``from torch.nn.functional import
    scaled_dot_product_attention``), found by an incremental scan of ``sys.modules``:
    modules bind names at import, so each module is scanned once (the first scan of a
    process with transformers loaded takes ~10 ms)."""

    def __init__(self):
        self.scanned: set[str] = set()
        self.found: list[tuple[dict, str]] = []

    def update(self) -> list[tuple[dict, str]]:
        for name, mod in list(sys.modules.items()):
            if name in self.scanned:
                continue
            self.scanned.add(name)
            if not isinstance(mod, types.ModuleType) or name.startswith("torch._C") or name == __name__:
                continue  # torch._C._nn and this module hold the builtin the wrapper calls
            d = vars(mod)
            self.found.extend((d, k) for k, v in list(d.items()) if v is SDPA)
        return self.found


_BINDINGS = _Bindings()


@contextlib.contextmanager
def sdpa_bool_flags():
    """While tracing, every module-level binding of the SDPA builtin is :func:`sdpa_with_bool_flags`.

    A TorchFunctionMode cannot do this: the builtin's argument parser raises
    on a SymBool ``is_causal`` before torch looks for modes.  A binding the
    scan cannot see (a local alias, an attribute of an object) still fails
    with an :class:`~shapes.errors.UnsupportedOpError`, never a wrong result.

    >>> with sdpa_bool_flags():
    ...     torch.nn.functional.scaled_dot_product_attention is sdpa_with_bool_flags
    True
    """
    rebound = []
    try:
        for d, k in _BINDINGS.update():
            if d.get(k) is SDPA:
                d[k] = sdpa_with_bool_flags
                rebound.append((d, k))
        yield
    finally:
        for d, k in rebound:
            if d.get(k) is sdpa_with_bool_flags:
                d[k] = SDPA


_TOLIST = torch.Tensor.tolist


def _tolist(t):
    # The dispatch keys, not t.device: a trace's tensors report the program's device.
    if not torch._C._dispatch_keys(t).has(DispatchKey.Meta):
        return _TOLIST(t)
    if t.dim() == 0:
        return t.item()
    return [_tolist(row) for row in t.unbind(0)]


@contextlib.contextmanager
def tolist_by_items():
    """``Tensor.tolist`` of a meta tensor reads its elements one by one (see the table above).

    >>> with tolist_by_items():
    ...     torch.tensor([[1, 2]]).tolist()
    [[1, 2]]
    """
    torch.Tensor.tolist = _tolist
    try:
        yield
    finally:
        torch.Tensor.tolist = _TOLIST


_HAS_INTERNAL_OVERLAP = torch._debug_has_internal_overlap


def _internal_overlap(t) -> int:
    """c10's ``has_internal_overlap`` (0 No, 1 Yes, 2 TooHard), its size tests asked after the stride tests.

    Yes means some dim of more than one element has stride 0; a non-overlapping and dense
    tensor has no such dim, so asking for one first gives C++'s answer wherever it is Yes, and
    only a stride-0 dim asks about its size (``copy_`` checks for Yes only).  The No/TooHard
    split is torch's own Python test, a layout question answered without a size guard.
    """
    if not torch._C._dispatch_keys(t).has(DispatchKey.Meta):
        return _HAS_INTERNAL_OVERLAP(t)
    from torch._prims_common import is_non_overlapping_and_dense_or_false
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols, guard_or_false
    if free_unbacked_symbols(t.stride()):
        return 2  # as C++: strides read from data are too hard
    if any(guard_or_false(stride == 0) and guard_or_false(size > 1) for size, stride in zip(t.shape, t.stride())):
        return 1
    return 0 if is_non_overlapping_and_dense_or_false(t) else 2


@contextlib.contextmanager
def overlap_by_strides():
    """``torch._debug_has_internal_overlap`` of a meta tensor asks no size question unless a stride is 0
    (see the table above).

    >>> with overlap_by_strides():
    ...     x = torch.empty(3, 1, device="meta")
    ...     [torch._debug_has_internal_overlap(t) for t in (x.expand(3, 4), x.t(), x.expand(3, 4)[:, ::2])]
    [1, 0, 1]
    """
    torch._debug_has_internal_overlap = _internal_overlap
    try:
        yield
    finally:
        torch._debug_has_internal_overlap = _HAS_INTERNAL_OVERLAP
