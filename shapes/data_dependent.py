"""Ops whose output size or value depends on tensor data.

Each handler creates unbacked symbols in the env and returns meta outputs
whose sizes use them, plus how to bind each symbol from the real output at
run time (``("size", dim)``, ``("storage_offset",)`` or ``("value",)``).
"""
from __future__ import annotations

import sympy
import torch

from .errors import UnsupportedOpError
from .functions import FloorDiv
from .provenance import capture
from .symbols import DataRead, DataSource, UnbackedKind
from .symnode import sym_value

aten = torch.ops.aten


def _numel_expr(t):
    n = sympy.Integer(1)
    for s in t.shape:
        n = n * (s.node.expr if isinstance(s, torch.SymInt) else sympy.Integer(s))
    return n


def _where(env) -> str:
    p = capture(env.current_op())
    return f"{p.filename}:{p.lineno} `{p.code}`" if p.code else p.location()


def _data(env, func, kind: UnbackedKind, read: DataRead, p=None):
    """A data-dependent symbol that ``func`` read at the user's line ``p`` (captured here if not given)."""
    p = p or capture(env.current_op())
    return env.create_unbacked(source=DataSource(kind=kind, read=read, op=str(func.overloadpacket),
                                                 filename=p.filename, lineno=p.lineno, code=p.code))


def _count(env, func, read: DataRead, numel_expr):
    u = _data(env, func, UnbackedKind.SIZE, read)
    env.add_op_axiom(sympy.Le(u, numel_expr), f"{env.describe_symbol(u)} is at most the number of elements")
    return u


def handle_nonzero(env, func, args, kwargs):
    x = args[0]
    u = _count(env, func, DataRead.NONZERO, _numel_expr(x))
    out = torch.empty((sym_value(env, u), x.dim()), dtype=torch.int64, device="meta")
    return out, {u: ("size", 0)}


def handle_masked_select(env, func, args, kwargs):
    x, mask = args[0], args[1]
    shape = torch.broadcast_shapes(x.shape, mask.shape)
    numel = sympy.Integer(1)
    for s in shape:
        numel = numel * (s.node.expr if isinstance(s, torch.SymInt) else sympy.Integer(s))
    u = _count(env, func, DataRead.MASKED_SELECT, numel)
    return torch.empty((sym_value(env, u),), dtype=x.dtype, device="meta"), {u: ("size", 0)}


def handle_index(env, func, args, kwargs):
    x, indices = args[0], args[1]
    bool_pos = [i for i, ix in enumerate(indices) if ix is not None and ix.dtype in (torch.bool, torch.uint8)]
    if not bool_pos:
        return None
    if len(bool_pos) != 1 or any(ix is not None for i, ix in enumerate(indices) if i not in bool_pos):
        raise UnsupportedOpError(
            f"indexing with a boolean mask combined with other indices is not supported "
            f"(at {_where(env)}); index with the mask alone, or use torch.nonzero explicitly"
        )
    p = bool_pos[0]
    mask = indices[p]
    covered = mask.dim()
    u = _count(env, func, DataRead.MASK_INDEX, _numel_expr(mask))
    shape = list(x.shape[:p]) + [sym_value(env, u)] + list(x.shape[p + covered:])
    return torch.empty(shape, dtype=x.dtype, device="meta"), {u: ("size", p)}


def handle_item(env, func, args, kwargs):
    x = args[0]
    if x.dtype.is_floating_point:
        u = _data(env, func, UnbackedKind.FLOAT, DataRead.ITEM)
        return sym_value(env, u, float), {u: ("value",)}
    if x.dtype is torch.bool:
        u = _data(env, func, UnbackedKind.BOOL, DataRead.ITEM)
        return sym_value(env, sympy.Eq(u, 1), bool), {u: ("value",)}
    if x.dtype.is_complex:
        raise UnsupportedOpError(f".item() of a complex tensor is not supported (at {_where(env)})")
    u = _data(env, func, UnbackedKind.INT, DataRead.ITEM)
    return sym_value(env, u, int), {u: ("value",)}


def handle_is_nonzero(env, func, args, kwargs):
    """``bool(tensor)``: the truth of a one-element tensor's value."""
    u = _data(env, func, UnbackedKind.BOOL, DataRead.TRUTH)
    return sym_value(env, sympy.Eq(u, 1), bool), {u: ("value",)}


def handle_allclose(env, func, args, kwargs):
    """``torch.allclose``: whether every element is close, a truth value read from data.

    The shapes must broadcast as in eager's ``isclose``: its meta kernel checks that first."""
    aten.isclose.default(*args, **kwargs)
    u = _data(env, func, UnbackedKind.BOOL, DataRead.ALLCLOSE)
    return sym_value(env, sympy.Eq(u, 1), bool), {u: ("value",)}


def handle_equal(env, func, args, kwargs):
    """``torch.equal``: same sizes and values, a truth value read from data (False for other sizes)."""
    u = _data(env, func, UnbackedKind.BOOL, DataRead.EQUAL)
    return sym_value(env, sympy.Eq(u, 1), bool), {u: ("value",)}


