"""Indices computed from positions alone: ``arange`` as a value of the loop index, and
``index.Tensor`` whose indices are such values as a direct load.

Hugging Face builds a padding mask as ``mask[batch_idx, kv_idx]`` with ``batch_idx`` and
``kv_idx`` made by ``arange`` (``transformers.masking_utils``): as ATen calls that is four
``arange`` launches and an ``index`` launch before the kernel that expands the mask.  Here an
integer ``arange`` is ``start + step * i`` computed where it is used, and an ``index`` whose
indices are affine in the output position (proved within the indexed dims for every size
the trace admits, so eager's ``IndexError`` cannot happen) reads ``mask`` at that position:
both fuse into the kernel that uses them.  An index read from memory, or one not proved in
range, stays ATen's ``index`` (which raises like eager).

Example::

    >>> import torch, shapes
    >>> from compiler.lowering import lower
    >>> def rows(m):
    ...     b = torch.arange(m.shape[0])
    ...     return m[b[:, None], torch.arange(m.shape[1])[None, :]] * 2
    >>> lp = lower(shapes.trace(rows, "m: f32[B, T]"))
    >>> [type(i).__name__ for i in lp.items]
    ['StoreItem']
"""
from __future__ import annotations

import sympy
import torch

from .exprs import IndexFacts
from .ir import Const, Op, SizeVal, loop_var
from .lowered import SizeExpr, TensorBox, Unsupported
from .ops_lowering import register, same_device

aten = torch.ops.aten
_INT = (torch.int64, torch.int32)


def _size(lw, a):
    """An ``arange`` bound as sympy: an int, or a SymInt's expression."""
    if isinstance(a, SizeExpr):
        return sympy.sympify(a.expr)
    if isinstance(a, int) and not isinstance(a, bool):
        return sympy.Integer(a)
    raise Unsupported(f"arange bound {a!r}")


@register(aten.arange.default, aten.arange.start, aten.arange.start_step)
def _arange(lw, node, *args, dtype=None, layout=None, device=None, pin_memory=None):
    """An integer ``arange``: ``start + step * i``, a value of the loop index (no tensor)."""
    out = node.meta["val"].dtype
    if out not in _INT or layout not in (None, torch.strided) or (device is not None and not same_device(lw, device)):
        raise Unsupported("arange of a float dtype, another layout or device")
    start, step = sympy.Integer(0), sympy.Integer(1)
    if len(args) == 1:
        _size(lw, args[0])
    elif len(args) >= 2:
        start = _size(lw, args[0])
        _size(lw, args[1])
        if len(args) == 3:
            step = _size(lw, args[2])
    return lw.out_box(node, lambda idx: SizeVal(start + step * idx[0], out))


def _affine(v):
    """``v`` (a kernel value) as a sympy expression of loop positions, where it is integer
    arithmetic on positions and constants; else None."""
    if isinstance(v, SizeVal):
        return sympy.sympify(v.expr) if v.dtype in _INT else None
    if isinstance(v, Const):
        return sympy.Integer(v.value) if isinstance(v.value, int) and not isinstance(v.value, bool) else None
    if isinstance(v, Op) and v.dtype in _INT:
        parts = [_affine(a) for a in v.args]
        if any(p is None for p in parts):
            return None
        if v.op == "add":
            return parts[0] + parts[1]
        if v.op == "sub":
            return parts[0] - parts[1]
        if v.op == "mul":
            return parts[0] * parts[1]
        if v.op == "neg":
            return -parts[0]
        if v.op == "cast" and v.args[0].dtype in _INT:
            return parts[0]
    return None


def _in_range(facts, e, pos, extents, size) -> bool:
    """``0 <= e < size`` wherever each position ``pos[j]`` is in ``[0, extents[j])``: ``e``
    affine in the positions with integer coefficients, checked at its two extremes."""
    e = sympy.expand(e)
    coeffs = [e.coeff(p) for p in pos]
    base = sympy.expand(e - sum(c * p for c, p in zip(coeffs, pos)))
    if base.free_symbols & set(pos) or any(not c.is_Integer for c in coeffs):
        return False  # not affine in the positions (a product, a floor division of one)
    lo = hi = base
    for c, n in zip(coeffs, extents):
        if c > 0:
            hi = hi + c * (sympy.sympify(n) - 1)
        elif c < 0:
            lo = lo + c * (sympy.sympify(n) - 1)
    return facts.nonneg(lo) and facts.nonneg(size - 1 - hi)


@register(aten.index.Tensor)
def _index(lw, node, self, indices):
    """``self[i0, i1, ...]`` (the leading dims, no ``None``) with integer indices made from
    positions: a load of ``self`` at the computed position, proved in range."""
    if not isinstance(self, TensorBox) or not indices or any(not isinstance(i, TensorBox) for i in indices):
        raise Unsupported("index with a None or a non-tensor index")
    if any(i.dtype not in _INT for i in indices):
        raise Unsupported("index by a mask")
    k = len(indices)
    shape = tuple(node.meta["shape"])
    rest = len(self.shape) - k
    bshape = shape[:len(shape) - rest]
    pos = [loop_var(f"z{j}") for j in range(len(bshape))]
    facts = IndexFacts(lw.tp.env)
    exprs = []
    for j, ind in enumerate(indices):
        e = _affine(lw.value(ind, tuple(pos), bshape))
        if e is None or not _in_range(facts, e, pos, bshape, sympy.sympify(self.shape[j])):
            raise Unsupported("an index read from memory, or not proved within its dim")
        exprs.append(e)

    def fn(idx):
        at = dict(zip(pos, idx[:len(bshape)]))
        return self(tuple(e.xreplace(at) for e in exprs) + tuple(idx[len(bshape):]))
    return lw.out_box(node, fn)
