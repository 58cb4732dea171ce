"""Attention masks computed from sizes alone: decided once per size, then causal or dropped.

A Hugging Face decoder traced (or compiled) cannot skip its mask the way it does
in eager mode: under tracing, transformers builds the causal mask from ``arange``
comparisons and passes it to SDPA, which then runs the memory-efficient kernel
with a (B, 1, T, T) mask (measured on an H100, Llama fp16 at B=4, T=2047: 785 us
per layer, against 100 us for eager's flash kernel with ``is_causal=True``).

Such a mask reads no input and no parameter: its value is a function of the
sizes only.  So at each new set of sizes the plan's steps that make it are run
once and the mask is *classified* (one synchronization, at the first call of a
size):

* ``NONE``: every entry keeps its key (all True, or an additive mask of zeros):
  SDPA without a mask is the same computation;
* ``CAUSAL``: exactly SDPA's own ``is_causal`` mask (``ones(L, S).tril()``, the
  query and key lengths its last two dims, broadcast over the rest; additive:
  0 and -inf): ``is_causal=True`` is the same computation;
* ``KEEP``: anything else (padding, sliding windows that cut in): the mask is passed.

Where a class other than ``KEEP`` applies, the steps that only made the mask
are skipped (fewer launches per call: the host is the bound at small sizes).
Exact, not a heuristic: the class is computed from the mask's values at those
sizes, and only masks whose every producing step is a deterministic function of
sizes (no input, parameter, random or uninitialized memory) are classified.

Example::

    >>> import torch
    >>> classify(torch.ones(2, 1, 3, 3, dtype=torch.bool).tril(), 3, 3) is MaskClass.CAUSAL
    True
    >>> classify(torch.ones(1, 1, 1, 5, dtype=torch.bool), 1, 5) is MaskClass.NONE
    True
    >>> classify(torch.ones(1, 1, 1, 3, dtype=torch.bool).tril(), 3, 3) is MaskClass.KEEP  # broadcast rows
    True
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
import torch

from .wrapper import BufSlot, ExternStep, KernelStep, SizeSlot, step_buffers


class MaskClass(enum.IntEnum):
    """What a sizes-only mask is at one set of sizes (an int: it travels in the sizes tuple)."""

    KEEP = 0
    CAUSAL = 1
    NONE = 2


_SDPA = torch.nn.functional.scaled_dot_product_attention
# ATen ops whose result is a deterministic function of their arguments (no randomness, no
# uninitialized memory): a chain of these from sizes alone makes a sizes-only buffer.
_PURE = {"arange", "view", "_unsafe_view", "reshape", "expand", "unsqueeze", "squeeze", "slice", "select",
         "permute", "transpose", "t", "clone", "contiguous", "_to_copy", "to", "le", "lt", "ge", "gt", "eq", "ne",
         "bitwise_and", "bitwise_or", "bitwise_not", "bitwise_xor", "logical_and", "logical_or", "logical_not",
         "where", "index", "full", "ones", "zeros", "scalar_tensor", "mul", "add", "sub", "detach", "alias",
         "lift_fresh_copy", "new_ones", "new_zeros", "full_like", "ones_like", "zeros_like", "cat", "stack",
         "tril", "triu", "view_as_traced", "masked_fill", "remainder", "floor_divide", "div", "abs", "neg",
         "minimum", "maximum", "clamp", "any", "all", "cumsum"}


def _op_name(target) -> str:
    name = getattr(target, "__name__", None) or str(target)
    return name.split(".")[0]


def sizes_only(plan, produced_outside: set) -> set:
    """The buffers of ``plan`` whose values depend on sizes only: made by kernels or pure
    ATen ops (:data:`_PURE`) from sizes-only buffers; ``produced_outside`` (inputs,
    parameters) never are.

    >>> aten = torch.ops.aten
    >>> plan = [ExternStep(aten.arange.default, (SizeSlot(0),), {}, "r"),
    ...         ExternStep(aten.le.Tensor, (BufSlot("r"), BufSlot("x")), {}, "m"),
    ...         ExternStep(aten.le.Tensor, (BufSlot("r"), BufSlot("r")), {}, "n")]
    >>> sorted(sizes_only(plan, {"x"}))
    ['n', 'r']
    """
    out: set = set()
    for step in plan:
        reads, writes = step_buffers(step)
        if reads & produced_outside or not reads <= out:
            continue
        if isinstance(step, ExternStep) and _op_name(step.target) not in _PURE:
            continue
        out |= writes
    return out


def _is_sdpa(target) -> bool:
    return target is _SDPA or _op_name(target) in ("scaled_dot_product_attention", "sdpa_without_cudnn")


@dataclass(frozen=True)
class SizedMask:
    """One SDPA step of a plan whose mask is sizes-only: the step's index, the mask buffer,
    and the size slots of the query and key lengths (the causal check needs them)."""

    step: int
    mask: str
    q_len: int
    k_len: int


def find(plan, produced_outside: set, buffers, slot) -> list:
    """The :class:`SizedMask` of every SDPA step of ``plan`` whose ``attn_mask`` is sizes-only
    and that computes nothing else a mask would change (no dropout, not already causal).
    ``buffers``: name -> lowered buffer (shapes); ``slot(expr)``: the size slot of ``expr``."""
    sized = sizes_only(plan, produced_outside)
    found = []
    for n, step in enumerate(plan):
        if not isinstance(step, ExternStep) or not _is_sdpa(step.target):
            continue
        args, kw = step.args, step.kwargs
        if len(args) < 4 or len(args) > 5 or not isinstance(args[3], BufSlot) or args[3].name not in sized:
            continue
        dropout = args[4] if len(args) > 4 else kw.get("dropout_p", 0.0)
        if dropout != 0.0 or kw.get("is_causal", False) is not False or set(kw) - {"scale", "enable_gqa",
                                                                                   "dropout_p", "is_causal"}:
            continue
        q, k = (buffers.get(a.name) if isinstance(a, BufSlot) else None for a in args[:2])
        if q is None or k is None or len(q.shape) < 2 or len(k.shape) < 2:
            continue
        found.append(SizedMask(n, args[3].name, slot(q.shape[-2]), slot(k.shape[-2])))
    return found


def sdpa_by_class(cls, sdpa, q, k, v, attn_mask, dropout_p=0.0, **kw):
    """``sdpa(q, k, v, attn_mask, ...)`` as its :class:`MaskClass` allows: with the mask
    (``KEEP``), ``is_causal=True`` or without one (``attn_mask`` may then be None: not computed).

    >>> q = torch.randn(1, 2, 4, 8)
    >>> m = torch.ones(4, 4, dtype=torch.bool).tril()
    >>> torch.allclose(sdpa_by_class(MaskClass.CAUSAL, _SDPA, q, q, q, None), _SDPA(q, q, q, m), atol=1e-6)
    True
    """
    if cls == MaskClass.CAUSAL:
        return sdpa(q, k, v, dropout_p=dropout_p, is_causal=True, **kw)
    if cls == MaskClass.NONE:
        return sdpa(q, k, v, dropout_p=dropout_p, **kw)
    return sdpa(q, k, v, attn_mask, dropout_p=dropout_p, **kw)


def rewrite(plan, masks: list, class_slot0: int) -> list:
    """``plan`` with each SDPA step of ``masks`` calling :func:`sdpa_by_class` with its class
    read from size slot ``class_slot0 + j`` (the j-th mask)."""
    from .wrapper import FAST_CALLS
    out = list(plan)
    for j, m in enumerate(masks):
        s = plan[m.step]
        inner = FAST_CALLS.get(s.target, s.target)
        out[m.step] = ExternStep(sdpa_by_class, (SizeSlot(class_slot0 + j), inner) + tuple(s.args), dict(s.kwargs),
                                 s.out)
    return out


def without_masks(plan, masks: list, classes: tuple) -> list:
    """The :func:`rewrite` plan with ``None`` for each mask its class drops (not computed then)."""
    out = list(plan)
    for m, c in zip(masks, classes):
        if c != MaskClass.KEEP:
            s = out[m.step]
            out[m.step] = ExternStep(s.target, s.args[:5] + (None,) + s.args[6:], s.kwargs, s.out)
    return out


def droppable(plan, outputs_read: set, masks: list, classes: tuple) -> frozenset:
    """Step indices that only made masks no step reads at ``classes``: skipped in that run.

    >>> aten = torch.ops.aten
    >>> plan = [ExternStep(aten.arange.default, (SizeSlot(0),), {}, "r"),
    ...         ExternStep(_SDPA, (BufSlot("q"), BufSlot("q"), BufSlot("q"), BufSlot("r")), {}, "o")]
    >>> masks = [SizedMask(1, "r", 0, 0)]
    >>> plan = without_masks(rewrite(plan, masks, 1), masks, (MaskClass.CAUSAL,))
    >>> sorted(droppable(plan, {"o"}, masks, (MaskClass.CAUSAL,)))
    [0]
    """
    dropped = {m.step: m.mask for m, c in zip(masks, classes) if c != MaskClass.KEEP}
    if not dropped:
        return frozenset()
    ancestry = _made_for(set(dropped.values()), plan)
    needed = set(outputs_read)
    skip = set()
    for n in range(len(plan) - 1, -1, -1):
        reads, writes = step_buffers(plan[n])
        if writes <= ancestry and not writes & needed:
            skip.add(n)
            continue
        needed |= reads
    return frozenset(skip)


def _made_for(unused: set, plan) -> set:
    """Every buffer made by a step in the ancestry of the ``unused`` masks (the only steps skipped)."""
    made: dict = {}
    for step in plan:
        reads, writes = step_buffers(step)
        for w in writes:
            made[w] = reads
    todo, seen = list(unused), set()
    while todo:
        b = todo.pop()
        if b in seen or b not in made:
            continue
        seen.add(b)
        todo.extend(made[b])
    return seen


def classify(mask: torch.Tensor, q_len: int, k_len: int) -> MaskClass:
    """The :class:`MaskClass` of ``mask`` for a query of ``q_len`` rows over ``k_len`` keys
    (one synchronization)."""
    if mask.dtype == torch.bool:
        keep = mask
    elif mask.is_floating_point():
        if not bool(((mask == 0) | (mask == float("-inf"))).all()):
            return MaskClass.KEEP
        keep = mask == 0
    else:
        return MaskClass.KEEP
    if bool(keep.all()):
        return MaskClass.NONE
    if keep.dim() < 2 or keep.shape[-2] != q_len or keep.shape[-1] != k_len:
        return MaskClass.KEEP
    tril = torch.ones(q_len, k_len, dtype=torch.bool, device=keep.device).tril()
    return MaskClass.CAUSAL if bool((keep == tril).all()) else MaskClass.KEEP


class MaskClassifier:
    """Per set of sizes, the class of each sizes-only mask of a plan: its producing steps run
    once on ``device`` (cached by the kernels' size values)."""

    def __init__(self, plan, masks: list, device, limit: int = 4096):
        from .wrapper import bind_launches, straight_line
        self.masks, self.device, self.limit = masks, device, limit
        keep = _made_for({m.mask for m in masks}, plan)
        self.steps = [s for s in plan if step_buffers(s)[1] & keep]
        self.fn = straight_line(self.steps, [], [], [BufSlot(m.mask) for m in masks])[1]
        self._bind = bind_launches
        self.cache: dict = {}

    def classes(self, kvals: tuple, sizes: tuple) -> tuple:
        got = self.cache.get(kvals)
        if got is not None:
            return got
        if self.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return (MaskClass.KEEP,) * len(self.masks)  # no synchronization inside a graph capture
        made = self.fn([], sizes, self._bind(self.steps, kvals), [], self.device)
        got = tuple(classify(t, sizes[m.q_len], sizes[m.k_len]) for t, m in zip(made, self.masks))
        if len(self.cache) < self.limit:
            self.cache[kvals] = got
        return got


__all__ = ["MaskClass", "SizedMask", "MaskClassifier", "sizes_only", "find", "rewrite", "without_masks",
           "droppable", "classify",
           "sdpa_by_class"]
