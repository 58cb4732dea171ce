"""Per-op rules of the padding analysis: how each ATen op moves kept and padded positions.

Each rule takes the analysis context and an FX node whose tensor inputs are
not mixed, and returns the :class:`~compiler.padding_facts.Fact` of its result
(a tuple of them for ops with several outputs).  An op without a rule that
touches a padded dim is *not proved*: never safe by default.

Example::

    >>> import torch
    >>> from compiler.padding_rules import RULES
    >>> torch.ops.aten.cumsum in RULES and torch.ops.aten.flip in RULES
    True
"""
from __future__ import annotations

import math

import sympy
import torch

from .padding_facts import Fact, MixKind, default_layout, is_padded, kept_prefix, merge_atoms, view_layout

aten = torch.ops.aten

# Pointwise ops that can turn finite values into inf or NaN (the padded part stops being finite).
_NONFINITE = {aten.exp, aten.exp2, aten.expm1, aten.log, aten.log2, aten.log10, aten.log1p, aten.div,
              aten.reciprocal, aten.rsqrt, aten.sqrt, aten.pow, aten.tan, aten.logit, aten.xlogy, aten.fmod,
              aten.remainder, aten.floor_divide, aten.erfinv, aten.acos, aten.asin, aten.acosh, aten.atanh}
# Unary ops with f(0) == 0: a zero padded part stays zero.
_KEEPS_ZERO = {aten.neg, aten.relu, aten.gelu, aten.silu, aten.tanh, aten.sin, aten.abs, aten.sign, aten.clone,
               aten._to_copy, aten.to, aten.contiguous, aten.detach, aten.alias, aten.erf, aten.sinh, aten.atan,
               aten.leaky_relu, aten.hardtanh, aten.lift_fresh_copy, aten.lift_fresh}
_SAME = {aten.clone, aten.contiguous, aten.alias, aten.detach, aten.lift_fresh, aten.lift_fresh_copy,
         aten._to_copy, aten.to, aten.tril, aten.triu, aten.type_as}
_VIEW = {aten.view, aten._unsafe_view, aten.reshape}
_CREATE = {aten.ones, aten.zeros, aten.full, aten.empty, aten.new_ones, aten.new_zeros, aten.new_full,
           aten.new_empty, aten.ones_like, aten.zeros_like, aten.full_like, aten.empty_like, aten.scalar_tensor,
           aten.empty_strided}
_ZERO_CREATE = {aten.zeros, aten.new_zeros, aten.zeros_like}

_REDUCE_FIX = {
    "sum": "zeros at the padded positions before the sum (x.masked_fill(pad, 0)), or sum the kept slice",
    "mean": "a sum over zero-padded positions divided by the true length (x.sum(d) / T), not by x.shape[d]",
    "amax": "-inf at the padded positions before the max", "max": "-inf at the padded positions before the max",
    "amin": "+inf at the padded positions before the min", "min": "+inf at the padded positions before the min",
    "var": "a masked variance: mean and count over the kept positions only",
    "std": "a masked variance: mean and count over the kept positions only",
    "logsumexp": "-inf at the padded positions",
    "prod": "ones at the padded positions before the product",
}
_REDUCE = {getattr(aten, n) for n in ("sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "var",
                                        "std", "var_mean", "std_mean", "logsumexp", "prod", "any", "all",
                                        "linalg_vector_norm", "norm", "nansum")}
SOFTMAX = {aten._softmax, aten._safe_softmax, aten.softmax, aten._log_softmax, aten.log_softmax}
_SCAN = {aten.cumsum, aten.cumprod, aten.cummax, aten.cummin, aten.logcumsumexp}


def _dim(d, rank):
    return d + rank if d < 0 else d


def _arg(node, i, name, default=None):
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name, default)


