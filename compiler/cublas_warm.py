"""cuBLAS's first call at a new shape, paid ahead on a helper thread (opt-in: ``SYMSHAPE_WARM_BUCKETS=1``).

Training graphs run their half-precision CUDA matmuls on row counts rounded up to buckets
(:mod:`compiler.row_buckets`), so a run meets few shapes; but each bucket's first call of each
matmul still pays cuBLAS's per-shape host time: on the H100 225-411 us a call (6.5 ms where it
loads another kernel), ~30 calls per GPT-2 or BERT step, so a step that meets a new bucket took
8-12 ms longer (bench/results/train_steps_host_h100_s18_2026-12-06.txt).  That work is shared
by the threads of a process: a shape first run on another thread (its own stream) cost the main
thread 45-90 us at its first call (bench/results/half_gemm_h100_s18_2026-12-06.txt, part 4).

:func:`note` is told each bucketed call's site (the call with its row count left open) and
bucket; the first time a site meets a bucket it queues the site's other buckets from 65 rows
to twice this one, nearest first, each made by ``job(rows)``: the same call on empty operands
of those rows.  One daemon thread runs the queue on its own CUDA stream; a job whose operands
and result would pass :data:`MAX_BYTES` is skipped.  The thread and CUDA graph recording
(:mod:`compiler.graph_capture`) never overlap (:func:`exclusive`): a launch from another thread
during a capture would invalidate it.  A user's own ``torch.cuda.graph`` capture is not guarded:
this is why the warming is opt-in.

Example (a CPU job: the queue and the thread work alike)::

    >>> import torch
    >>> done = []
    >>> from compiler.row_buckets import bucket
    >>> note(("example",), 72, lambda rows: done.append(torch.ones(rows, 2).sum().item()), bucket, enabled=True)
    >>> drain()
    >>> sorted(done)[:3], 144.0 in done  # 80, 88, 96 rows...; never the 72 rows the call ran on
    ([160.0, 176.0, 192.0], False)
"""
from __future__ import annotations

import contextlib
import os
import threading
from collections import deque

#: Whether bucketed matmuls queue their other buckets (read at each call).
ENABLED = os.environ.get("SYMSHAPE_WARM_BUCKETS", "0") == "1"

#: The largest warm-up (operands and result, bytes) the thread runs: its memory adds to a step's peak
#: where the two overlap (~5% of a d=768 model's training step at these sizes).
MAX_BYTES = 64 << 20

#: Jobs queued / run / skipped (too large) / failed, and the failures' messages.
STATS = {"queued": 0, "done": 0, "skipped": 0, "failed": 0, "errors": []}

#: (site, rows) a call ran at (its buckets around were queued then) / queued or run at all.
_met: set = set()
_queued: set = set()
_queue: deque = deque()
_cond = threading.Condition()
_exclusive = threading.RLock()
_thread = None
_busy = 0


def buckets_around(rows: int, bucket) -> list:
    """The buckets (``bucket(n)``: the bucket of ``n`` rows) from 65 rows to twice ``rows``,
    ``rows``'s own left out, nearest first.

    >>> from compiler.row_buckets import bucket
    >>> buckets_around(96, bucket)
    [88, 104, 80, 112, 72, 120, 128, 144, 160, 176, 192]
    """
    out, q = [], 65
    while True:
        b = bucket(q)
        if b > 2 * rows:
            break
        if b != rows:
            out.append(b)
        q = b + 1
    return sorted(out, key=lambda b: (abs(b - rows), b))


def note(site, rows: int, job, bucket, nbytes=None, device=None, enabled=None) -> None:
    """A bucketed call at ``site`` ran on ``rows`` rows: queue ``job(q)`` (which runs the same
    call on ``q`` rows) for the site's other buckets (``bucket(n)``: the bucket of ``n`` rows)
    not met yet, where ``nbytes(q)`` (its
    operands' and result's bytes; None: not checked) is within :data:`MAX_BYTES`; on CUDA
    ``device``, the thread runs them on a stream of its own there.  ``enabled``: whether to
    (None: :data:`ENABLED`)."""
    if not (ENABLED if enabled is None else enabled):
        return
    key = (site, rows)
    if key in _met:
        return
    _met.add(key)
    _queued.add(key)  # run by the call itself: never queued
    todo = []
    for q in buckets_around(rows, bucket):
        if (site, q) in _queued:
            continue
        _queued.add((site, q))
        if nbytes is not None and nbytes(q) > MAX_BYTES:
            STATS["skipped"] += 1
            continue
        todo.append((job, q, device))
    if not todo:
        return
    with _cond:
        _queue.extend(todo)
        STATS["queued"] += len(todo)
        _cond.notify()
    _start()


def _start() -> None:
    global _thread
    if _thread is None or not _thread.is_alive():
        _thread = threading.Thread(target=_work, name="symshape-cublas-warm", daemon=True)
        _thread.start()


def _work() -> None:
    global _busy
    stream = None
    while True:
        with _cond:
            while not _queue:
                _cond.wait()
            job, q, device = _queue.popleft()
            _busy += 1
        try:
            with _exclusive:
                if getattr(device, "type", None) == "cuda":
                    import torch
                    if stream is None:
                        stream = torch.cuda.Stream(device=device)
                    with torch.cuda.device(device), torch.cuda.stream(stream):
                        job(q)
                    stream.synchronize()
                else:
                    job(q)
            STATS["done"] += 1
        except (RuntimeError, ValueError, TypeError, IndexError) as e:  # a warm-up that fails only costs its call later
            STATS["failed"] += 1
            if len(STATS["errors"]) < 10:
                STATS["errors"].append(f"{type(e).__name__}: {e}"[:200])
        finally:
            with _cond:
                _busy -= 1
                _cond.notify_all()


def drain() -> None:
    """Wait until every queued warm-up has run (tests, benchmarks)."""
    with _cond:
        while _queue or _busy:
            _cond.wait(timeout=0.1)


@contextlib.contextmanager
def exclusive():
    """No warm-up runs while the block does (a CUDA graph's capture)."""
    with _exclusive:
        yield


__all__ = ["note", "drain", "exclusive", "buckets_around", "ENABLED", "MAX_BYTES", "STATS"]
