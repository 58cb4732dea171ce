"""Matmuls with few rows in compiled Triton programs: a split-K Triton kernel or cuBLAS, chosen per call.

cuBLAS launches few CTAs for ``M <= 64``-row matmuls against large weights (GPT-2's linears
at small T): most of an H100's 132 SMs idle while the weights stream in.  The skinny kernel
(:mod:`compiler.matmul_kernels`) tiles N by ``BLOCK_N`` and splits K so the grid fills the
SMs, then adds the K slices in a second kernel (with the bias).  :func:`mm` and
:func:`addmm` replace ``aten.mm`` / ``aten.addmm`` in the Triton target's compiled programs
(:class:`~compiler.codegen.triton.TritonTarget`): the choice is made at call time from the
sizes (:func:`use_skinny`, a rule measured by ``bench/skinny_matmul_bench.py``), so a size
class change never retraces.  fp32 runs as 3xTF32 on tensor cores (``input_precision="tf32x3"``,
error near exact fp32's; ``"ieee"`` where triton lacks it) and is only chosen while eager's
matmuls are exact fp32 (not ``torch.backends.cuda.matmul.allow_tf32``, not measured).

Example::

    >>> import torch
    >>> ROWS[torch.float32]  # measured on the H100: 3xTF32 tiles win at 16..128 rows
    (16, 128)
    >>> [use_skinny(m, 768, 768, torch.float32, "cuda") for m in (8, 16, 128, 4096)]
    [False, True, True, False]
    >>> a, b = torch.randn(3, 4), torch.randn(4, 5)
    >>> torch.equal(mm(a, b), torch.mm(a, b))  # CPU without the interpreter: ATen
    True
"""
from __future__ import annotations

import os

import torch

from .kernel_fallback import kernel_or_aten

#: Rows ``(least, most)`` for which the skinny kernel beats cuBLAS, per dtype (H100, triton 3.6:
#: bench/results/skinny_matmul_h100_2026-11-23.txt and skinny_tf32x3_h100_2026-11-23.txt).
#: fp32 (3xTF32 tiles, errors vs fp64 at or below cuBLAS's exact SGEMM): 1.42-8.4x faster at
#: M = 16..128 on GPT-2's four linears (cuBLAS 11-83 us, the kernel 6-18 us); at M = 8 it
#: ranges 0.84-1.72x and at M = 1 loses (0.4-0.6x), so rows below 16 keep cuBLAS (9..15 not
#: measured).  Above 128 not measured.  Half types: the tiles lose by ~1 us (0, 0: never).
#: ``SYMSHAPE_SKINNY_MIN_ROWS`` / ``SYMSHAPE_SKINNY_MAX_ROWS`` set fp32's entry (measurements).
ROWS = {torch.float32: (int(os.environ.get("SYMSHAPE_SKINNY_MIN_ROWS", "16")),
                        int(os.environ.get("SYMSHAPE_SKINNY_MAX_ROWS", "128"))),
        torch.float16: (0, 0), torch.bfloat16: (0, 0)}

#: The kernel only pays off when the weight is large enough to need many SMs.
MIN_WEIGHT_ELEMS = 1 << 16

#: ``SYMSHAPE_SKINNY_MM=0`` keeps every matmul on ATen (for before/after measurements).
ENABLED = os.environ.get("SYMSHAPE_SKINNY_MM", "1") != "0"

#: Calls that ran the skinny kernel / ATen (for tests and reports).
CALLS = {"skinny": 0, "aten": 0}

_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
_SMS: dict = {}
_PLANS: dict = {}
_kernels = None


def _kernel_module():
    global _kernels
    if _kernels is None:
        from . import matmul_kernels
        _kernels = matmul_kernels
    return _kernels


def _sm_count(device) -> int:
    n = _SMS.get(device)
    if n is None:
        n = _SMS[device] = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" \
            else 4
    return n


def use_skinny(m: int, n: int, k: int, dtype, device_type: str) -> bool:
    """Whether an ``(m, k) @ (k, n)`` matmul of ``dtype`` runs the skinny kernel (else ATen).

    >>> use_skinny(1, 3072, 768, torch.float32, "cpu")  # CPU without the interpreter: never
    False
    """
    if not ENABLED or (device_type != "cuda" and not (_INTERPRET and device_type == "cpu")):
        return False
    if dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32 and not _INTERPRET:
        return False  # TF32 matmuls: not measured against cuBLAS
    least, most = ROWS.get(dtype, (0, 0))
    return 0 < m and least <= m <= most and n > 0 and k > 0 and n * k >= MIN_WEIGHT_ELEMS


