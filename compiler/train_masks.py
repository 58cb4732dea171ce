"""Attention masks of a training graph proved true everywhere or causal: dropped before AOTAutograd traces.

AOTAutograd writes the attention kernel SDPA picks into the forward and backward
graphs, and it picks once, at trace time.  A boolean ``attn_mask`` rules out the
flash kernel, and a mask broadcast along its last dim (stride 0) rules out the
memory-efficient one too, leaving SDPA's math path: fp32 ``bmm`` and a materialized
(B, H, T, T) softmax in both directions.  Transformers builds such masks under
``torch.compile`` where eager passes none: HF ViT (transformers 5.17) passes
``(arange(T)[None, None, :, None] >= 0).expand(B, 1, T, T)``, true everywhere, and
its training step on an H100 ran the math path.  GPT-2 and Llama pass their causal
mask built from ``arange`` comparisons, which keeps flash out.

Such a mask reads no tensor, only sizes.  :func:`drop_proved_masks` traces the steps
that make it with symshape at symbolic sizes and proves, with
:mod:`compiler.mask_proofs`, its class at every size: every entry true (each
comparison is linear in the indices, its extreme over the index box is at a corner,
and the engine decides that corner), or exactly ``j <= i`` over the query and key
lengths.  Only then does the mask go: an all-true boolean mask masks nothing, and a
causal one is SDPA's own ``is_causal=True``, so the call computes the same attention.
A mask that reads an input, or whose proof fails, is kept as it is.

Causal masks become ``is_causal=True`` when asked (``causal=True``).  The training
backend asks by default (``$SYMSHAPE_TRAIN_CAUSAL=0`` or ``options={"causal_masks":
False}`` keep the mask).  Session 12's note measured ``is_causal=True`` as slower
(GPT-2 18.11 against 14.69 ms), but those two runs came from separate device calls,
and the H100 host drifts by up to 1.7x between calls.  Session 13 ran both in one
process, interleaved (``bench/train_compare.py``, modes ``symshape`` and
``symshape_causal``, bf16, 30 random lengths).  GPT-2 went from 14.53 to 13.92 ms and
Llama from 14.06 to 13.86 ms.  With the rewrite, AOTAutograd records flash attention
in both directions instead of the memory-efficient kernel: in session 13's profile,
its backward took 0.69 ms per step against flash's 0.17 ms.  Kernel builds fell from
75 to 71, and the gradient error against fp32 fell (GPT-2 7.8e-3 to 6.1e-3).  On the
CPU, ATen's fused causal kernel replaces the masked one (GPT-2 fp32 quick: 91 to
46 ms per step).

Example::

    >>> import torch
    >>> def attn(q, k, v):
    ...     T = q.shape[-2]
    ...     mask = (torch.arange(T)[None, None, :, None] >= 0).expand(q.shape[0], 1, T, T)
    ...     return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    >>> seen = []
    >>> def backend(gm, example_inputs):
    ...     seen.append(drop_proved_masks(gm))
    ...     return gm.forward
    >>> q = torch.randn(2, 4, 9, 8)
    >>> _ = torch.compile(attn, backend=backend, dynamic=True)(q, q, q)
    >>> seen
    [1]
"""
from __future__ import annotations

import math
import operator
from typing import Optional

import sympy
import torch
import torch.fx

from torch._subclasses.fake_tensor import unset_fake_temporarily

from shapes.errors import SymshapeError
from shapes.spec import Dim
from shapes.tracer import trace

from .mask_proofs import prove
from .sized_masks import MaskClass

_SDPA_TARGETS = (torch._C._nn.scaled_dot_product_attention, torch.nn.functional.scaled_dot_product_attention)


_IN_PLACE_OPERATORS = {operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv,
                       operator.ifloordiv, operator.imod, operator.ipow, operator.iand, operator.ior, operator.ixor,
                       operator.ilshift, operator.irshift}


def _mutates(node) -> bool:
    """Whether ``node`` may write into one of its arguments (an in-place method or op, ``x[i] = v``, ``x += y``)."""
    if node.target in _IN_PLACE_OPERATORS:
        return True
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    return name.endswith("_") and not name.startswith("_") or "out" in node.kwargs


def _written(nodes) -> bool:
    """Whether a tensor made by ``nodes``, or anything that may alias one (every tensor made
    from them, up to the SDPA calls that read the mask), is written in place in the graph."""
    stack = [n for n in nodes if isinstance(_example(n), torch.Tensor)]
    visited = set()
    while stack:
        n = stack.pop()
        if n in visited:
            continue
        visited.add(n)
        for u in n.users:
            if u.op == "call_function" and u.target in _SDPA_TARGETS:
                continue  # reads the mask; its output aliases none of it
            if _mutates(u):
                return True
            if isinstance(_example(u), (torch.Tensor, tuple, list)):
                stack.append(u)
    return False


def _example(node):
    return node.meta.get("example_value", node.meta.get("val")) if isinstance(node, torch.fx.Node) else None


def _mask_arg(node) -> Optional[torch.fx.Node]:
    m = node.kwargs.get("attn_mask", node.args[3] if len(node.args) > 3 else None)
    return m if isinstance(m, torch.fx.Node) else None


