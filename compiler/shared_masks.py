"""One boolean attention mask shared by every layer, turned into its additive form once per run.

BERT-style encoders pass the same boolean padding mask to each layer's
``scaled_dot_product_attention``.  ATen's memory-efficient kernel takes an additive mask,
so every call first converts the booleans (``where(logical_not(mask), -inf, 0)`` in the
query's dtype: three small kernels and their host time, about 35 us per call on an H100's
host).  A run whose plan passes one kernel-made boolean mask to several SDPA steps converts
it at the first of them and hands the float mask to all.

Exact: :func:`sdpa_shared_mask` asks ATen which kernel the boolean mask would get
(``torch._fused_sdp_choice``) and uses the converted mask only where that is the
memory-efficient kernel and the converted mask gets it too: the same kernel on the same
additive mask ATen would have made.  Otherwise (the math kernel, whose fully masked rows
differ between the two forms, the CPU, any other choice) the boolean mask is passed as it is.
On the Triton target SDPA runs without cuDNN (:func:`compiler.codegen.triton.sdpa_without_cudnn`),
whose boolean conversion differs (a finite fill), so cuDNN is never the choice here.

Example::

    >>> import torch
    >>> q = torch.randn(2, 2, 5, 8)
    >>> m = torch.rand(2, 1, 5, 5) > 0.3
    >>> ref = torch.nn.functional.scaled_dot_product_attention(q, q, q, m)
    >>> torch.equal(sdpa_shared_mask({}, q, q, q, m), ref)
    True
"""
from __future__ import annotations

import torch

import sympy

from shapes.functions import FloorDiv

from .ir import Buffer, BufferKind, Const, Op
from .lowered import ExternItem, Ref, RefKind, StoreItem, TensorBox, cast
from .repeated_shapes import cudnn_allowed
from .view_folding import mutates
from .wrapper import RUN_CACHE, BufSlot, ExternStep

_EFFICIENT = int(torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION)
_CUDNN = int(torch.nn.attention.SDPBackend.CUDNN_ATTENTION)
_sdpa = torch.nn.functional.scaled_dot_product_attention
_choice = torch._fused_sdp_choice
_cudnn_enabled = torch.backends.cuda.cudnn_sdp_enabled
_enable_cudnn = torch.backends.cuda.enable_cudnn_sdp


def _additive(cache: dict, m, dtype, made=None):
    """``m``'s additive form in ``dtype``, made once per run (``cache``: the run's own dict);
    ``made``: that form already stored by the kernel that made ``m`` (:func:`add_additive_forms`)."""
    key = (id(m), dtype)
    got = cache.get(key)
    if got is not None and got[0] is m:
        return got[1]
    if made is not None and made.dtype == dtype:
        cache[key] = (m, made)
        return made
    # ATen's own conversion for the non-cuDNN kernels, op for op (same values, same dtype).
    f = torch.where(m.logical_not(), float("-inf"), torch.scalar_tensor(0.0, dtype=dtype, device=m.device))
    cache[key] = (m, f)
    return f


