"""Hand-written causal attention runs as one SDPA call, and only where the mask is proved causal."""
import math

import pytest
import torch

import compiler
import shapes
from compiler.attention import SDPA, fuse_causal_attention
from tests.compiler_programs import Attention


class Heads(torch.nn.Module):
    """Multi-head attention as GPT-2 writes it, with the mask given by ``mask(T)``."""

    def __init__(self, mask, d=32, h=4, fill=float("-inf"), scale_after=False):
        super().__init__()
        self.qkv, self.h, self.mask, self.fill, self.scale_after = torch.nn.Linear(d, 3 * d), h, mask, fill, \
            scale_after

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in self.qkv(x).split(C, dim=-1))
        att = q @ k.transpose(-2, -1)
        s = 1.0 / math.sqrt(C // self.h)
        if not self.scale_after:
            att = att * s
        att = att.masked_fill(~self.mask(T, x.device), self.fill)
        if self.scale_after:
            att = att * s
        att = torch.softmax(att, dim=-1)
        return (att @ v).transpose(1, 2).reshape(B, T, C)


def tril(T, dev):
    return torch.ones(T, T, dtype=torch.bool, device=dev).tril()


def tril_arange(T, dev):
    i = torch.arange(T, device=dev)
    return i[None, :] <= i[:, None]


def n_sdpa(tp):
    return sum(n.target is SDPA for n in tp.graph.nodes)


@pytest.mark.parametrize("mask", [tril, tril_arange])
@pytest.mark.parametrize("scale_after", [False, True])
def test_causal_heads_become_one_sdpa_and_match_eager(mask, scale_after):
    torch.manual_seed(0)
    m = Heads(mask, scale_after=scale_after).eval()
    f = compiler.compile(m, "x: f32[B, T, 32]")
    v = f.variants[0]
    assert v.fused_attention == 1
    assert n_sdpa(v.tp) == 1
    # No bmm is left and no kernel reads a (B*H, T, T) tensor.
    assert not any(n.target is torch.ops.aten.bmm.default for n in v.tp.graph.nodes)
    with torch.no_grad():
        for B, T in [(2, 2), (3, 7), (1, 16), (2, 17), (2, 64)]:
            x = torch.randn(B, T, 32)
            torch.testing.assert_close(f(x), m(x), atol=1e-5, rtol=1e-4)
    # Size 1 is a size: the one variant serves B = 1 too, and runs SDPA.
    assert f.stats["traces"] == 1 and all(v.fused_attention == 1 for v in f.variants)


def test_heads_merge_back_without_a_copy_kernel():
    # (att @ v).transpose(1, 2).reshape(...) after the fused SDPA: a `.contiguous()` call (a no-op on
    # the layout ATen's flash/efficient kernels return), not a copy kernel of the attention output.
    torch.manual_seed(0)
    m = Heads(tril).eval()
    f = compiler.compile(m, "x: f32[B, T, 32]")
    v = f.variants[0]
    targets = [n.target for n in v.tp.graph.nodes if n.op == "call_function"]
    assert torch.ops.aten.contiguous.default in targets and torch.ops.aten.clone.default not in targets
    assert not v.kernels
    with torch.no_grad():
        for B, T in [(2, 5), (3, 16)]:
            x = torch.randn(B, T, 32)
            out = f(x)
            assert out.is_contiguous()
            torch.testing.assert_close(out, m(x), atol=1e-5, rtol=1e-4)


def test_single_head_program_fuses():
    torch.manual_seed(0)
    a = Attention().eval()
    f = compiler.compile(a, "x: f32[B, T, 32]")
    assert f.variants[0].fused_attention == 1
    with torch.no_grad():
        x = torch.randn(2, 13, 32)
        torch.testing.assert_close(f(x), a(x), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("mask, why", [
    (lambda T, dev: torch.ones(T, T, dtype=torch.bool, device=dev).tril(-1), "keeps j < i: row 0 is all -inf"),
    (lambda T, dev: torch.ones(T, T, dtype=torch.bool, device=dev).triu(), "anti-causal"),
    (lambda T, dev: torch.ones(T, T, dtype=torch.bool, device=dev).tril(1), "keeps j <= i + 1"),
])
def test_other_masks_are_not_rewritten(mask, why):
    torch.manual_seed(0)
    m = Heads(mask).eval()
    tp = shapes.trace(m, "x: f32[B, T, 32]")
    assert fuse_causal_attention(tp) == 0, why
    f = compiler.compile(m, "x: f32[B, T, 32]")
    with torch.no_grad():
        x = torch.randn(2, 9, 32)
        torch.testing.assert_close(f(x), m(x), atol=1e-5, rtol=1e-4, equal_nan=True)


def test_finite_fill_is_not_rewritten():
    # -1e4 is not -inf: a fully masked row would differ, so no rewrite is claimed.
    tp = shapes.trace(Heads(tril, fill=-1e4).eval(), "x: f32[B, T, 32]")
    assert fuse_causal_attention(tp) == 0


def test_probabilities_used_twice_are_not_rewritten():
    class Twice(Heads):
        def forward(self, x):
            B, T, C = x.shape
            q, k, v = (t.view(B, T, 4, C // 4).transpose(1, 2) for t in self.qkv(x).split(C, dim=-1))
            att = torch.softmax((q @ k.transpose(-2, -1)).masked_fill(~tril(T, x.device), float("-inf")), -1)
            return (att @ v).transpose(1, 2).reshape(B, T, C), att.sum(-1)

    tp = shapes.trace(Twice(tril).eval(), "x: f32[B, T, 32]")
    assert fuse_causal_attention(tp) == 0


class Sdpa(torch.nn.Module):
    """Attention through F.scaled_dot_product_attention, with an optional mask built from T."""

    def __init__(self, d=32, h=4, causal=True, bias=None):
        super().__init__()
        self.qkv, self.h, self.causal, self.bias = torch.nn.Linear(d, 3 * d), h, causal, bias

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in self.qkv(x).split(C, dim=-1))
        mask = self.bias(T, x.device) if self.bias is not None else None
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal)
        return y.transpose(1, 2).reshape(B, T, C)


def test_sdpa_is_traced_as_one_node():
    m = Sdpa().eval()
    tp = shapes.trace(m, "x: f32[B, T, 32]")
    (node,) = [n for n in tp.graph.nodes if n.target is SDPA]  # kept whole: no math decomposition
    assert node.args[5] is True and tp.guards == [] and tp.runtime_asserts == []
    assert fuse_causal_attention(tp) == 0
    assert not any(n.target in (torch.ops.aten.tril.default, torch.ops.aten.bmm.default) for n in tp.graph.nodes)
    f = compiler.compile(m, "x: f32[B, T, 32]")
    for T in (1, 2, 5, 17):
        x = torch.randn(2, T, 32)
        with torch.no_grad():
            torch.testing.assert_close(f(x), m(x), atol=1e-5, rtol=1e-5)


def test_sdpa_with_other_biases_is_not_rewritten():
    def upper(T, dev):  # j >= i kept: anti-causal
        return torch.ones(T, T, dtype=torch.bool, device=dev).triu()

    def finite(T, dev):  # an additive float bias that is not -inf
        return torch.zeros(T, T, device=dev).masked_fill(~tril(T, dev), -1e4)

    for bias in (upper, finite):
        m = Sdpa(causal=False, bias=bias).eval()
        tp = shapes.trace(m, "x: f32[B, T, 32]")
        assert fuse_causal_attention(tp) == 0, bias.__name__
        f = compiler.compile(m, "x: f32[B, T, 32]")
        x = torch.randn(2, 9, 32)
        with torch.no_grad():
            torch.testing.assert_close(f(x), m(x), atol=1e-5, rtol=1e-5)


def test_upcast_softmax_with_an_additive_mask_becomes_sdpa_in_half():
    # softmax(q @ k^T * s + bias, dtype=float32).to(half) @ v, with a float bias from the caller:
    # one SDPA call with attn_mask=bias (fp16 inputs, fp32 mask); no scores buffer.
    def prog(q, k, v, bias):
        att = (q @ k.transpose(-2, -1)) * 0.25 + bias
        return torch.softmax(att.float(), dim=-1).to(q.dtype) @ v

    f = compiler.compile(prog, "q: f16[B, 4, T, 16]", "k: f16[B, 4, T, 16]", "v: f16[B, 4, T, 16]",
                         "bias: f16[B, 1, T, T]")
    v = f.variants[0]
    assert v.fused_attention == 1 and n_sdpa(v.tp) == 1
    assert not any(n.target is torch.ops.aten.bmm.default for n in v.tp.graph.nodes)
    for B, T in [(2, 5), (1, 1), (3, 13)]:
        q, k, vv = (torch.randn(B, 4, T, 16, dtype=torch.float16) for _ in range(3))
        bias = torch.randn(B, 1, T, T, dtype=torch.float16)
        bias[..., 1:][torch.rand(B, 1, T, T - 1) > 0.6] = float("-inf")
        torch.testing.assert_close(f(q, k, vv, bias), prog(q, k, vv, bias), atol=4e-3, rtol=4e-3)


def test_a_bias_that_widens_the_scores_is_not_rewritten():
    # The bias has more heads than the scores broadcast to: SDPA's mask may not widen them.
    def prog(q, k, v, bias):
        return torch.softmax(q @ k.transpose(-2, -1) + bias, dim=-1) @ v

    tp = shapes.trace(prog, "q: f32[B, 1, T, 8]", "k: f32[B, 1, T, 8]", "v: f32[B, 1, T, 8]", "bias: f32[B, 3, T, T]")
    assert fuse_causal_attention(tp) == 0
