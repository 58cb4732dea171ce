"""Shape checks of eager's scatter-into-a-view ops and ``index_put``.

torch's meta kernels for ``slice_scatter``, ``select_scatter`` and
``diagonal_scatter`` return a tensor like ``self`` without checking that
``src`` has the shape of the view it is written into; ``index_put``'s does
not check that the values broadcast to the indexed shape, nor that a
boolean mask has the shape of the dims it indexes.  Eager checks all of
them.

Example::

    >>> import torch
    >>> from shapes.eager_checks.scatter import select_scatter_checks
    >>> [str(c) for c, m in select_scatter_checks(torch.empty(3, 4, 5), torch.empty(3, 6), 1, 0)]
    ['True', 'False']
"""
from __future__ import annotations

import sympy
import torch

from .conv import size_expr, sizes_of


def _same_shape(src, shape, what="src"):
    text = "[" + ", ".join(str(s) for s in shape) + "]"
    msg = f"expected {what} to have a size equal to the slice of self. {what} size = {sizes_of(src)}, slice size = {text}"
    if src.dim() != len(shape):
        return [(sympy.false, msg)]
    return [(sympy.And(*[sympy.Eq(size_expr(a), b) for a, b in zip(src.shape, shape)]), msg)]


def _dim(d, n):
    return d + n if d < 0 else d


def _bound(v, size):
    """A slice bound as eager normalizes it: negative counts from the end, then clamped to [0, size]."""
    v = size_expr(v)
    if v.is_number and v < 0:
        return sympy.Max(v + size, 0)
    return sympy.Min(v, size)


def slice_scatter_checks(self, src, dim=0, start=None, end=None, step=1):
    if self.dim() == 0:
        return []
    d = _dim(dim, self.dim())
    size = size_expr(self.shape[d])
    lo = sympy.Integer(0) if start is None else _bound(start, size)
    hi = size if end is None else _bound(end, size)
    step = size_expr(step)
    length = sympy.Max((hi - lo + step - 1) // step, 0) if step != 1 else sympy.Max(hi - lo, 0)
    shape = [size_expr(s) for s in self.shape]
    shape[d] = length
    return _same_shape(src, shape)


def select_scatter_checks(self, src, dim, index):
    if self.dim() == 0:
        return []
    d = _dim(dim, self.dim())
    size, i = size_expr(self.shape[d]), size_expr(index)
    in_range = (sympy.And(sympy.Ge(i, -size), sympy.Lt(i, size)),
                f"select(): index {i} out of range for tensor of size {sizes_of(self)} at dimension {d}")
    return [in_range] + _same_shape(src, [size_expr(s) for i, s in enumerate(self.shape) if i != d])


def diagonal_scatter_checks(self, src, offset=0, dim1=0, dim2=1):
    if self.dim() < 2:
        return []
    d1, d2 = _dim(dim1, self.dim()), _dim(dim2, self.dim())
    s1, s2, off = size_expr(self.shape[d1]), size_expr(self.shape[d2]), size_expr(offset)
    if off.is_number and off < 0:
        n = sympy.Max(sympy.Min(s1 + off, s2), 0)
    else:
        n = sympy.Max(sympy.Min(s1, s2 - off), 0)
    shape = [size_expr(s) for i, s in enumerate(self.shape) if i not in (d1, d2)] + [n]
    return _same_shape(src, shape)


def index_put_checks(self, indices, values, accumulate=False):
    """A boolean mask has the shape of the dims it indexes; values broadcast to the indexed shape
    (checked where every index is an integer tensor, whose result shape needs no data)."""
    out = []
    pos = 0
    for idx in indices:
        if idx is None:
            pos += 1
            continue
        if idx.dtype in (torch.bool, torch.uint8):
            for k in range(idx.dim()):
                if pos + k < self.dim():
                    out.append((sympy.Eq(size_expr(idx.shape[k]), size_expr(self.shape[pos + k])),
                                f"The shape of the mask {sizes_of(idx)} at index {k} does not match the shape of the "
                                f"indexed tensor {sizes_of(self)} at index {pos + k}"))
            pos += idx.dim()
        else:
            pos += 1
    if any(i is not None and i.dtype in (torch.bool, torch.uint8) for i in indices):
        return out
    try:
        result = torch.ops.aten.index.Tensor(self, list(indices))
    except (RuntimeError, IndexError):  # the kernel itself reports a bad index; its check comes first
        return out
    r, v = [size_expr(s) for s in result.shape], [size_expr(s) for s in values.shape]
    msg = (f"shape mismatch: value tensor of shape {sizes_of(values)} cannot be broadcast to indexing result of "
           f"shape {sizes_of(result)}")
    if len(v) > len(r):
        # Leading size-1 dims of values are dropped before broadcasting.
        extra = v[:len(v) - len(r)]
        out.append((sympy.And(*[sympy.Eq(e, 1) for e in extra]), msg))
        v = v[len(v) - len(r):]
    for a, b in zip(reversed(v), reversed(r)):
        out.append((sympy.Or(sympy.Eq(a, 1), sympy.Eq(a, b)), msg))
    return out


def ormqr_checks(input, tau, other, left=True, transpose=False):
    if input.dim() < 2 or other.dim() < 2 or tau.dim() < 1:
        return []
    k = -2 if left else -1
    want = sympy.Min(size_expr(other.shape[k]), size_expr(input.shape[-1]))
    return [(sympy.Eq(size_expr(tau.shape[-1]), want),
             f"torch.ormqr: tau.shape[-1] must be equal to min(other.shape[{k}], input.shape[-1])")]


def masked_index_put_checks(self, mask, indices, values, *rest):
    """``_unsafe_masked_index_put_accumulate``: values broadcast to the indexed shape, as for index_put."""
    return index_put_checks(self, indices, values)


def as_strided_checks(x, size, stride, storage_offset=None):
    """The view must lie inside the storage of ``x`` (eager's ``setStorage`` check)."""
    try:
        nbytes = size_expr(x.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError):  # no storage size to compare with: the kernel decides
        return []
    off = size_expr(x.storage_offset() if storage_offset is None else storage_offset)
    sizes, strides = [size_expr(s) for s in size], [size_expr(s) for s in stride]
    item = x.element_size()
    need = (off + sum(((s - 1) * st for s, st in zip(sizes, strides)), sympy.Integer(0)) + 1) * item
    ok = sympy.Or(*[sympy.Eq(s, 0) for s in sizes], sympy.Le(need, nbytes))
    return [(ok, f"setStorage: sizes {sizes}, strides {strides}, storage offset {off}, and itemsize {item} "
                 f"requiring a storage size of {need} are out of bounds for storage of size {nbytes}")]