def plan(m: int, n: int, k: int, sms: int, fma: bool = False, block_n: int = 64, block_k: int = 64,
         ctas_per_sm: int = 2) -> tuple:
    """``(BLOCK_M, BLOCK_N, BLOCK_K, split, k_per_split, fma)``: tiles over M and N, and K
    cut into ``split`` slices of ``k_per_split`` (a multiple of BLOCK_K) so that about
    ``ctas_per_sm`` CTAs per SM run.  Default: ``tl.dot`` tiles for tensor cores (BLOCK_M 16,
    32 or 64, the least that covers M up to 64), each slice at least two K blocks.  The
    defaults (BLOCK_N 64, BLOCK_K 64, 2 CTAs per SM) had the best geometric-mean speedup
    over GPT-2's linears at M = 16..64 of the 12 tiles tried on the H100 in 3xTF32.
    ``fma``: exact fp32 on the CUDA cores, BLOCK_M the next power of two up to 8 and
    BLOCK_M x BLOCK_K = 64 (a 64-register block per thread; ``block_n``/``block_k`` ignored).

    >>> plan(16, 768, 768, 132), plan(64, 3072, 768, 132, block_n=128, block_k=32)
    ((16, 64, 64, 6, 128, False), (64, 128, 32, 8, 96, False))
    >>> plan(16, 768, 768, 132, fma=True)
    (8, 64, 8, 11, 72, True)
    """
    if fma:
        # BLOCK_M 16 x BLOCK_K 4 computed wrong sums on the H100 (triton 3.6; right under the
        # interpreter): BLOCK_K stays >= 8, so BLOCK_M <= 8.
        block_m = min(8, 1 << max(0, m - 1).bit_length())
        block_n, block_k = 64, max(8, 64 // block_m)
        min_slice = 64
    else:
        block_m = 16 if m <= 16 else 32 if m <= 32 else 64
        min_slice = 2 * block_k
    tiles = -(-m // block_m) * -(-n // block_n)
    want = max(1, -(-ctas_per_sm * sms // tiles))
    most = max(1, k // min_slice)
    split = min(want, most)
    k_per_split = -(-k // split)
    k_per_split = -(-k_per_split // block_k) * block_k
    split = -(-k // k_per_split)
    return block_m, block_n, block_k, split, k_per_split, fma


def _precision(dtype):
    if dtype != torch.float32:
        return None
    if torch.backends.cuda.matmul.allow_tf32 and not _INTERPRET:
        return "tf32"
    return "tf32x3" if _kernel_module().DOT_HAS_TF32X3 else "ieee"


def skinny_matmul(a: torch.Tensor, b: torch.Tensor, bias=None, config=None, precision=None) -> torch.Tensor:
    """``a @ b + bias`` (``bias`` of shape ``(N,)`` or None) with the skinny kernel, for any
    strides of ``a`` and ``b``; ``config`` overrides :func:`plan`'s choice and ``precision``
    fp32's ``tl.dot`` input precision (benchmarks, tests).

    >>> import os; os.environ.get("TRITON_INTERPRET") != "1" or True
    True
    """
    km = _kernel_module()
    m, k = a.shape
    n = b.shape[1]
    prec = precision if precision is not None and a.dtype == torch.float32 else _precision(a.dtype)
    key = (m, n, k, a.device, prec, bias is not None)
    cfg = config or _PLANS.get(key)
    if cfg is None:
        cfg = _PLANS[key] = plan(m, n, k, _sm_count(a.device))
    block_m, block_n, block_k, split, kps, fma = cfg
    up = _INTERPRET and a.dtype == torch.bfloat16
    out = torch.empty((m, n), dtype=a.dtype, device=a.device)
    grid = (-(-n // block_n), -(-m // block_m), split)
    bias_arg = bias if bias is not None else out
    if split == 1:
        km.skinny_mm[grid](a, b, bias_arg, out, m, n, k, kps, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                           out.stride(0), out.stride(1), HAS_BIAS=bias is not None, PARTIAL=False,
                           PRECISION=prec, UPCAST=up, FMA=fma,
                           BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=4)
        return out
    ws = torch.empty((split, m, n), dtype=torch.float32, device=a.device)
    km.skinny_mm[grid](a, b, bias_arg, ws, m, n, k, kps, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                       n, 1, HAS_BIAS=False, PARTIAL=True, PRECISION=prec, UPCAST=up, FMA=fma,
                       BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=4)
    block = 1024
    km.split_sum[(-(-(m * n) // block),)](ws, bias_arg, out, m, n, split, out.stride(0), out.stride(1),
                                          HAS_BIAS=bias is not None, BLOCK=block, num_warps=4)
    return out


def plain_operands(a, b, bias) -> bool:
    """Whether ``a @ b (+ bias)`` is a matmul a Triton kernel of ours may compute: 2-D operands of
    one dtype and device whose sizes agree, a bias of one contiguous row of N (or none), and no
    autograd history to record (the kernels record none).

    >>> a, b = torch.randn(3, 4), torch.randn(4, 5)
    >>> plain_operands(a, b, torch.randn(5)), plain_operands(a, b, torch.randn(3, 5)), plain_operands(a, b.double(), None)
    (True, False, False)
    """
    if a.dim() != 2 or b.dim() != 2 or a.dtype != b.dtype or a.device != b.device or a.shape[1] != b.shape[0]:
        return False
    if bias is not None and (not isinstance(bias, torch.Tensor) or bias.dim() != 1 or bias.dtype != a.dtype
                             or bias.device != a.device or bias.shape[0] != b.shape[1] or bias.stride(0) != 1):
        return False
    return not (torch.is_grad_enabled() and (a.requires_grad or b.requires_grad
                                             or (bias is not None and bias.requires_grad)))


def _eligible(a, b, bias) -> bool:
    if not plain_operands(a, b, bias):
        return False
    # The sizes first: triton is imported only where the kernel could run.
    if not use_skinny(a.shape[0], b.shape[1], a.shape[1], a.dtype, a.device.type):
        return False
    km = _kernel_module()
    # fp32's measured win is 3xTF32's: exact "ieee" tiles lose to cuBLAS.
    return km.DOT_HAS_PRECISION and (a.dtype != torch.float32 or km.DOT_HAS_TF32X3)


def mm(a, b):
    """``torch.mm(a, b)``, on the skinny kernel where :func:`use_skinny` says it wins."""
    if _eligible(a, b, None):
        return kernel_or_aten("skinny_mm", lambda: _counted(skinny_matmul, a, b), lambda: _aten(torch.mm, a, b))
    return _aten(torch.mm, a, b)


def _counted(fn, *args):
    CALLS["skinny"] += 1
    return fn(*args)


def _aten(fn, *args, **kwargs):
    CALLS["aten"] += 1
    return fn(*args, **kwargs)


def addmm(bias, a, b, *, beta=1, alpha=1):
    """``torch.addmm(bias, a, b)``, on the skinny kernel (bias fused) where it wins; a
    ``beta``/``alpha`` other than 1 or a bias that is not one row of N runs ATen."""
    if beta == 1 and alpha == 1 and _eligible(a, b, bias):
        return kernel_or_aten("skinny_mm", lambda: _counted(skinny_matmul, a, b, bias),
                              lambda: _aten(torch.addmm, bias, a, b))
    return _aten(torch.addmm, bias, a, b, beta=beta, alpha=alpha)


def extern_calls(dtype=None) -> dict:
    """ATen overload -> the call-time chooser that replaces it in compiled Triton programs,
    for matmuls whose result has ``dtype`` (any dtype when None); empty where :data:`ROWS`
    enables no rows for it: the choice would cost host time per call and always pick ATen
    (and an fp16 program keeps its addmm + t fused into one ``F.linear``).  Read when a
    variant is planned.

    >>> extern_calls(torch.float16)
    {}
    >>> extern_calls(torch.float32) == {} or torch.ops.aten.mm.default in extern_calls(torch.float32)
    True
    """
    rows = [ROWS.get(dtype, (0, 0))] if dtype is not None else list(ROWS.values())
    if not ENABLED or not any(most for _, most in rows):
        return {}
    aten = torch.ops.aten
    return {aten.mm.default: mm, aten.addmm.default: addmm}


__all__ = ["mm", "addmm", "skinny_matmul", "use_skinny", "plan", "extern_calls", "plain_operands", "ROWS", "CALLS"]
