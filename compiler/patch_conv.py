"""Patch embeddings (a convolution whose kernel equals its stride) as one matmul, in training graphs.

A ViT's patch embedding is ``Conv2d(C, D, kernel_size=p, stride=p)``: the patches do not
overlap, so the convolution is the image cut into ``p x p`` patches, each flattened to
``C * p * p`` values, times the ``(D, C * p * p)`` weight.  :func:`patch_conv` computes it
that way: the patches (``unfold``, which leaves out the rows and columns past the last
whole patch), a permuted copy and ``F.linear``; its backward is a matmul for the weight, a
sum for the bias and (where the image requires grad) a matmul and the inverse permutation
for the input.

Why it is opt-in (``SYMSHAPE_PATCH_CONV=1``): it was written because cuDNN builds an
execution plan for every new input shape, and a training loop over images of varying size
meets a new shape at most steps.  Measured on an H100 (bf16, batch 8,
``bench/patch_conv_first_calls.py``), cuDNN's first forward + backward at a new size costs a
median 2.95 ms against the matmul's 3.68 ms, so that cost is not there; the matmul is faster
in the steady state from 320 px up (0.43 against 1.00 ms at 512 px).  HF ViT training at 50
random image sizes (``bench/train_compare.py``) ran 1.12x eager with it and 1.13x without, and
dynamo + AOTAutograd took 7 s longer to compile it (their symbolic sizes of the patches are
larger expressions than a convolution's).  For high-resolution images the steady-state win
may pay; the default keeps cuDNN.

The rewrite applies to ``torch.conv2d`` calls of dynamo's graph with a 4-D floating input,
``groups=1``, no padding, no dilation, a stride equal to the kernel's (larger than 1 x 1)
sides, and an output that is not itself the graph's output (its strides are channels-last,
where eager's are contiguous).  Under autocast ``F.linear`` casts as ``conv2d`` does, and the
bias is added in the GEMM's epilogue as cuDNN does.

Example::

    >>> import torch
    >>> x, w, b = torch.randn(2, 3, 35, 48), torch.randn(5, 3, 16, 16), torch.randn(5)
    >>> got = patch_conv(x, w, b, (16, 16))
    >>> torch.allclose(got, torch.conv2d(x, w, b, stride=16), atol=1e-4), tuple(got.shape)
    (True, (2, 5, 2, 3))
"""
from __future__ import annotations

import os

import torch
import torch.fx
import torch.nn.functional as F

from .eager_refusals import refuse_as_eager

_ARG_NAMES = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")


def patch_conv(x: torch.Tensor, weight: torch.Tensor, bias, stride) -> torch.Tensor:
    """``torch.conv2d(x, weight, bias, stride)`` for a 4-D ``x`` and ``stride`` equal to the kernel's
    sides, as one ``F.linear`` over the image's patches.  Where eager refuses the sizes (an image
    smaller than a patch), eager's error is raised.

    >>> patch_conv(torch.randn(1, 3, 8, 8), torch.randn(4, 3, 4, 4), None, (4, 4)).shape
    torch.Size([1, 4, 2, 2])
    """
    n, c, h, w = x.shape
    d, _, p, q = weight.shape
    if h < p or w < q:  # a guard under a trace; eager's message for the empty output
        msg = (f"Calculated output size: ({d}x{(h - p) // p + 1}x{(w - q) // q + 1}). Output size is too small")
        return refuse_as_eager(x, msg, lambda: torch.conv2d(x, weight, bias, stride))
    nh, nw = h // p, w // q
    # unfold, not a slice to nh * p: a slice asks whether it is the whole dim (a guard on
    # whether p divides the side, so a second compile when it first does)
    patches = x.unfold(2, p, p).unfold(3, q, q).permute(0, 2, 3, 1, 4, 5)
    # F.linear of the 4-D patches: the output comes out (n, nh, nw, d), with no reshape back
    out = F.linear(patches.reshape(n, nh, nw, c * p * q), weight.reshape(d, c * p * q), bias)
    return out.permute(0, 3, 1, 2)


def _pair(v):
    if isinstance(v, (tuple, list)) and len(v) == 2 and all(type(e) is int for e in v):
        return tuple(v)
    return (v, v) if type(v) is int else None


def _example(node):
    return node.meta.get("example_value") if isinstance(node, torch.fx.Node) else node


def _patch_stride(node):
    """The stride of a ``torch.conv2d`` node that :func:`patch_conv` computes, else None."""
    kw = {**dict(zip(_ARG_NAMES, node.args)), **node.kwargs}
    x, wt = _example(kw.get("input")), _example(kw.get("weight"))
    if not (isinstance(x, torch.Tensor) and isinstance(wt, torch.Tensor) and x.dim() == 4 and wt.dim() == 4
            and x.dtype.is_floating_point):
        return None
    kernel = tuple(wt.shape[2:])
    if not all(type(k) is int for k in kernel) or kernel[0] * kernel[1] < 2:
        return None
    stride = _pair(kw.get("stride", 1))
    padding = kw.get("padding", 0)
    padding = (0, 0) if padding == "valid" else _pair(padding)
    if (stride != kernel or padding != (0, 0) or _pair(kw.get("dilation", 1)) != (1, 1)
            or kw.get("groups", 1) != 1):
        return None
    if any(u.op == "output" for u in node.users):
        return None
    return stride


def patch_convs_as_matmuls(gm: torch.fx.GraphModule, enabled=None) -> int:
    """Rewrite ``gm``'s (a dynamo graph's) patch-embedding ``torch.conv2d`` calls as
    :func:`patch_conv`; returns how many.  ``enabled``: None reads ``$SYMSHAPE_PATCH_CONV``
    (default off, see above).

    >>> g = torch.fx.Graph()
    >>> x, w = g.placeholder("x"), g.placeholder("w")
    >>> x.meta["example_value"], w.meta["example_value"] = torch.empty(2, 3, 32, 32), torch.empty(8, 3, 16, 16)
    >>> y = g.call_function(torch.conv2d, (x, w, None, (16, 16), (0, 0), (1, 1), 1))
    >>> _ = g.output(g.call_method("flatten", (y, 2)))
    >>> gm = torch.fx.GraphModule(torch.nn.Module(), g)
    >>> xs, ws = torch.randn(2, 3, 32, 32), torch.randn(8, 3, 16, 16)
    >>> patch_convs_as_matmuls(gm, enabled=True), torch.allclose(gm(xs, ws), torch.conv2d(xs, ws, stride=16).flatten(2), atol=1e-4)
    (1, True)
    """
    if enabled is None:
        enabled = os.environ.get("SYMSHAPE_PATCH_CONV", "0") == "1"
    if not enabled:
        return 0
    n = 0
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is not torch.conv2d:
            continue
        stride = _patch_stride(node)
        if stride is None:
            continue
        kw = {**dict(zip(_ARG_NAMES, node.args)), **node.kwargs}
        node.target, node.args, node.kwargs = patch_conv, (kw["input"], kw["weight"], kw.get("bias"), stride), {}
        n += 1
    if n:
        gm.recompile()
    return n


__all__ = ["patch_conv", "patch_convs_as_matmuls"]
