"""Symbolic bounds on the *values* of integer index tensors.

Shapes alone cannot say that ``wpe(torch.arange(T))`` fails once ``T``
exceeds the embedding's rows: the failure is an out-of-range index.  The
tracer therefore tracks, for integer tensors built from ``arange``, a
symbolic interval of their values through views and offsets, and turns each
lookup (``embedding``, ``index_select``) into a runtime assert that the
indices are in range, with the user line of the lookup.  A violated bound at
the example sizes raises ``IndexError`` like eager PyTorch does.
"""
from __future__ import annotations

from typing import Optional

import sympy
import torch

aten = torch.ops.aten

# Ops whose output values are a subset of (or equal to) input 0's values.
_PRESERVING = {
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.unsqueeze.default,
    aten.squeeze.dim, aten.squeeze.default, aten.squeeze.dims, aten.expand.default, aten.slice.Tensor,
    aten.select.int, aten.permute.default, aten.transpose.int, aten.t.default, aten.clone.default,
    aten.alias.default, aten.detach.default, aten._to_copy.default, aten.contiguous.default,
    aten.repeat.default, aten.flatten.using_ints, aten.lift_fresh.default,
}


def _e(x):
    if isinstance(x, torch.SymInt):
        return x.node.expr
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return sympy.Integer(x)
    return None


def output_bounds(func, args, kwargs, bounds_of) -> Optional[tuple]:
    """(lo, hi) of the values of ``func``'s integer output, or None if unknown."""
    if func in (aten.arange.default, aten.arange.start, aten.arange.start_step):
        dtype = kwargs.get("dtype")
        if dtype is not None and dtype.is_floating_point:
            return None
        if func is aten.arange.default:
            start, end, step = sympy.Integer(0), _e(args[0]), sympy.Integer(1)
        else:
            start, end = _e(args[0]), _e(args[1])
            step = _e(args[2]) if len(args) > 2 else sympy.Integer(kwargs.get("step", 1))
        if start is None or end is None or step is None or not (step.is_Integer and step > 0):
            return None
        # Values lie in [start, end - 1]; with no values the lookup checks are vacuous anyway.
        return (start, end - 1)
    if func in _PRESERVING and args and isinstance(args[0], torch.Tensor):
        return bounds_of(args[0])
    if func in (aten.add.Tensor, aten.sub.Tensor) and len(args) >= 2:
        a, b = args[0], args[1]
        ba = bounds_of(a) if isinstance(a, torch.Tensor) else None
        if ba is None:
            return None
        alpha = kwargs.get("alpha", 1)
        if isinstance(b, torch.Tensor):
            bb = bounds_of(b)
            if bb is None or alpha != 1:
                return None
            return (ba[0] + bb[0], ba[1] + bb[1]) if func is aten.add.Tensor else (ba[0] - bb[1], ba[1] - bb[0])
        c = _e(b)
        if c is None or alpha != 1:
            return None
        return (ba[0] + c, ba[1] + c) if func is aten.add.Tensor else (ba[0] - c, ba[1] - c)
    return None


def lookup_checks(func, args, bounds_of):
    """[(condition, message)] that must hold for an index lookup to be in range."""
    if func is aten.embedding.default:
        weight, idx = args[0], args[1]
        b = bounds_of(idx)
        if b is None:
            return []
        n = _e(weight.shape[0])
        return [(sympy.Ge(b[0], 0), f"embedding index {b[0]} must be >= 0"),
                (sympy.Lt(b[1], n), f"embedding index {b[1]} out of range for {n} rows")]
    if func is aten.index_select.default:
        x, dim, idx = args[0], args[1], args[2]
        b = bounds_of(idx)
        if b is None:
            return []
        n = _e(x.shape[dim])
        return [(sympy.Ge(b[0], -n), f"index_select index {b[0]} out of range for size {n}"),
                (sympy.Lt(b[1], n), f"index_select index {b[1]} out of range for size {n}")]
    if func is aten.gather.default:
        x, dim, idx = args[0], args[1], args[2]
        b = bounds_of(idx)
        if b is None or x.dim() == 0:
            return []
        n = _e(x.shape[dim])
        return [(sympy.Ge(b[0], 0), f"gather index {b[0]} must be >= 0"),
                (sympy.Lt(b[1], n), f"gather index {b[1]} is out of bounds for dimension {dim} with size {n}")]
    if func in (aten.index.Tensor, aten.index_put.default, aten.index_put_.default, aten._unsafe_index.Tensor):
        # x[..., idx, ...] with index tensors (e.g. a list index made a constant):
        # each must lie in [-n, n) for its dim, as eager checks.
        x, indices = args[0], args[1]
        if any(ix is not None and ix.dtype in (torch.bool, torch.uint8) for ix in indices):
            return []
        out = []
        for d, ix in enumerate(indices):
            b = bounds_of(ix) if ix is not None else None
            if b is None or d >= x.dim():
                continue
            n = _e(x.shape[d])
            out += [(sympy.Ge(b[0], -n), f"index {b[0]} is out of bounds for dimension {d} with size {n}"),
                    (sympy.Lt(b[1], n), f"index {b[1]} is out of bounds for dimension {d} with size {n}")]
        return out
    return []
