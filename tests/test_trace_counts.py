"""compiler.compile's trace counts by cause: the first trace, the first trace again at larger
automatic example sizes (shapes.example_sizes), and the sizes the program branches on, traced
at compile time (compiler.branch_sizes); calls at those sizes then trace nothing."""
import torch

import compiler


def _branchy(x):
    if x.shape[0] != 1:  # transformers' masks ask `batch_size != position_ids.shape[0]`
        return x * 2
    return x + 1


def _rows_of_8(x):
    # Squeezes the first of N // 8 rows where there is only one: at N = 8 a trace pins N // 8 == 1.
    return x.view(x.shape[0] // 8, 8).squeeze(0) * 3


def test_a_branch_size_is_traced_at_compile_time_and_counted_as_such():
    f = compiler.compile(_branchy, "x: f32[B, N]")
    assert f.stats["traces"] == 2 and f.stats["branch_traces"] == 1 and f.stats["retraces"] == 0, f.stats
    for shape in [(1, 5), (3, 5), (1, 7)]:
        x = torch.randn(*shape)
        assert torch.equal(f(x), _branchy(x))
    assert f.stats["traces"] == 2, f.stats  # the calls at B = 1 found their variant


def test_a_trace_at_degenerate_example_sizes_is_retraced_and_counted_as_such():
    f = compiler.compile(_rows_of_8, "x: f32[N]")
    assert f.stats["retraces"] == 1 and f.stats["traces"] == 2 + f.stats["branch_traces"], f.stats
    x = torch.randn(24)
    assert torch.equal(f(x), _rows_of_8(x))
