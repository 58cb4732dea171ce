"""Triton kernels for matmuls with few rows: ``out = a @ b (+ bias)`` split over N and K.

Imported lazily by :mod:`compiler.skinny_matmul` (importing triton picks the interpreter
from ``TRITON_INTERPRET``).  ``skinny_mm`` computes one ``BLOCK_M x BLOCK_N`` tile over
one slice of K.  Over all of K it adds the bias and stores the output; with ``PARTIAL``
(K in several slices) it stores fp32 partial sums that ``split_sum`` adds in a fixed order
(deterministic, unlike atomics).  ``PRECISION`` is ``tl.dot``'s ``input_precision``: ``"ieee"`` for exact fp32,
``"tf32x3"`` for fp32 on tensor cores at near-fp32 accuracy,
``"tf32"`` where eager's matmuls run in TF32, ``None`` for half types.  ``FMA`` skips
``tl.dot`` (whose exact-fp32 path is slow on Hopper) for a broadcast multiply and sum over
a small ``BLOCK_M x BLOCK_K x BLOCK_N`` block: exact fp32 for any BLOCK_M (keep BLOCK_K >= 8:
16 x 4 x 64 summed wrong on an H100 with triton 3.6, right under the interpreter).  ``UPCAST``
multiplies in fp32 (exact for bf16 products): the interpreter's ``tl.dot`` gets bf16 wrong.

Example (under ``TRITON_INTERPRET=1`` on CPU, or on CUDA)::

    >>> import torch
    >>> from compiler.matmul_kernels import skinny_mm, DOT_HAS_PRECISION
    >>> DOT_HAS_PRECISION
    True
"""
import inspect

import triton
import triton.language as tl

#: Whether this triton's ``tl.dot`` takes ``input_precision`` (triton >= 3.0): without it
#: exact fp32 cannot be asked for, and the skinny kernel is not used.
DOT_HAS_PRECISION = "input_precision" in inspect.signature(tl.dot).parameters


def _accepts_tf32x3() -> bool:
    # The CUDA backend lists the input precisions it compiles (triton >= 3.0); the
    # interpreter accepts "tf32x3" too but multiplies in plain fp32 (numpy).
    try:
        from triton.backends.nvidia.compiler import CUDAOptions
    except ImportError:
        return False
    return "tf32x3" in getattr(CUDAOptions, "allowed_dot_input_precisions", ())


#: Whether ``tl.dot`` takes ``input_precision="tf32x3"``: fp32 on tensor cores as three TF32
#: products (a_hi*b_hi + a_hi*b_lo + a_lo*b_hi), error near fp32's rather than TF32's.
DOT_HAS_TF32X3 = DOT_HAS_PRECISION and _accepts_tf32x3()


@triton.jit
def skinny_mm(a_ptr, b_ptr, bias_ptr, out_ptr, M, N, K, k_per_split,
              s_am, s_ak, s_bk, s_bn, s_om, s_on,
              HAS_BIAS: tl.constexpr, PARTIAL: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
              FMA: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_k = tl.program_id(2)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    k_lo = pid_k * k_per_split
    k_hi = tl.minimum(k_lo + k_per_split, K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k_lo, k_hi, BLOCK_K):
        rk = k + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rm[:, None] * s_am + rk[None, :] * s_ak,
                    mask=(rm[:, None] < M) & (rk[None, :] < k_hi), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * s_bk + rn[None, :] * s_bn,
                    mask=(rk[:, None] < k_hi) & (rn[None, :] < N), other=0.0)
        if FMA:
            # fp32 products summed in fp32 on the CUDA cores: any BLOCK_M (tl.dot needs 16).
            acc += tl.sum(a.to(tl.float32)[:, :, None] * b.to(tl.float32)[None, :, :], axis=1)
        else:
            if UPCAST:
                a, b = a.to(tl.float32), b.to(tl.float32)
            acc = tl.dot(a, b, acc, input_precision=PRECISION)
    if not PARTIAL:
        if HAS_BIAS:
            acc += tl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
        tl.store(out_ptr + rm[:, None] * s_om + rn[None, :] * s_on, acc.to(out_ptr.dtype.element_ty),
                 mask=(rm[:, None] < M) & (rn[None, :] < N))
    else:
        # Partial sums: out_ptr is the fp32 workspace [splits, M, N], contiguous.
        tl.store(out_ptr + pid_k * M * N + rm[:, None] * N + rn[None, :], acc,
                 mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def split_sum(ws_ptr, bias_ptr, out_ptr, M, N, splits, s_om, s_on,
              HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < M * N
    m = offs // N
    n = offs % N
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in range(0, splits):
        acc += tl.load(ws_ptr + s * M * N + offs, mask=mask, other=0.0)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + n, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + m * s_om + n * s_on, acc.to(out_ptr.dtype.element_ty), mask=mask)


__all__ = ["skinny_mm", "split_sum", "DOT_HAS_PRECISION", "DOT_HAS_TF32X3"]
