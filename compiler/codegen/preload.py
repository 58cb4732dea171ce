"""Loading the binaries that build workers finished, in a background thread, before a launch needs them.

A kernel variant built by a worker (:mod:`.build_pool`) lands in Triton's on-disk
cache; the parent's first launch of it still loads it: Triton hashes the
kernel's source and dependencies, reads the cache entry and makes the kernel
object, about 2 ms a variant (HF Llama's 16 kernels, compile-only, this
machine: median 1.9 ms).  A call at a new size meets a new class for many of
its kernels at once, so that is 100-200 ms of a real model's first call there,
about the half of session 22's first-call stall that waiting for builds did
not explain.

:func:`load_when_built` hands each build's future to one daemon thread, which
loads the variant (Triton's warm-up, with the arguments the worker built it
with) as soon as the build finishes, in the order builds finish: the first
call's classes, then the ones that stand in for every size
(:mod:`.stand_ins`), then the rest.  The thread's work is the work the
launches would do; it runs while the main thread waits (for the GPU, for a
build, for the next request).  A build that failed is not loaded (its launch
compiles it, with Triton's error if it fails there too); a load that fails is
recorded in :data:`PRELOADS` and left to the launch.  ``SYMSHAPE_PRELOAD=0``
turns it off.  ``SYMSHAPE_PRELOAD_REST=r`` makes the thread sleep ``r`` times each load's
length after it: a load holds the GIL, and a main thread that gives the GIL up at every torch
call waits for it (``bench/preload_contention.py``), so a rest lowers the thread's share of the
GIL while steps run, at the price of loading later (an A/B switch: default 0).

Example (no build in flight here: nothing to load)::

    >>> drain(timeout=1.0)
    True
"""
from __future__ import annotations

import contextlib
import os
import queue
import threading
import time

#: Variants loaded ahead, seconds spent loading, and load errors (newest last).
PRELOADS: dict = {"n": 0, "s": 0.0, "errors": []}

_QUEUE: "queue.Queue" = queue.Queue()


def _load_errors() -> tuple:
    errors = [OSError, RuntimeError, ImportError, ValueError, TypeError, AttributeError, KeyError, IndexError,
              AssertionError]
    try:
        from triton.compiler.errors import TritonError
        errors.append(TritonError)
    except ImportError:
        pass
    return tuple(errors)



_THREAD: list = []
_LOCK = threading.Lock()


def enabled() -> bool:
    """Whether finished builds are loaded ahead (``SYMSHAPE_PRELOAD``, default on)."""
    return os.environ.get("SYMSHAPE_PRELOAD", "1") != "0"


def load_when_built(launcher, key, futs, device=None) -> None:
    """Load variant ``key`` of ``launcher`` (``launcher.warm_jobs([key])``) in the loader thread
    once all of ``futs`` (its builds in workers: a split tiled variant has two) have finished
    without an error; ``device``: the CUDA device index the launches run on (the thread's
    current device is set to it)."""
    if not enabled() or not futs:
        return
    with _LOCK:
        if not _THREAD or _THREAD[0][1] != os.getpid():  # none yet, or the parent's (a forked child has none)
            t = threading.Thread(target=_loop, daemon=True, name="symshape-preload")
            t.start()
            _THREAD[:] = [(t, os.getpid())]
    left = [len(futs)]

    def done(_):
        with _LOCK:
            left[0] -= 1
            last = left[0] == 0
        if last:
            _QUEUE.put((launcher, key, futs, device))
    for fut in futs:
        fut.add_done_callback(done)


def drain(timeout: float = 60.0) -> bool:
    """Wait until every finished build handed over so far is loaded (tests, benches); whether it
    finished within ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while _QUEUE.unfinished_tasks:
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


def queued() -> int:
    """How many finished builds wait for (or are in) the loader thread's load now.

    >>> queued() >= 0
    True
    """
    return _QUEUE.unfinished_tasks


def _rest() -> float:
    """The loader's rest after a load, in multiples of the load's length (``SYMSHAPE_PRELOAD_REST``)."""
    try:
        return max(0.0, float(os.environ.get("SYMSHAPE_PRELOAD_REST", "0")))
    except ValueError:
        return 0.0


def _loop() -> None:
    # What a load may raise (Triton's errors, a cache entry gone, a driver that refuses): recorded.
    load_errors = _load_errors()
    while True:
        launcher, key, futs, device = _QUEUE.get()
        try:
            if all(fut.exception() is None for fut in futs):
                t0 = time.perf_counter()
                _load(launcher, key, device)
                took = time.perf_counter() - t0
                PRELOADS["s"] += took
                PRELOADS["n"] += 1
                rest = _rest()
                if rest:
                    time.sleep(rest * took)
        # A load ahead only saves the launch its own load: a failure is the launch's to meet again.
        except load_errors as e:
            PRELOADS["errors"].append(f"{type(e).__name__}: {e}"[:300])
        finally:
            _QUEUE.task_done()


def _load(launcher, key, device) -> None:
    import torch
    with torch.cuda.device(device) if device is not None else contextlib.nullcontext():
        for job in launcher.warm_jobs([key]):
            job()


__all__ = ["PRELOADS", "drain", "enabled", "load_when_built", "queued"]