def pointwise(cx, node):
    out_shape = cx.shape(node)
    rank = len(out_shape)
    p = node.target._overloadpacket
    tensors, scalars = [], []
    for a in list(node.args) + list(node.kwargs.values()):
        f = cx.fact(a)
        if f is not None:
            tensors.append((a, f))
        elif cx.tainted(a):
            return cx.mixed(node, f"uses a size of a padded dim ({cx.expr_text(a)}) as a value",
                            "take the true size as a separate input, or keep this dim unpadded", MixKind.NOT_PROVED)
        else:
            scalars.append(a)
    layout = []
    for d in range(rank):
        lays = set()
        for a, f in tensors:
            k = d - (rank - len(f.layout))
            if k >= 0 and cx.shape(a)[k] != 1:
                lays.add(f.layout[k])
        if len(lays) > 1:
            return cx.mixed(node, f"combines dim {d} of differently laid out operands "
                                  f"({' vs '.join(cx.layout_text(x) for x in lays)})",
                            "lay the operands out alike (same view/merge order) before combining them")
        layout.append(lays.pop() if lays else default_layout(out_shape[d], cx.padded))
    finite = all(f.finite for _, f in tensors) and p not in _NONFINITE and all(
        not isinstance(s, float) or math.isfinite(s) for s in scalars)
    zero = frozenset()
    if p in _KEEPS_ZERO or (p is aten.mul or (p is aten.div and scalars and all(
            isinstance(s, (int, float)) and s != 0 for s in scalars))) and all(f.finite for _, f in tensors):
        for a, f in tensors:
            shift = rank - len(f.layout)
            zero |= {k + shift for k in f.zero}
        if p is not aten.mul:
            zero &= frozenset(range(rank))
    elif p is aten.masked_fill and len(tensors) >= 1 and node.args[2] == 0:
        zero = tensors[0][1].zero
    return Fact(tuple(layout), finite=finite, zero=zero)


def same(cx, node):
    f = cx.fact(node.args[0])
    return f.with_(layout=f.layout) if f is not None else None


def view(cx, node):
    f = cx.fact(node.args[0])
    out = view_layout(f.layout, cx.shape(node))
    if out is None:
        return cx.mixed(node, f"reshapes {cx.shape_text(node.args[0])} to {cx.shape_text(node)}, which splits "
                              f"or reorders a padded dim, so padded positions land between kept ones",
                        "reshape only dims that are not padded, or keep the padded dim outermost of a merge")
    return Fact(out, finite=f.finite, zero=_map_zero(f, out))


def _map_zero(f: Fact, out_layout) -> frozenset:
    """Zero facts across a view: the i-th padded input dim to the i-th padded output dim, where they match."""
    ins = [d for d, lay in enumerate(f.layout) if is_padded(lay)]
    outs = [d for d, lay in enumerate(out_layout) if is_padded(lay)]
    zero = set()
    for order in (lambda x: x, lambda x: x[::-1]):  # matching dims from the front, then from the back
        for a, b in zip(order(ins), order(outs)):
            if f.layout[a] != out_layout[b]:
                break
            if a in f.zero:
                zero.add(b)
    return frozenset(zero)


def permute(cx, node):
    f = cx.fact(node.args[0])
    r = len(f.layout)
    p = node.target._overloadpacket
    if p is aten.permute:
        order = [_dim(d, r) for d in node.args[1]]
    elif p is aten.t:
        order = [1, 0] if r == 2 else list(range(r))
    else:
        a, b = _dim(node.args[1], r), _dim(node.args[2], r)
        order = list(range(r))
        order[a], order[b] = order[b], order[a]
    return Fact(tuple(f.layout[d] for d in order), finite=f.finite,
                zero=frozenset(order.index(d) for d in f.zero))


def unsqueeze(cx, node):
    f = cx.fact(node.args[0])
    out = cx.shape(node)
    lay, src = [], [(lay, d) for d, lay in enumerate(f.layout)]
    if node.target._overloadpacket is aten.unsqueeze:
        k = _dim(node.args[1], len(out))
        src.insert(k, (((sympy.Integer(1), None),), None))
    else:  # squeeze: drop the size-1 dims that are gone
        shape = cx.shape(node.args[0])
        dims = _arg(node, 1, "dim", None)
        dims = range(len(shape)) if dims is None else [dims] if isinstance(dims, int) else dims
        dims = {_dim(d, len(shape)) for d in dims if shape[_dim(d, len(shape))] == 1}
        src = [s for d, s in enumerate(src) if d not in dims]
    zero = frozenset(k for k, (_, d) in enumerate(src) if d in f.zero)
    lay = tuple(s[0] for s in src)
    return Fact(lay, finite=f.finite, zero=zero)


def expand(cx, node):
    f = cx.fact(node.args[0])
    out, src = cx.shape(node), cx.shape(node.args[0])
    shift = len(out) - len(src)
    lay = []
    for d, size in enumerate(out):
        k = d - shift
        if k >= 0 and src[k] == size:
            lay.append(f.layout[k])
        else:
            lay.append(default_layout(size, cx.padded))
    return Fact(tuple(lay), finite=f.finite, zero=frozenset(k + shift for k in f.zero if src[k] == out[k + shift]))


