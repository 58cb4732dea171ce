"""Hand-written attention in a traced graph, replaced by one fused SDPA call.

``softmax(Q @ K^T * s + mask) @ V`` materializes a (B*H, T, S) score tensor and runs
five kernels; ``scaled_dot_product_attention`` computes the same function in one fused
kernel.  The rewrite applies only where it is proved equivalent for every size the trace
serves, recognized structurally (the forms transformers' ``eager`` attention and
hand-written models use):

* the mask: none; causal, with kept entries exactly ``j <= i`` over the score's last two
  dims (read by :class:`shapes.flops.masks.MaskAnalysis`), applied as a ``-inf`` fill or a
  ``where(tril, 0, -inf)`` bias (-> ``is_causal=True``); or any additive float tensor that
  broadcasts into the scores without widening them (-> ``attn_mask=bias``, SDPA's float
  mask is that addition);
* the scale: positive constants on the scores, Q or K (-> ``scale``);
* the softmax over the last dim, its input possibly upcast to fp32 and its output cast
  back (SDPA's kernels accumulate in fp32 too);
* Q, K, V flattened into the two ``bmm`` calls through views, expands and copies; K/V
  repeated per head (GQA's ``repeat_kv``) are taken as repeated here, and
  :mod:`compiler.sdpa_calls` turns them into ``enable_gqa``;
* no intermediate (scores, probabilities) used elsewhere.

``F.scaled_dot_product_attention`` itself never needs this: the tracer keeps it whole
(:mod:`shapes.eager_checks.attention`).

Example::

    >>> import torch, shapes
    >>> from tests.compiler_programs import Attention
    >>> tp = shapes.trace(Attention().eval(), "x: f32[B, T, 32]")
    >>> fuse_causal_attention(tp)
    1
    >>> sum(n.target is torch.ops.aten.scaled_dot_product_attention.default for n in tp.graph.nodes)
    1
"""
from __future__ import annotations

import math
import types
from typing import Optional

import sympy
import torch
import torch.fx

from shapes.flops.masks import Band, MaskAnalysis

from .sdpa_calls import contiguous_heads

aten = torch.ops.aten
SDPA = aten.scaled_dot_product_attention.default
_SOFTMAX = {aten._softmax.default, aten._safe_softmax.default, aten.softmax.int}
# Ops that keep a batched matmul operand's values in row-major order of its batch dims.
_FLATTEN = {aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.clone.default,
            aten.expand.default, aten.contiguous.default}
_CAUSAL = Band(hi=0)


# The trace's simplifier while fuse_causal_attention runs: sizes recorded before a guard fixed
# a symbol (B before transformers' `batch_size != 1` branch at B = 1) compare equal to the
# size the guard gave it only through the engine's replacements.
_SIMPLIFY: list = []


def _shape(n) -> Optional[tuple]:
    v = n.meta.get("val") if isinstance(n, torch.fx.Node) else None
    if not isinstance(v, torch.Tensor):
        return None
    dims = tuple(sympy.sympify(s.node.expr if isinstance(s, torch.SymInt) else s) for s in v.shape)
    return tuple(_SIMPLIFY[-1](d) for d in dims) if _SIMPLIFY else dims


def _same(a, b) -> bool:
    return a is not None and b is not None and len(a) == len(b) and all(
        sympy.expand(x - y) == 0 for x, y in zip(a, b))


def _numel(shape):
    return sympy.Mul(*shape) if shape else sympy.Integer(1)


def _only_user(n) -> Optional[torch.fx.Node]:
    return next(iter(n.users)) if len(n.users) == 1 else None


def _unflatten(n, batch=None):
    """The tensor a bmm operand was flattened from: ``(X, batch dims)`` where the operand
    is X's values with X's leading dims merged row-major and its last two dims kept.
    With ``batch``, the earliest such X whose batch dims are ``batch`` (a repeat before it,
    as in GQA's ``repeat_kv``, has other batch dims)."""
    shape = _shape(n)
    x, best = n, None
    while isinstance(x, torch.fx.Node) and x.op == "call_function" and x.target in _FLATTEN:
        src = x.args[0]
        s, ss = _shape(x), _shape(src)
        if s is None or ss is None or len(s) < 2 or len(ss) < 2 or not _same(s[-2:], ss[-2:]):
            break
        if x.target is aten.expand.default and not _same(s, ss):
            break  # a real broadcast: values repeat
        if not _same((_numel(s[:-2]),), (_numel(ss[:-2]),)):
            break
        x = src
        if batch is not None and len(ss) >= 3 and _same(ss[:-2], batch):
            best = x
    if batch is not None and best is not None:
        x = best
    xs = _shape(x)
    if xs is None or len(xs) < 3 or not _same(xs[-2:], shape[-2:]):
        return None
    return x, xs[:-2]


