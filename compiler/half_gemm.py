"""Half-precision matmuls of training graphs on CUDA through one Triton GEMM (opt-in: ``SYMSHAPE_TRAIN_GEMM=1``).

A training step at a new sequence length meets a new row count (``M = batch * T``) in every
linear, forward and input gradient, and a new contraction in every weight gradient.  cuBLAS
pays host time per new shape: on the H100 225-411 us at the first bf16 call of a new ``M``
(6.5 ms where it loads another kernel), 36-62 us repeated (.gpu probes of session 18); a GPT-2
or BERT step has ~30 such calls, so with row buckets (:mod:`compiler.row_buckets`) a step that
meets a new bucket spent 8-12 ms more host time than one that does not.

:func:`matmul` runs ``a @ b (+ bias)`` on :func:`~compiler.gemm_kernels.gemm` instead: the
row count and the contraction are run-time arguments (``do_not_specialize``), so one binary
per call site serves every length, launched through the compiled kernel's own launcher
(:class:`~compiler.codegen.triton_launch.Launcher`).  It is opt-in because its plain tiles
(no TMA, no warp specialization) lose on the device: 0.50-0.77x of cuBLAS's time on GPT-2's
and BERT's training shapes at ``M = 8000`` on the H100 (bench/results/half_gemm_h100_s18_2026-12-06.txt),
which over a long run costs more than the first calls it saves.

:func:`linear`, :func:`mm` and :func:`addmm` replace the training plan's ATen matmuls
(:func:`training_matmuls`) and fall back to :mod:`compiler.row_buckets`' calls (cuBLAS) for
anything the kernel does not take: fp32, CPU tensors, layouts other than row- or column-major,
a bias that is not one row of N, offsets past 32 bits.

Example::

    >>> config(4096, 3072, a_t=False), config(768, 768, a_t=True)
    ((128, 128, 64, 8, 3), (64, 64, 64, 4, 4))
    >>> layout(torch.empty(6, 4)), layout(torch.empty(4, 6).t()), layout(torch.empty(6, 8)[:, ::2])
    ((False, 4), (True, 6), None)
"""
from __future__ import annotations

import os

import torch

from . import row_buckets
from .skinny_matmul import plain_operands
from .wrapper import ExternStep

#: Whether training graphs' half-precision CUDA matmuls run the Triton GEMM (else cuBLAS).  Off by
#: default (see the module docstring); the kernel itself (:func:`matmul`) runs either way.
ENABLED = os.environ.get("SYMSHAPE_TRAIN_GEMM", "0") == "1"

_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
_HALF = (torch.bfloat16, torch.float16)
_I32 = 2 ** 31

#: Calls that ran the kernel / fell back to cuBLAS (tests, reports).
CALLS = {"kernel": 0, "fallback": 0}

_kernels = None
_launchers: dict = {}


def _kernel():
    global _kernels
    if _kernels is None:
        from . import gemm_kernels
        _kernels = gemm_kernels
    return _kernels.gemm