def create(cx, node):
    p = node.target._overloadpacket
    values = node.args[1:] if p in (aten.full, aten.new_full, aten.full_like) else \
        node.args[:1] if p is aten.scalar_tensor else ()
    for a in values:
        if cx.tainted(a):
            return cx.mixed(node, "fills with a size of a padded dim", "fill with the true size passed separately",
                            MixKind.NOT_PROVED)
    shape = cx.shape(node)
    value = _arg(node, 1, "fill_value") if p in (aten.full, aten.full_like) else \
        _arg(node, 2, "fill_value") if p is aten.new_full else None
    finite = not isinstance(value, float) or math.isfinite(value)
    lay = tuple(default_layout(s, cx.padded) for s in shape)
    zero = frozenset(range(len(shape))) if p in _ZERO_CREATE or value == 0 else frozenset()
    return Fact(lay, finite=finite, zero=zero)


def arange(cx, node):
    args = list(node.args)
    if node.target == aten.arange.default:
        start, step = 0, 1
    else:
        start = args[0] if args else node.kwargs.get("start", 0)
        step = args[2] if len(args) > 2 else node.kwargs.get("step", 1)
    if cx.tainted(start) or cx.tainted(step):
        return cx.mixed(node, "starts or steps at a size of a padded dim, so its values change with the padding",
                        "pass the offset as a tensor input", MixKind.NOT_PROVED)
    return Fact(tuple(default_layout(s, cx.padded) for s in cx.shape(node)))


def reduction(cx, node):
    f = cx.fact(node.args[0])
    r = len(f.layout)
    p = node.target._overloadpacket
    dims = _arg(node, 1, "dim", None)
    if p is aten.var_mean or p is aten.std_mean or p in (aten.var, aten.std):
        dims = node.kwargs.get("dim", node.args[1] if len(node.args) > 1 and not isinstance(node.args[1], bool)
                               else None)
    if isinstance(dims, int):
        dims = [dims]
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        dims = list(range(r))
    dims = {_dim(d, r) for d in dims}
    keep = node.kwargs.get("keepdim", node.args[2] if len(node.args) > 2 and isinstance(node.args[2], bool)
                           else False)
    for d in sorted(dims):
        if is_padded(f.layout[d]):
            if p in (aten.sum, aten.nansum) and d in f.zero and f.finite:
                continue  # the padded part adds zeros
            name = p.__name__.split(".")[-1]
            return cx.mixed(node, f"reduces over dim {d}, a padded dim ({cx.layout_text(f.layout[d])}): kept "
                                  f"results read the padded positions", _REDUCE_FIX.get(name, "mask the padded "
                                  "positions with the reduction's identity"))
    lay = [((sympy.Integer(1), None),) if d in dims else f.layout[d] for d in range(r) if keep or d not in dims]
    return Fact(tuple(lay), finite=f.finite and p not in (aten.var, aten.std))


def softmax(cx, node):
    f = cx.fact(node.args[0])
    r = len(f.layout)
    d = _dim(node.args[1], r)
    if not is_padded(f.layout[d]):
        return Fact(f.layout, finite=f.finite)
    why = cx.causal_softmax(node, f, d)
    if why is None:
        return Fact(f.layout, finite=True, zero=frozenset({d}))
    return cx.mixed(node, f"normalizes over dim {d}, a padded dim: kept rows read the padded positions ({why})",
                    "-inf in the scores at padded positions (an attention mask over the padded keys), "
                    "or a causal mask")


def layer_norm(cx, node):
    f = cx.fact(node.args[0])
    r = len(f.layout)
    k = len(node.args[1])
    for d in range(r - k, r):
        if is_padded(f.layout[d]):
            return cx.mixed(node, f"normalizes over dim {d}, a padded dim",
                            "normalize over dims that are not padded, or a masked mean/variance")
    stats = Fact(f.layout[:r - k] + (((sympy.Integer(1), None),),) * k, finite=True)
    return Fact(f.layout, finite=True), stats, stats