def _peel_scale(n):
    """``(x, c)`` where ``n`` is ``x`` times the positive constant ``c`` (1 when it is not scaled)."""
    c = 1.0
    while isinstance(n, torch.fx.Node) and n.op == "call_function" and n.target in (
            aten.mul.Tensor, aten.mul.Scalar) and isinstance(n.args[1], (int, float)) and \
            not isinstance(n.args[1], bool) and n.args[1] > 0:
        c, n = c * n.args[1], n.args[0]
    return n, c


def _causal_bias(bias, scores, total, masks) -> bool:
    """Whether ``scores + bias`` is ``scores`` with ``-inf`` where j > i and unchanged elsewhere:
    ``bias = where(kept, 0, -inf)`` with ``kept`` exactly ``j <= i``, not widening ``scores``."""
    if not (isinstance(bias, torch.fx.Node) and bias.op == "call_function" and bias.target is aten.where.self):
        return False
    kept, zero, fill = masks.pred(bias.args[0]), masks.scalar(bias.args[1]), masks.scalar(bias.args[2])
    bs, ss = _shape(bias), _shape(scores)
    return (kept == _CAUSAL and zero == 0.0 and fill == -math.inf and bs is not None and len(bs) >= 2
            and _same(bs[-2:], ss[-2:]) and _same(_shape(total), ss))


def _transposed_last2(n):
    """``k`` where ``n`` is ``k.transpose(-2, -1)`` (as ATen records it)."""
    if not (isinstance(n, torch.fx.Node) and n.op == "call_function" and n.target is aten.transpose.int):
        return None
    rank = len(_shape(n) or ())
    d0, d1 = (d % rank for d in n.args[1:3])
    return n.args[0] if {d0, d1} == {rank - 2, rank - 1} else None


class _Match:
    """One recognized attention: the nodes to replace and the SDPA arguments."""

    def __init__(self, q, k, v, scale, out, mask=None, causal=True):
        self.q, self.k, self.v, self.scale, self.out, self.mask, self.causal = q, k, v, scale, out, mask, causal


def _additive_bias(bias, scores, total) -> bool:
    """Whether ``scores + bias`` adds a float tensor that broadcasts into ``scores`` without
    widening it: SDPA's float ``attn_mask`` is exactly that addition."""
    bv, sv = (n.meta.get("val") if isinstance(n, torch.fx.Node) else None for n in (bias, scores))
    bs, ss = _shape(bias), _shape(scores)
    return (isinstance(bv, torch.Tensor) and isinstance(sv, torch.Tensor) and bv.dtype.is_floating_point
            and bv.dtype == sv.dtype and bs is not None and ss is not None and len(bs) <= len(ss)
            and _same(_shape(total), ss))


def _cast_only(n) -> bool:
    """A dtype conversion and nothing else (``x.float()``, softmax's ``dtype=``, ``.to(q.dtype)``)."""
    return (isinstance(n, torch.fx.Node) and n.op == "call_function" and n.target is aten._to_copy.default
            and set(n.kwargs) <= {"dtype"} and len(n.args) == 1)


def _match(softmax, masks: MaskAnalysis) -> Optional[_Match]:
    args = list(softmax.args)
    rank = len(_shape(softmax) or ())
    if rank < 3 or args[1] % rank != rank - 1 or (len(args) > 2 and args[2]) or softmax.kwargs.get("dtype"):
        return None  # a softmax over another dim, or one that changes the dtype
    # Scores: from the softmax down through the mask and the scale to Q @ K^T.
    chain = _score_chain(args[0], masks)
    if chain is None:
        return None
    x, scale, causal, mask = chain
    if x.target is not aten.bmm.default or len(x.users) != 1:
        return None
    qf, kf = _unflatten(x.args[0]), _unflatten(x.args[1])
    if qf is None or kf is None:
        return None
    q, batch = qf
    q, sq = _peel_scale(q)
    kt, sk = _peel_scale(kf[0])
    k = _transposed_last2(kt)
    if k is None or not _same(kf[1], batch):
        return None
    scale *= sq * sk
    # Probabilities: the softmax flattened the same way into P @ V.
    p = softmax
    for _ in range(4):
        u = _only_user(p)
        if u is None:
            return None
        if u.target is aten.bmm.default:
            break
        if u.target not in _FLATTEN and not _cast_only(u):
            return None
        p = u
    else:
        return None
    pv = u
    if pv.args[0] is not p or len(pv.users) < 1:
        return None
    vf = _unflatten(pv.args[1], batch)
    if vf is None or not _same(vf[1], batch):
        return None
    v = vf[0]
    pv_shape = _shape(pv)
    want = batch + (_shape(q)[-2], _shape(v)[-1])
    out = pv
    if not _same(pv_shape, want):
        u = _only_user(pv)
        if u is None or u.target not in (aten.view.default, aten._unsafe_view.default) or not _same(_shape(u), want):
            return None
        out = u
    if _shape(q)[-1] != _shape(k)[-1] or not _same(_shape(k)[-2:-1], _shape(v)[-2:-1]):
        return None
    if not (q.meta["val"].dtype == k.meta["val"].dtype == v.meta["val"].dtype == out.meta["val"].dtype):
        return None
    return _Match(q, k, v, float(scale), out, mask, causal)


