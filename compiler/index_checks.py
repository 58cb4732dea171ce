"""Run-time range checks for indices that fused kernels read from data.

Where the compiler fuses an indexing op into a kernel (the NLL loss's ``gather`` as a picked sum,
its backward's one-hot ``scatter`` as a ``where``), an index outside the indexed dim would select
nothing: the kernel would return a value where eager raises.  The index is checked first, as
Inductor's ``assert_indirect_indexing`` does: on CUDA queued on the device (``torch._assert_async``:
no host sync; it fails at the next synchronization), on the CPU at once, with eager's message.

Example::

    >>> import torch
    >>> check_index_range(torch.tensor([[0], [2]]), 3, 1) is not None
    True
    >>> check_index_range(torch.tensor([[0], [3]]), 3, 1)
    Traceback (most recent call last):
    ...
    IndexError: index 3 is out of bounds for dimension 1 with size 3
"""
from __future__ import annotations

import sympy
import torch

from .lowered import ExternItem, Ref, RefKind, TensorBox


def check_index_range(index: torch.Tensor, size: int, dim: int) -> torch.Tensor:
    """``index`` itself, after checking that every value is in ``0 <= i < size`` (raises like eager)."""
    if not index.numel():
        return index
    if index.device.type == "cuda":
        torch._assert_async(((index >= 0) & (index < size)).all(),
                            f"index out of bounds for dimension {dim} with size {size}")
        return index
    lo, hi = (int(v) for v in torch.aminmax(index))
    if lo < 0 or hi >= size:
        raise IndexError(f"index {lo if lo < 0 else hi} is out of bounds for dimension {dim} with size {size}")
    return index


def checked_index(lw, node, index: TensorBox, size, dim: int) -> TensorBox:
    """``index`` read through :func:`check_index_range` (an extern that returns it): the kernels that
    read it run after the check, which the scheduler cannot drop since they read its result.

    ``lw`` is the :class:`~compiler.lowering.Lowerer`, ``size`` the indexed dim's length (sympy or int)."""
    buf = lw.realize(index)
    size = sympy.sympify(size)
    n = int(size) if size.is_Integer else Ref(RefKind.SIZE, size)
    out = lw.new_buffer(f"{buf.name}_checked", buf.shape, buf.dtype, "extern", buf.strides)
    lw.items.append(ExternItem(target=check_index_range, args=(Ref(RefKind.BUF, buf.name), n, dim), kwargs={},
                               out=out, node=node))
    return lw.buffer_box(out)
