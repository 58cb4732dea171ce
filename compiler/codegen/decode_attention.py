"""Attention of one query position (a decode step) as one Triton launch: the host cost of SDPA gone.

A decoder's step attends one new query over the whole KV cache:
``scaled_dot_product_attention(q [B, H, 1, D], k [B, Hk, S, D], v [B, Hk, S, D])``,
no mask (a sizes-only mask proved all-visible, :mod:`compiler.mask_proofs`).  On
the GPU that step is host-bound: ATen's SDPA picks a kernel (its checks), makes
the flash kernel's outputs (logsumexp, RNG state) and launches it, 40-90 us of
host time per call on the H100 machine against 12 us of GPU time (profile in
``bench/results/gpu_decode_h100_decode5_*``), four times per token for a 4-layer
Llama.  :func:`decode_attention` computes the same function in one kernel
launched through the compiled kernel's own launcher
(:class:`~compiler.codegen.triton_launch.Launcher`): one program per query
head streams its key/value head (``h // (H // Hk)``, GQA) in blocks of
``BLOCK_N`` keys with an online softmax in fp32, as flash attention does.  The
sizes are arguments (``do_not_specialize``): one binary serves every cache length.

Taken only where it computes exactly SDPA's function (:func:`decode_eligible`):
one query position, no mask, no dropout, not causal (``is_causal`` with one query
is top-left aligned in SDPA: a different function), at least one key, equal
head dims, the heads' last dim contiguous, ``enable_gqa`` where the head counts
differ (else SDPA's own error is raised), no autograd.  The output has flash's
layout (a ``[B, H, 1, D]`` view of a ``[B, 1, H, D]`` tensor), so the
merged-heads copy after it stays free (:func:`compiler.sdpa_calls.contiguous_heads`).

Example (the kernel itself runs in tests/test_decode_attention.py: on CUDA, or on the CPU
under ``TRITON_INTERPRET=1``, against SDPA)::

    >>> import torch
    >>> q, k = torch.randn(1, 4, 1, 16), torch.randn(1, 2, 37, 16)
    >>> decode_eligible(q, k, k, None, 0.0, False, True)  # 4 query heads over 2 KV heads, one position
    True
    >>> try_decode(q, k, k, enable_gqa=True) is None  # CPU tensors: the caller runs SDPA
    True
"""
from __future__ import annotations

import math
import warnings

import torch
import triton
import triton.language as tl
from triton.compiler.errors import CompilationError

from .triton_launch import Launcher

#: Keys per loop iteration (each iteration waits on its loads: few of them at long caches),
#: and the cache length from which the larger block (with more warps) is taken.
BLOCK_N, BIG_BLOCK_N, BIG_FROM = 64, 128, 256
_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_I32 = 2 ** 31 - 1


_SIZES = ["S", "H", "REP", "D", "sqb", "sqh", "skb", "skh", "sks", "svb", "svh", "svs", "sob", "soh"]


