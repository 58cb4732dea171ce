"""A trace assumes contiguous inputs; a program that reads a layout is held to that (shapes.layout_reads)."""
import warnings

import pytest
import torch

import compiler
import shapes
from compiler.runtime import LayoutFallback
from shapes.layout_reads import LayoutMismatch


def _branches_on_layout(x):
    return (x.reshape(-1) if x.is_contiguous() else x) * 2


def _size_from_stride(x):
    return x.reshape(x.stride(0), -1) + 1


def _offset_sized(x):
    return x[: x.storage_offset() + 1] * 3


@pytest.mark.parametrize("prog,what", [(_branches_on_layout, "Tensor.is_contiguous"),
                                       (_size_from_stride, "Tensor.stride"),
                                       (_offset_sized, "Tensor.storage_offset")])
def test_a_program_that_reads_a_layout_gives_eager_s_answer_for_strided_inputs(prog, what):
    tp = shapes.trace(prog, "x: f32[N, 8]")
    assert [r.what for r in tp.layout_reads] == [what]
    assert "test_layout_reads.py" in tp.layout_reads[0].text()
    f = compiler.compile(prog, "x: f32[N, 8]")
    for x in (torch.randn(5, 8), torch.randn(1, 8), torch.randn(13, 8)):  # contiguous: the compiled plan
        with warnings.catch_warnings():
            warnings.simplefilter("error", LayoutFallback)
            got = f(x)
        assert got.shape == prog(x).shape
        torch.testing.assert_close(got, prog(x))
    assert f.stats.get("program_calls", 0) == 0
    with pytest.warns(LayoutFallback, match="run the program itself"):
        f(torch.randn(8, 5).t())
    for x in (torch.randn(8, 5).t(), torch.randn(7, 16)[:, ::2], torch.randn(20, 8)[3:],
              torch.randn(30, 8).as_strided((1, 8), (100, 1))):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LayoutFallback)
            try:
                want = prog(x)
            except RuntimeError as e:  # eager refuses this layout's sizes: so does the compiled program
                with pytest.raises(RuntimeError) as ours:
                    f(x)
                assert str(ours.value) == str(e)
                continue
            got = f(x)
        assert got.shape == want.shape
        torch.testing.assert_close(got, want)
    assert f.stats["program_calls"] == 5  # every strided call, the one that warned included
    with pytest.raises(LayoutMismatch, match="not laid out as the trace"):
        tp.run(torch.randn(8, 5).t())


def test_a_program_that_reads_no_layout_serves_strided_inputs_compiled():
    """Torch's own reads (matmul's decomposition picks its ops by strides) are not the program's."""
    def prog(x, w):
        return torch.softmax(x @ w, -1).transpose(0, 1)

    tp = shapes.trace(prog, "x: f32[N, 8]", "w: f32[8, 4]")
    assert tp.layout_reads == []
    f = compiler.compile(prog, "x: f32[N, 8]", "w: f32[8, 4]")
    w = torch.randn(8, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", LayoutFallback)
        for x in (torch.randn(8, 6).t(), torch.randn(3, 8)):
            torch.testing.assert_close(f(x, w), prog(x, w))
            torch.testing.assert_close(tp.run(x, w), prog(x, w))
    assert f.stats.get("program_calls", 0) == 0