def _score_chain(x, masks: MaskAnalysis):
    """From the softmax's input down through the mask, an fp32 upcast and the scale:
    ``(the Q @ K^T bmm node, the scale, whether a causal mask was found, an additive
    float mask or None)``, or None for another chain."""
    scale, causal, mask = 1.0, False, None
    for _ in range(16):
        if not isinstance(x, torch.fx.Node) or x.op != "call_function" or len(x.users) != 1:
            return None
        a = x.args
        if x.target in (aten.masked_fill.Scalar, aten.masked_fill.Tensor) and not causal and mask is None:
            fill = masks.scalar(a[2])
            dropped = masks.pred(a[1])
            ms, xs = _shape(a[1]), _shape(x)
            if fill != -math.inf or dropped is None or ms is None or len(ms) < 2 or not _same(ms[-2:], xs[-2:]):
                return None
            if dropped != Band(lo=1):  # masked exactly where j >= i + 1: keeps j <= i
                return None
            causal, x = True, a[0]
        elif x.target is aten.where.self and not causal and mask is None:
            kept, fill = masks.pred(a[0]), masks.scalar(a[2])
            ms, xs = _shape(a[0]), _shape(x)
            if fill != -math.inf or kept != _CAUSAL or ms is None or len(ms) < 2 or not _same(ms[-2:], xs[-2:]):
                return None
            causal, x = True, a[1]
        elif x.target is aten.add.Tensor and not causal and mask is None and len(a) == 2 and not x.kwargs:
            scores = next((s for s, b in ((a[0], a[1]), (a[1], a[0])) if _causal_bias(b, s, x, masks)), None)
            if scores is not None:
                causal, x = True, scores
                continue
            # Any other additive float mask (transformers' eager attention): SDPA's float attn_mask.
            pair = next(((s, b) for s, b in ((a[0], a[1]), (a[1], a[0])) if _additive_bias(b, s, x)), None)
            if pair is None:
                return None
            x, mask = pair
        elif _cast_only(x) and x.kwargs.get("dtype") == torch.float32:
            x = a[0]  # scores upcast before the softmax: SDPA's kernels accumulate in fp32 too
        elif x.target in (aten.mul.Tensor, aten.mul.Scalar, aten.div.Tensor, aten.div.Scalar) and \
                isinstance(a[1], (int, float)) and not isinstance(a[1], bool) and a[1] > 0:
            scale = scale * a[1] if x.target in (aten.mul.Tensor, aten.mul.Scalar) else scale / a[1]
            x = a[0]
        elif x.target in (aten.view.default, aten._unsafe_view.default) and x.args[0].target is aten.bmm.default:
            x = x.args[0]
        elif x.target is aten.bmm.default:
            break
        else:
            return None
    else:
        return None
    return x, scale, causal, mask


def fuse_causal_attention(tp) -> int:
    """Replace each proved-causal hand-written attention in ``tp.graph`` by one
    ``scaled_dot_product_attention(..., is_causal=True)`` node; returns how many.

    The graph is rewritten in place (the compiler owns its traces); dead nodes
    (the score, mask and probability computations) are removed.
    """
    masks = MaskAnalysis(types.SimpleNamespace(traced=tp))
    _SIMPLIFY.append(tp.env.simplify)
    try:
        return _fuse(tp, masks)
    finally:
        _SIMPLIFY.pop()


def _fuse(tp, masks) -> int:
    g = tp.graph
    done = 0
    for node in list(g.nodes):
        if node.op != "call_function" or node.target not in _SOFTMAX:
            continue
        m = _match(node, masks)
        if m is None:
            continue
        with g.inserting_before(m.out):
            if m.mask is None:
                new = g.call_function(SDPA, (m.q, m.k, m.v), {"is_causal": m.causal, "scale": m.scale})
            else:
                new = g.call_function(SDPA, (m.q, m.k, m.v, m.mask), {"scale": m.scale})
        new.meta = dict(m.out.meta)
        m.out.replace_all_uses_with(new)
        contiguous_heads(new)
        done += 1
    if done:
        g.eliminate_dead_code()
        g.lint()
    return done
