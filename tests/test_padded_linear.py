"""compiler.padded_linear: the padded weight's linear equals eager's, follows weight updates,
and the compiler picks it exactly for half-precision linears of odd static width on CUDA."""
import dataclasses
import gc

import pytest
import torch

import compiler
from compiler import padded_linear as pl


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [False, True])
def test_equals_eager_linear(dtype, bias):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 7, 32, generator=g).to(dtype)
    w = torch.randn(1030, 32, generator=g).to(dtype)
    b = torch.randn(1030, generator=g).to(dtype) if bias else None
    got = pl.padded_linear(x, w, b)
    want = torch.nn.functional.linear(x, w, b)
    assert got.shape == want.shape == (2, 7, 1030) and got.is_contiguous()
    tol = 1e-5 if dtype is torch.float32 else 5e-2
    assert torch.allclose(got.float(), want.float(), atol=tol, rtol=tol)


def test_padded_copy_follows_the_weight():
    x = torch.randn(3, 8)
    w = torch.randn(1001, 8)
    b = torch.randn(1001)
    first = pl.padded_linear(x, w, b)
    with torch.no_grad():
        w.mul_(2)  # in place: the padded copy is stale and must be remade
        b.add_(1)
    assert torch.allclose(pl.padded_linear(x, w, b), torch.nn.functional.linear(x, w, b), atol=1e-5)
    assert not torch.allclose(first, pl.padded_linear(x, w, b))
    other_b = torch.zeros(1001)  # the same weight with another bias
    assert torch.allclose(pl.padded_linear(x, w, other_b), torch.nn.functional.linear(x, w), atol=1e-5)
    key = id(w)
    assert key in pl._PADDED
    del w, first
    gc.collect()
    assert key not in pl._PADDED  # no padded copy outlives its weight


def test_wants_padding_only_for_odd_wide_half_cuda():
    assert pl.wants_padding(50257, torch.float16, "cuda")
    assert pl.wants_padding(50257, torch.bfloat16, "cuda")
    assert not pl.wants_padding(50257, torch.float32, "cuda")
    assert not pl.wants_padding(50257, torch.float16, "cpu")
    assert not pl.wants_padding(50264, torch.float16, "cuda")  # aligned already
    assert not pl.wants_padding(1001 - 8 * 100, torch.float16, "cuda")  # narrow: the copy costs more
    assert not pl.wants_padding(None, torch.float16, "cuda")  # a dynamic width


def test_compiled_lm_head_plan_is_padded_on_cuda_only():
    head = torch.nn.Linear(32, 1030, bias=False)
    c = compiler.compile(head, "x: f32[B, 32]", target="cpp")
    x = torch.randn(3, 32)
    assert torch.allclose(c(x), head(x), atol=1e-5)
    v = c.variants[0]
    # The plan's weight is the const [1030, 32]: as fp16 on CUDA it would run padded.
    half = {n: dataclasses.replace(b, dtype=torch.float16) for n, b in v.lp.buffers.items()}
    names = lambda plan: [getattr(s.target, "__name__", "") for s in plan]  # noqa: E731
    assert "linear" in names(v.plan) and "padded_linear" not in names(v.plan)
    assert "padded_linear" in names(pl.padded_steps(v.plan, half, "cuda"))
    assert "padded_linear" not in names(pl.padded_steps(v.plan, v.lp.buffers, "cuda"))  # fp32 stays
