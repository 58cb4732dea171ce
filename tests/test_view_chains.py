"""Chains of views from a contiguous tensor made as one direct view (compiler.view_chains), against eager."""
import pytest
import torch

import compiler


def _layout(t):
    """Sizes and strides, the strides of size-1 dims left out: no element's address depends on them,
    and eager's view and the trace's meta kernels may pick different ones."""
    return tuple((n, st) for n, st in zip(t.shape, t.stride()) if n != 1), t.shape


def _heads(x, w):
    """GPT-2's attention input: a fused projection split in three, each viewed as heads and transposed."""
    B, T = x.shape[0], x.shape[1]
    q, k, v = (x @ w).split(16, -1)
    q, k, v = (t.view(B, T, 4, 4).transpose(1, 2) for t in (q, k, v))
    return q * 2 + k, v.select(1, 3), k.unsqueeze(0).expand(2, -1, -1, -1, -1)[1, :, :, ::2]


def _unbound(x):
    """A kernel's output unbound and sliced: every link a view of it."""
    y = torch.relu(x) + 1
    a, b = y.unbind(-1)
    return a.t() * 3, b[1:], y.permute(2, 0, 1).narrow(1, 0, 1)


@pytest.mark.parametrize("prog,specs,make", [
    (_heads, ("x: f32[B, T, 16]", "w: f32[16, 48]"), lambda B, T: (torch.randn(B, T, 16), torch.randn(16, 48))),
    (_unbound, ("x: f32[B, T, 2]",), lambda B, T: (torch.randn(B, T, 2),)),
])
def test_view_chains_equal_eager_at_every_size(prog, specs, make):
    f = compiler.compile(prog, *specs)
    src = f.variants[0].source
    assert "REINTERPRET(" in src
    for B, T in [(2, 3), (1, 1), (3, 13), (5, 64)]:
        args = make(B, T)
        with torch.no_grad():
            got, want = f(*args), prog(*args)
        for g, e in zip(got, want):
            assert _layout(g) == _layout(e)
            torch.testing.assert_close(g, e)


def test_a_chain_is_one_direct_view_and_its_links_are_not_called():
    f = compiler.compile(_heads, "x: f32[B, T, 16]", "w: f32[16, 48]")
    src = f.variants[0].source
    assert "split" not in src and src.count("REINTERPRET(b_mm") >= 3, src


def test_a_start_that_is_not_contiguous_runs_the_chain_s_own_calls():
    """A chain's start that is contiguous in the trace but strided at run time (a slice of a wider
    tensor, a transpose) takes the chain's own calls: eager's values and layouts, or eager's error."""
    def prog(x):
        y = x.view(x.shape[0], -1, 2)[:, 1:].transpose(1, 2)
        return y * 2, x.unsqueeze(1)

    f = compiler.compile(prog, "x: f32[N, 8]")
    assert "REINTERPRET(b_x" in f.variants[0].source
    for x in (torch.randn(3, 8), torch.randn(5, 16)[:, :8], torch.randn(8, 7).t(), torch.randn(1, 8)):
        try:
            want = prog(x)
        except RuntimeError as e:
            with pytest.raises(RuntimeError, match="view"):
                f(x)
            assert "view" in str(e)
            continue
        got = f(x)
        for g, e in zip(got, want):
            torch.testing.assert_close(g, e)
        # The view (the chain's end) has eager's layout; the kernel's output its own dense one.
        assert _layout(got[1]) == _layout(want[1]) and got[1].data_ptr() == x.data_ptr()
