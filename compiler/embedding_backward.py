"""An embedding's weight gradient in compiled Triton programs: one atomic-add kernel, or ATen.

ATen's CUDA ``embedding_dense_backward`` sorts the ids when there are more than 3072 of them
(a training batch of 8 x 587 tokens has 4696): a radix sort, then segment offsets, partial
sums per segment and their scatter -- about ten launches per embedding, and a language model
has two or three embeddings (BERT: words, positions, token types).  :func:`embedding_dense_backward`
replaces that op in the Triton target's compiled programs
(:meth:`~compiler.codegen.triton.TritonTarget.extern_call`) with one zero fill and one kernel
(:mod:`compiler.embedding_kernels`) that adds each row of the gradient into its id's row with
float32 atomic adds, as Inductor does.

Atomic adds make the order of the additions, so the last bits of a row hit by several ids,
vary from run to run.  Where the user asked for reproducibility
(``torch.use_deterministic_algorithms(True)``) the call stays on ATen, as it does for
``scale_grad_by_freq`` (a count per id first) and on the CPU without the Triton interpreter,
and for a half-precision table whose float32 accumulator would pass :data:`HALF_ACC_BYTES`.

Example::

    >>> import torch
    >>> g, ids = torch.ones(4, 3), torch.tensor([0, 2, 2, 1])
    >>> embedding_dense_backward(g, ids, 3, -1, False)  # CPU without the interpreter: ATen
    tensor([[1., 1., 1.],
            [1., 1., 1.],
            [2., 2., 2.]])
"""
from __future__ import annotations

import os

import torch

from .codegen.triton_classes import pow2_block
from .kernel_fallback import kernel_or_aten

#: ``SYMSHAPE_EMBEDDING_KERNEL=0`` keeps ATen's op (before/after measurements).
ENABLED = os.environ.get("SYMSHAPE_EMBEDDING_KERNEL", "1") != "0"

#: Rows per program: a chunk of one id (token types) is summed before its single atomic add.
ROWS = 32

#: Bytes of float32 accumulator a half-precision gradient may take (the kernel sums in float32,
#: then rounds once): past it ATen's op runs, which keeps the weight's gradient in the half type
#: (a 128k x 4096 vocabulary would need 2 GiB of float32 besides its 1 GiB result).
HALF_ACC_BYTES = 512 << 20

#: Calls that ran the kernel / ATen (for tests and reports).
CALLS = {"kernel": 0, "aten": 0}

_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
_kernels = None


def _kernel():
    global _kernels
    if _kernels is None:
        from . import embedding_kernels
        _kernels = embedding_kernels
    return _kernels.embedding_grad


def uses_kernel(grad: torch.Tensor, indices: torch.Tensor, scale_grad_by_freq: bool, num_weights: int = 0) -> bool:
    """Whether :func:`embedding_dense_backward` runs the kernel for these arguments (else ATen).

    >>> uses_kernel(torch.ones(4, 3), torch.tensor([0, 2, 2, 1]), False)  # CPU, no interpreter
    False
    """
    dev = grad.device.type
    if not ENABLED or scale_grad_by_freq or torch.are_deterministic_algorithms_enabled():
        return False
    if dev != "cuda" and not (_INTERPRET and dev == "cpu"):
        return False
    if not (grad.dtype in (torch.float32, torch.float16, torch.bfloat16) and grad.dim() >= 1
            and indices.dtype in (torch.int64, torch.int32) and indices.device == grad.device
            and grad.numel() // max(1, grad.shape[-1]) == indices.numel()):
        return False
    return grad.dtype == torch.float32 or num_weights * grad.shape[-1] * 4 <= HALF_ACC_BYTES


def embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    """``aten.embedding_dense_backward``: ``[num_weights, D]``, row ``i`` the sum of the rows of
    ``grad_output`` whose id is ``i`` (``padding_idx``'s row stays 0), in ``grad_output``'s dtype,
    summed in float32."""
    if not uses_kernel(grad_output, indices, scale_grad_by_freq, num_weights):
        return _by_aten(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)
    return kernel_or_aten("embedding_grad", lambda: _by_kernel(grad_output, indices, num_weights, padding_idx),
                          lambda: _by_aten(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq))


def _by_aten(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    CALLS["aten"] += 1
    return torch.ops.aten.embedding_dense_backward.default(grad_output, indices, num_weights, padding_idx,
                                                           scale_grad_by_freq)


def _by_kernel(grad_output, indices, num_weights, padding_idx):
    CALLS["kernel"] += 1
    d = grad_output.shape[-1]
    g = grad_output.reshape(-1, d).contiguous()
    ids = indices.reshape(-1).contiguous()
    n = ids.numel()
    out = torch.zeros((num_weights, d), dtype=torch.float32, device=grad_output.device)
    if n and d:
        block_d = pow2_block(d, 256)
        grid = (-(-n // ROWS), -(-d // block_d))
        _kernel()[grid](g, ids, out, n, d, padding_idx, ROWS=ROWS, BLOCK_D=block_d, num_warps=4)
    return out if grad_output.dtype == torch.float32 else out.to(grad_output.dtype)


def extern_calls() -> dict:
    """ATen overload -> replacement in compiled Triton programs (empty when disabled).

    >>> torch.ops.aten.embedding_dense_backward.default in extern_calls()
    True
    """
    if not ENABLED:
        return {}
    return {torch.ops.aten.embedding_dense_backward.default: embedding_dense_backward}


__all__ = ["embedding_dense_backward", "uses_kernel", "extern_calls", "CALLS", "ROWS",
           "HALF_ACC_BYTES"]
