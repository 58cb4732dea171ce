"""Linear layers whose output width breaks cuBLAS's alignment: the weight padded once, the output sliced.

A half-precision ``F.linear(x, w)`` with ``w.shape[0]`` (the output width N) not a
multiple of 8 gives cuBLAS an output leading dimension that is not 16-byte
aligned, and it falls back to an old kernel: on the H100, GPT-2's tied LM head
(N = 50257 vocabulary) ran ``cutlass_75_tensorop_f16_s1688gemm`` at 1.84 ms per call
at (2, 999), 76% of the program's GPU time, where Inductor (which pads the matmul)
ran 0.24 ms (bench/results/gpu_host_probe_gpt2_h100_gpu3call2_2026-11-26.txt).
:func:`padded_linear` multiplies by a copy of the weight padded to a multiple of
:data:`ALIGN` rows (made once per weight and kept while the weight lives and is
not modified in place) and returns the first N columns, contiguous like eager's.

:func:`wants_padding` says where the compiler uses it (static N, half precision,
CUDA, wide enough that the copy pays).

Example::

    >>> import torch
    >>> x, w, b = torch.randn(3, 16), torch.randn(70, 16), torch.randn(70)
    >>> torch.allclose(padded_linear(x, w, b), torch.nn.functional.linear(x, w, b), atol=1e-5)
    True
    >>> wants_padding(50257, torch.float16, "cuda"), wants_padding(50304, torch.float16, "cuda")
    (True, False)
"""
from __future__ import annotations

import weakref

import sympy
import torch

from .wrapper import BufSlot, ExternStep

#: Rows the padded weight is rounded up to (16-byte aligned rows in fp16, whole GEMM tiles).
ALIGN = 64
#: Narrower outputs keep eager's call: the output copy would cost more than the kernel saves.
MIN_WIDTH = 1024

# id(weight) -> (weakref to it, its version, weakref to the bias or None, its version, padded w, padded b)
_PADDED: dict = {}


def wants_padding(n, dtype, device_type) -> bool:
    """Whether a linear layer of static output width ``n`` runs padded (see the module docstring)."""
    return (isinstance(n, int) and n % 8 != 0 and n >= MIN_WIDTH and device_type == "cuda"
            and dtype in (torch.float16, torch.bfloat16))


def _padded(w, b):
    hit = _PADDED.get(id(w))
    if hit is not None:
        wref, wver, bref, bver, wp, bp = hit
        if wref() is w and wver == w._version and (
                (b is None and bref is None) or (bref is not None and bref() is b and bver == b._version)):
            return wp, bp
    n = w.shape[0]
    rows = -(-n // ALIGN) * ALIGN
    with torch.no_grad():
        wp = w.new_zeros((rows, *w.shape[1:]))
        wp[:n] = w
        bp = None
        if b is not None:
            bp = b.new_zeros((rows,))
            bp[:n] = b
    if hit is None or hit[0]() is not w:
        # The entry goes with the weight: no padded copy outlives it, and a new tensor
        # that reuses its id never meets a stale entry.
        weakref.finalize(w, _PADDED.pop, id(w), None)
    _PADDED[id(w)] = (weakref.ref(w), w._version, None if b is None else weakref.ref(b),
                      None if b is None else b._version, wp, bp)
    return wp, bp


def padded_linear(x, w, b=None):
    """``F.linear(x, w, b)`` computed with ``w`` padded to a multiple of :data:`ALIGN` rows."""
    n = w.shape[0]
    wp, bp = _padded(w, b)
    return torch.nn.functional.linear(x, wp, bp)[..., :n].contiguous()


def padded_steps(plan, buffers, device_type) -> list:
    """``plan`` with each ``F.linear`` step whose weight (a buffer of ``buffers``) has a static
    output width that :func:`wants_padding` names calling :func:`padded_linear` instead.

    >>> from compiler.ir import Buffer
    >>> w = Buffer(name="w", shape=(sympy.Integer(50257), sympy.Integer(768)), strides=(), dtype=torch.float16, kind="const")
    >>> step = ExternStep(torch.nn.functional.linear, (BufSlot("x"), BufSlot("w")), {}, "y")
    >>> [s.target.__name__ for s in padded_steps([step], {"w": w}, "cuda")]
    ['padded_linear']
    >>> [s.target.__name__ for s in padded_steps([step], {"w": w}, "cpu")]
    ['linear']
    """
    out = []
    for s in plan:
        if isinstance(s, ExternStep) and s.target is torch.nn.functional.linear and len(s.args) >= 2 \
                and isinstance(s.args[1], BufSlot):
            buf = buffers.get(s.args[1].name)
            n = buf.shape[0] if buf is not None and len(buf.shape) == 2 else None
            n = int(n) if isinstance(n, (int, sympy.Integer)) else None
            if buf is not None and wants_padding(n, buf.dtype, device_type):
                s = ExternStep(padded_linear, s.args, s.kwargs, s.out)
        out.append(s)
    return out


__all__ = ["padded_linear", "padded_steps", "wants_padding", "ALIGN", "MIN_WIDTH"]
