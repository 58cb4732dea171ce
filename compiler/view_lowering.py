"""Lowerings of ATen's view ops as index remaps, and of ``cat`` / ``slice_backward`` as ``where``s.

A view's lowered value reads its source at a remapped index (no copy); a
reshape pairs runs of dims whose size products agree (:func:`view_remap`).
The handlers register into :data:`compiler.ops_lowering.HANDLERS` when this
module is imported (:mod:`compiler.lowering` does).

Example::

    >>> import sympy
    >>> B, T = sympy.symbols("B T", positive=True, integer=True)
    >>> remap = view_remap((B, T, 4), (B * T, 4))
    >>> i, j = sympy.symbols("i j", integer=True)
    >>> remap((i, j))[2]
    j
"""
from __future__ import annotations

import sympy
import torch

from shapes.functions import FloorDiv, PyMod

from .ir import Const, Op, SizeVal
from .lowered import TensorBox, Unsupported, cast
from .ops_lowering import register

aten = torch.ops.aten


def _dt(node):
    return node.meta["val"].dtype


def _view_box(lw, node, src, remap):
    box = lw.out_box(node, lambda idx: src(remap(idx)))
    box.view_of = src
    return box


def _groups(src, dst):
    """Pair runs of dims with equal size products; None when sizes do not pair up."""
    s_nz = [i for i, v in enumerate(src) if v != 1]
    d_nz = [i for i, v in enumerate(dst) if v != 1]
    groups, i, j = [], 0, 0
    while i < len(d_nz) and j < len(s_nz):
        gd, gs = [d_nz[i]], [s_nz[j]]
        pd, ps = dst[d_nz[i]], src[s_nz[j]]
        i, j = i + 1, j + 1
        while sympy.expand(pd - ps) != 0:
            ratio = sympy.cancel(ps / pd)
            num, den = sympy.fraction(ratio)
            if den == 1 and i < len(d_nz):
                gd.append(d_nz[i]); pd = pd * dst[d_nz[i]]; i += 1  # noqa: E702
            elif num == 1 and j < len(s_nz):
                gs.append(s_nz[j]); ps = ps * src[s_nz[j]]; j += 1  # noqa: E702
            else:
                return None
        groups.append((gd, gs))
    if i != len(d_nz) or j != len(s_nz):
        return None
    return groups


def view_remap(src, dst):
    """Index map dst idx -> src idx of a contiguous reshape from ``src`` to ``dst``."""
    src, dst = tuple(src), tuple(dst)
    groups = _groups(src, dst) or [([i for i, v in enumerate(dst) if v != 1],
                                    [i for i, v in enumerate(src) if v != 1])]

    def remap(idx):
        out = [sympy.Integer(0)] * len(src)
        for gd, gs in groups:
            lin = sympy.Integer(0)
            for d in gd:
                lin = lin * dst[d] + idx[d]
            rem = lin
            for s in reversed(gs[1:]):
                out[s] = PyMod(rem, src[s])
                rem = FloorDiv(rem, src[s])
            if gs:
                out[gs[0]] = rem
        return tuple(out)
    return remap


@register(aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.unsqueeze.default,
          aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.alias.default, aten.detach.default,
          aten.lift_fresh_copy.default)
def _view(lw, node, src, *rest, **kw):
    remap = view_remap(src.shape, node.meta["shape"])
    box = _view_box(lw, node, src, remap)
    if node.target == aten.lift_fresh_copy.default:
        box.view_of = None  # a copy, not a view
    return box


@register(aten.expand.default)
def _expand(lw, node, src, sizes, implicit=False):
    out = tuple(node.meta["shape"])
    n, k = len(out), len(src.shape)
    return _view_box(lw, node, src, lambda idx: tuple(
        sympy.Integer(0) if (src.shape[i] == 1 and out[n - k + i] != 1) else idx[n - k + i] for i in range(k)))


@register(aten.permute.default)
def _permute(lw, node, src, dims):
    n = len(src.shape)
    dims = [d % n for d in dims]

    def remap(idx):
        out = [None] * n
        for i, d in enumerate(dims):
            out[d] = idx[i]
        return tuple(out)
    return _view_box(lw, node, src, remap)


@register(aten.t.default, aten.transpose.int)
def _transpose(lw, node, src, d0=0, d1=1):
    n = len(src.shape)
    if n < 2:
        return _view_box(lw, node, src, lambda idx: idx)
    dims = list(range(n))
    dims[d0 % n], dims[d1 % n] = dims[d1 % n], dims[d0 % n]
    return _permute(lw, node, src, dims)