def matmul(cx, node):
    p = node.target._overloadpacket
    bias = None
    if p in (aten.addmm, aten.baddbmm):
        bias, a, b = node.args[:3]
    else:
        a, b = node.args[:2]
    fa, fb = cx.fact(a), cx.fact(b)
    la, lb = fa.layout, fb.layout
    ra = len(la)
    if la[-1] != lb[-2]:
        return cx.mixed(node, f"contracts differently laid out dims ({cx.layout_text(la[-1])} vs "
                              f"{cx.layout_text(lb[-2])})", "lay both operands out alike")
    if is_padded(la[-1]):
        ok = (ra - 1 in fa.zero and fb.finite) or (len(lb) - 2 in fb.zero and fa.finite)
        if not ok:
            return cx.mixed(node, f"contracts over a padded dim ({cx.layout_text(la[-1])}): kept outputs "
                                  f"sum over padded positions",
                            "zeros at the padded positions of one operand (e.g. the attention weights of "
                            "padded keys, from -inf scores or a causal mask)")
    batch = []
    for x, y in zip(la[:-2], lb[:-2]):
        if x != y:
            return cx.mixed(node, "multiplies batches laid out differently", "lay both operands out alike")
        batch.append(x)
    out = tuple(batch) + (la[-2], lb[-1])
    fact = Fact(out, finite=fa.finite and fb.finite)
    if bias is not None:
        fbias = cx.fact(bias)
        if fbias is not None:
            for k in range(len(fbias.layout)):
                d = len(out) - len(fbias.layout) + k
                if cx.shape(bias)[k] != 1 and fbias.layout[k] != out[d]:
                    return cx.mixed(node, "adds a bias laid out differently", "lay the bias out like the product")
            fact = fact.with_(finite=fact.finite and fbias.finite)
    return fact


def sdpa(cx, node):
    q, k, v = (cx.fact(a) for a in node.args[:3])
    mask = _arg(node, 3, "attn_mask")
    causal = _arg(node, 5, "is_causal", False)
    out = q.layout[:-1] + (v.layout[-1],)
    if not is_padded(k.layout[-2]):
        return Fact(out, finite=q.finite and k.finite and v.finite)
    why = None
    if not (k.finite and v.finite):
        why = "the padded keys or values may not be finite (0 * inf is NaN)"
    elif causal and mask is None:
        if not (q.layout[-2] == k.layout[-2] and kept_prefix(q.layout[-2]) and len(q.layout[-2]) == 1):
            why = "is_causal with queries and keys laid out differently"
    else:
        why = cx.causal_mask(mask, q.layout[-2], k.layout[-2])
    if why is None:
        return Fact(out, finite=True)
    return cx.mixed(node, f"attends over padded keys ({why})",
                    "is_causal=True, or an attn_mask that is False (-inf) at the padded key positions")


def scan(cx, node):
    f = cx.fact(node.args[0])
    # A prefix scan at a kept position reads only earlier (kept) positions.
    return Fact(f.layout, finite=f.finite and node.target._overloadpacket is aten.cumsum)


def _along(cx, node, d, fact, what, fix):
    f = cx.fact(node.args[0])
    d = _dim(d, len(f.layout))
    if is_padded(f.layout[d]):
        return cx.mixed(node, f"{what} along dim {d}, a padded dim ({cx.layout_text(f.layout[d])})", fix)
    return fact(f)


def flip(cx, node):
    f = cx.fact(node.args[0])
    for d in node.args[1]:
        if is_padded(f.layout[_dim(d, len(f.layout))]):
            return cx.mixed(node, f"reverses dim {d}, a padded dim: the padding moves in front of the kept "
                                  f"positions", "reverse only the kept slice (x[:, :T].flip(1))")
    return Fact(f.layout, finite=f.finite)


def roll(cx, node):
    return _along(cx, node, node.args[2][0] if len(node.args) > 2 and node.args[2] else 0,
                  lambda f: Fact(f.layout, finite=f.finite), "rolls", "roll only the kept slice")


def slice_(cx, node):
    f = cx.fact(node.args[0])
    r = len(f.layout)
    d = _dim(_arg(node, 1, "dim", 0), r)
    start, end, step = _arg(node, 2, "start", None), _arg(node, 3, "end", None), _arg(node, 4, "step", 1)
    lay = list(f.layout)
    if not is_padded(f.layout[d]):
        lay[d] = default_layout(cx.shape(node)[d], cx.padded)
        return Fact(tuple(lay), finite=f.finite, zero=f.zero)
    full = cx.shape(node)[d] == cx.shape(node.args[0])[d]
    if start in (None, 0) and step == 1 and full:
        return Fact(f.layout, finite=f.finite, zero=f.zero)
    kept = cx.shape(node.args[0])[d]
    if len(f.layout[d]) == 1 and step == 1 and not cx.tainted(start) and not cx.tainted(end) and \
            isinstance(start, (int, type(None))) and (start or 0) >= 0 and isinstance(end, int) and end >= 0 and \
            cx.masks.proved(sympy.Le(end, kept)):
        # x[:, a:b] with 0 <= a <= b <= T on the traced range: only kept positions.
        lay[d] = default_layout(cx.shape(node)[d], cx.padded)
        return Fact(tuple(lay), finite=f.finite)
    return cx.mixed(node, f"slices dim {d}, a padded dim, at {cx.expr_text(start)}:{cx.expr_text(end)}: "
                          f"positions counted from the end land in the padding",
                    "index from the start with the true length (x[:, T - 1] with T passed in), "
                    "or keep this dim unpadded")


