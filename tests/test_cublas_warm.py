"""compiler.cublas_warm: a row-bucketed matmul's other buckets warmed on a helper thread.

The thread and its queue run here with CPU jobs (the same code path as CUDA's but the stream);
the row-bucket call sites' warm-ups are run at other row counts on CPU tensors, so every job
they make is a valid call of the same matmul.
"""
import threading

import torch

from compiler import cublas_warm as cw
from compiler import row_buckets as rb


def test_buckets_around_cover_65_rows_to_twice_the_call_nearest_first():
    for rows in (72, 96, 520, 4096, 8192):
        got = cw.buckets_around(rows, rb.bucket)
        assert rows not in got and len(got) == len(set(got))
        assert all(rb.bucket(q) == q and 65 <= q <= 2 * rows for q in got)
        assert [abs(q - rows) for q in got] == sorted(abs(q - rows) for q in got)
        every = {rb.bucket(n) for n in range(65, 2 * rows + 1)} - {rows}
        assert set(got) == {q for q in every if q <= 2 * rows}


def test_each_bucket_is_queued_once_and_the_thread_runs_it():
    ran = []
    job = lambda q: ran.append(torch.zeros(q, 3).shape[0])  # noqa: E731
    site = ("test-once", object())
    cw.note(site, 96, job, rb.bucket, enabled=True)
    cw.drain()
    first = sorted(ran)
    assert first == sorted(cw.buckets_around(96, rb.bucket))
    cw.note(site, 96, job, rb.bucket, enabled=True)  # the same bucket again: nothing new
    cw.note(site, 104, job, rb.bucket, enabled=True)  # a bucket already warmed: only unseen ones
    cw.drain()
    assert sorted(ran[len(first):]) == sorted(q for q in cw.buckets_around(104, rb.bucket) if q not in first + [96])
    before = len(ran)
    cw.note(("test-off",), 96, job, rb.bucket, enabled=False)
    cw.drain()
    assert len(ran) == before


def test_too_large_warmups_are_skipped():
    ran, skipped = [], cw.STATS["skipped"]
    per_row = cw.MAX_BYTES // 1024  # rows past 1024 pass the cap
    cw.note(("test-large",), 1024, lambda q: ran.append(q), rb.bucket, nbytes=lambda q: q * per_row, enabled=True)
    cw.drain()
    assert ran and max(ran) <= 1024 < max(cw.buckets_around(1024, rb.bucket))
    assert cw.STATS["skipped"] - skipped == len([q for q in cw.buckets_around(1024, rb.bucket) if q > 1024])


def test_no_warmup_runs_while_a_capture_holds_exclusive():
    started = threading.Event()
    with cw.exclusive():
        cw.note(("test-exclusive",), 72, lambda q: started.set(), rb.bucket, enabled=True)
        assert not started.wait(0.3), "a warm-up ran during an exclusive block"
    assert started.wait(5)
    cw.drain()


def test_row_bucket_sites_warm_the_same_call_at_other_rows(monkeypatch):
    """Each call form's warm-up (linear, mm, addmm, a weight gradient's padded contraction) run
    at every queued bucket on CPU bf16 tensors: all valid calls, none failed."""
    monkeypatch.setattr(cw, "ENABLED", True)
    x = torch.randn(100, 24, dtype=torch.bfloat16)
    w = torch.randn(40, 24, dtype=torch.bfloat16)
    b = torch.randn(40, dtype=torch.bfloat16)
    gy = torch.randn(100, 40, dtype=torch.bfloat16)
    done, failed = cw.STATS["done"], cw.STATS["failed"]
    rb._warm_rows(rb.linear, x, (w, b), 40, 104, lambda e: torch.nn.functional.linear(e, w, b))
    shape_w = tuple(w.shape)
    rb._warm_rows(rb.mm, gy, (w,), 24, 104, lambda e: torch.mm(e, rb._empty(shape_w, rb._layout_of(w))))
    rb._warm_contraction(gy.t(), x, 104)  # dW = gy^T @ x over the tokens
    cw.drain()
    assert cw.STATS["failed"] == failed, cw.STATS["errors"]
    assert cw.STATS["done"] - done == 3 * len(cw.buckets_around(104, rb.bucket))