def config(m: int, n: int, a_t: bool) -> tuple:
    """``(BM, BN, BK, num_warps, num_stages)`` for an ``m x n`` output.  Rows of a
    transposed ``a`` are a weight's dim (a weight gradient: fixed per call site), so a small
    tile grid there picks small tiles; otherwise ``m`` is tokens, and one tile size serves
    every length (one binary per call site, whatever the length).  Best or near it on the
    H100 for GPT-2/BERT's training shapes of the six tiles measured (bench/results above)."""
    if a_t and -(-m // 128) * -(-n // 128) < 132:
        return 64, 64, 64, 4, 4
    return 128, 128, 64, 8, 3


def layout(t) -> tuple | None:
    """``(transposed, leading dim)`` of a 2-D tensor stored row-major (``(False, stride(0))``)
    or column-major (``(True, stride(1))``); None for any other layout."""
    rows, cols = t.shape
    s0, s1 = t.stride()
    if (s1 == 1 or cols == 1) and (rows == 1 or s0 >= cols):
        return False, s0 if rows > 1 else cols
    if (s0 == 1 or rows == 1) and (cols == 1 or s1 >= rows):
        return True, s1 if cols > 1 else rows
    return None


def _fits(t, lay) -> bool:
    """Every offset the kernel computes for ``t`` fits 32 bits."""
    rows, cols = t.shape
    inner, outer = (rows, cols) if lay[0] else (cols, rows)
    return t.storage_offset() + outer * lay[1] + inner < _I32


def _usable(a, b, bias) -> tuple | None:
    """The layouts of ``a`` and ``b`` where the kernel takes ``a @ b + bias``, else None."""
    if a.dtype not in _HALF or not plain_operands(a, b, bias):
        return None
    if a.device.type != "cuda" and not (_INTERPRET and a.device.type == "cpu"):
        return None
    la, lb = layout(a), layout(b)
    if la is None or lb is None or not _fits(a, la) or not _fits(b, lb):
        return None
    return la, lb


def matmul(a, b, bias=None):
    """``a @ b (+ bias)`` on the Triton GEMM where it takes them (see the module docstring), else
    :func:`torch.addmm` / :func:`torch.mm`.

    >>> a, b = torch.randn(5, 16), torch.randn(16, 3)
    >>> torch.allclose(matmul(a, b), a @ b)
    True
    """
    lay = _usable(a, b, bias)
    if lay is None:
        CALLS["fallback"] += 1
        return torch.mm(a, b) if bias is None else torch.addmm(bias, a, b)
    return _run(a, b, bias, lay)


def _run(a, b, bias, lay):
    (a_t, lda), (b_t, ldb) = lay
    m, k = a.shape
    n = b.shape[1]
    out = torch.empty((m, n), dtype=a.dtype, device=a.device)
    CALLS["kernel"] += 1
    if m == 0 or n == 0:
        return out
    bm, bn, bk, warps, stages = config(m, n, a_t)
    ld8 = lda % 8 == 0 and ldb % 8 == 0 and n % 8 == 0
    # Only where the dim is the contiguous one of its operand (the kernel reads the flag there
    # alone): a flag that followed the token count would build a binary per length class.
    m_even, n_even = a_t and m % bm == 0, (not b_t) and n % bn == 0
    up = _INTERPRET and a.dtype == torch.bfloat16
    key = (a_t, b_t, bias is not None, ld8, m_even, n_even, up, bm, bn, a.dtype)
    launch = _launchers.get(key)
    if launch is None:
        from .codegen.triton_launch import Launcher
        launch = _launchers[key] = Launcher(_kernel(), {"A_T": a_t, "B_T": b_t, "HAS_BIAS": bias is not None, "LD8": ld8,
                                 "M_EVEN": m_even, "N_EVEN": n_even, "UPCAST": up, "BM": bm, "BN": bn, "BK": bk,
                                 "GM": 8, "num_warps": warps, "num_stages": stages})
    launch([a, b, out if bias is None else bias, out], (-(-m // bm) * -(-n // bn),), [m, n, k, lda, ldb, n])
    return out


def linear(x, w, b=None):
    """``F.linear(x, w, b)``: 2-D ``x`` on the kernel, anything else as :func:`row_buckets.linear`."""
    if x.dim() == 2 and w.dim() == 2:
        lay = _usable(x, w.t(), b)
        if lay is not None:
            return _run(x, w.t(), b, lay)
    CALLS["fallback"] += 1
    return row_buckets.linear(x, w, b)


def mm(a, b):
    """``torch.mm(a, b)`` on the kernel, else as :func:`row_buckets.mm`."""
    lay = _usable(a, b, None)
    if lay is not None:
        return _run(a, b, None, lay)
    CALLS["fallback"] += 1
    return row_buckets.mm(a, b)


def addmm(bias, a, b, *, beta=1, alpha=1):
    """``torch.addmm(bias, a, b)`` on the kernel (a bias of one row, ``beta = alpha = 1``), else
    as :func:`row_buckets.addmm`."""
    if beta == 1 and alpha == 1:
        lay = _usable(a, b, bias)
        if lay is not None:
            return _run(a, b, bias, lay)
    CALLS["fallback"] += 1
    return row_buckets.addmm(bias, a, b, beta=beta, alpha=alpha)


def training_matmuls(plan, device_type) -> list:
    """``plan`` with its ``F.linear`` / ``aten.mm`` / ``aten.addmm`` steps on :func:`linear`,
    :func:`mm`, :func:`addmm` where a training graph runs on CUDA (or the CPU under
    ``TRITON_INTERPRET=1``; :func:`row_buckets.active`) and the kernel is on (:data:`ENABLED`); else :func:`row_buckets.bucketed_steps`.

    >>> step = ExternStep(torch.ops.aten.mm.default, (), {}, "y")
    >>> [s.target for s in training_matmuls([step], "cpu")] == [torch.ops.aten.mm.default]
    True
    """
    on = device_type == "cuda" or (_INTERPRET and device_type == "cpu")  # the interpreter: tests on the CPU
    if not ENABLED or not on or not row_buckets.active():
        return row_buckets.bucketed_steps(plan, device_type)
    swap = {torch.nn.functional.linear: linear, torch.ops.aten.mm.default: mm, torch.ops.aten.addmm.default: addmm}
    return [ExternStep(swap[s.target], s.args, s.kwargs, s.out) if isinstance(s, ExternStep) and s.target in swap
            else s for s in plan]


__all__ = ["matmul", "linear", "mm", "addmm", "training_matmuls", "config", "layout", "ENABLED", "CALLS"]
