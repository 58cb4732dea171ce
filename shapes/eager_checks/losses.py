"""The shape checks of eager's ``nll_loss`` kernels (``LossNLL.cpp``, ``LossNLL2d.cpp``).

The class-weight size is what torch's meta route misses; the other checks
are eager's too so the first failing one reports eager's message.

Example::

    >>> import torch
    >>> from shapes.eager_checks.losses import nll_loss_checks
    >>> x, t, w = torch.empty(4, 3), torch.empty(4, dtype=torch.long), torch.empty(5)
    >>> [str(c) for c, m in nll_loss_checks(x, t, w)]
    ['True', 'False']
"""
from __future__ import annotations

import sympy
import torch

from .conv import size_expr, sizes_of


def _numel(t):
    n = sympy.Integer(1)
    for s in t.shape:
        n = n * size_expr(s)
    return n


def nll_loss_checks(x, target, weight, *rest):
    """[(condition, message)] of ``aten.nll_loss_forward`` (input 1-D or 2-D)."""
    if not (0 < x.dim() <= 2) or target.dim() > 1:
        return []  # ranks are static: the meta kernel reports them
    out = []
    if not (x.dim() == 1 and target.dim() == 0):
        out.append((sympy.Eq(size_expr(x.shape[0]), size_expr(target.shape[0])),
                    f"size mismatch (got input: {sizes_of(x)}, target: {sizes_of(target)})"))
    if weight is not None:
        n = size_expr(x.shape[-1])
        ok = sympy.Eq(_numel(weight), n) if weight.dim() == 1 else sympy.false
        out.append((ok, f"weight tensor should be defined either for all {n} classes or no classes but got "
                        f"weight tensor of shape: {sizes_of(weight)}"))
    return out


def nll_loss2d_checks(x, target, weight, *rest):
    """[(condition, message)] of ``aten.nll_loss2d_forward`` (input N, C, H, W)."""
    if x.dim() != 4 or target.dim() != 3:
        return []
    out = []
    if weight is not None:
        out.append((sympy.Eq(_numel(weight), size_expr(x.shape[1])),
                    "weight tensor should be defined either for all or no classes"))
    same = sympy.And(*[sympy.Eq(size_expr(x.shape[i]), size_expr(target.shape[j])) for i, j in ((0, 0), (2, 1), (3, 2))])
    out.append((same, f"size mismatch (got input: {sizes_of(x)} , target: {sizes_of(target)}"))
    return out
