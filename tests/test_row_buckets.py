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


def _nan_alloc(shape, strides, dtype):
    """An allocator whose memory holds NaN (what an uninitialized block may hold): padding that is
    read without being zeroed shows up in any sum it reaches."""
    return torch.full(shape, float("nan"), dtype=dtype).as_strided(shape, strides)


def _roomy(t):
    """``t``'s values in an :func:`rb.alloc_with_room` buffer of its shape (extra rows NaN)."""
    out = rb.alloc_with_room(_nan_alloc, tuple(t.shape), tuple(t.stride()), t.dtype)
    out.copy_(t)
    return out


@pytest.mark.parametrize("rows", [65, 97, 520, 1031])
def test_a_buffer_with_room_is_padded_in_place_and_its_rows_read_as_they_are(rows):
    g = torch.Generator().manual_seed(rows)
    x = _roomy(torch.randint(-4, 5, (rows, 24), generator=g).float())
    w = torch.randint(-4, 5, (24, 16), generator=g).float()
    p = rb.bucket(rows)
    padded = rb._row_padded(x, p)
    assert padded.shape == (p, 24) and padded.data_ptr() == x.data_ptr()  # a view: nothing copied
    assert torch.equal((padded @ w)[:rows], x @ w)
    plain = torch.randint(-4, 5, (rows, 24), generator=g).float()  # no room: a copy
    assert rb._row_padded(plain, p).data_ptr() != plain.data_ptr()


@pytest.mark.parametrize("k", [65, 97, 520, 1031])
def test_a_contraction_over_buffers_with_room_zeroes_their_padding_in_place(k):
    """The weight-gradient form ``x.t() @ gy`` on buffers whose extra rows hold NaN: zeroed in place
    (no copy), the sum exact; a buffer with no room is copied, the operand left as it was."""
    g = torch.Generator().manual_seed(k)
    x = _roomy(torch.randint(-4, 5, (k, 24), generator=g).float())
    gy = _roomy(torch.randint(-4, 5, (k, 40), generator=g).float())
    want = x.t().double() @ gy.double()
    p = rb.bucket(k)
    assert rb._zeroed_room(x.t(), 1, p).data_ptr() == x.data_ptr()
    assert torch.equal(rb._padded_contraction(x.t(), gy, p).double(), want)
    plain = gy.clone()
    assert rb._zeroed_room(plain, 0, p) is None
    assert torch.equal(rb._padded_contraction(x.t(), plain, p).double(), want)


def test_padding_that_would_overwrite_the_buffers_own_elements_is_not_zeroed():
    """A view of a buffer with room whose extra rows would be the buffer's next rows (one batch of
    a [B, T, d] buffer): copied, never zeroed in place, and the buffer keeps its values."""
    x = _roomy(torch.arange(3 * 80 * 8, dtype=torch.float32).reshape(3, 80, 8))
    before = x.clone()
    first = x[0]  # rows 80.. of this view are x[1]
    assert rb._zeroed_room(first.t(), 1, rb.bucket(80)) is None
    got = rb._padded_contraction(first.t(), first, rb.bucket(80))
    assert torch.equal(got, first.t() @ first) and torch.equal(x, before)


def test_a_freed_buffer_with_room_is_forgotten():
    """The record of a buffer with room goes with its storage: memory reused by a tensor that is not
    one (an input, an ATen result) is never zeroed as padding."""
    import gc
    x = _roomy(torch.ones(100, 8))
    ptr = x.untyped_storage().data_ptr()
    assert ptr in rb._ROOMY
    view = x.t()
    del x
    gc.collect()
    assert ptr in rb._ROOMY  # a view keeps the storage
    del view
    gc.collect()
    assert ptr not in rb._ROOMY


def test_buffers_feeding_bucketed_matmuls_through_views_get_room():
    """The plan marks exactly the kernel outputs a bucketed matmul reads (through views), and the
    generated wrapper allocates them with room and computes what eager does: a real CPU program's
    plan with its matmuls swapped for the bucketed calls (which run plain on the CPU)."""
    import compiler
    from compiler.wrapper import ExternStep, KernelStep, template_buffers

    def mlp(x, w1, w2):
        h = torch.nn.functional.gelu(x @ w1)
        return h.sin().reshape(-1, 4, 16).transpose(1, 2).reshape(-1, 16) @ w2, h.cos()

    f = compiler.compile(mlp, "x: f32[M, 8]", "w1: f32[8, 16]", "w2: f32[16, 4]", target="cpp")
    v = f.variants[0]
    swapped = [ExternStep(rb.mm, s.args, s.kwargs, s.out) if isinstance(s, ExternStep) and s.target in
               (torch.ops.aten.mm.default, torch.mm) else s for s in v.plan]
    marked = rb.with_room(swapped)
    made = {al.name: al for s in marked if isinstance(s, KernelStep) for al in s.allocs}
    roomy = {n for n, al in made.items() if al.room is rb.alloc_with_room}
    # The sine reaches the second matmul (through views) and gets room; the cosine, an output no
    # matmul reads, does not.
    outputs = template_buffers(list(v.outputs), set())
    assert len(roomy) == 1 and len(made) >= 2 and not roomy & outputs
    source, fn = v._straight(marked)
    name = next(iter(roomy))
    assert f"b_{name} = R" in source
    v._fns = {k: fn for k in v._fns}
    v.fn = fn
    g = torch.Generator().manual_seed(0)
    for m in (4 * 26, 4 * 101):
        x, w1, w2 = (torch.randn(*s, generator=g) for s in ((m, 8), (8, 16), (16, 4)))
        for got, want in zip(f(x, w1, w2), mlp(x, w1, w2)):
            torch.testing.assert_close(got, want)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the buckets apply to CUDA half tensors only")
