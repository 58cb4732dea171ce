"""How each ``scaled_dot_product_attention`` node of a traced graph is called: GQA from
repeated keys/values, and the merged-heads copy that eager's fused kernels make free.

* **GQA.**  Models with fewer key/value heads than query heads (Llama, Qwen2, Mistral,
  Gemma) often repeat K and V to the query's heads before SDPA (transformers'
  ``repeat_kv``: ``x[:, :, None].expand(B, G, n, S, D).reshape(B, G*n, S, D)``), a copy of
  K and V per layer.  ``enable_gqa=True`` on the un-repeated K/V computes the same thing
  (query head ``h`` reads key/value head ``h // n`` in both), without the copy: the CPU
  flash kernel runs it with or without a mask (2.2x faster than the repeated form on a
  2-core CPU, B=4, 8 heads over 2, T=256).  On CUDA only the flash kernel supports GQA,
  and it takes no mask: with a mask, ``enable_gqa`` would send SDPA to the math kernel,
  so the repeated K/V are kept there.
* **Merged heads.**  ``sdpa(...).transpose(1, 2)`` followed by a contiguous copy (how
  every model merges the heads back) is a copy only of the meta layout: ATen's fused
  kernels return the (B, H, T, D) view of a (B, T, H, D) tensor, so ``.contiguous()`` is
  free where they ran (and a copy where another kernel ran).

Both rewrites are exact (the same values for every size the trace serves).

Example::

    >>> import torch, shapes
    >>> def attn(q, k, v):
    ...     rep = lambda x: x[:, :, None].expand(-1, -1, 2, -1, -1).reshape(x.shape[0], 4, -1, 8)
    ...     return torch.nn.functional.scaled_dot_product_attention(q, rep(k), rep(v))
    >>> tp = shapes.trace(attn, "q: f32[B, 4, T, 8]", "k: f32[B, 2, T, 8]", "v: f32[B, 2, T, 8]")
    >>> use_gqa(tp, with_masks=True)
    1
    >>> [n.kwargs.get("enable_gqa") for n in tp.graph.nodes if n.target is SDPA]
    [True]
"""
from __future__ import annotations

from typing import Optional

import sympy
import torch
import torch.fx

aten = torch.ops.aten
SDPA = aten.scaled_dot_product_attention.default
# Ops between the expand and SDPA that only merge the expanded dims (a reshape's copy).
_MERGE = {aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.clone.default,
          aten.contiguous.default}


def _shape(n) -> Optional[tuple]:
    v = n.meta.get("val") if isinstance(n, torch.fx.Node) else None
    if not isinstance(v, torch.Tensor):
        return None
    return tuple(sympy.sympify(s.node.expr if isinstance(s, torch.SymInt) else s) for s in v.shape)


def _eq(a, b) -> bool:
    return sympy.expand(a - b) == 0


def _repeated(n) -> Optional[torch.fx.Node]:
    """The 5-D ``[B, G, 1, S, D]`` node that ``n`` (``[B, G*r, S, D]``) repeats r times per head, or None."""
    want = _shape(n)
    if want is None or len(want) != 4:
        return None
    x = n
    for _ in range(6):
        if not isinstance(x, torch.fx.Node) or x.op != "call_function":
            return None
        if x.target is aten.expand.default:
            break
        if x.target not in _MERGE:
            return None
        x = x.args[0]
    else:
        return None
    src, big = x.args[0], _shape(x)
    small = _shape(src)
    if small is None or big is None or len(small) != 5 or len(big) != 5 or small[2] != 1:
        return None
    b, g, r, s, d = big
    if not (_eq(small[0], b) and _eq(small[1], g) and _eq(small[3], s) and _eq(small[4], d)):
        return None
    if not (_eq(want[0], b) and _eq(want[1], g * r) and _eq(want[2], s) and _eq(want[3], d)):
        return None
    return src


def _squeezed(g, src):
    with g.inserting_after(src):
        new = g.call_function(aten.squeeze.dim, (src, 2))
    val = src.meta["val"].squeeze(2)
    new.meta = {k: v for k, v in src.meta.items() if k not in ("val", "shape")}
    new.meta["val"] = val
    new.meta["shape"] = tuple(s for i, s in enumerate(src.meta["shape"]) if i != 2)
    return new


def use_gqa(tp, with_masks: bool) -> int:
    """Call SDPA on un-repeated K/V with ``enable_gqa=True`` where K and V are repeats of
    fewer heads; where a call has a mask only if ``with_masks``.  Returns how many calls."""
    g = tp.graph
    done = 0
    for node in list(g.nodes):
        if node.op != "call_function" or node.target is not SDPA or node.kwargs.get("enable_gqa"):
            continue
        args = list(node.args)
        mask = args[3] if len(args) > 3 else node.kwargs.get("attn_mask")
        if (mask is not None and not with_masks) or len(args) < 3:
            continue
        srcs = [_repeated(args[1]), _repeated(args[2])]
        if any(s is None for s in srcs):
            continue
        args[1], args[2] = (_squeezed(g, s) for s in srcs)
        node.args = tuple(args)
        node.kwargs = {**node.kwargs, "enable_gqa": True}
        done += 1
    if done:
        g.eliminate_dead_code()
        g.lint()
    return done


def contiguous_heads(sdpa) -> bool:
    """``clone(sdpa(...).transpose(1, 2))`` (the heads merged back) as ``.contiguous()``.

    ATen's flash and efficient kernels write their output as (B, T, H, D) and return the
    (B, H, T, D) view of it, so the transposed result is already contiguous and the clone
    a pure copy; ``contiguous`` gives the same values in the same layout, copying only
    where another SDPA kernel ran.  Only where nothing else sees the SDPA output or the
    transposed view (so nothing can observe that the result may alias them).
    """
    t = next(iter(sdpa.users)) if len(sdpa.users) == 1 else None
    # A view to the same shape (``attn.view(B, -1, T, D)``) keeps the layout.
    while t is not None and t.op == "call_function" and t.target in (aten.view.default, aten.reshape.default) \
            and _shape(t) is not None and _shape(sdpa) is not None and len(_shape(t)) == len(_shape(sdpa)) \
            and all(_eq(a, b) for a, b in zip(_shape(t), _shape(sdpa))):
        t = next(iter(t.users)) if len(t.users) == 1 else None
    if t is None or t.op != "call_function" or t.target is not aten.transpose.int or \
            sorted(d % 4 for d in t.args[1:3]) != [1, 2]:
        return False
    c = next(iter(t.users)) if len(t.users) == 1 else None
    if c is None or c.op != "call_function" or c.target is not aten.clone.default or \
            c.kwargs.get("memory_format", torch.contiguous_format) is not torch.contiguous_format or len(c.args) != 1:
        return False
    c.target = aten.contiguous.default
    c.kwargs = {}
    return True


def tune_calls(tp, target: str) -> dict:
    """Both rewrites over ``tp.graph`` for a compile ``target`` ("cpp": CPU kernels, which
    take GQA with masks; "triton": CUDA, where masked GQA stays repeated)."""
    gqa = use_gqa(tp, with_masks=target == "cpp")
    merged = sum(contiguous_heads(n) for n in list(tp.graph.nodes) if n.op == "call_function" and n.target is SDPA)
    return {"gqa": gqa, "merged_heads": merged}
