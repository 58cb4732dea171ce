"""``scaled_dot_product_attention`` kept whole: eager's shape checks and its output, without the math.

Eager runs SDPA as one fused kernel (flash / cuDNN / memory-efficient on CUDA,
the flash kernel on the CPU), but the op is CompositeImplicitAutograd: on meta
tensors it decomposes into its math form (scale, ``bmm``, mask, softmax,
``bmm``), and that form asks size questions eager's kernels never ask.  The
tracer keeps the op as one node (:mod:`.dispatch` hands it to the tracer's
mode) and computes its output here, from the rules that hold whichever kernel
eager picks:

* ``query``, ``key``, ``value`` of one dtype and at least 2 dims; a mask of
  at least 2 dims whose dtype is bool, float32, or the query's;
* ``enable_gqa``: the key/value heads (dim -3) divide the query heads, or
  all three are equal; key and value are then taken at the query's heads;
* scores ``query @ key^T``: the head dims (-1) of query and key agree, the
  batch dims broadcast (guards, as for ``matmul``);
* the mask broadcasts to the scores' shape without growing it (eager adds it
  in place);
* output ``scores @ value``: key and value have one sequence length, batch
  dims broadcast; shape ``[*batch, L, Ev]`` in the query's dtype.

Conditions are returned as ``(condition, message)`` pairs for the tracer to
assert; broadcasting (which changes the output's shape) is decided by the
engine like any other broadcast.  One divergence, on purpose: eager's CPU
flash kernel accepts a value whose sequence length differs from the key's
(it reads past the value); here that is an error, as in every other kernel.

Example::

    >>> import torch
    >>> q, k = torch.empty(2, 8, 5, 16), torch.empty(2, 2, 7, 16)
    >>> [str(c) for c, _ in sdpa_checks(q, k, k, enable_gqa=True)]
    ['True', 'True', 'True']
    >>> sdpa_output(q, k, k, enable_gqa=True).shape
    torch.Size([2, 8, 5, 16])
"""
from __future__ import annotations

import sympy
import torch

from ..errors import program_error
from .conv import size_expr, sizes_of

aten = torch.ops.aten

_MASK_MSG = ("Expected attn_mask dtype to be bool or float or to match query dtype, but got attn_mask.dtype: "
             "{} and  query.dtype: {} instead.")


def _bind(args, kwargs):
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal")
    out = dict(attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False)
    out.update(zip(names, args))
    out.update(kwargs)
    return out


def _validate(q, k, v, attn_mask, enable_gqa):
    """Raise eager's error for a dtype or rank it rejects before any size question."""
    if not (q.dtype == k.dtype == v.dtype):
        raise program_error(RuntimeError, 
            f"Expected query, key, and value to have the same dtype, but got query.dtype: {q.dtype} key.dtype: "
            f"{k.dtype} and value.dtype: {v.dtype} instead.")
    if min(q.dim(), k.dim(), v.dim()) < 2:
        raise program_error(RuntimeError, 
            f"Expected query, key, and value to all be  at least 2 dimensional, but got query.dim: {q.dim()} "
            f"key.dim: {k.dim()} and value.dim: {v.dim()} instead.")
    if attn_mask is not None:
        if attn_mask.dtype not in (torch.bool, torch.float32, q.dtype):
            raise program_error(RuntimeError, _MASK_MSG.format(attn_mask.dtype, q.dtype))
        if attn_mask.dim() < 2:
            raise program_error(IndexError, 
                f"Dimension out of range (expected to be in range of [-1, 0], but got -2)")
    if enable_gqa and min(q.dim(), k.dim(), v.dim()) < 3:
        raise program_error(IndexError, "Dimension out of range (expected to be in range of [-2, 1], but got -3)")


def sdpa_checks(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
                enable_gqa=False):
    """[(condition, message)] eager requires of SDPA's sizes (see the module docstring)."""
    q, k, v = query, key, value
    _validate(q, k, v, attn_mask, enable_gqa)
    conds = []
    if enable_gqa:
        hq, hk, hv = (size_expr(t.shape[-3]) for t in (q, k, v))
        equal = sympy.And(sympy.Eq(hq, hk), sympy.Eq(hk, hv))
        divides = sympy.And(sympy.Eq(hq % hk, 0), sympy.Eq(hq % hv, 0))
        conds.append((sympy.Or(equal, divides), "Number of heads in key and value must divide the number of "
                                                 "heads in query"))
    eq, ek = size_expr(q.shape[-1]), size_expr(k.shape[-1])
    conds.append((sympy.Eq(eq, ek), f"SDPA: the head dim of query {sizes_of(q)} and key {sizes_of(k)} must agree "
                                    f"(query @ key^T)"))
    sk, sv = size_expr(k.shape[-2]), size_expr(v.shape[-2])
    conds.append((sympy.Eq(sk, sv), f"SDPA: key {sizes_of(k)} and value {sizes_of(v)} must have one sequence "
                                    f"length (scores @ value)"))
    return conds


def _heads(t, q, enable_gqa):
    """``t``'s shape with its heads at the query's (GQA repeats key and value heads)."""
    shape = list(t.shape)
    if enable_gqa:
        shape[-3] = q.shape[-3]
    return shape


def _mask_checks(mask, scores):
    """The mask broadcasts into the scores' shape (an in-place add in eager)."""
    msg = (f"SDPA: attn_mask {sizes_of(mask)} must broadcast to the attention scores' shape "
           f"[{', '.join(str(size_expr(s)) for s in scores)}]")
    if mask.dim() > len(scores):
        return [(sympy.false, msg)]
    conds = []
    for m, s in zip(reversed(mask.shape), reversed(scores)):
        m, s = size_expr(m), size_expr(s)
        conds.append(sympy.Or(sympy.Eq(m, 1), sympy.Eq(m, s)))
    return [(sympy.And(*conds), msg)]


def sdpa_mask_checks(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
                     enable_gqa=False):
    """[(condition, message)] on the mask, once the scores' batch dims are known (after broadcasting)."""
    if attn_mask is None:
        return []
    kshape = _heads(key, query, enable_gqa)
    batch = torch.broadcast_shapes(tuple(query.shape[:-2]), tuple(kshape[:-2]))
    return _mask_checks(attn_mask, tuple(batch) + (query.shape[-2], key.shape[-2]))


def sdpa_output(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
                enable_gqa=False):
    """The output eager's SDPA returns, as an empty meta tensor: ``[*batch, L, Ev]``, contiguous."""
    kshape, vshape = _heads(key, query, enable_gqa), _heads(value, query, enable_gqa)
    batch = torch.broadcast_shapes(tuple(query.shape[:-2]), tuple(kshape[:-2]))
    batch = torch.broadcast_shapes(tuple(batch), tuple(vshape[:-2]))
    return aten.empty.memory_format(tuple(batch) + (query.shape[-2], value.shape[-1]), dtype=query.dtype,
                                    device="meta")


def checks(args, kwargs):
    a = _bind(args, kwargs)
    return sdpa_checks(**a) + sdpa_mask_checks(**a)


def output(args, kwargs):
    return sdpa_output(**_bind(args, kwargs))
