"""Eager's C++ memory-format choice (``suggest_memory_format``), and the composite kernels that ask it.

ATen's C++ composite kernels ask ``suggest_memory_format`` of a symbolic
tensor through c10's templated ``is_channels_last_strides_2d``, whose size
comparisons reach symshape through the generic ``c10/core/SymInt.h``
operators: the size-1 policy cannot tell them from a semantic question, so
``if (sizes[d] > 1) min *= sizes[d]`` became a guard ``B > 1`` that rejects
``B == 1`` (Swin's pooler: ``AdaptiveAvgPool1d`` of a transposed input).
Here the same kernels run in Python with the same answers.  That comparison
needs no question at all: it runs after ``sizes[d] == 0`` returned, so
``sizes[d] >= 1``, and at ``sizes[d] == 1`` multiplying by it leaves ``min``
as it was; ``min *= sizes[d]`` is equal to both branches at every size.

Example::

    >>> import torch
    >>> suggest_memory_format(torch.randn(1, 5, 8).transpose(1, 2).unsqueeze(-2))  # Swin's pooler input
    torch.channels_last
"""
from __future__ import annotations

import torch

_ORDER = {4: (1, 3, 2, 0), 5: (1, 4, 3, 2, 0)}


def _strides_like_channels_last(sizes, strides) -> bool:
    """``is_channels_last_strides_2d_s4`` / ``_3d_s5`` of c10/core/MemoryFormat.h, question for question
    except ``sizes[d] > 1`` (see the module docstring)."""
    order = _ORDER[len(sizes)]
    if strides[1] == 0:
        return False
    low = 0
    for d in order:
        if sizes[d] == 0:
            return False
        if strides[d] < low:
            return False
        # N111 and N11W tensors: NCHW is the default for ambiguous cases.
        if d == 0 and low == strides[1]:
            return False
        low = strides[d] * sizes[d]
    return True


def suggest_memory_format(t: torch.Tensor) -> torch.memory_format:
    """``TensorBase::suggest_memory_format()`` of ATen (``channels_last_strides_exact_match=false``).

    >>> suggest_memory_format(torch.randn(2, 3, 4, 5))
    torch.contiguous_format
    """
    if t.layout == torch.strided and t.dim() in _ORDER:
        if _strides_like_channels_last(t.shape, t.stride()):
            return torch.channels_last if t.dim() == 4 else torch.channels_last_3d
    return torch.contiguous_format


def adaptive_avg_pool2d(input: torch.Tensor, output_size):
    """ATen's C++ ``adaptive_avg_pool2d`` (a composite: the mean over H and W for a 1x1 output).

    >>> x = torch.randn(2, 8, 1, 5).transpose(1, 3)
    >>> y = adaptive_avg_pool2d(x, [1, 1])
    >>> (y.shape, y.stride()) == (torch.ops.aten.adaptive_avg_pool2d.default(x, [1, 1]).shape,
    ...                           torch.ops.aten.adaptive_avg_pool2d.default(x, [1, 1]).stride())
    True
    """
    torch._check(len(output_size) == 2, lambda: "adaptive_avg_pool2d: output_size must be 2")
    torch._check(output_size[0] >= 0 and output_size[1] >= 0, lambda: (
        "adaptive_avg_pool2d: elements of output_size must be greater than or equal to 0 "
        f"but received {{{output_size[0]}, {output_size[1]}}}"))
    if not input.is_quantized and output_size[0] == 1 and output_size[1] == 1:
        out = input.mean((-1, -2), keepdim=True)
        if suggest_memory_format(input) == torch.channels_last:
            n, c = input.shape[0], input.shape[1]
            out.as_strided_((n, c, 1, 1), (c, 1, c, c))
        return out
    return torch.ops.aten._adaptive_avg_pool2d.default(input, output_size)
