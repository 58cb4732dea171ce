"""Half-precision matmuls on CUDA at few row counts: rows rounded up to a bucket.

cuBLAS's first call at a row count it has not met costs milliseconds of host time
in bf16 on the H100 (2.4-2.9 ms against 80-110 us for a repeated one:
``bench/mm_first_call.py``, bench/results/mm_first_call_h100_train4_2026-11-26.txt),
where fp32 costs ~40 us: a training run whose sequence length changes every step
meets new ``M = batch * T`` in every linear, forward and input gradient, at every
step.  :func:`linear`, :func:`mm` and :func:`addmm` run the call on the rows
rounded up to :func:`bucket` (at most 1/8 more rows, eight buckets per octave), the
extra rows left unset, and return the first ``M`` rows: each output row of a matmul
reads only its own input row, so the result is the unpadded call's up to cuBLAS's
choice of kernel (a kernel chosen for the padded shape), and no extra row reaches
a sum.  Weight gradients, whose contraction runs over ``M`` (a new length at every
step too, ~100-250 us of first-call host time each), run on the contraction rounded
up with zeros in both operands (:func:`mm_padded_contraction`: each extra product is
0) where the copies are small (:data:`K_COPY_BYTES`).

Only on CUDA tensors of half types, and by default only in training graphs (the
backend's forward and backward, planned inside :func:`training_graphs`):
``SYMSHAPE_MM_ROW_BUCKETS=1`` buckets every compiled program's matmuls, ``=0`` none.
:func:`bucketed_steps` swaps the calls in a compiled program's plan.  Measured on the
H100 (bench/results/train_compare_gpt2_bf16_h100_train4_call2_2026-11-26.txt): GPT-2
bf16 training at a new length every step, 22.53 -> 16.29 ms/step.

Padding without copies: the buffers a training plan's kernels make and its matmuls read
(through views) are allocated with room for the bucket's rows (:func:`alloc_with_room`), so
a row-padded call reads them in place (the extra rows unset: each output row reads only its
own input row).  A contraction rounded up needs zeros in both operands' extra rows: where the
storage is one such allocation and the extra rows lie past every element the buffer holds, they
are zeroed in place (one small fill per storage) instead of copying the operand.  Any other operand (an
ATen result, an input, a view whose extra rows would be another tensor's) is copied as before;
a linear's output gradient copied so for its input's gradient is the same copy its weight's
gradient reads (:func:`_row_copy`).

Example::

    >>> [bucket(m) for m in (1, 64, 65, 520, 4096, 4097, 8184)]
    [1, 64, 72, 576, 4096, 4608, 8192]
    >>> import torch
    >>> x, w = torch.randn(5, 3), torch.randn(4, 3)
    >>> torch.equal(linear(x, w), torch.nn.functional.linear(x, w))  # CPU: the call as it is
    True
"""
from __future__ import annotations

import os
import weakref
from dataclasses import dataclass, replace

import torch

from . import cublas_warm
from .view_chains import step_name
from .wrapper import Alloc, BufSlot, ExternStep, KernelStep, reinterpret

_MODE = os.environ.get("SYMSHAPE_MM_ROW_BUCKETS", "train")
#: Whether compiled programs bucket their half-precision CUDA matmuls' rows: every program
#: (``SYMSHAPE_MM_ROW_BUCKETS=1``), none (``0``), or None: training graphs only (the default).
ENABLED = True if _MODE == "1" else False if _MODE == "0" else None
#: Whether weight gradients (the contraction over the rows) are rounded up too; ``SYMSHAPE_MM_CONTRACTION_BUCKETS=0``
#: leaves them at their own length (read at each call: an A/B switch for benches).
CONTRACTION = os.environ.get("SYMSHAPE_MM_CONTRACTION_BUCKETS", "1") != "0"
_training = False


class training_graphs:
    """A context in which programs are planned for training (bucketed where :data:`ENABLED` is None).

    >>> with training_graphs():
    ...     active()
    True
    """

    def __enter__(self):
        global _training
        self.was, _training = _training, True

    def __exit__(self, *exc):
        global _training
        _training = self.was
        _LAST_COPY[0] = None  # a run's last row copy is not kept past it (its memory)


def planning_training() -> bool:
    """Whether programs planned now are a training step's graphs (inside :class:`training_graphs`),
    whatever :data:`ENABLED` says.

    >>> planning_training()
    False
    """
    return _training


