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


@pytest.mark.parametrize("k", [1, 65, 97, 520])
def test_zero_padded_contraction_equals_the_sum_exactly(k):
    """A weight gradient's ``x.t() @ g`` over ``k`` tokens, padded to ``bucket(k)`` with zeros in
    both operands (x transposed as the backward passes it): integer-valued fp32, so any
    difference in the sum would show exactly."""
    g = torch.Generator().manual_seed(k)
    x = torch.randint(-4, 5, (k, 24), generator=g).float()
    gy = torch.randint(-4, 5, (k, 40), generator=g).float()
    p = rb.bucket(k) if rb.bucket(k) != k else k + 3
    got = rb.mm_padded_contraction(x.t(), gy, p)
    assert torch.equal(got, x.t() @ gy)
    assert torch.equal(rb.mm_padded_contraction(x.t(), gy.t().contiguous().t(), p), x.t() @ gy)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the buckets apply to CUDA half tensors only")
@pytest.mark.parametrize("m", [65, 520, 4097])
def test_weight_gradient_form_equals_unpadded(m):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, 768, device="cuda", dtype=torch.bfloat16, generator=g)
    gy = torch.randn(m, 3072, device="cuda", dtype=torch.bfloat16, generator=g)
    got, want = rb.mm(x.t(), gy), x.t() @ gy
    assert got.shape == want.shape
    torch.testing.assert_close(got.float(), want.float(), atol=0.5, rtol=0.02)