def sdpa_shared_mask(cache, q, k, v, attn_mask, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
                     additive=None):
    """``scaled_dot_product_attention(q, k, v, attn_mask, ...)`` without cuDNN, on the boolean
    mask's additive form made once per run (``cache``: the run's dict, :data:`~compiler.wrapper.RUN_CACHE`)
    where ATen would make that form for the memory-efficient kernel (see the module docstring).
    ``additive``: that form made by the mask's kernel (:func:`add_additive_forms`), else None."""
    m = attn_mask
    kw = dict(dropout_p=dropout_p, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
    was = _cudnn_enabled()
    if was and cudnn_allowed(q) and _choice(q, k, v, m, dropout_p, is_causal, scale=scale,
                                            enable_gqa=enable_gqa) == _CUDNN:
        return _sdpa(q, k, v, m, **kw)  # a repeated shape that eager runs on cuDNN (compiler.repeated_shapes)
    if was:
        _enable_cudnn(False)
    try:
        if _choice(q, k, v, m, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa) == _EFFICIENT:
            f = _additive(cache, m, q.dtype, additive)
            if _choice(q, k, v, f, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa) == _EFFICIENT:
                return _sdpa(q, k, v, f, **kw)
        return _sdpa(q, k, v, m, **kw)
    finally:
        if was:
            _enable_cudnn(True)


def share_masks(plan, buffers, sdpa_target, additive=None) -> list:
    """``plan`` with the ``sdpa_target`` steps that pass one boolean ``attn_mask`` buffer (read by
    at least two of them) calling :func:`sdpa_shared_mask` with the run's cache; the same steps
    in the same places (plan indices keep their meaning).  Unchanged where a step writes in
    place (the mask could change between its readers).  ``buffers``: name -> lowered buffer.

    >>> q, m = BufSlot("q"), BufSlot("m")
    >>> plan = [ExternStep(_sdpa, (q, q, q, m), {"scale": 0.5}, "a"), ExternStep(_sdpa, (q, q, q, m), {}, "b")]
    >>> class B: dtype = torch.bool
    >>> [(s.target.__name__, s.args[0]) for s in share_masks(plan, {"m": B()}, _sdpa)]
    [('sdpa_shared_mask', RUN_CACHE), ('sdpa_shared_mask', RUN_CACHE)]
    """
    if any(mutates(s) for s in plan):
        return list(plan)
    readers: dict = {}
    for n, s in enumerate(plan):
        if isinstance(s, ExternStep) and s.target is sdpa_target and len(s.args) == 4 and isinstance(
                s.args[3], BufSlot) and not s.kwargs.keys() - {"scale", "enable_gqa", "dropout_p", "is_causal"}:
            b = buffers.get(s.args[3].name)
            if b is not None and b.dtype is torch.bool:
                readers.setdefault(s.args[3].name, []).append(n)
    out = list(plan)
    for steps in readers.values():
        if len(steps) >= 2:
            for n in steps:
                s = plan[n]
                kw = dict(s.kwargs)
                if (additive or {}).get(s.args[3].name) is not None:
                    kw["additive"] = BufSlot(additive[s.args[3].name])
                out[n] = ExternStep(sdpa_shared_mask, (RUN_CACHE, *s.args), kw, s.out)
    return out


#: Rows of a stored additive mask start at multiples of this many elements: ATen's memory-efficient
#: SDPA copies a mask whose strides are not multiples of 8 into a padded one (``preprocess_mask``),
#: a launch per call of every layer where the key length is not a multiple of 8.
ROW_ALIGN = 16
_SDPA_OP = torch.ops.aten.scaled_dot_product_attention.default
_KWARGS = {"scale", "enable_gqa", "dropout_p", "is_causal"}


def _aligned_strides(shape) -> tuple:
    n = sympy.sympify(shape[-1])
    row = sympy.Integer(-(-int(n) // ROW_ALIGN) * ROW_ALIGN) if n.is_Integer else FloorDiv(n + ROW_ALIGN - 1, ROW_ALIGN) * ROW_ALIGN
    out = [sympy.Integer(1)]
    acc = row
    for s in reversed(shape[:-1]):
        out.append(acc)
        acc = acc * s
    return tuple(reversed(out))


def add_additive_forms(lp) -> dict:
    """Where a kernel-made boolean mask is the ``attn_mask`` of two or more SDPA calls (the
    readers :func:`share_masks` serves), store its additive form beside it in the same kernel:
    ``where(mask, 0, -inf)`` in the query's dtype, ATen's own conversion value for value, rows
    aligned to :data:`ROW_ALIGN`.  The run then makes the form with no launch of its own (ATen's
    takes three), and ATen's SDPA takes it without padding it per call.  Adds the stores to
    ``lp``; returns ``{mask buffer: additive buffer}``.

    >>> import torch, shapes
    >>> from compiler.lowering import lower
    >>> sdpa = torch.nn.functional.scaled_dot_product_attention
    >>> def two(q, keep):
    ...     m = (keep[:, None, None, :] > 0).expand(-1, 1, q.shape[2], -1)
    ...     return sdpa(sdpa(q, q, q, m), q, q, m)
    >>> lp = lower(shapes.trace(two, "q: f32[B, 2, T, 8]", "keep: i64[B, T]"))
    >>> made = add_additive_forms(lp)
    >>> [(m, a, lp.buffers[a].strides[-2:]) for m, a in made.items()]
    [('expand_default', 'expand_default_additive', (16*(((T + 15)//16)), 1))]
    """
    readers: dict = {}
    for it in lp.items:
        if isinstance(it, ExternItem) and it.target is _SDPA_OP and len(it.args) == 4 and isinstance(
                it.args[3], Ref) and it.args[3].kind is RefKind.BUF and not set(it.kwargs) - _KWARGS:
            readers.setdefault(it.args[3].value, []).append(it)
    made = {}
    for name, items in readers.items():
        mask = lp.buffers.get(name)
        if len(items) < 2 or mask is None or mask.dtype is not torch.bool or len(mask.shape) < 2:
            continue
        dtypes = {lp.buffers[it.args[0].value].dtype for it in items if it.args[0].kind is RefKind.BUF}
        where = [i for i, it in enumerate(lp.items) if isinstance(it, StoreItem) and it.buffer.name == name]
        if len(dtypes) != 1 or not where or not next(iter(dtypes)).is_floating_point:
            continue
        dtype = dtypes.pop()
        src = lp.items[where[0]].box
        buf = Buffer(name=f"{name}_additive", shape=mask.shape, strides=_aligned_strides(mask.shape), dtype=dtype,
                     kind=BufferKind.KERNEL)
        if buf.name in lp.buffers:
            continue

        def fn(idx, src=src, dtype=dtype):
            return cast(Op("where", (src(idx), Const(0.0, torch.float32), Const(float("-inf"), torch.float32)),
                           torch.float32), dtype)
        lp.buffers[buf.name] = buf
        lp.items.insert(where[0] + 1, StoreItem(buffer=buf, box=TensorBox(mask.shape, dtype, fn)))
        made[name] = buf.name
    return made
