"""Hand-written causal attention in a traced graph, replaced by one fused SDPA call.

``softmax(Q @ K^T * s  masked where j > i) @ V`` materializes a (B*H, T, T)
score tensor and runs five kernels; ``scaled_dot_product_attention(Q, K, V,
is_causal=True, scale=s)`` computes the same function in one fused kernel
(ATen's flash/efficient attention on CUDA).  The rewrite applies only where it
is proved equivalent for every size the trace serves: the mask's kept entries
are exactly ``j <= i`` over the score's last two dims (read by
:class:`shapes.flops.masks.MaskAnalysis` from how the graph builds the mask),
the fill is ``-inf``, the scale is a positive constant, the softmax runs over
the last dim, and no intermediate (scores, probabilities) is used elsewhere.

The same shape covers ATen's own math decomposition of ``scaled_dot_product_attention``
(what tracing SDPA on meta tensors records): Q and K^T each scaled by ``sqrt(s)``,
and the causal mask added as a bias ``where(tril(ones(L, S)), 0, -inf)``.

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

aten = torch.ops.aten
SDPA = aten.scaled_dot_product_attention.default
_SOFTMAX = {aten._softmax.default, aten._safe_softmax.default, aten.softmax.int}
# Ops that keep a batched matmul operand's values in row-major order of its batch dims.
_FLATTEN = {aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.clone.default,
            aten.expand.default, aten.contiguous.default}
_CAUSAL = Band(hi=0)


def _shape(n) -> Optional[tuple]:
    v = n.meta.get("val") if isinstance(n, torch.fx.Node) else None
    if not isinstance(v, torch.Tensor):
        return None
    return tuple(sympy.sympify(s.node.expr if isinstance(s, torch.SymInt) else s) for s in v.shape)


def _same(a, b) -> bool:
    return a is not None and b is not None and len(a) == len(b) and all(
        sympy.expand(x - y) == 0 for x, y in zip(a, b))


def _numel(shape):
    return sympy.Mul(*shape) if shape else sympy.Integer(1)


def _only_user(n) -> Optional[torch.fx.Node]:
    return next(iter(n.users)) if len(n.users) == 1 else None


def _unflatten(n):
    """The tensor a bmm operand was flattened from: ``(X, batch dims)`` where the operand
    is X's values with X's leading dims merged row-major and its last two dims kept."""
    shape = _shape(n)
    x = n
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

    def __init__(self, q, k, v, scale, out):
        self.q, self.k, self.v, self.scale, self.out = q, k, v, scale, out


def _match(softmax, masks: MaskAnalysis) -> Optional[_Match]:
    args = list(softmax.args)
    rank = len(_shape(softmax) or ())
    if rank < 3 or args[1] % rank != rank - 1 or (len(args) > 2 and args[2]) or softmax.kwargs.get("dtype"):
        return None  # a softmax over another dim, or one that changes the dtype
    # Scores: from the softmax down through the mask and the scale to Q @ K^T.
    chain = _score_chain(args[0], masks)
    if chain is None:
        return None
    x, scale, causal = chain
    if not causal or x.target is not aten.bmm.default or len(x.users) != 1:
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
        if u.target not in _FLATTEN:
            return None
        p = u
    else:
        return None
    pv = u
    if pv.args[0] is not p or len(pv.users) < 1:
        return None
    vf = _unflatten(pv.args[1])
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
    return _Match(q, k, v, float(scale), out)


def _score_chain(x, masks: MaskAnalysis):
    """From the softmax's input down through the causal mask and the scale: ``(the Q @ K^T
    bmm node, the scale, whether a causal mask was found)``, or None for another chain."""
    scale, causal = 1.0, False
    for _ in range(16):
        if not isinstance(x, torch.fx.Node) or x.op != "call_function" or len(x.users) != 1:
            return None
        a = x.args
        if x.target in (aten.masked_fill.Scalar, aten.masked_fill.Tensor) and not causal:
            fill = masks.scalar(a[2])
            dropped = masks.pred(a[1])
            ms, xs = _shape(a[1]), _shape(x)
            if fill != -math.inf or dropped is None or ms is None or len(ms) < 2 or not _same(ms[-2:], xs[-2:]):
                return None
            if dropped != Band(lo=1):  # masked exactly where j >= i + 1: keeps j <= i
                return None
            causal, x = True, a[0]
        elif x.target is aten.where.self and not causal:
            kept, fill = masks.pred(a[0]), masks.scalar(a[2])
            ms, xs = _shape(a[0]), _shape(x)
            if fill != -math.inf or kept != _CAUSAL or ms is None or len(ms) < 2 or not _same(ms[-2:], xs[-2:]):
                return None
            causal, x = True, a[1]
        elif x.target is aten.add.Tensor and not causal and len(a) == 2 and not x.kwargs:
            scores = next((s for s, b in ((a[0], a[1]), (a[1], a[0])) if _causal_bias(b, s, x, masks)), None)
            if scores is None:
                return None
            causal, x = True, scores
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
    return x, scale, causal


def _contiguous_heads(sdpa) -> None:
    """``clone(sdpa(...).transpose(1, 2))`` (the heads merged back) as ``.contiguous()``.

    ATen's flash and efficient kernels write their output as (B, T, H, D) and return the
    (B, H, T, D) view of it, so the transposed result is already contiguous and the clone
    a pure copy; ``contiguous`` gives the same values in the same layout, copying only
    where another SDPA kernel ran.  Only where nothing else sees the SDPA output or the
    transposed view (so nothing can observe that the result may alias them).
    """
    t = _only_user(sdpa)
    if t is None or t.op != "call_function" or t.target is not aten.transpose.int or \
            sorted(d % 4 for d in t.args[1:3]) != [1, 2]:
        return
    c = _only_user(t)
    if c is None or c.op != "call_function" or c.target is not aten.clone.default or \
            c.kwargs.get("memory_format", torch.contiguous_format) is not torch.contiguous_format or len(c.args) != 1:
        return
    c.target = aten.contiguous.default
    c.kwargs = {}


def fuse_causal_attention(tp) -> int:
    """Replace each proved-causal hand-written attention in ``tp.graph`` by one
    ``scaled_dot_product_attention(..., is_causal=True)`` node; returns how many.

    The graph is rewritten in place (the compiler owns its traces); dead nodes
    (the score, mask and probability computations) are removed.
    """
    masks = MaskAnalysis(types.SimpleNamespace(traced=tp))
    g = tp.graph
    done = 0
    for node in list(g.nodes):
        if node.op != "call_function" or node.target not in _SOFTMAX:
            continue
        m = _match(node, masks)
        if m is None:
            continue
        with g.inserting_before(m.out):
            new = g.call_function(SDPA, (m.q, m.k, m.v), {"is_causal": True, "scale": m.scale})
        new.meta = dict(m.out.meta)
        m.out.replace_all_uses_with(new)
        _contiguous_heads(new)
        done += 1
    if done:
        g.eliminate_dead_code()
        g.lint()
    return done
