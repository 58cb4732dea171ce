"""Triton kernel for an embedding's weight gradient: rows of the output's gradient added into the rows their ids name.

Imported lazily by :mod:`compiler.embedding_backward` (importing triton picks the interpreter
from ``TRITON_INTERPRET``).  ``embedding_grad`` takes ``ROWS`` consecutive rows of ``grad``
(``[N, D]``) and their ids, and adds them into ``out`` (``[num_weights, D]``, float32, zeroed by
the caller) with atomic adds, ``BLOCK_D`` columns per program.  Where every id of the chunk is
the same (BERT's token types, mostly 0), the chunk's rows are summed first and added once: one
atomic per column instead of ``ROWS``, so a single hot row does not serialize every update.
Ids equal to ``padding_idx`` add nothing (``padding_idx`` -1: none is).

Example (under ``TRITON_INTERPRET=1`` on CPU, or on CUDA)::

    >>> from compiler.embedding_kernels import embedding_grad
    >>> embedding_grad.__name__
    'embedding_grad'
"""
import triton
import triton.language as tl


@triton.jit(do_not_specialize=["N", "D", "padding_idx"])
def embedding_grad(grad, ids, out, N, D, padding_idx, ROWS: tl.constexpr, BLOCK_D: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    cmask = cols < D
    rmask = rows < N
    idx = tl.load(ids + rows, mask=rmask, other=padding_idx).to(tl.int64)
    live = rmask & (idx != padding_idx)
    mask = live[:, None] & cmask[None, :]
    g = tl.load(grad + rows[:, None] * D + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    lo = tl.min(tl.where(live, idx, 9223372036854775807), axis=0)
    hi = tl.max(tl.where(live, idx, -1), axis=0)
    if lo == hi:
        tl.atomic_add(out + lo * D + cols, tl.sum(g, axis=0), mask=cmask, sem="relaxed")
    else:
        tl.atomic_add(out + idx[:, None] * D + cols[None, :], g, mask=mask, sem="relaxed")