def _decode_kernel(Q, K, V, O, S, H, REP, D, sqb, sqh, skb, skh, sks, svb, svh, svs, sob, soh, scale,
                   BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    pid = tl.program_id(0)
    b = pid // H
    h = pid % H
    kh = h // REP
    d = tl.arange(0, BLOCK_D)
    dm = d < D
    q = tl.load(Q + b * sqb + h * sqh + d, mask=dm, other=0.0).to(tl.float32)
    kbase = K + b * skb + kh * skh
    vbase = V + b * svb + kh * svh
    offs = tl.arange(0, BLOCK_N)
    # Typed fp32 scalars from the start: loop-carried values keep one type.
    m_i = tl.max(tl.full([BLOCK_N], -float("inf"), tl.float32), 0)
    l_i = tl.sum(tl.zeros([BLOCK_N], dtype=tl.float32), 0)
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for start in range(0, S, BLOCK_N):
        n = start + offs
        nm = n < S
        km = nm[:, None] & dm[None, :]
        k = tl.load(kbase + n[:, None] * sks + d[None, :], mask=km, other=0.0).to(tl.float32)
        # Keys past S get -inf: zero weight, and their (zero) values are never read into acc.
        s = tl.where(nm, tl.sum(q[None, :] * k, 1) * scale, -float("inf"))
        m_new = tl.maximum(tl.max(s, 0), m_i)
        p = tl.exp(s - m_new)
        alpha = tl.exp(m_i - m_new)
        v = tl.load(vbase + n[:, None] * svs + d[None, :], mask=km, other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, 0)
        l_i = l_i * alpha + tl.sum(p, 0)
        m_i = m_new
    tl.store(O + b * sob + h * soh + d, (acc / l_i).to(O.dtype.element_ty), mask=dm)


_KERNELS: dict = {}


def kernel_for(dtype):
    """The JIT kernel for tensors of ``dtype``: one per dtype, because a direct launch
    (:mod:`compiler.codegen.triton_launch`) reuses the binary compiled for one
    binding at every other binding of the same function with the same options and integer
    types, whatever the pointers' element types (symshape's generated kernels each serve one
    dtype).  Shared across dtypes, an fp16 call ran the fp32 binary on the H100 (decode5 call 3).

    >>> kernel_for(torch.float16) is kernel_for(torch.float16), kernel_for(torch.float16) is kernel_for(torch.float32)
    (True, False)
    """
    k = _KERNELS.get(dtype)
    if k is None:
        k = _KERNELS[dtype] = triton.jit(do_not_specialize=_SIZES)(_decode_kernel)
    return k


def decode_eligible(q, k, v, attn_mask, dropout_p, is_causal, enable_gqa) -> bool:
    """Whether :func:`decode_attention` computes exactly ``sdpa(q, k, v, attn_mask, dropout_p,
    is_causal, enable_gqa=enable_gqa)`` (the device aside); see the module docstring.

    >>> q, k = torch.randn(2, 8, 1, 64), torch.randn(2, 2, 5, 64)
    >>> decode_eligible(q, k, k, None, 0.0, False, True), decode_eligible(q, k, k, None, 0.0, False, False)
    (True, False)
    >>> decode_eligible(q, k, k, None, 0.0, True, True)  # causal with one query: key 0 only
    False
    """
    if attn_mask is not None or dropout_p != 0.0 or is_causal:
        return False
    if not (isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)):
        return False
    # Called for each layer at every decode step: each size and stride read once (the checks
    # were 4 us of host time per call on a 2-core CPU, about three times that on the H100 host).
    qs, ks, vs = q.shape, k.shape, v.shape
    if len(qs) != 4 or len(ks) != 4 or ks != vs or qs[2] != 1:
        return False
    B, H, _, D = qs
    Bk, Hk, S, Dk = ks
    if Bk != B or Dk != D or S < 1 or D > 256 or Hk < 1:
        return False
    dt = q.dtype
    if dt not in _DTYPES or k.dtype != dt or v.dtype != dt:
        return False
    if H % Hk or (H != Hk and not enable_gqa):
        return False
    qt, kt, vt = q.stride(), k.stride(), v.stride()
    if qt[3] != 1 or kt[3] != 1 or vt[3] != 1:
        return False
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return False
    # Offsets are 32-bit in the kernel: the largest element offset of each (strides are never negative).
    return (q.storage_offset() + (B - 1) * qt[0] + (H - 1) * qt[1] + (D - 1) < _I32
            and k.storage_offset() + (B - 1) * kt[0] + (Hk - 1) * kt[1] + (S - 1) * kt[2] + (D - 1) < _I32
            and v.storage_offset() + (B - 1) * vt[0] + (Hk - 1) * vt[1] + (S - 1) * vt[2] + (D - 1) < _I32)


#: Where the next :func:`decode_attention` call writes (set by :class:`writing_into`), or None.
_DEST: list = []


