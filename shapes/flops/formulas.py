"""Symbolic FLOP formulas for ATen ops, in torch.utils.flop_counter's conventions.

Each formula takes the op's arguments bound by name (tensors replaced by
:class:`TensorArg`, whose ``shape`` holds sympy expressions) and the op's
output(s), and returns a sympy expression.  The arithmetic is plain ``*`` and
``+``, so the same formulas give exact ints when the shapes are ints (see
:func:`torch_cpu_mapping`).

Conventions (those of ``torch.utils.flop_counter.FlopCounterMode``):

* a multiply-add counts 2 FLOPs, so ``[m, k] @ [k, n]`` is ``2*m*k*n``; the
  ``2*k - 1`` subtlety and bias additions (``addmm``, ``baddbmm``,
  convolution bias) are ignored;
* convolution: ``2 * N * prod(spatial) * prod(weight.shape)``, where
  ``spatial`` is the output's spatial size, or the input's for a transposed
  convolution; ``weight.shape[1]`` is already per group, so groups need no
  extra term;
* scaled-dot-product attention: the two batched matmuls ``Q @ K^T`` and
  ``P @ V`` over the query heads (GQA counts the broadcast KV heads), causal
  masking not subtracted; backward: the five matmuls of the recompute and the
  gradient (``2*b*h*s_q*s_k*(3*d_qk + 2*d_v)``);
* every other op counts 0 FLOPs (elementwise ops, reductions, softmax,
  norms, and also ``mv``/``dot``/``addmv``/``addbmm``, which torch does not
  count either).

Where symshape deliberately differs from torch (documented per formula):

* ``_scaled_dot_product_flash_attention_for_cpu`` (the fused CPU kernel
  ``F.scaled_dot_product_attention`` dispatches to on CPU tensors) and
  ``_scaled_dot_product_fused_attention_overrideable`` (and their backwards)
  are counted with the SDPA formula; torch has no formula for them, so
  ``FlopCounterMode`` on CPU tensors reports 0 for attention.  Pass
  :func:`torch_cpu_mapping` as its ``custom_mapping`` to compare.
* ``_flash_attention_forward`` / ``_efficient_attention_forward`` (and
  backwards) take ``[batch, seq, heads, dim]`` tensors; symshape reads them in
  that layout (torch's formula reads a non-nested input as
  ``[batch, heads, seq, dim]``).  For nested (jagged) inputs both assume every
  sequence has the maximum length: an upper bound.
* ``cudnn_convolution`` and ``_slow_conv2d_forward`` have no ``transposed``
  argument: symshape counts them as regular convolutions (torch's formula
  takes their 7th positional argument for ``transposed``).

Example::

    >>> import sympy
    >>> from shapes.flops.formulas import TensorArg, mm_flops
    >>> m, k, n = sympy.symbols("m k n", integer=True)
    >>> mm_flops(TensorArg((m, k)), TensorArg((k, n)))
    2*k*m*n
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Any, Callable, Optional

import sympy
import torch

aten = torch.ops.aten


@dataclass(frozen=True)
class TensorArg:
    """A tensor argument as the formulas see it: symbolic shape and dtype."""

    shape: tuple
    dtype: torch.dtype = torch.float32

    @property
    def numel(self):
        return sympy.Mul(*self.shape) if self.shape else sympy.Integer(1)

    @property
    def nbytes(self):
        return self.numel * _itemsize(self.dtype)


def _itemsize(dtype: torch.dtype) -> int:
    return dtype.itemsize


def _shape(x):
    """A shape from a TensorArg, a tensor, or a plain sequence (torch's custom_mapping passes sizes)."""
    if isinstance(x, TensorArg):
        return tuple(x.shape)
    if isinstance(x, torch.Tensor):
        return tuple(x.shape)
    return tuple(x)


# --------------------------------------------------------------------------- matmul family

def mm_flops(a, b):
    """``[m, k] @ [k, n]``: ``2*m*k*n``."""
    m, k = _shape(a)
    _, n = _shape(b)
    return 2 * m * k * n


def bmm_flops(a, b):
    """``[b, m, k] @ [b, k, n]``: ``2*b*m*k*n``."""
    bs, m, k = _shape(a)
    _, _, n = _shape(b)
    return 2 * bs * m * k * n


# --------------------------------------------------------------------------- convolution

def conv_flops(x, w, out, transposed: bool = False):
    """``2 * N * prod(spatial) * prod(weight.shape)``.

    ``spatial`` is the output's spatial size for a convolution and the input's
    for a transposed one: each input point of a transposed convolution
    scatters the whole filter.  ``weight.shape`` is ``[C_out, C_in/groups,
    *k]`` (``[C_in, C_out/groups, *k]`` when transposed), so the product
    already counts one group's channels per output channel.
    """
    xs, ws = _shape(x), _shape(w)
    spatial = (xs if transposed else _shape(out))[2:]
    return 2 * xs[0] * prod(spatial, start=1) * prod(ws, start=1)


def _t(shape):
    s = _shape(shape)
    return (s[1], s[0]) + tuple(s[2:])


def conv_backward_flops(grad_out, x, w, transposed, output_mask, grad_input, grad_weight):
    """The FLOPs of the input and weight gradients of a convolution.

    The input gradient is a transposed convolution of ``grad_out`` with the
    weight (a plain one if the forward was transposed); the weight gradient a
    convolution of the input with ``grad_out`` (batch and channel swapped).
    The bias gradient is a reduction: 0 FLOPs.
    """
    total = 0
    if output_mask[0] and grad_input is not None:
        total += conv_flops(grad_out, w, grad_input, transposed=not transposed)
    if output_mask[1] and grad_weight is not None:
        if transposed:
            total += conv_flops(_t(grad_out), _t(x), _t(grad_weight))
        else:
            total += conv_flops(_t(x), _t(grad_out), _t(grad_weight))
    return total


# --------------------------------------------------------------------------- attention

def sdpa_flops(b, h_q, s_q, s_k, d_qk, d_v):
    """``Q @ K^T`` plus ``P @ V`` over ``b*h_q`` heads: ``2*b*h_q*s_q*s_k*(d_qk + d_v)``."""
    return 2 * b * h_q * s_q * s_k * d_qk + 2 * b * h_q * s_q * s_k * d_v


def sdpa_backward_flops(b, h_q, s_q, s_k, d_qk, d_v):
    """Recompute ``Q @ K^T``, then dP, dV, dQ, dK: ``2*b*h_q*s_q*s_k*(3*d_qk + 2*d_v)``."""
    return 2 * b * h_q * s_q * s_k * (3 * d_qk + 2 * d_v)


def sdpa_bhsd_flops(q, k, v):
    """SDPA on ``[batch, heads, seq, dim]`` query/key/value."""
    b, h_q, s_q, d_qk = _shape(q)
    s_k = _shape(k)[2]
    d_v = _shape(v)[3]
    return sdpa_flops(b, h_q, s_q, s_k, d_qk, d_v)


def sdpa_bhsd_backward_flops(q, k, v):
    b, h_q, s_q, d_qk = _shape(q)
    s_k = _shape(k)[2]
    d_v = _shape(v)[3]
    return sdpa_backward_flops(b, h_q, s_q, s_k, d_qk, d_v)


def _bshd_dims(q, k, v, cum_q, max_q, max_k, nested_rank):
    """``(b, h_q, s_q, s_k, d_qk, d_v)`` of a ``[batch, seq, heads, dim]`` kernel call.

    Nested (jagged) inputs pack all sequences into one dim; their count is
    ``len(cum_seq) - 1`` and each is assumed to have the maximum length (the
    lengths are data: this is an upper bound, as torch assumes on meta tensors).
    """
    qs, ks, vs = _shape(q), _shape(k), _shape(v)
    if cum_q is not None:
        b = _shape(cum_q)[0] - 1
        return b, qs[-2], max_q, max_k, qs[-1], vs[-1]
    if len(qs) != nested_rank + 1:
        raise ValueError(f"expected a [batch, seq, heads, dim] query, got shape {qs}")
    return qs[0], qs[2], qs[1], ks[1], qs[3], vs[3]


# --------------------------------------------------------------------------- binding ATen calls

#: One formula per op (keyed by OpOverloadPacket): ``f(args, out) -> expr``
#: where ``args`` maps schema argument names to values.
FORMULAS: dict[Any, Callable] = {}


def _register(*packets):
    def deco(fn):
        for p in packets:
            if p is not None:
                FORMULAS[p] = fn
        return fn
    return deco


def _op(name):
    """An ATen packet if this torch build has it (kernels differ across versions)."""
    return getattr(aten, name, None)


def _positional(args: dict, i: int):
    return list(args.values())[i]


@_register(aten.mm)
def _mm(args, out):
    return mm_flops(args["self"], args["mat2"])


@_register(aten.addmm)
def _addmm(args, out):
    return mm_flops(args["mat1"], args["mat2"])


@_register(aten.bmm)
def _bmm(args, out):
    return bmm_flops(args["self"], args["mat2"])


@_register(aten.baddbmm)
def _baddbmm(args, out):
    return bmm_flops(args["batch1"], args["batch2"])


@_register(_op("_scaled_mm"))
def _scaled_mm(args, out):
    return mm_flops(args["self"], args["mat2"])


@_register(aten.convolution, aten._convolution, _op("convolution_overrideable"),
           _op("cudnn_convolution"), _op("_slow_conv2d_forward"))
def _convolution(args, out):
    # The first two arguments are input and weight in every variant; the
    # variants without a ``transposed`` argument are regular convolutions.
    x, w = _positional(args, 0), _positional(args, 1)
    return conv_flops(x, w, out, transposed=bool(args.get("transposed", False)))


@_register(aten.convolution_backward)
def _convolution_backward(args, out):
    grad_input, grad_weight = out[0], out[1]
    return conv_backward_flops(args["grad_output"], args["input"], args["weight"], bool(args["transposed"]),
                               args["output_mask"], grad_input, grad_weight)


@_register(_op("_scaled_dot_product_efficient_attention"), _op("_scaled_dot_product_flash_attention"),
           _op("_scaled_dot_product_cudnn_attention"), _op("_scaled_dot_product_flash_attention_for_cpu"),
           _op("_scaled_dot_product_fused_attention_overrideable"))
def _sdpa(args, out):
    return sdpa_bhsd_flops(args["query"], args["key"], args["value"])


@_register(aten.scaled_dot_product_attention)
def _sdpa_whole(args, out):
    # The op as the tracer keeps it (any rank, broadcast batch dims, GQA): the two
    # matmuls of its math form, which FlopCounterMode counts where it decomposes it,
    # over the output's batch dims (GQA heads are the query's).
    q, k, o = _shape(args["query"]), _shape(args["key"]), _shape(out)
    batch = sympy.Integer(1)
    for d in o[:-2]:
        batch = batch * d
    return 2 * batch * o[-2] * k[-2] * q[-1] + 2 * batch * o[-2] * k[-2] * o[-1]


@_register(_op("_scaled_dot_product_efficient_attention_backward"),
           _op("_scaled_dot_product_flash_attention_backward"),
           _op("_scaled_dot_product_cudnn_attention_backward"),
           _op("_scaled_dot_product_flash_attention_for_cpu_backward"),
           _op("_scaled_dot_product_fused_attention_overrideable_backward"))
def _sdpa_backward(args, out):
    return sdpa_bhsd_backward_flops(args["query"], args["key"], args["value"])


@_register(_op("_flash_attention_forward"))
def _flash_forward(args, out):
    return sdpa_flops(*_bshd_dims(args["query"], args["key"], args["value"], args["cum_seq_q"],
                                  args["max_q"], args["max_k"], 3))


@_register(_op("_flash_attention_backward"))
def _flash_backward(args, out):
    return sdpa_backward_flops(*_bshd_dims(args["query"], args["key"], args["value"], args["cum_seq_q"],
                                           args["max_q"], args["max_k"], 3))


@_register(_op("_efficient_attention_forward"))
def _efficient_forward(args, out):
    return sdpa_flops(*_bshd_dims(args["query"], args["key"], args["value"], args["cu_seqlens_q"],
                                  args["max_seqlen_q"], args["max_seqlen_k"], 3))


@_register(_op("_efficient_attention_backward"))
def _efficient_backward(args, out):
    return sdpa_backward_flops(*_bshd_dims(args["query"], args["key"], args["value"], args["cu_seqlens_q"],
                                           args["max_seqlen_q"], args["max_seqlen_k"], 3))


def bind(func, args, kwargs) -> dict:
    """The op's arguments by schema name, defaults filled in (in schema order)."""
    out = {}
    schema = func._schema
    pos = list(args)
    for i, a in enumerate(schema.arguments):
        if not a.kwarg_only and i < len(pos):
            out[a.name] = pos[i]
        elif a.name in kwargs:
            out[a.name] = kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
        else:
            out[a.name] = None
    return out


def formula_for(packet) -> Optional[Callable]:
    """symshape's formula for an ATen op packet, or None."""
    return FORMULAS.get(packet)


def torch_counted() -> frozenset:
    """The ops torch's FlopCounterMode has a formula for (read at call time, so
    formulas registered with ``register_flop_formula`` are included)."""
    from torch.utils.flop_counter import flop_registry
    return frozenset(flop_registry)


#: Ops symshape counts that torch's FlopCounterMode has no formula for.
BEYOND_TORCH = frozenset(p for p in (
    _op("_scaled_dot_product_flash_attention_for_cpu"),
    _op("_scaled_dot_product_flash_attention_for_cpu_backward"),
    _op("_scaled_dot_product_fused_attention_overrideable"),
    _op("_scaled_dot_product_fused_attention_overrideable_backward"),
) if p is not None)

#: SDPA kernels with an ``is_causal`` argument (forward and backward).
SDPA_CAUSAL_ARG = frozenset(p for p in (
    aten.scaled_dot_product_attention,
    _op("_scaled_dot_product_efficient_attention"), _op("_scaled_dot_product_flash_attention"),
    _op("_scaled_dot_product_cudnn_attention"), _op("_scaled_dot_product_flash_attention_for_cpu"),
    _op("_scaled_dot_product_fused_attention_overrideable"),
    _op("_scaled_dot_product_efficient_attention_backward"), _op("_scaled_dot_product_flash_attention_backward"),
    _op("_scaled_dot_product_cudnn_attention_backward"), _op("_scaled_dot_product_flash_attention_for_cpu_backward"),
    _op("_scaled_dot_product_fused_attention_overrideable_backward"),
    _op("_flash_attention_forward"), _op("_flash_attention_backward"),
    _op("_efficient_attention_forward"), _op("_efficient_attention_backward"),
) if p is not None)

#: Of those, the kernels that take ``[batch, seq, heads, dim]`` tensors.
BSHD_KERNELS = frozenset(p for p in (
    _op("_flash_attention_forward"), _op("_flash_attention_backward"),
    _op("_efficient_attention_forward"), _op("_efficient_attention_backward"),
) if p is not None)

#: Ops that do matrix arithmetic but which torch's convention counts as 0
#: FLOPs (so does symshape, to agree with it); reports point them out.
MATMUL_LIKE_UNCOUNTED = frozenset(p for p in (
    _op("mv"), _op("dot"), _op("vdot"), _op("addmv"), _op("addbmm"), _op("addr"), _op("_trilinear"),
    _op("_int_mm"), _op("linalg_vecdot"),
) if p is not None)


def torch_cpu_mapping() -> dict:
    """A ``custom_mapping`` for FlopCounterMode that counts the fused CPU attention kernels.

    ``F.scaled_dot_product_attention`` on CPU tensors runs
    ``_scaled_dot_product_flash_attention_for_cpu``, which torch's registry
    lacks (it counts 0 for attention on CPU).  With this mapping FlopCounterMode
    counts it with the SDPA formula, as symshape does.

    Example::

        >>> from torch.utils.flop_counter import FlopCounterMode
        >>> from shapes.flops.formulas import torch_cpu_mapping
        >>> counter = FlopCounterMode(display=False, custom_mapping=torch_cpu_mapping())
    """
    def fwd(q, k, v, *args, out_shape=None, **kwargs):
        return int(sdpa_bhsd_flops(q, k, v))

    def bwd(grad, q, k, v, *args, out_shape=None, **kwargs):
        return int(sdpa_bhsd_backward_flops(q, k, v))

    mapping = {}
    for p in BEYOND_TORCH:
        mapping[p] = bwd if str(p).endswith("_backward") else fwd
    return mapping
