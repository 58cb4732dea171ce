"""Sizes-only attention masks whose class is proved from the graph (compiler.mask_proofs):
no classification and no sync, and the result is eager's at every size."""
import pytest
import torch
import torch.nn.functional as F

import compiler
from compiler import mask_proofs
from compiler.sized_masks import MaskClass
from tests.attention_models import greedy_tokens_eager_and_backend, tiny_llama_lm


def _decode(q, k, v):
    # transformers' decode mask: the one query sits at position S - 1 and sees every key.
    S = k.shape[-2]
    mask = torch.arange(S, device=q.device)[None, :] <= torch.arange(1, device=q.device)[:, None] + (S - 1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[None, None])


def _causal(q, k, v):
    T = q.shape[-2]
    mask = torch.arange(T, device=q.device)[None, :] <= torch.arange(T, device=q.device)[:, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[None, None].expand(q.shape[0], 1, T, T))


def _lagged(q, k, v):
    # Off by one: every query also sees the next key; not causal, and not all visible.
    T = q.shape[-2]
    mask = torch.arange(T, device=q.device)[None, :] <= torch.arange(T, device=q.device)[:, None] + 1
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[None, None])


def _window(q, k, v):
    # A sliding window of 3 keys: an And of two comparisons, one not always true.
    T = q.shape[-2]
    i, j = torch.arange(T, device=q.device)[:, None], torch.arange(T, device=q.device)[None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=((j <= i) & (j > i - 3))[None, None])


def _decode_short(q, k, v):
    # One key too few visible: the last key is masked at every S.
    S = k.shape[-2]
    mask = torch.arange(S, device=q.device)[None, :] < torch.arange(1, device=q.device)[:, None] + (S - 1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[None, None])


def test_the_decode_mask_is_proved_visible_and_runs_unmasked():
    f = compiler.compile(_decode, "q: f32[1, 2, 1, 8]", "k: f32[1, 2, S, 8]", "v: f32[1, 2, S, 8]")
    (v,) = f.variants
    assert v.proven == (MaskClass.NONE,) and v.all_proven
    g = torch.Generator().manual_seed(0)
    for S in (1, 2, 7, 13, 64, 97):  # sizes including 1 and primes; each shape called once
        q, k, val = (torch.randn(1, 2, n, 8, generator=g) for n in (1, S, S))
        torch.testing.assert_close(f(q, k, val), _decode(q, k, val), atol=1e-5, rtol=1e-5)
    assert v._classifier is None  # never ran the mask's steps to look at its values
    # The steps that only made the mask are gone from the run at the proved class.
    plan, skip = v.plan_at(v.fixed_classes)
    assert skip and all(n < v.masks[0].step for n in skip)


@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
def test_proved_classes_per_dtype(dt):
    dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dt]
    tol = {"f32": 1e-5, "f16": 2e-3, "bf16": 2e-2}[dt]
    for fn, specs, want in (
            (_decode, (f"q: {dt}[1, 2, 1, 8]", f"k: {dt}[1, 2, S, 8]", f"v: {dt}[1, 2, S, 8]"), MaskClass.NONE),
            (_causal, (f"q: {dt}[B, 2, T, 8]", f"k: {dt}[B, 2, T, 8]", f"v: {dt}[B, 2, T, 8]"), MaskClass.CAUSAL)):
        f = compiler.compile(fn, *specs, dims={"T": (2, 512)} if fn is _causal else None)
        assert f.variants[0].proven == (want,), fn.__name__
        g = torch.Generator().manual_seed(1)
        for n in (2, 3, 11, 31):
            B = 2 if fn is _causal else 1
            q = torch.randn(B, 2, 1 if fn is _decode else n, 8, generator=g).to(dtype)
            k, v = (torch.randn(B, 2, n, 8, generator=g).to(dtype) for _ in range(2))
            torch.testing.assert_close(f(q, k, v), fn(q, k, v), atol=tol, rtol=tol)


