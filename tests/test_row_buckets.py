"""compiler.row_buckets: matmul rows rounded up to few buckets; results equal the unpadded call's."""
import pytest
import torch

from compiler import row_buckets as rb


def test_buckets_are_few_and_pad_at_most_an_eighth():
    rows = range(1, 8 * 1024 + 1)
    got = [rb.bucket(m) for m in rows]
    assert all(b >= m and b - m <= m / 8 for m, b in zip(rows, got))
    assert all(x <= y for x, y in zip(got, got[1:]))  # monotone: a bigger input never gets fewer rows
    assert len({rb.bucket(8 * t) for t in range(64, 1025)}) <= 33  # a training run's M = 8 * T


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the buckets apply to CUDA half tensors only")
@pytest.mark.parametrize("m", [65, 520, 4097])
def test_bucketed_calls_equal_unpadded_rows(m):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, 768, device="cuda", dtype=torch.bfloat16, generator=g)
    w = torch.randn(3072, 768, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(3072, device="cuda", dtype=torch.bfloat16, generator=g)
    for got, want in ((rb.linear(x, w, b), torch.nn.functional.linear(x, w, b)), (rb.mm(x, w.t()), x @ w.t()),
                      (rb.addmm(b, x, w.t()), torch.addmm(b, x, w.t()))):
        assert got.shape == want.shape and got.is_contiguous()
        torch.testing.assert_close(got.float(), want.float(), atol=0.05, rtol=0.02)
