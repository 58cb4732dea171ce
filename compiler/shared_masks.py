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

from .view_folding import mutates
from .wrapper import RUN_CACHE, BufSlot, ExternStep

_EFFICIENT = int(torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION)
_sdpa = torch.nn.functional.scaled_dot_product_attention
_choice = torch._fused_sdp_choice
_cudnn_enabled = torch.backends.cuda.cudnn_sdp_enabled
_enable_cudnn = torch.backends.cuda.enable_cudnn_sdp


def _additive(cache: dict, m, dtype):
    """``m``'s additive form in ``dtype``, made once per run (``cache``: the run's own dict)."""
    key = (id(m), dtype)
    got = cache.get(key)
    if got is not None and got[0] is m:
        return got[1]
    # ATen's own conversion for the non-cuDNN kernels, op for op (same values, same dtype).
    f = torch.where(m.logical_not(), float("-inf"), torch.scalar_tensor(0.0, dtype=dtype, device=m.device))
    cache[key] = (m, f)
    return f


def sdpa_shared_mask(cache, q, k, v, attn_mask, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """``scaled_dot_product_attention(q, k, v, attn_mask, ...)`` without cuDNN, on the boolean
    mask's additive form made once per run (``cache``: the run's dict, :data:`~compiler.wrapper.RUN_CACHE`)
    where ATen would make that form for the memory-efficient kernel (see the module docstring)."""
    was = _cudnn_enabled()
    if was:
        _enable_cudnn(False)
    try:
        m = attn_mask
        kw = dict(dropout_p=dropout_p, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
        if _choice(q, k, v, m, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa) == _EFFICIENT:
            f = _additive(cache, m, q.dtype)
            if _choice(q, k, v, f, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa) == _EFFICIENT:
                return _sdpa(q, k, v, f, **kw)
        return _sdpa(q, k, v, m, **kw)
    finally:
        if was:
            _enable_cudnn(True)


def share_masks(plan, buffers, sdpa_target) -> list:
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
                out[n] = ExternStep(sdpa_shared_mask, (RUN_CACHE, *s.args), dict(s.kwargs), s.out)
    return out