def select(cx, node):
    f = cx.fact(node.args[0])
    r = len(f.layout)
    d, i = _dim(node.args[1], r), node.args[2]
    if is_padded(f.layout[d]) and not (isinstance(i, int) and i >= 0):
        return cx.mixed(node, f"picks position {cx.expr_text(i)} of dim {d}, a padded dim: at the bucket size "
                              f"that is a padded position", "index from the start with the true length")
    return Fact(f.layout[:d] + f.layout[d + 1:], finite=f.finite)


def split(cx, node):
    f = cx.fact(node.args[0])
    r = len(f.layout)
    d = _dim(_arg(node, 2, "dim", 0), r)
    if is_padded(f.layout[d]):
        return cx.mixed(node, f"splits dim {d}, a padded dim", "split a dim that is not padded")
    val = node.meta.get("val")
    n = len(val) if isinstance(val, (list, tuple)) else 1
    return tuple(Fact(f.layout, finite=f.finite) for _ in range(n))


def cat(cx, node):
    parts = [a for a in node.args[0] if cx.shape(a) not in ((0,),)]
    facts = [cx.fact(a) for a in parts]
    if len(parts) == 1:
        return facts[0]
    r = len(facts[0].layout)
    d = _dim(_arg(node, 1, "dim", 0), r)
    if any(is_padded(f.layout[d]) for f in facts[:-1]):
        return cx.mixed(node, f"concatenates along dim {d}, a padded dim: the later parts start after the "
                              f"padding", "concatenate along a dim that is not padded")
    if is_padded(facts[-1].layout[d]):
        return cx.mixed(node, f"concatenates onto a padded dim {d}: its size {cx.shape(node)[d]} is not a padded "
                              f"dim the analysis tracks", "concatenate along a dim that is not padded", MixKind.NOT_PROVED)
    lay = list(facts[0].layout)
    for k in range(r):
        if k != d and len({f.layout[k] for f in facts}) > 1:
            return cx.mixed(node, "concatenates parts laid out differently", "lay the parts out alike")
    lay[d] = default_layout(cx.shape(node)[d], cx.padded)
    return Fact(tuple(lay), finite=all(f.finite for f in facts))


def embedding(cx, node):
    w, idx = cx.fact(node.args[0]), cx.fact(node.args[1])
    if is_padded_any(w):
        return cx.not_proved(node)
    return Fact(idx.layout + w.layout[1:], finite=w.finite)


def index_select(cx, node):
    src, idx = cx.fact(node.args[0]), cx.fact(node.args[2])
    d = _dim(node.args[1], len(src.layout))
    if is_padded(src.layout[d]):
        return cx.mixed(node, f"gathers along dim {d}, a padded dim, at positions it reads from data",
                        "keep this dim unpadded")
    return Fact(src.layout[:d] + idx.layout + src.layout[d + 1:], finite=src.finite)


def is_padded_any(f: Fact) -> bool:
    return any(is_padded(lay) for lay in f.layout)


RULES = {aten.native_layer_norm: layer_norm, aten.mm: matmul, aten.bmm: matmul, aten.addmm: matmul,
         aten.baddbmm: matmul, aten.scaled_dot_product_attention: sdpa, aten.flip: flip, aten.roll: roll,
         aten.slice: slice_, aten.select: select, aten.split: split, aten.split_with_sizes: split,
         aten.cat: cat, aten.embedding: embedding, aten.index_select: index_select, aten.arange: arange,
         aten.expand: expand, aten.permute: permute, aten.transpose: permute, aten.t: permute,
         aten.unsqueeze: unsqueeze, aten.squeeze: unsqueeze}
RULES.update({p: same for p in _SAME})
RULES.update({p: view for p in _VIEW})
RULES.update({p: create for p in _CREATE})
RULES.update({p: reduction for p in _REDUCE})
RULES.update({p: softmax for p in SOFTMAX})
RULES.update({p: scan for p in _SCAN})


def rule_for(target):
    """The rule for an op overload: its packet's, or :func:`pointwise` for ops tagged pointwise."""
    p = getattr(target, "_overloadpacket", None)
    if p in RULES:
        return RULES[p]
    if isinstance(target, torch._ops.OpOverload) and torch.Tag.pointwise in target.tags:
        return pointwise
    return None


__all__ = ["RULES", "SOFTMAX", "rule_for", "pointwise", "merge_atoms"]