@pytest.mark.parametrize("fn", [_lagged, _window, _decode_short])
def test_masks_that_are_neither_are_not_proved_and_stay_exact(fn):
    specs = ("q: f32[1, 2, 1, 8]", "k: f32[1, 2, S, 8]", "v: f32[1, 2, S, 8]") if fn is _decode_short else \
        ("q: f32[B, 2, T, 8]", "k: f32[B, 2, T, 8]", "v: f32[B, 2, T, 8]")
    f = compiler.compile(fn, *specs, dims={"T": (2, 512)} if fn is not _decode_short else None)
    (v,) = f.variants
    assert len(v.masks) == 1 and v.proven == (None,) and not v.all_proven
    g = torch.Generator().manual_seed(2)
    for n in (2, 5, 17):
        q = torch.randn(1, 2, 1 if fn is _decode_short else n, 8, generator=g)
        k = torch.randn(1, 2, n, 8, generator=g)
        for _ in range(2):  # the second call classifies at run time
            torch.testing.assert_close(f(q, k, k), fn(q, k, k), atol=1e-5, rtol=1e-5)


def test_an_unhandled_op_leaves_the_mask_unproved():
    import sympy
    g = torch.fx.Graph()
    x = g.placeholder("x")
    x.meta.update(shape=(4,), dtype=torch.int64)
    with pytest.raises(mask_proofs.Unproved):
        mask_proofs.element(x, (sympy.Symbol("i"),))
    a = g.call_function(torch.ops.aten.arange.default, (4,), {"dtype": torch.float32})
    a.meta.update(shape=(4,), dtype=torch.float32)  # float rounding is not the closed form's
    with pytest.raises(mask_proofs.Unproved):
        mask_proofs.element(a, (sympy.Symbol("i"),))


def test_hf_llama_decode_mask_is_proved_and_tokens_equal_eager(monkeypatch):
    pytest.importorskip("transformers")
    import transformers.masking_utils as mu
    # Under torch < 2.14 (the GPU machine's 2.11) transformers never skips its mask while
    # compiling; newer torch lets it skip the mask itself.  Take the older behaviour here.
    monkeypatch.setattr(mu, "is_torchdynamo_exporting", lambda: True, raising=False)
    toks = greedy_tokens_eager_and_backend(tiny_llama_lm(), prompt_len=7, steps=10, seed=3)
    assert toks["symshape"] == toks["eager"]
    pieces = [p for gp in toks["graphed"] for p in gp.pieces.values() if p is not None]
    assert pieces
    for pw in pieces:
        v = pw.v
        assert v.masks and all(c is MaskClass.NONE for c in v.proven), pw.report()
        # No step of any segment makes the mask, and every SDPA step is passed no mask.
        steps = [st for s in pw.segments for st in s.steps]
        assert not any(getattr(st, "out", None) == m.mask for m in v.masks for st in steps)


def _odd_keys(q, k, v):
    # Integer bitwise and: not a logical And of truth values.
    S = k.shape[-2]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=((torch.arange(S) & 1) == 1)[None, None, None])


def _cast_twice(q, k, v):
    # A truth value cast to an integer and compared: no closed form taken for it.
    S = k.shape[-2]
    keep = (torch.arange(S)[None, :] <= torch.arange(1)[:, None] + (S - 1)).to(torch.int64) > 0
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep[None, None])


@pytest.mark.parametrize("fn", [_odd_keys, _cast_twice])
def test_integer_bit_ops_and_casts_are_not_taken_for_logic(fn):
    f = compiler.compile(fn, "q: f32[1, 2, 1, 8]", "k: f32[1, 2, S, 8]", "v: f32[1, 2, S, 8]", dims={"S": (2, 64)})
    (v,) = f.variants
    assert v.proven == (None,)
    for S in (2, 3, 8):
        q, k = torch.randn(1, 2, 1, 8), torch.randn(1, 2, S, 8)
        torch.testing.assert_close(f(q, k, k), fn(q, k, k), atol=1e-5, rtol=1e-5)


def _against_a_size(q, k, v):
    # A size compared as a scalar: le.Scalar with a SymInt (the lowering raised KeyError 'val'
    # on it: a size node has no meta value, only its expression).
    S = k.shape[-2]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=(torch.arange(S) <= S - 1)[None, None, None])


def test_a_mask_compared_with_a_size_compiles_and_is_proved():
    f = compiler.compile(_against_a_size, "q: f32[1, 2, 1, 8]", "k: f32[1, 2, S, 8]", "v: f32[1, 2, S, 8]")
    assert f.variants[0].proven == (MaskClass.NONE,)
    for S in (2, 3, 11):
        q, k = torch.randn(1, 2, 1, 8), torch.randn(1, 2, S, 8)
        torch.testing.assert_close(f(q, k, k), _against_a_size(q, k, k), atol=1e-5, rtol=1e-5)
