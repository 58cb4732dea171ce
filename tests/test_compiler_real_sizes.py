"""Sizes used as real values (``H / 5``, a SymFloat) keep their fraction in compiled kernels.

Interpolation to a fixed size from a symbolic one scales indexes by ``H / out``;
an int64 there truncated the scale to 0 and every output row read row 0.
"""
import pytest
import torch
import torch.nn.functional as F

import compiler


@pytest.mark.parametrize("mode", ["nearest", "bilinear", "bicubic"])
def test_interpolate_to_a_fixed_size_from_symbolic_sizes(mode):
    def prog(x):
        kw = {} if mode == "nearest" else {"align_corners": False}
        return F.interpolate(x, size=(5, 6), mode=mode, **kw)

    f = compiler.compile(prog, "x: f32[B, C, H, W]", target="cpp")
    for shape in [(1, 2, 4, 4), (2, 3, 7, 9), (2, 1, 13, 3)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(f(x), prog(x), atol=1e-5, rtol=1e-5)
    assert f.stats["traces"] <= 3  # B = 1 and C = 1 get their own traces


def test_a_size_ratio_as_a_value():
    def prog(x):
        return x * (x.shape[1] / 4) + x.shape[1] // 3

    f = compiler.compile(prog, "x: f32[B, T]", target="cpp")
    for shape in [(2, 3), (3, 10), (2, 17)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(f(x), prog(x))
