"""Decoder-block ops fused into kernels instead of ATen externs: rotary's ``cat``, masks built
with ``&``/``|`` and ``new_ones``.  (The Triton side: tests/compiler_triton_cases.py's
``case_cat_rotary_and_masks``.)"""
import torch

import compiler
from tests import attention_models as AM

ATEN = torch.ops.aten


def rotary(x, cos, sin):
    x1, x2 = x[..., :4], x[..., 4:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def three_way(a, b):
    return torch.cat([a * 2, b, a + 1], dim=1).sin()


def masks(x):
    T = x.shape[-1]
    i = torch.arange(T, device=x.device)
    keep = (i[:, None] >= i[None, :]) & x.new_ones((), dtype=torch.bool) | (i[None, :] == 0)
    return x.masked_fill(~keep, -1.0)


def _externs(f):
    return {str(s.target) for v in f.variants for s in v.lp.items if hasattr(s, "target")}


def test_cat_is_fused_and_exact_at_every_size():
    f = compiler.compile(rotary, "x: f32[B, 4, T, 8]", "cos: f32[T, 8]", "sin: f32[T, 8]")
    g = compiler.compile(three_way, "a: f32[B, T]", "b: f32[B, S]")
    for B, T, S in [(1, 1, 1), (2, 5, 3), (3, 13, 17)]:
        x, c, s = torch.randn(B, 4, T, 8), torch.randn(T, 8), torch.randn(T, 8)
        torch.testing.assert_close(f(x, c, s), rotary(x, c, s))
        a, b = torch.randn(B, T), torch.randn(B, S)
        torch.testing.assert_close(g(a, b), three_way(a, b))
    assert "aten.cat.default" not in _externs(f) | _externs(g)


def test_bool_masks_are_fused():
    f = compiler.compile(masks, "x: f32[B, T, T]")
    for B, T in [(1, 1), (2, 7)]:
        x = torch.randn(B, T, T)
        torch.testing.assert_close(f(x), masks(x))
    assert not {"aten.bitwise_and.Tensor", "aten.bitwise_or.Tensor", "aten.new_ones.default"} & _externs(f)


def test_llama_block_has_no_cat_or_mask_externs():
    case = AM.BY_NAME["llama"]
    f = compiler.compile(case.module(), *case.specs)
    assert not {"aten.cat.default", "aten.bitwise_and.Tensor", "aten.new_ones.default"} & _externs(f)
