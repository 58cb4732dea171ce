"""Attention masks made from sizes alone (compiler.sized_masks): classified per size, then
SDPA runs causal or unmasked, and the steps that only made the mask are skipped."""
import pytest
import torch
import torch.nn.functional as F

import compiler
from compiler.sized_masks import MaskClass
from tests.attention_models import Logits, tiny_llama_lm


def _window(q, k, v):
    # transformers' causal mask with a cache: key j visible to query i iff j <= i + (S - T).
    T, S = q.shape[-2], k.shape[-2]
    mask = torch.arange(S, device=q.device)[None, :] <= torch.arange(T, device=q.device)[:, None] + (S - T)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[None, None])


def _classes(f):
    return sorted({c for v in f.variants if v._classifier for cs in v._classifier.cache.values() for c in cs})


def test_a_sizes_only_mask_is_classified_per_size_and_the_result_is_eager():
    f = compiler.compile(_window, "q: f32[B, 2, T, 8]", "k: f32[B, 2, S, 8]", "v: f32[B, 2, S, 8]")
    v = f.variants[0]
    assert len(v.masks) == 1
    g = torch.Generator().manual_seed(0)
    for T, S in [(5, 5), (1, 6), (3, 7), (7, 7), (1, 2)]:
        q, k, val = (torch.randn(2, 2, n, 8, generator=g) for n in (T, S, S))
        for _ in range(2):  # the second call of a shape classifies its mask
            torch.testing.assert_close(f(q, k, val), _window(q, k, val), atol=1e-5, rtol=1e-5)
    # T == S: SDPA's own causal mask; T=3 over S=7: bottom-right aligned, not SDPA's
    # top-left causal: kept.  T == 1: every key visible at every S.  Size 1 is a size, so
    # the one variant serves T == 1 too and classifies its mask per shape like the others.
    assert _classes(f) == [MaskClass.KEEP, MaskClass.CAUSAL, MaskClass.NONE]
    assert len(f.variants) == 1
    assert v._classifier.cache == {(2, 5, 5): (MaskClass.CAUSAL,), (2, 6, 1): (MaskClass.NONE,),
                                   (2, 7, 3): (MaskClass.KEEP,), (2, 7, 7): (MaskClass.CAUSAL,),
                                   (2, 2, 1): (MaskClass.NONE,)}


def test_a_shape_called_once_is_never_classified():
    """Classifying runs the mask's steps and synchronizes: a decoder's cache length never
    repeats, so only a shape's second call pays for it (on the H100 a classification per
    token cost more than the fused kernel saved)."""
    f = compiler.compile(_window, "q: f32[B, 2, T, 8]", "k: f32[B, 2, S, 8]", "v: f32[B, 2, S, 8]")
    v = f.variants[0]
    for S in range(3, 9):
        q, k = torch.randn(2, 2, 3, 8), torch.randn(2, 2, S, 8)
        torch.testing.assert_close(f(q, k, k), _window(q, k, k), atol=1e-5, rtol=1e-5)
    assert v._classifier is None or not v._classifier.cache
    f(q, k, k)
    assert len(f.variants) == 1
    assert list(v._classifier.cache.values()) == [(MaskClass.KEEP,)]  # T=3 over S=8: bottom-right


def test_dropped_masks_skip_the_steps_that_made_them():
    f = compiler.compile(_window, "q: f32[B, 2, T, 8]", "k: f32[B, 2, S, 8]", "v: f32[B, 2, S, 8]")
    v = f.variants[0]
    q = torch.randn(1, 2, 4, 8)
    f(q, q, q)
    causal = v._fn_for((MaskClass.CAUSAL,))
    from compiler import sized_masks
    plan = sized_masks.without_masks(v.plan, v.masks, (MaskClass.CAUSAL,))
    skip = sized_masks.droppable(plan, {o.name for o in v.outputs}, v.masks, (MaskClass.CAUSAL,))
    # The mask's steps (aranges, the compare) are skipped; SDPA and the outputs are not.
    assert skip and all(n < v.masks[0].step for n in skip) and v.masks[0].step not in skip
    assert causal is not v.fn and v._fn_for((MaskClass.KEEP,)) is v.fn


def test_a_mask_from_an_input_is_never_classified():
    def padded(q, k, v, keep):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :].bool())
    f = compiler.compile(padded, "q: f32[B, 2, T, 8]", "k: f32[B, 2, T, 8]", "v: f32[B, 2, T, 8]",
                         "keep: i64[B, T] in 0..1")
    assert f.variants[0].masks == []
    q = torch.randn(2, 2, 5, 8)
    keep = torch.ones(2, 5, dtype=torch.long)
    keep[1, 3:] = 0
    torch.testing.assert_close(f(q, q, q, keep), padded(q, q, q, keep), atol=1e-5, rtol=1e-5)




def test_hf_llama_runs_causal_without_its_mask_and_equals_eager():
    transformers = pytest.importorskip("transformers")
    model = tiny_llama_lm()
    f = compiler.compile(Logits(model), "ids: i64[B, T]")
    v = f.variants[0]
    assert len(v.masks) == 2  # one mask buffer read by both layers' SDPA
    ids = torch.randint(0, 128, (2, 11), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(f(ids), model(input_ids=ids, use_cache=False).logits, atol=2e-4, rtol=2e-4)
    assert set(v._classifier.cache.values()) == {(MaskClass.CAUSAL, MaskClass.CAUSAL)}


def test_piecewise_graphs_split_a_plan_with_a_sized_mask():
    """CUDA graphs between the S-dependent steps read mask classes from the sizes tuple
    (always KEEP there): the split and the run work with them (on the H100 the split
    indexed past the size expressions)."""
    from compiler.piecewise import PiecewiseRun

    def step(q, k, v):
        h = q @ q.transpose(-1, -2) @ q
        return _window(h, k, v)
    f = compiler.compile(step, "q: f32[1, 2, 3, 8]", "k: f32[1, 2, S, 8]", "v: f32[1, 2, S, 8]")
    v = f.variants[0]
    assert len(v.masks) == 1
    pw = PiecewiseRun(v, {v.tp.env.symbols["S"]}, capture=False)
    q, k = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 9, 8)
    torch.testing.assert_close(pw((q, k, k), f.bind((q, k, k))), step(q, k, k), atol=1e-5, rtol=1e-5)
    assert any(s.graphed for s in pw.segments)