@register(aten.slice.Tensor)
def _slice(lw, node, src, dim=0, start=None, end=None, step=1):
    n = len(src.shape)
    dim = dim % n
    size = src.shape[dim]
    if start is None:
        start = 0
    if not isinstance(start, int) or not isinstance(step, int) or step < 1:
        raise Unsupported("symbolic slice start")
    if start < 0:
        if not size.is_Integer:
            raise Unsupported("negative start on a symbolic dim")
        start = max(0, start + int(size))
    return _view_box(lw, node, src, lambda idx: tuple(
        idx[i] if i != dim else start + step * idx[i] for i in range(n)))


@register(aten.slice_backward.default)
def _slice_backward(lw, node, grad, input_sizes, dim, start, end, step):
    """The gradient of a unit-step slice: ``grad`` placed at ``start`` along ``dim`` in zeros of
    ``input_sizes``, as a ``where`` (fused; an fp32 activation-sized tensor otherwise).  ``grad``
    is read at an index clamped into its range (both sides of a ``where`` are computed), which
    needs its length along ``dim`` at least 1, proved from the trace's facts."""
    shape, dt = tuple(node.meta["shape"]), _dt(node)
    n = len(shape)
    if not isinstance(grad, TensorBox) or len(grad.shape) != n or step != 1 or not isinstance(start, int) or start < 0:
        raise Unsupported("slice_backward with a step, a symbolic or negative start")
    d = dim % n
    length = sympy.sympify(grad.shape[d])
    if lw.tp.env.static_bool(sympy.Ge(length, 1), log=False) is not True:
        raise Unsupported("slice_backward of a slice that may be empty")

    def fn(idx):
        i = idx[d]
        j = sympy.Max(sympy.Min(i - start, length - 1), 0)
        inside = Op("and", (Op("ge", (SizeVal(i, torch.int64), Const(start, torch.int64)), torch.bool),
                                    Op("lt", (SizeVal(i, torch.int64), SizeVal(start + length, torch.int64)), torch.bool)),
                    torch.bool)
        v = cast(grad(tuple(idx[:d]) + (j,) + tuple(idx[d + 1:])), dt)
        return Op("where", (inside, v, Const(0, dt)), dt)
    return lw.out_box(node, fn)


@register(aten.select.int)
def _select(lw, node, src, dim, index):
    n = len(src.shape)
    dim = dim % n
    if not isinstance(index, int):
        raise Unsupported("symbolic select index")
    if index < 0:
        if not src.shape[dim].is_Integer:
            raise Unsupported("negative index on a symbolic dim")
        index += int(src.shape[dim])
    return _view_box(lw, node, src, lambda idx: tuple(idx[:dim]) + (sympy.Integer(index),) + tuple(idx[dim:]))


@register(aten.cat.default)
def _cat(lw, node, tensors, dim=0):
    """``cat`` as one value per output element: a ``where`` over which input holds it.

    Every input is read at an index clamped into its own range along ``dim`` (both sides of a
    ``where`` are computed), so no read leaves any input; the clamp needs each input's length
    to be at least 1, proved from the trace's facts (else the op stays an extern).  Inputs of
    static size 0 are skipped (eager skips them too, legacy 1-D empties included).
    """
    shape = tuple(node.meta["shape"])
    n = len(shape)
    if not all(isinstance(t, TensorBox) for t in tensors) or n == 0:
        raise Unsupported("cat of non-tensors")
    dim = dim % n
    boxes = [t for t in tensors if not any(sympy.sympify(d) == 0 for d in t.shape)]
    if not boxes or any(len(b.shape) != n for b in boxes):
        raise Unsupported("cat of empty or mixed-rank inputs")
    env = lw.tp.env
    sizes = [sympy.sympify(b.shape[dim]) for b in boxes]
    if any(env.static_bool(sympy.Ge(sz, 1), log=False) is not True for sz in sizes):
        raise Unsupported("cat input that may be empty")
    offs = [sympy.Integer(0)]
    for sz in sizes[:-1]:
        offs.append(offs[-1] + sz)
    dt = _dt(node)

    def fn(idx):
        i = idx[dim]
        val = None
        last = len(boxes) - 1
        for k, b, off, sz in reversed(list(zip(range(len(boxes)), boxes, offs, sizes))):
            j = i - off
            if k != last:
                j = sympy.Min(j, sz - 1)
            if k != 0:
                j = sympy.Max(j, 0)
            v = cast(b(tuple(idx[:dim]) + (j,) + tuple(idx[dim + 1:])), dt)
            if val is None:
                val = v
            else:
                below = Op("lt", (SizeVal(i, torch.int64), SizeVal(off + sz, torch.int64)), torch.bool)
                val = Op("where", (below, v, val), dt)
        return val
    return lw.out_box(node, fn)


__all__ = ["view_remap"]