def handle_unique(env, func, args, kwargs):
    x = args[0]
    name = func.overloadpacket.__name__
    if name == "unique_dim":
        raise UnsupportedOpError(f"torch.unique(dim=...) is not supported (at {_where(env)})")
    u = _count(env, func, DataRead.UNIQUE, _numel_expr(x))
    if name == "_unique2":
        return_inverse = args[2] if len(args) > 2 else kwargs.get("return_inverse", False)
        return_counts = args[3] if len(args) > 3 else kwargs.get("return_counts", False)
    else:  # unique_consecutive
        return_inverse = args[1] if len(args) > 1 else kwargs.get("return_inverse", False)
        return_counts = args[2] if len(args) > 2 else kwargs.get("return_counts", False)
    su = sym_value(env, u)
    vals = torch.empty((su,), dtype=x.dtype, device="meta")
    inv = torch.empty(x.shape if return_inverse else (0,), dtype=torch.int64, device="meta")
    cnt = torch.empty((su,) if return_counts else (0,), dtype=torch.int64, device="meta")
    return (vals, inv, cnt), {u: ("size", 0)}


def handle_repeat_interleave(env, func, args, kwargs):
    repeats = args[0]
    out_size = kwargs.get("output_size")
    if out_size is not None:
        return None
    u = _data(env, func, UnbackedKind.SIZE, DataRead.REPEATS)
    return torch.empty((sym_value(env, u),), dtype=repeats.dtype, device="meta"), {u: ("size", 0)}


def handle_slice(env, func, args, kwargs):
    """``x[s:e]`` along a dim where ``s`` or ``e`` is a value read from data (``tensor_split`` by an
    index tensor): its length and where it starts are data-dependent, as in torch's fake kernel."""
    x = args[0]
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    start = args[2] if len(args) > 2 else kwargs.get("start")
    end = args[3] if len(args) > 3 else kwargs.get("end")
    step = args[4] if len(args) > 4 else kwargs.get("step", 1)
    if not any(isinstance(v, torch.SymInt) and env.has_unbacked(v.node.expr) for v in (start, end)):
        return None
    if x.dim() == 0:
        raise RuntimeError("slice() cannot be applied to a 0-dim tensor.")
    if not isinstance(step, int) or step <= 0:
        return None  # a symbolic step: the meta kernel decides (and asks)
    dim = dim % x.dim()
    n = x.shape[dim]
    n_expr = n.node.expr if isinstance(n, torch.SymInt) else sympy.Integer(n)
    known = lambda c: env.static_bool(env.simplify(c), log=False) is True  # noqa: E731 - torch's guard_or_false
    lo = sympy.Integer(0) if start is None else _slice_index(_expr(start), n_expr, known)
    hi = n_expr if end is None or (isinstance(end, int) and end >= 2 ** 62) else _slice_index(_expr(end), n_expr,
                                                                                              known)
    length = None
    if lo is not None and hi is not None:
        if known(sympy.Ge(hi, lo)):
            length = FloorDiv(hi - lo + step - 1, step) if step != 1 else hi - lo
        elif known(sympy.Ge(lo, hi)):
            length = sympy.Integer(0)
    where = capture(env.current_op())
    bindings = {}
    if length is None:
        u = _data(env, func, UnbackedKind.SIZE, DataRead.SLICE_LENGTH, where)
        env.add_op_axiom(sympy.Le(u, n_expr), "a slice is at most as long as its dim")
        length, bindings[u] = u, ("size", dim)
    if lo is None:
        u = _data(env, func, UnbackedKind.SIZE, DataRead.SLICE_START, where)
        lo, bindings[u] = u, ("storage_offset",)
        offset = u  # the binding reads the whole storage offset
    else:
        offset = _expr(x.storage_offset()) + lo * _expr(x.stride()[dim])
    sizes, strides = list(x.shape), list(x.stride())
    sizes[dim] = sym_value(env, length)
    strides[dim] = strides[dim] * step
    return x.as_strided(sizes, strides, sym_value(env, offset)), bindings


def _expr(v):
    return v.node.expr if isinstance(v, torch.SymInt) else sympy.Integer(v)


def _slice_index(i, n, known):
    """Where a slice bound ``i`` lands in a dim of size ``n`` (torch's ``_compute_slice_index``), or None."""
    if known(sympy.And(i >= 0, i <= n)):
        return i
    if known(sympy.And(i < 0, i >= -n)):
        return i + n
    if known(i < -n):
        return sympy.Integer(0)
    if known(i > n):
        return n
    if known(i >= 0):
        return sympy.Min(i, n)
    if known(i < 0):
        return sympy.Max(i + n, 0)
    return None


HANDLERS = {
    aten.nonzero.default: handle_nonzero,
    aten.masked_select.default: handle_masked_select,
    aten.index.Tensor: handle_index,
    aten._local_scalar_dense.default: handle_item,
    aten.item.default: handle_item,
    aten.is_nonzero.default: handle_is_nonzero,
    aten._unique2.default: handle_unique,
    aten.unique_consecutive.default: handle_unique,
    aten.unique_dim.default: handle_unique,
    aten.repeat_interleave.Tensor: handle_repeat_interleave,
    aten.slice.Tensor: handle_slice,
    aten.allclose.default: handle_allclose,
    aten.equal.default: handle_equal,
}