class writing_into:
    """Within this block, the first :func:`decode_attention` call whose output has ``dest``'s
    shape, dtype and device writes into ``dest`` and returns it (a CUDA graph's input buffer:
    no copy into it afterwards, :mod:`compiler.piecewise`).  One thread's decode at a time."""

    def __init__(self, dest):
        self.dest = dest

    def __enter__(self):
        _DEST[:] = [self.dest]
        return self

    def __exit__(self, *exc):
        _DEST.clear()
        return False


def decode_attention(q, k, v, scale=None, enable_gqa=False):
    """``scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=enable_gqa)`` for one
    query position (``q.shape[2] == 1``), where :func:`decode_eligible` holds."""
    B, H, _, D = q.shape
    _, Hk, S, _ = k.shape
    dest = _DEST[0] if _DEST else None
    if dest is not None and dest.shape == (B, H, 1, D) and dest.dtype == q.dtype and dest.device == q.device \
            and dest.stride(-1) == 1:
        _DEST.clear()
        out = dest  # its (B, H, 1, D) strides, whatever its layout
    else:
        out = torch.empty((B, 1, H, D), dtype=q.dtype, device=q.device).transpose(1, 2)
    sc = float(scale) if scale is not None else 1.0 / math.sqrt(D)
    block_d = max(16, triton.next_power_of_2(D))
    qt, kt, vt, ot = q.stride(), k.stride(), v.stride(), out.stride()
    args = [S, H, H // Hk, D, qt[0], qt[1], kt[0], kt[1], kt[2], vt[0], vt[1], vt[2], ot[0], ot[1], sc]
    big = S > BIG_FROM
    launcher = _LAUNCHERS.get((q.dtype, big, block_d))
    if launcher is None:
        opts = {"BLOCK_N": BIG_BLOCK_N if big else BLOCK_N, "BLOCK_D": block_d, "num_warps": 8 if big else 4}
        launcher = _LAUNCHERS[(q.dtype, big, block_d)] = Launcher(kernel_for(q.dtype), opts)
    launcher([q, k, v, out], (B * H,), args)
    return out


#: (dtype, big blocks, BLOCK_D) -> the kernel's Launcher: S is new at every decode step, so a
#: launch bound per size would serve one call (binding cost more host time than launching).
_LAUNCHERS: dict = {}


#: Why the kernel is off for this process (it did not compile with this Triton), or None.
DISABLED = None
_WARM: set = set()


def warm(dtype, device, head_dim) -> None:
    """Compile both block configurations for ``dtype`` (a launch on a small dummy cache each),
    so that a decode crossing ``BIG_FROM`` keys does not stall on a compile mid-generation.
    Not while a CUDA graph is being captured (the dummies would join it)."""
    key = (dtype, device, head_dim)  # the device itself: str() of it each call cost a microsecond
    if key in _WARM or (device.type == "cuda" and torch.cuda.is_current_stream_capturing()):
        return
    _WARM.add(key)
    q = torch.zeros(1, 1, 1, head_dim, dtype=dtype, device=device)
    saved = list(_DEST)  # a buffer the real call writes into is not the dummies'
    _DEST.clear()
    try:
        for n in (1, BIG_FROM + 1):
            kv = torch.zeros(1, 1, n, head_dim, dtype=dtype, device=device)
            decode_attention(q, kv, kv)
    finally:
        _DEST[:] = saved


def try_decode(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """:func:`decode_attention` where it applies on CUDA tensors, else None (the caller runs SDPA)."""
    global DISABLED
    if DISABLED is not None or not q.is_cuda or not decode_eligible(q, k, v, attn_mask, dropout_p, is_causal,
                                                                    enable_gqa):
        return None
    try:
        warm(q.dtype, q.device, q.shape[-1])
        return decode_attention(q, k, v, scale, enable_gqa)
    except CompilationError as e:  # symshape's kernel, not the program: SDPA from now on, and say why
        DISABLED = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        warnings.warn(f"symshape's decode attention kernel did not compile ({DISABLED}); running SDPA")
        return None


__all__ = ["decode_attention", "decode_eligible", "kernel_for", "try_decode", "warm", "writing_into", "BLOCK_N"]