def _sizes_only_subgraph(mask: torch.fx.Node) -> Optional[tuple]:
    """``(nodes in graph order, SymInt placeholders)`` that make ``mask`` from sizes alone, or None."""
    seen, stack, sizes = set(), [mask], []
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op == "placeholder":
            v = _example(n)
            if not (isinstance(v, torch.SymInt) and v.node.expr.is_Symbol):
                return None  # a tensor (input, parameter) or a size that is not one symbol
            sizes.append(n)
            continue
        if n.op not in ("call_function", "call_method"):
            return None  # get_attr (a module's tensor) or a submodule call: reads state
        # Random or uninitialized tensors need no refusal here: the proof has no rule for them.
        stack.extend(n.all_input_nodes)
    # A write into one of these tensors (or a view of one) anywhere in the graph would make the
    # mask SDPA reads something else than the steps that made it: such a mask is not proved.
    if _written(seen):
        return None
    order = [n for n in mask.graph.nodes if n in seen and n.op != "placeholder"]
    return order, sorted(sizes, key=lambda p: str(_example(p).node.expr))


def _mask_program(order: list, sizes: list, mask: torch.fx.Node) -> torch.fx.GraphModule:
    """A graph module computing ``mask`` from the sizes (one argument each)."""
    g = torch.fx.Graph()
    env = {p: g.placeholder(p.name) for p in sizes}
    for n in order:
        env[n] = g.node_copy(n, lambda a: env[a])
    g.output(env[mask])
    return torch.fx.GraphModule(torch.nn.Module(), g)


def _same_size(a, b) -> bool:
    ea = a.node.expr if isinstance(a, torch.SymInt) else a
    eb = b.node.expr if isinstance(b, torch.SymInt) else b
    return bool(sympy.simplify(sympy.sympify(ea) - sympy.sympify(eb)) == 0)


def _proved_class(order: list, sizes: list, mask: torch.fx.Node, q, k) -> MaskClass:
    """``mask``'s class at every size (``KEEP`` where not proved): traced by symshape and proved
    by :func:`compiler.mask_proofs.prove`.  ``CAUSAL`` needs the mask's last two sizes to be
    the query's and the key's lengths (``q``, ``k``: their example tensors)."""
    v = _example(mask)
    if not isinstance(v, torch.Tensor) or v.dtype is not torch.bool:
        return MaskClass.KEEP
    sub = _mask_program(order, sizes, mask)
    names = [str(_example(p).node.expr) for p in sizes]
    # Each size reaches the traced function as the length of a 1-D input, so it is a named dim.
    specs = [f"{n}: i64[{n}]" for n in names]
    hints = {n: int(_example(p).node.hint) if _example(p).node.hint is not None else 8 for n, p in zip(names, sizes)}
    # Every size from 0 up, unbounded: the proof then holds whatever range dynamo gave the symbol.
    dims = {n: Dim(0, math.inf, h) for n, h in hints.items()}

    def program(*holders):
        return sub(*(h.shape[0] for h in holders))

    program.__signature__ = None
    try:
        # A backend runs inside dynamo's fake mode and tracing context: symshape's trace runs outside them.
        with unset_fake_temporarily(), torch._guards.tracing(None):
            tp = trace(program, *specs, dims=dims,
                              device=v.device.type if v.device.type in ("cpu", "cuda") else None)
    except (SymshapeError, RuntimeError, TypeError, ValueError):
        return MaskClass.KEEP
    out = next(n for n in tp.graph.nodes if n.op == "output").args[0]
    out = out[0] if isinstance(out, (tuple, list)) else out
    if not isinstance(out, torch.fx.Node) or not out.meta.get("shape"):
        return MaskClass.KEEP
    shape = [sympy.sympify(d) for d in out.meta["shape"]]
    lengths_match = (v.dim() >= 2 and isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor)
                     and _same_size(v.shape[-2], q.shape[-2]) and _same_size(v.shape[-1], k.shape[-2]))
    # The proof compares the mask's last sizes with the lengths; they were matched above, in dynamo's terms.
    q_len, k_len = (shape[-2], shape[-1]) if lengths_match else (sympy.nan, sympy.nan)
    got = prove(tp, out.name, q_len, k_len)
    return got if got in (MaskClass.NONE, MaskClass.CAUSAL) else MaskClass.KEEP


def drop_proved_masks(gm: torch.fx.GraphModule, *, causal: bool = False) -> int:
    """Remove from ``gm``'s SDPA calls every boolean mask proved true everywhere, and (with
    ``causal``) turn every mask proved causal into ``is_causal=True``; returns how many masks went.

    ``gm`` is a dynamo graph (torch-level calls).  The steps that only made a dropped
    mask are removed with it.
    """
    dropped = 0
    proofs: dict = {}
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in _SDPA_TARGETS:
            continue
        mask = _mask_arg(node)
        if mask is None or node.kwargs.get("is_causal", len(node.args) > 5 and node.args[5]) is not False:
            continue
        q, k = _example(node.args[0]), _example(node.args[1])
        key = (mask, str(getattr(q, "shape", None)), str(getattr(k, "shape", None)))
        if key not in proofs:  # every layer reads the same mask: traced and proved once
            sub = _sizes_only_subgraph(mask)
            proofs[key] = MaskClass.KEEP if sub is None else _proved_class(*sub, mask, q, k)
        cls = proofs[key]
        if cls is MaskClass.KEEP or (cls is MaskClass.CAUSAL and not causal):
            continue
        # the arguments after q, k, v (mask, dropout, causal flag, scale...) as keywords
        kwargs = {**dict(zip(("attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"), node.args[3:])),
                  **node.kwargs, "attn_mask": None}
        if cls is MaskClass.CAUSAL:
            kwargs["is_causal"] = True
        node.args, node.kwargs = node.args[:3], kwargs
        dropped += 1
    if dropped:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return dropped


__all__ = ["drop_proved_masks"]
