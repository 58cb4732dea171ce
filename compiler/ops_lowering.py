"""Per-ATen-op lowerings: pointwise math, fills, gathers, reductions (views: :mod:`compiler.view_lowering`).

Each handler takes ``(lowerer, node, *args, **kwargs)`` with graph nodes
replaced by lowered values and returns a TensorBox (or a tuple of them);
raising :class:`~compiler.lowering.Unsupported` makes the op an extern.
Ops not listed here are externs.

Example::

    >>> import torch
    >>> from compiler.ops_lowering import HANDLERS
    >>> torch.ops.aten.gelu.default in HANDLERS
    True
"""
from __future__ import annotations

import math

import sympy
import torch

from .index_checks import checked_index
from .ir import HALF_DTYPES, Const, Op, RedRef, SizeVal, compute_dtype
from .lowered import TensorBox, Unsupported, cast

aten = torch.ops.aten
HANDLERS: dict = {}


def register(*ops):
    def deco(fn):
        for op in ops:
            HANDLERS[op] = fn
        return fn
    return deco


def _dt(node):
    return node.meta["val"].dtype


def _meta(a):
    """What type promotion sees of an argument: a tensor node's meta value; for a size passed
    as a scalar (a SymInt node, ``x <= k.shape[-2]``), a Python number of its kind."""
    if not hasattr(a, "meta"):
        return a
    if "val" in a.meta:
        return a.meta["val"]
    expr = a.meta.get("expr")
    if expr is not None:
        return 1 if getattr(expr, "is_integer", False) else 1.0
    return a.meta["val"]  # no rule: the KeyError says which node


def _pointwise(lw, node, args, f, compute=None):
    """out[idx] = f(*args at idx), args cast to ``compute`` (default: the output dtype)."""
    shape = tuple(node.meta["shape"])
    dt = compute or _dt(node)
    out = _dt(node)

    def fn(idx):
        vals = [lw.value(a, idx, shape, dt) for a in args]
        return cast(f(*vals), out)
    return lw.out_box(node, fn)


def _op(name):
    return lambda *vs: Op(name, tuple(vs), vs[0].dtype)


def _promoted(node):
    """The dtype torch computes a binary op in (comparisons, where)."""
    tensors = [a for a in node.args if hasattr(a, "meta")]
    metas = [_meta(a) for a in node.args[:2]]
    try:
        return torch.result_type(*metas) if len(metas) == 2 else metas[0].dtype
    except (TypeError, RuntimeError, AttributeError):
        return tensors[0].meta["val"].dtype


# -- arithmetic ------------------------------------------------------------------------------
@register(aten.add.Tensor, aten.add.Scalar)
def _add(lw, node, a, b, alpha=1):
    if alpha != 1:
        return _pointwise(lw, node, [a, b, alpha], lambda x, y, k: Op("add", (x, Op("mul", (y, k), y.dtype)), x.dtype))
    return _pointwise(lw, node, [a, b], _op("add"))


@register(aten.sub.Tensor, aten.sub.Scalar)
def _sub(lw, node, a, b, alpha=1):
    if alpha != 1:
        return _pointwise(lw, node, [a, b, alpha], lambda x, y, k: Op("sub", (x, Op("mul", (y, k), y.dtype)), x.dtype))
    return _pointwise(lw, node, [a, b], _op("sub"))


@register(aten.rsub.Scalar, aten.rsub.Tensor)
def _rsub(lw, node, a, b, alpha=1):
    return _pointwise(lw, node, [b, a, alpha], lambda y, x, k: Op("sub", (y, Op("mul", (x, k), x.dtype)), x.dtype))


def _on_cpu(lw) -> bool:
    """Whether the program is traced for the CPU (no device: the C++ target's CPU), where some
    ATen kernels differ from their CUDA ones in what they round."""
    device = getattr(lw.tp, "device", None)
    return device is None or torch.device(device).type == "cpu"


def _scalar_in_opmath(lw, node, args, f):
    """:func:`_pointwise` where a Python number operand of a half-precision op on the CPU is a
    float32 constant, unrounded: ATen's CPU mul and div kernels read the scalar's original value
    in their float32 opmath (``x * 0.1`` on bf16 ``x`` multiplies by 0.1f, not by bf16's
    0.10009765625), where its add and sub use the scalar converted to the tensor's dtype.  Its
    CUDA kernels read the converted value for all four (``TensorIterator.scalar_value``): a
    program traced for CUDA keeps the rounded constant."""
    out = _dt(node)
    if out not in HALF_DTYPES or not _on_cpu(lw):
        return _pointwise(lw, node, args, f)
    shape = tuple(node.meta["shape"])

    def fn(idx):
        vals = [Const(float(a), torch.float32) if isinstance(a, (int, float)) and not isinstance(a, bool)
                else lw.value(a, idx, shape, out) for a in args]
        return cast(f(*vals), out)
    return lw.out_box(node, fn)


