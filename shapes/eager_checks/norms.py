"""Outputs whose CPU shape differs from the meta kernel's: batch norm in eval mode.

Eager's CPU ``native_batch_norm`` with ``training=False`` returns empty
``save_mean`` and ``save_invstd`` (shape ``(0,)``); the meta kernel returns
them with the channel count.

Example::

    >>> import torch
    >>> from shapes.eager_checks.norms import batch_norm_output
    >>> x, c = torch.empty(2, 3, 4, device="meta"), torch.empty(3, device="meta")
    >>> out = torch.ops.aten.native_batch_norm(x, c, c, c, c, False, 0.1, 1e-5)
    >>> [tuple(t.shape) for t in batch_norm_output(torch.ops.aten.native_batch_norm.default, (x, c, c, c, c, False, 0.1, 1e-5), {}, out)]
    [(2, 3, 4), (0,), (0,)]
"""
from __future__ import annotations

import torch

aten = torch.ops.aten


def batch_norm_output(func, args, kwargs, out):
    training = args[5] if len(args) > 5 else kwargs.get("training")
    if training or not isinstance(out, (tuple, list)) or len(out) != 3:
        return out
    y, mean, invstd = out
    empty = [torch.empty((0,), dtype=t.dtype, device=t.device) for t in (mean, invstd)]
    return type(out)([y, *empty])


OUTPUTS = {
    aten.native_batch_norm.default: batch_norm_output,
    aten._native_batch_norm_legit.default: batch_norm_output,
}