def active() -> bool:
    """Whether programs planned now bucket their matmuls (:data:`ENABLED`, :class:`training_graphs`)."""
    return ENABLED if ENABLED is not None else _training

_HALF = (torch.bfloat16, torch.float16)


def bucket(m: int) -> int:
    """``m`` rounded up to a multiple of 1/8 of its power of two (rows up to 64 as they are).

    >>> bucket(1000), bucket(1024), bucket(1025)
    (1024, 1024, 1152)
    """
    if m <= 64:
        return m
    step = 1 << (m.bit_length() - 4)
    return -(-m // step) * step


def _rows(a) -> int | None:
    """The padded row count for ``a`` (a 2-D CUDA half tensor), or None where it keeps its own."""
    if a.dim() != 2 or not a.is_cuda or a.dtype not in _HALF:
        return None
    p = bucket(a.shape[0])
    return p if p != a.shape[0] else None


def _padded(a, rows):
    """``a`` (2-D) copied onto ``rows`` rows, row-major, the extra rows unset (:func:`_row_copy`)."""
    return _row_copy(a, rows, zeros=False)


@dataclass(kw_only=True)
class RowCopy:
    """The last operand :func:`_row_copy` padded: the source view (held, so that its memory is not
    reused while the record stands), its version, and the copy (``zeroed``: its extra rows are 0)."""

    source: torch.Tensor
    version: int
    copy: torch.Tensor
    zeroed: bool


#: The last row copy made (:func:`_row_copy`), or None; forgotten when a :class:`training_graphs` block ends.
_LAST_COPY: list = [None]


def forget_row_copy() -> None:
    """Forget the last row copy, so that the next run of a program makes its own: a CUDA graph
    recorded after another run (:mod:`compiler.train_graphs`) must not read that run's copy.

    >>> forget_row_copy()
    """
    _LAST_COPY[0] = None


def _same_view(x, y) -> bool:
    """Whether ``x`` and ``y`` view the same elements the same way (``x`` held alive, so an equal
    address is the same memory)."""
    return (x.data_ptr() == y.data_ptr() and x.shape == y.shape and x.stride() == y.stride()
            and x.dtype == y.dtype and x.device == y.device)


def _row_copy(a, rows: int, zeros: bool):
    """``a`` (2-D) copied onto ``rows`` rows in a row-major buffer, the extra rows zero where
    ``zeros``.  A linear's output gradient with no room is padded twice in a row: for the
    input's gradient (its rows, any values) and then, transposed, for the weight's (the
    contraction, zeros): the second call reuses the first's copy (its extra rows zeroed then,
    after the first matmul read them in stream order), one allocation and copy instead of two.

    >>> a = torch.arange(6.).reshape(3, 2)
    >>> first, second = _row_copy(a, 4, zeros=False), _row_copy(a, 4, zeros=True)
    >>> second is first, second[3].tolist()
    (True, [0.0, 0.0])
    >>> _ = a.add_(1)
    >>> _row_copy(a, 4, zeros=True)[0].tolist()  # written since: copied again
    [1.0, 2.0]
    """
    if a.is_inference():  # no version counter to tell a write by: copied, not recorded
        return _fresh_row_copy(a, rows, zeros)
    last = _LAST_COPY[0]
    if (last is not None and last.copy.shape[0] == rows and last.version == a._version
            and _same_view(last.source, a)):
        if zeros and not last.zeroed:
            last.copy[a.shape[0]:].zero_()
            last.zeroed = True
        return last.copy
    out = _fresh_row_copy(a, rows, zeros)
    _LAST_COPY[0] = RowCopy(source=a, version=a._version, copy=out, zeroed=zeros)
    return out


def _fresh_row_copy(a, rows: int, zeros: bool):
    """``a`` (2-D) copied onto ``rows`` rows, row-major, the extra rows zero where ``zeros``."""
    out = a.new_empty((rows, a.shape[1]))
    out[: a.shape[0]].copy_(a)
    if zeros:
        out[a.shape[0]:].zero_()
    return out


#: Storages allocated with room for padded rows (:func:`alloc_with_room`), by data pointer: a weak
#: reference to the storage, the bytes its buffer holds (what lies past them is padding), and
#: whether the padding is zero yet (zeroed at most once: nothing but this module touches it).
_ROOMY: dict = {}


def _forget(ref, ptr) -> None:
    if _ROOMY.get(ptr, (None,))[0] is ref:
        del _ROOMY[ptr]


def alloc_with_room(alloc, shape, strides, dtype):
    """``alloc(shape, strides, dtype)`` for a contiguous buffer, on a storage with room for its
    rows (all dims but the last) rounded up to :func:`bucket`; recorded, so that a contraction may
    zero the extra rows in place (:func:`_zeroed_room`).

    >>> from compiler.wrapper import allocator
    >>> x = alloc_with_room(allocator(torch.device("cpu")), (3, 41, 8), (328, 8, 1), torch.float16)
    >>> x.shape, x.is_contiguous(), x.untyped_storage().nbytes() // 2 // 8    # 123 rows -> 128
    (torch.Size([3, 41, 8]), True, 128)
    """
    numel, want = 1, 1
    for n in shape:
        numel *= n
    for n, st in zip(reversed(shape), reversed(strides)):
        if n != 1 and st != want:  # not contiguous: the buffer as it is
            return alloc(shape, strides, dtype)
        want *= n
    width = shape[-1] if shape else 0
    rows = numel // width if width else 0
    p = bucket(rows)
    if p == rows:
        return alloc(shape, strides, dtype)
    base = alloc((p * width,), (1,), dtype)
    storage = base.untyped_storage()
    ptr = storage.data_ptr()
    _ROOMY[ptr] = [weakref.ref(storage, lambda ref, ptr=ptr: _forget(ref, ptr)), numel * base.element_size(), False]
    return reinterpret(base, shape, strides, 0)


def _grown(t, dim: int, size: int):
    """``t`` with ``dim`` grown to ``size`` over its own storage (a view, no copy), or None where
    the storage ends first."""
    shape = list(t.shape)
    shape[dim] = size
    strides = t.stride()
    end = t.storage_offset() + 1 + sum((n - 1) * st for n, st in zip(shape, strides))
    if end * t.element_size() > t.untyped_storage().nbytes():
        return None
    return t.as_strided(shape, strides)


def _row_padded(a, rows):
    """``a`` on ``rows`` rows: a view where its storage has room (the extra rows unset), else a copy."""
    grown = _grown(a, 0, rows)
    return grown if grown is not None else _padded(a, rows)


def _zeroed_room(t, dim: int, size: int):
    """``t`` grown along ``dim`` to ``size`` in its own storage, the added elements zero, where
    that storage is an :func:`alloc_with_room` allocation and every added element lies past the
    bytes its buffer holds (so no tensor reads them but padded matmuls); None otherwise.  The
    storage's whole padding is zeroed at its first such use (one fill for every operand it backs)."""
    storage = t.untyped_storage()
    entry = _ROOMY.get(storage.data_ptr())
    if entry is None or entry[0]() is not storage or t.stride(dim) == 0:
        return None
    size_of = t.element_size()
    held = entry[1]
    if (t.storage_offset() + t.shape[dim] * t.stride(dim)) * size_of < held or held % size_of:
        return None  # the added rows would be elements of the buffer itself
    grown = _grown(t, dim, size)
    if grown is not None and not entry[2]:
        t.as_strided(((storage.nbytes() - held) // size_of,), (1,), held // size_of).zero_()
        entry[2] = True
    return grown


def _layout_of(t) -> tuple:
    """``(dtype, device, column-major)`` of a 2-D tensor: what an empty stand-in copies (a
    warm-up holds no reference to the tensor itself, which may be an activation)."""
    return t.dtype, t.device, t.dim() == 2 and t.stride(0) == 1 and t.stride(1) != 1


def _empty(shape, layout):
    """An empty 2-D tensor of ``shape`` with a :func:`_layout_of` layout."""
    dtype, device, column_major = layout
    if column_major:
        return torch.empty(shape[::-1], dtype=dtype, device=device).t()
    return torch.empty(shape, dtype=dtype, device=device)


def _warm_rows(op, a, others, out, p, call):
    """Queue ``call`` at the other row buckets of the matmul ``op`` (:mod:`compiler.cublas_warm`):
    ``call(x)`` runs it on an empty ``x`` of a bucket's rows (laid out as ``a``), making ``out``
    columns; ``others``: its other operands (their shapes and strides name the call site).
    Called only where :data:`compiler.cublas_warm.ENABLED`."""
    k, size, la = a.shape[1], a.element_size(), _layout_of(a)
    site = (op, la, k, tuple((tuple(o.shape), tuple(o.stride())) for o in others))
    cublas_warm.note(site, p, lambda q: call(_empty((q, k), la)), bucket,
                     nbytes=lambda q: (q * k + q * out) * size, device=a.device)


def linear(x, w, b=None):
    """``F.linear(x, w, b)`` on ``x``'s rows rounded up to :func:`bucket` (CUDA half types)."""
    p = _rows(x)
    if p is None:
        return torch.nn.functional.linear(x, w, b)
    if cublas_warm.ENABLED:  # opt-in: nothing made for it on the hot path otherwise
        shape_w, lw, nb = tuple(w.shape), _layout_of(w), None if b is None else b.shape[0]
        _warm_rows(linear, x, (w,) + ((b,) if b is not None else ()), w.shape[0], p, lambda e: torch.nn.functional.linear(
            e, _empty(shape_w, lw), None if nb is None else torch.empty(nb, dtype=e.dtype, device=e.device)))
    return torch.nn.functional.linear(_row_padded(x, p), w, b)[: x.shape[0]]


#: Bytes of operands :func:`mm` copies at most to round a contraction up (a copy costs device
#: time in proportion; the first-call cost it saves does not grow with the operands).
K_COPY_BYTES = 64 << 20


def _contraction(a, b) -> int | None:
    """The padded contraction length for ``a @ b`` (2-D CUDA half operands), or None where it
    keeps its own."""
    if a.dim() != 2 or b.dim() != 2 or not a.is_cuda or a.dtype not in _HALF or b.dtype != a.dtype:
        return None
    k = a.shape[1]
    p = bucket(k)
    return None if p == k else p


def _zero_padded(a, dim: int, size: int):
    """``a`` (2-D) grown to ``size`` along ``dim`` with zeros, in ``a``'s memory order (a
    transposed operand stays transposed: cuBLAS reads it as it would have read ``a``).

    >>> _zero_padded(torch.ones(2, 3).t(), 1, 4).tolist(), _zero_padded(torch.ones(2, 3).t(), 1, 4).stride()
    ([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]], (1, 3))
    """
    column_major = a.stride(0) == 1 and a.stride(1) != 1
    if dim == 0 and not column_major:
        return _row_copy(a, size, zeros=True)
    if dim == 1 and column_major:  # a transposed row-major operand: its rows padded, transposed back
        return _row_copy(a.t(), size, zeros=True).t()
    shape = list(a.shape)
    shape[dim] = size
    out = a.new_empty(shape[::-1]).t() if column_major else a.new_empty(shape)
    out.narrow(dim, 0, a.shape[dim]).copy_(a)
    out.narrow(dim, a.shape[dim], size - a.shape[dim]).zero_()
    return out


def mm_padded_contraction(a, b, p: int):
    """``a @ b`` with the contraction (``a``'s columns, ``b``'s rows) padded to ``p`` with
    zeros: every extra product is 0, so the sum is the unpadded one up to cuBLAS's choice of kernel.

    >>> a, b = torch.randn(3, 5).t(), torch.randn(5, 4)
    >>> torch.allclose(mm_padded_contraction(a.t(), b, 8), a.t() @ b)
    True
    """
    return torch.mm(_zero_padded(a, 1, p), _zero_padded(b, 0, p))


def _padded_contraction(a, b, k: int):
    """``a @ b`` with the contraction padded to ``k`` with zeros: operands with room padded in place
    (:func:`_zeroed_room`), the others copied (:func:`mm_padded_contraction`), or None where the copies would pass
    :data:`K_COPY_BYTES` (a copy costs device time in proportion; the first-call cost it saves
    does not grow with the operands)."""
    ra, rb = _zeroed_room(a, 1, k), _zeroed_room(b, 0, k)
    copied = (a.shape[0] if ra is None else 0) + (b.shape[1] if rb is None else 0)
    if copied * k * a.element_size() > K_COPY_BYTES:
        return None
    return torch.mm(_zero_padded(a, 1, k) if ra is None else ra, _zero_padded(b, 0, k) if rb is None else rb)


def mm(a, b):
    """``torch.mm(a, b)`` on ``a``'s rows rounded up to :func:`bucket` (CUDA half types); a
    weight gradient (rows fixed, the contraction runs over the tokens) on its contraction
    rounded up, with zeros."""
    p = _rows(a)
    if p is None:
        k = _contraction(a, b) if CONTRACTION else None
        out = None if k is None else _padded_contraction(a, b, k)
        if out is not None and cublas_warm.ENABLED:
            _warm_contraction(a, b, k)
        return torch.mm(a, b) if out is None else out
    if cublas_warm.ENABLED:
        shape_b, lb = tuple(b.shape), _layout_of(b)
        _warm_rows(mm, a, (b,), b.shape[1], p, lambda e: torch.mm(e, _empty(shape_b, lb)))
    return torch.mm(_row_padded(a, p), b)[: a.shape[0]]


def _warm_contraction(a, b, k):
    """Queue a weight gradient's ``a @ b`` at its contraction's other buckets (:mod:`compiler.cublas_warm`;
    called only where it is on)."""
    m, n, size, la, lb = a.shape[0], b.shape[1], a.element_size(), _layout_of(a), _layout_of(b)
    cublas_warm.note((_warm_contraction, la, lb, m, n), k, lambda q: torch.mm(_empty((m, q), la), _empty((q, n), lb)), bucket,
                     nbytes=lambda q: (m * q + q * n + m * n) * size, device=a.device)


def addmm(bias, a, b, *, beta=1, alpha=1):
    """``torch.addmm(bias, a, b)`` on ``a``'s rows rounded up (a bias of one row only)."""
    p = _rows(a)
    if p is None or bias.dim() != 1:
        return torch.addmm(bias, a, b, beta=beta, alpha=alpha)
    if cublas_warm.ENABLED:
        shape_b, lb, nb = tuple(b.shape), _layout_of(b), bias.shape[0]
        _warm_rows(addmm, a, (b, bias), b.shape[1], p, lambda e: torch.addmm(
            torch.empty(nb, dtype=e.dtype, device=e.device), e, _empty(shape_b, lb), beta=beta, alpha=alpha))
    return torch.addmm(bias, _row_padded(a, p), b, beta=beta, alpha=alpha)[: a.shape[0]]


def bucketed_steps(plan, device_type) -> list:
    """``plan`` with its ``F.linear`` / ``aten.mm`` / ``aten.addmm`` steps calling :func:`linear`,
    :func:`mm`, :func:`addmm`, where bucketing is on (:data:`ENABLED`, :class:`training_graphs`)
    and the program runs on CUDA.

    >>> step = ExternStep(torch.ops.aten.mm.default, (), {}, "y")
    >>> [s.target for s in bucketed_steps([step], "cpu")] == [torch.ops.aten.mm.default]
    True
    """
    if not active() or device_type != "cuda":
        return plan
    swap = {torch.nn.functional.linear: linear, torch.ops.aten.mm.default: mm, torch.ops.aten.addmm.default: addmm}
    plan = [ExternStep(swap[s.target], s.args, s.kwargs, s.out) if isinstance(s, ExternStep) and s.target in swap
            else s for s in plan]
    return with_room(plan)


#: Plan steps whose result views their first argument's storage.
_VIEW_STEPS = frozenset({"view_as_traced", "view", "_unsafe_view", "t", "transpose", "permute"})


def with_room(plan) -> list:
    """``plan`` with the buffers its kernels make and its bucketed matmuls read (through views)
    allocated by :func:`alloc_with_room`.

    >>> k = KernelStep(None, ("x",), (Alloc("x", (0,), (1,), torch.float16),), (False,))
    >>> v = ExternStep(torch.ops.aten.t.default, (BufSlot("x"),), {}, "xt")
    >>> plan = with_room([k, v, ExternStep(mm, (BufSlot("w"), BufSlot("xt")), {}, "y")])
    >>> plan[0].allocs[0].room is alloc_with_room
    True
    """
    made, source = set(), {}
    for s in plan:
        if isinstance(s, KernelStep):
            made.update(al.name for al in s.allocs)
        elif step_name(s.target) in _VIEW_STEPS and s.args and isinstance(s.args[0], BufSlot):
            source[s.out] = s.args[0].name
    want = set()
    for s in plan:
        if isinstance(s, ExternStep) and s.target in (linear, mm, addmm):
            for a in (s.args[:1] if s.target is linear else s.args[:2] if s.target is mm else s.args[1:2]):
                name = a.name if isinstance(a, BufSlot) else None
                while name in source:
                    name = source[name]
                if name in made:
                    want.add(name)
    return [replace(s, allocs=tuple(replace(al, room=alloc_with_room) if al.name in want else al for al in s.allocs))
            if isinstance(s, KernelStep) and any(al.name in want for al in s.allocs) else s for s in plan]


__all__ = ["bucket", "linear", "mm", "addmm", "mm_padded_contraction", "K_COPY_BYTES", "bucketed_steps", "with_room",
           "alloc_with_room", "training_graphs", "planning_training", "active", "ENABLED", "forget_row_copy"]