@register(aten.mul.Tensor, aten.mul.Scalar)
def _mul(lw, node, a, b):
    return _scalar_in_opmath(lw, node, [a, b], _op("mul"))


@register(aten.div.Tensor, aten.div.Scalar)
def _div(lw, node, a, b):
    if not _dt(node).is_floating_point:
        raise Unsupported("integer true division")
    return _scalar_in_opmath(lw, node, [a, b], _op("div"))


for _name in ("neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "abs", "reciprocal", "sin", "cos",
              "floor", "ceil", "log1p", "expm1", "relu"):
    register(getattr(aten, _name).default)(
        (lambda nm: lambda lw, node, a: _pointwise(lw, node, [a], _op(nm)))(_name))


@register(aten.logical_not.default, aten.bitwise_not.default)
def _not(lw, node, a):
    if _dt(node) != torch.bool:
        raise Unsupported("bitwise not on integers")
    return _pointwise(lw, node, [a], _op("not"), compute=torch.bool)


@register(aten.logical_and.default, aten.logical_or.default)
def _logical(lw, node, a, b):
    nm = "and" if node.target == aten.logical_and.default else "or"
    return _pointwise(lw, node, [a, b], _op(nm), compute=torch.bool)


@register(aten.bitwise_and.Tensor, aten.bitwise_or.Tensor)
def _bitwise(lw, node, a, b):
    # On bools (masks built with `&` and `|`) bitwise and logical ops agree.
    if _dt(node) != torch.bool or any(isinstance(x, TensorBox) and x.dtype != torch.bool for x in (a, b)):
        raise Unsupported("bitwise ops on integers")
    nm = "and" if node.target == aten.bitwise_and.Tensor else "or"
    return _pointwise(lw, node, [a, b], _op(nm), compute=torch.bool)


@register(aten.gelu.default)
def _gelu(lw, node, a, approximate="none"):
    def f(x):
        dt = x.dtype
        c = lambda v: Const(v, dt)  # noqa: E731
        half_x = Op("mul", (c(0.5), x), dt)
        if approximate == "tanh":
            cube = Op("mul", (Op("mul", (x, x), dt), x), dt)
            inner = Op("mul", (c(math.sqrt(2 / math.pi)), Op("add", (x, Op("mul", (c(0.044715), cube), dt)), dt)), dt)
            t = Op("tanh", (inner,), dt)
        else:
            t = Op("erf", (Op("mul", (x, c(math.sqrt(0.5))), dt),), dt)
        return Op("mul", (half_x, Op("add", (c(1.0), t), dt)), dt)
    # ATen's GELU kernels compute a half-precision input in float32 and round once, at the end.
    return _pointwise(lw, node, [a], f, compute=compute_dtype(_dt(node)))


@register(aten.silu.default)
def _silu(lw, node, a):
    return _pointwise(lw, node, [a], lambda x: Op("mul", (x, Op("sigmoid", (x,), x.dtype)), x.dtype),
                      compute=compute_dtype(_dt(node)))  # one rounding, as ATen's SiLU kernels


@register(aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor)
def _pow(lw, node, a, b):
    if isinstance(b, (int, float)) and not isinstance(b, bool):
        if b == 2:
            return _pointwise(lw, node, [a], lambda x: Op("mul", (x, x), x.dtype))
        if b == 3:
            # ATen's CPU and CUDA kernels cube as x * x * x too (GELU's tanh form): a product
            # vectorizes, a pow call costs ~20 flops per element.
            return _pointwise(lw, node, [a], lambda x: Op("mul", (Op("mul", (x, x), x.dtype), x), x.dtype))
        if b == 0.5:
            return _pointwise(lw, node, [a], _op("sqrt"))
        if b == 1:
            return _pointwise(lw, node, [a], lambda x: x)
    if not _dt(node).is_floating_point:
        raise Unsupported("integer pow")
    return _pointwise(lw, node, [a, b], _op("pow"))


@register(aten.maximum.default, aten.minimum.default)
def _maxmin(lw, node, a, b):
    return _pointwise(lw, node, [a, b], _op("maximum" if node.target == aten.maximum.default else "minimum"))