@pytest.mark.parametrize("m", [65, 520, 4097])
def test_cuda_matmuls_on_buffers_with_room_equal_unpadded(m):
    """The training forms on bf16 CUDA buffers with room whose extra rows hold NaN: the row-padded
    calls read them in place, the weight gradient zeroes them in place; all equal the plain calls."""
    def nan_alloc(shape, strides, dtype):
        return torch.full(shape, float("nan"), dtype=dtype, device="cuda").as_strided(shape, strides)

    def roomy(t):
        out = rb.alloc_with_room(nan_alloc, tuple(t.shape), tuple(t.stride()), t.dtype)
        out.copy_(t)
        return out

    g = torch.Generator(device="cuda").manual_seed(0)
    x = roomy(torch.randn(m, 768, device="cuda", dtype=torch.bfloat16, generator=g))
    gy = roomy(torch.randn(m, 3072, device="cuda", dtype=torch.bfloat16, generator=g))
    w = torch.randn(3072, 768, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(3072, device="cuda", dtype=torch.bfloat16, generator=g)
    for got, want in ((rb.linear(x, w, b), torch.nn.functional.linear(x, w, b)), (rb.mm(gy, w), gy @ w),
                      (rb.addmm(b, x, w.t()), torch.addmm(b, x, w.t()))):
        assert got.shape == want.shape and got.is_contiguous() and torch.isfinite(got).all()
        torch.testing.assert_close(got.float(), want.float(), atol=0.05, rtol=0.02)
    got, want = rb.mm(x.t(), gy), x.t() @ gy
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got.float(), want.float(), atol=0.5, rtol=0.02)


def test_a_storage_padding_is_zeroed_once_for_every_operand_it_backs():
    """Two column blocks of one buffer with room (q and k of a fused projection) in two weight
    gradients: the first zeroes the storage's whole padding, the second finds it zero."""
    k = 97
    g = torch.Generator().manual_seed(1)
    qk = _roomy(torch.randint(-4, 5, (k, 48), generator=g).float())
    gy = _roomy(torch.randint(-4, 5, (k, 40), generator=g).float())
    p = rb.bucket(k)
    entry = rb._ROOMY[qk.untyped_storage().data_ptr()]
    assert entry[2] is False
    for block in (qk[:, :24], qk[:, 24:]):
        assert torch.equal(rb._padded_contraction(block.t(), gy, p).double(), block.t().double() @ gy.double())
        assert entry[2] is True
    whole = torch.tensor([], dtype=qk.dtype).set_(qk.untyped_storage())
    assert whole.numel() == p * 48 and not torch.isnan(whole).any()  # the padding was NaN before


@pytest.mark.parametrize("k", [65, 97, 1031])
def test_an_output_gradient_with_no_room_is_copied_once_for_both_its_matmuls(k):
    """The backward pads a linear's output gradient for the input's gradient (rows, any values)
    and then, transposed, for the weight's (contraction, zeros): the second reuses the first's
    copy with its extra rows zeroed, and both products equal the unpadded ones exactly
    (integer-valued fp32). A write to the gradient in between, or the end of a training run,
    drops the shared copy."""
    g = torch.Generator().manual_seed(k)
    gy = torch.randint(-4, 5, (k, 24), generator=g).float()
    w, x = torch.randint(-4, 5, (24, 16), generator=g).float(), torch.randint(-4, 5, (k, 40), generator=g).float()
    p = rb.bucket(k)
    rows = rb._row_padded(gy, p)
    rows[k:] = float("nan")  # what an unset row may hold
    assert torch.equal((rows @ w)[:k], gy @ w)
    padded = rb._zero_padded(gy.t(), 1, p)
    assert padded.t().data_ptr() == rows.data_ptr()  # the same copy, transposed, its extra rows zero now
    assert torch.equal(padded @ torch.cat([x, torch.zeros(p - k, 40)]), gy.t() @ x)
    gy.add_(1)  # written since the copy: copied again
    again = rb._zero_padded(gy.t(), 1, p)
    assert again.data_ptr() != rows.data_ptr() and torch.equal(again.t()[:k], gy)
    assert torch.equal(rb._padded_contraction(gy.t(), x, p), gy.t() @ x)
    with rb.training_graphs():
        assert rb._LAST_COPY[0] is not None
    assert rb._LAST_COPY[0] is None
    with torch.inference_mode():  # no version counter: copied each time, the values as eager's
        frozen, fx = gy.clone(), x.clone()
        assert torch.equal(rb._padded_contraction(frozen.t(), fx, p), gy.t() @ x)
        assert rb._LAST_COPY[0] is None
