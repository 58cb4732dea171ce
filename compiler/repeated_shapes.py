"""Whether the call a compiled program is running is at a shape it has met twice before.

Some kernels plan per shape: cuDNN's attention builds an execution plan at each new shape
(8.7 ms of host time per call on an H200 with torch 2.11 where a decode step's KV length grows
by one), which a dynamic-shape program would pay at every size, so compiled programs keep it
off.  A shape that keeps coming back (a served prompt length, an encoder at a fixed size) pays
the plan once and then runs cuDNN's kernel, as eager does: BERT with a mask at (1, 4096) bf16
ran cuDNN's flash kernel in 0.80 ms per call for 4 layers on the H100, against 2.78 ms for
ATen's memory-efficient kernel (bench/results/bert_b1_kernels_h100_s12_2026-11-27.txt).
:class:`~compiler.runtime.CompiledProgram` runs a shape's third and later calls under
:func:`repeated_shape`; the SDPA callers ask :func:`cudnn_allowed`.

Example::

    >>> import torch
    >>> q = torch.randn(1, 2, 3, 8)
    >>> with repeated_shape():
    ...     _REPEATED[0], cudnn_allowed(q)  # a CPU tensor: cuDNN is a CUDA kernel
    (True, False)
    >>> _REPEATED[0]
    False
"""
from __future__ import annotations

import contextlib

import torch

_REPEATED = [False]
_capturing = torch.cuda.is_current_stream_capturing


@contextlib.contextmanager
def repeated_shape():
    """Mark the call running inside as one at a shape met twice before (see the module docstring)."""
    was = _REPEATED[0]
    _REPEATED[0] = True
    try:
        yield
    finally:
        _REPEATED[0] = was


def cudnn_allowed(q) -> bool:
    """Whether an SDPA call on query ``q`` may let ATen choose cuDNN's kernel: at a repeated
    shape, and not while a CUDA graph captures (the graph would keep the kernel of one shape)."""
    return _REPEATED[0] and getattr(q, "is_cuda", False) and not _capturing()


__all__ = ["cudnn_allowed", "repeated_shape"]