def _clamp(x, lo, hi):
    if lo is not None:
        x = Op("maximum", (x, lo), x.dtype)
    if hi is not None:
        x = Op("minimum", (x, hi), x.dtype)
    return x


@register(aten.clamp.default)
def _clamp_h(lw, node, a, min=None, max=None):
    args = [a] + [v for v in (min, max) if v is not None]
    return _pointwise(lw, node, args, lambda x, *r: _clamp(x, r[0] if min is not None else None,
                                                        r[-1] if max is not None else None))


@register(aten.clamp_min.default)
def _clamp_min(lw, node, a, lo):
    return _pointwise(lw, node, [a, lo], lambda x, v: _clamp(x, v, None))


@register(aten.clamp_max.default)
def _clamp_max(lw, node, a, hi):
    return _pointwise(lw, node, [a, hi], lambda x, v: _clamp(x, None, v))


for _name, _op_name in (("lt", "lt"), ("le", "le"), ("gt", "gt"), ("ge", "ge"), ("eq", "eq"), ("ne", "ne")):
    @register(getattr(aten, _name).Tensor, getattr(aten, _name).Scalar)
    def _cmp(lw, node, a, b, _o=_op_name):
        return _pointwise(lw, node, [a, b], lambda x, y: Op(_o, (x, y), torch.bool), compute=_promoted(node))


