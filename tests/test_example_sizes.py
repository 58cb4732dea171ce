"""Automatic example sizes never leave a compiler with a trace only sizes no real input has.

A ViT-like program (a 16x16 patch convolution, position embeddings interpolated to the patch
grid) at the automatic sizes H=16, W=24 has one patch row and one patch column: its guards
pin ``H // 16 == 1``.  ``shapes.example_sizes.trace_general`` traces again at larger sizes,
so ``compiler.compile`` builds a variant that serves the real image sizes.
"""
import torch
import torch.nn.functional as F

import compiler
import shapes
from shapes.example_sizes import degenerate_guards, trace_general

nn = torch.nn


class PatchEncoder(nn.Module):
    """ViT's embedding: patches of 16, position embeddings of a 2x2 grid interpolated to the image's."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.proj = nn.Conv2d(3, 8, 16, stride=16)
        self.pos = nn.Parameter(torch.randn(1, 8, 2, 2))

    def forward(self, px):
        x = self.proj(px)
        pos = F.interpolate(self.pos, size=(px.shape[2] // 16, px.shape[3] // 16), mode="bicubic",
                            align_corners=False)
        return (x + pos).flatten(2).transpose(1, 2)


SPEC = "px: f32[B, 3, H, W]"


def test_the_automatic_sizes_alone_pin_the_patch_grid_to_one():
    tp = shapes.trace(PatchEncoder().eval(), SPEC, specialize_zero_one=True)
    assert (tp.hints["H"], tp.hints["W"]) == (16, 24)
    assert "Eq((H//16), 1)" in {str(g.expr) for g in degenerate_guards(tp)}


def test_trace_general_traces_again_where_a_derived_size_is_one():
    tp = trace_general(PatchEncoder().eval(), SPEC, specialize_zero_one=True)
    assert degenerate_guards(tp) == []
    assert tp.hints["H"] // 16 >= 2 and tp.hints["H"] not in (tp.hints["B"], tp.hints["W"])
    assert tp.hints["B"] == 8  # a dim no degenerate guard names keeps its size


def test_compile_builds_one_general_variant_that_serves_real_image_sizes():
    m = PatchEncoder().eval()
    f = compiler.compile(m, SPEC)
    assert f.stats["variants"] == 1 and f.stats["traces"] == 2  # the wasted trace was never compiled
    for b, h, w in [(2, 224, 224), (3, 333, 333), (2, 48, 80)]:
        x = torch.randn(b, 3, h, w)
        torch.testing.assert_close(f(x), m(x), atol=1e-5, rtol=1e-5)
    assert f.stats["variants"] == 1
    x = torch.randn(2, 3, 16, 40)  # one patch row (H // 16 == 1): the same variant, eager's answer
    torch.testing.assert_close(f(x), m(x), atol=1e-5, rtol=1e-5)
    assert f.stats["variants"] == 1


def test_a_size_the_caller_gives_is_kept_and_a_range_that_forces_the_size_is_respected():
    m = PatchEncoder().eval()
    f = compiler.compile(m, SPEC, dims={"H": 16})
    assert f.variants[0].tp.hints["H"] == 16 and f.stats["traces"] == 1
    tp = trace_general(m, SPEC, dims={"H": (16, 31)}, specialize_zero_one=True)
    assert 16 <= tp.hints["H"] <= 31
    x = torch.randn(2, 3, 20, 64)
    torch.testing.assert_close(compiler.compile(m, SPEC, dims={"H": (16, 31)})(x), m(x), atol=1e-5, rtol=1e-5)


def test_a_program_without_derived_sizes_is_traced_once():
    f = compiler.compile(lambda x: x * 2, "x: f32[B, T]")
    assert f.stats["traces"] == 1 and f.variants[0].tp.hints == {"B": 8, "T": 16}