@register(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(lw, node, c, a, b):
    shape, dt = tuple(node.meta["shape"]), _dt(node)

    def fn(idx):
        cv = lw.value(c, idx, shape, torch.bool)
        return Op("where", (cv, lw.value(a, idx, shape, dt), lw.value(b, idx, shape, dt)), dt)
    return lw.out_box(node, fn)


@register(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(lw, node, x, mask, v):
    shape, dt = tuple(node.meta["shape"]), _dt(node)
    if isinstance(v, TensorBox) and v.shape:
        raise Unsupported("masked_fill value with dims")

    def fn(idx):
        fill = lw.value(v, idx, shape, dt) if not isinstance(v, TensorBox) else cast(v(()), dt)
        return Op("where", (lw.value(mask, idx, shape, torch.bool), fill, lw.value(x, idx, shape, dt)), dt)
    return lw.out_box(node, fn)


def same_device(lw, device) -> bool:
    """Whether ``_to_copy(..., device=device)`` stays on the device the program was traced for.

    A program's tensors all live on its traced device (the wrapper allocates there and kernels
    read every input there), so a cast naming that device (AOTAutograd writes autocast's
    backward casts as ``_to_copy(x, dtype=..., device=cuda)``) changes the dtype only, and fuses."""
    d, home = torch.device(device), getattr(lw.tp, "device", None)
    if d.type == "meta":
        return True
    return home is not None and d.type == home.type and (d.index is None or home.index is None or d.index == home.index)


@register(aten._to_copy.default)
def _to_copy(lw, node, a, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
             memory_format=None):
    if layout not in (None, torch.strided) or (device is not None and not same_device(lw, device)):
        raise Unsupported("device or layout change")
    return _pointwise(lw, node, [a], lambda x: x, compute=a.dtype if isinstance(a, TensorBox) else None)


@register(torch.ops.prims.convert_element_type.default)
def _convert_element_type(lw, node, a, dtype):
    # AOTAutograd's backward writes some of autocast's casts as this prim: a cast, fused like _to_copy.
    return _pointwise(lw, node, [a], lambda x: x, compute=a.dtype if isinstance(a, TensorBox) else None)


@register(aten.clone.default)
def _clone(lw, node, a, memory_format=None):
    box = lw.out_box(node, a.fn)
    if isinstance(a, TensorBox) and a.node is not None and not _is_output(node) and not _is_output(a.node):
        # Where it must be a tensor, the clone is its source's tensor (Lowerer.realize checks the strides);
        # never one the caller receives twice (two outputs) or may write (an output aliasing another).
        box.clone_of = a
    return box


def _is_output(node) -> bool:
    return any(u.op == "output" for u in node.users)


@register(aten.full.default)
def _full(lw, node, size, value, dtype=None, layout=None, device=None, pin_memory=None):
    dt = _dt(node)
    return lw.out_box(node, lambda idx: cast(lw.value(value, idx, (), dt), dt))


@register(aten.full_like.default)
def _full_like(lw, node, self, value, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    # A fill is a pointwise value: fused into its users (the NLL loss backward's zeros under its
    # one-hot scatter), never a tensor of its own.  The layout is symshape's (a functional graph).
    return _full(lw, node, None, value)


@register(aten.scatter.value)
def _scatter_value(lw, node, self, dim, index, value):
    """``scatter(self, dim, index, value)`` with one index per row along ``dim`` (``index`` of
    ``self``'s sizes, 1 along ``dim``): ``where(i_dim == index, value, self)``, pointwise, so the
    NLL loss backward's one-hot (a ``[rows, vocabulary]`` fp32 tensor as an ATen scatter) fuses
    into the kernel that uses it.  Other index shapes stay ATen's scatter.  The index is range-checked
    first (:mod:`compiler.index_checks`): eager raises on an index outside ``self``."""
    shape, dt = tuple(node.meta["shape"]), _dt(node)
    d = dim % len(shape) if shape else 0
    if (not isinstance(index, TensorBox) or not shape or len(index.shape) != len(shape)
            or sympy.sympify(index.shape[d]) != 1
            or any(sympy.sympify(index.shape[i]) != sympy.sympify(shape[i]) for i in range(len(shape)) if i != d)):
        raise Unsupported("scatter with more than one index per row")
    index = checked_index(lw, node, index, shape[d], d)

    def fn(idx):
        at = tuple(sympy.Integer(0) if i == d else idx[i] for i in range(len(shape)))
        hit = Op("eq", (SizeVal(idx[d], torch.int64), cast(index(at), torch.int64)), torch.bool)
        return Op("where", (hit, lw.value(value, idx, shape, dt), lw.value(self, idx, shape, dt)), dt)
    return lw.out_box(node, fn)


@register(aten.gather.default)
def _gather(lw, node, self, dim, index, sparse_grad=False):
    """``gather(self, dim, index)`` with one index per row along ``dim`` (``index`` of ``self``'s
    sizes, 1 along ``dim``): the sum along ``dim`` of ``where(i_dim == index, self, 0)``, one term
    picked and zeros (exact in any dtype), so the NLL loss's pick from the log-probabilities
    fuses with the log-softmax that makes them instead of an ATen gather reading a
    ``[rows, vocabulary]`` fp32 tensor.  Other index shapes stay ATen's gather; like
    :func:`_scatter_value`, the index is range-checked first."""
    shape, dt = tuple(node.meta["shape"]), _dt(node)
    n = len(shape)
    if not isinstance(self, TensorBox) or not isinstance(index, TensorBox) or n == 0 or len(self.shape) != n \
            or dt == torch.bool or dt.is_complex:
        raise Unsupported("gather of non-tensors, 0-d or bool")
    d = dim % n
    if sympy.sympify(index.shape[d]) != 1 or any(sympy.sympify(index.shape[i]) != sympy.sympify(self.shape[i])
                                                  for i in range(n) if i != d):
        raise Unsupported("gather with more than one index per row")
    index = checked_index(lw, node, index, self.shape[d], d)
    acc = torch.float32 if dt in (torch.float16, torch.bfloat16) else dt

    def pick(idx):
        at = tuple(sympy.Integer(0) if i == d else idx[i] for i in range(n))
        hit = Op("eq", (SizeVal(idx[d], torch.int64), cast(index(at), torch.int64)), torch.bool)
        return Op("where", (hit, cast(self(idx), acc), Const(0, acc)), acc)
    red = lw.reduce(TensorBox(tuple(self.shape), acc, pick), [d], True, "sum", acc)
    return lw.out_box(node, lambda idx: cast(red(idx), dt))


@register(aten.scalar_tensor.default)
def _scalar_tensor(lw, node, value, dtype=None, layout=None, device=None, pin_memory=None):
    return _full(lw, node, (), value)


@register(aten.new_zeros.default, aten.new_ones.default)
def _new_zeros(lw, node, self, size, dtype=None, layout=None, device=None, pin_memory=None):
    return _full(lw, node, size, 0 if node.target == aten.new_zeros.default else 1)


@register(aten.zeros.default, aten.ones.default)
def _zeros(lw, node, size, dtype=None, layout=None, device=None, pin_memory=None):
    return _full(lw, node, size, 0 if node.target == aten.zeros.default else 1)


# -- reductions ----------------------------------------------------------------------------------
def _acc_dtype(node):
    return _dt(node)


@register(aten.sum.dim_IntList, aten.sum.default)
def _sum(lw, node, a, dim=None, keepdim=False, dtype=None):
    return lw.reduce(a, list(dim or []), keepdim, "sum", _dt(node), node)


@register(aten.mean.dim, aten.mean.default)
def _mean(lw, node, a, dim=None, keepdim=False, dtype=None):
    dt = _dt(node)
    ct = compute_dtype(dt)  # ATen sums and divides a half-precision mean in float32, rounding once
    s = lw.reduce(a, list(dim or []), keepdim, "sum", ct, None)
    n = s.rsize
    return lw.out_box(node, lambda idx: cast(Op("div", (s(idx), SizeVal(n, ct)), ct), dt))


@register(aten.amax.default, aten.amin.default)
def _amax(lw, node, a, dim=(), keepdim=False):
    return lw.reduce(a, list(dim or []), keepdim, "max" if node.target == aten.amax.default else "min",
                     _dt(node), node)


def _softmax_parts(lw, x, dim):
    """(max, exp(x - max), sum of it) over ``dim``, in ``x``'s compute dtype: ATen's softmax
    kernels take a half-precision row in float32 and round only the result."""
    ct = compute_dtype(x.dtype)
    m = lw.reduce(x, [dim], True, "max", ct)
    shape = x.shape
    e = TensorBox(shape, ct, lambda idx: Op("exp", (Op("sub", (cast(x(idx), ct), m(idx)), ct),), ct))
    s = lw.reduce(e, [dim], True, "sum", ct)
    return m, e, s


@register(aten._softmax.default)
def _softmax(lw, node, x, dim, half_to_float):
    if half_to_float or x.dtype != _dt(node):
        raise Unsupported("softmax with a dtype change")
    m, e, s = _softmax_parts(lw, x, dim)
    return lw.out_box(node, lambda idx: cast(Op("div", (e(idx), s(idx)), e.dtype), x.dtype))


@register(aten._log_softmax.default)
def _log_softmax(lw, node, x, dim, half_to_float):
    if half_to_float or x.dtype != _dt(node):
        raise Unsupported("log_softmax with a dtype change")
    m, e, s = _softmax_parts(lw, x, dim)
    ct = e.dtype
    return lw.out_box(node, lambda idx: cast(Op("sub", (Op("sub", (cast(x(idx), ct), m(idx)), ct),
                                                         Op("log", (s(idx),), ct)), ct), x.dtype))


@register(aten.native_layer_norm.default)
def _layer_norm(lw, node, x, normalized_shape, weight, bias, eps):
    dt = x.dtype
    if not dt.is_floating_point:
        raise Unsupported("integer layer norm")
    # ATen's layer norm computes a half-precision input in float32 (mean, variance, the affine
    # part) and rounds each output once: the output to the input's dtype, mean and rstd to
    # theirs: float32 on CUDA (as the meta function says), the input's on the CPU (where the
    # meta function says float32 too, and a training graph's backward expects the input's).
    ct = compute_dtype(dt)
    n = len(x.shape)
    dims = list(range(n - len(normalized_shape), n))
    total = lw.reduce(x, dims, True, "sum", ct)
    N = SizeVal(total.rsize, ct)
    mean = TensorBox(total.shape, ct, lambda idx: Op("div", (total(idx), N), ct))
    centered = TensorBox(x.shape, ct, lambda idx: Op("sub", (cast(x(idx), ct), mean(idx)), ct))
    sq = TensorBox(x.shape, ct, lambda idx: Op("mul", (centered(idx), centered(idx)), ct))
    var = lw.reduce(sq, dims, True, "sum", ct)
    rstd = TensorBox(var.shape, ct, lambda idx: Op("rsqrt", (Op("add", (Op("div", (var(idx), N), ct),
                                                                         Const(float(eps), ct)), ct),), ct))
    shape = x.shape

    def out(idx):
        v = Op("mul", (centered(idx), rstd(idx)), ct)
        if weight is not None:
            v = Op("mul", (v, lw.value(weight, idx, shape, ct)), ct)
        if bias is not None:
            v = Op("add", (v, lw.value(bias, idx, shape, ct)), ct)
        return v
    outs = [n_ for n_ in node.users]  # getitem nodes carry the fx node for layouts
    by_index = {u.args[1]: u for u in outs if u.target.__name__ == "getitem"}
    boxes = []
    for i, (fn, shp) in enumerate(((out, shape), (mean.fn, mean.shape), (rstd.fn, rstd.shape))):
        got = by_index.get(i)
        odt = got.meta["val"].dtype if i > 0 and not _on_cpu(lw) and got is not None and "val" in got.meta else dt
        boxes.append(TensorBox(tuple(shp), odt, (lambda f, d: lambda idx: cast(f(idx), d))(fn, odt), node=got))
    return tuple(boxes)


__all__ = ["HANDLERS", "register", "RedRef", "same_device"]
