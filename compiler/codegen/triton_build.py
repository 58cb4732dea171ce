"""Building Triton kernel variants ahead of their launches, so that only what a call needs blocks it.

Every size class a kernel can meet (:mod:`.triton_classes`) is built when a
program compiles.  Where it can, :func:`warm` hands the builds to worker
processes (:mod:`.build_pool`): the classes of the sizes being compiled for
first, then every other one, in the background.  A launch of a variant
whose build is still running waits for that build only
(:func:`wait_built`), then loads the binary from Triton's on-disk cache; a
build that failed leaves the launch to compile the variant itself, with
Triton's own error if it fails there too.

Where processes can't be used (``SYMSHAPE_BUILD_PROCESSES=0``, a non-CUDA
Triton backend, workers that could not start), the older path runs: every
variant compiled in threads before the first call (Triton's asynchronous
compile), its reason kept in ``MODE["reason"]``.  Under the interpreter or
without a GPU nothing is built ahead: a launch builds what it needs.

Example (no GPU here: nothing to build ahead)::

    >>> warm([]), MODE["mode"] in (None, "processes", "threads")
    (0, True)
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

from . import build_pool

#: How kernels are built ahead in this process: ``mode`` ("processes" or "threads") and, for
#: threads, why processes are not used.
MODE: dict = {"mode": None, "reason": None}

#: Why builds ahead failed (Triton's message), newest last; their kernels compile at launch instead.
WARM_ERRORS: list = []

#: Seconds calls spent waiting for builds still running in workers, and how many waits.
WAITS: dict = {"s": 0.0, "n": 0}

_GAVE_UP: list = []


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _enabled() -> bool:
    import torch
    return (not _interpreting() and os.environ.get("SYMSHAPE_WARM_CLASSES", "1") != "0"
            and torch.cuda.is_available())


def process_pool():
    """``(pool, None)`` where builds run in worker processes, else ``(None, why not)``."""
    if os.environ.get("SYMSHAPE_BUILD_PROCESSES", "1") == "0":
        return None, "SYMSHAPE_BUILD_PROCESSES=0"
    if _GAVE_UP:
        return None, _GAVE_UP[0]
    try:
        from triton.runtime.driver import driver
        if not hasattr(driver, "set_active"):
            return None, "this Triton has no driver to compile without a GPU"
        t = driver.active.get_current_target()
        if t.backend != "cuda":
            return None, f"Triton backend {t.backend!r}: workers compile for CUDA only"
        pool = build_pool.pool_for((t.backend, t.arch, t.warp_size))
    except (OSError, RuntimeError, AttributeError, ImportError, ValueError) as e:  # the thread path builds instead
        _GAVE_UP.append(f"worker processes failed to start: {type(e).__name__}: {e}"[:300])
        return None, _GAVE_UP[0]
    return pool, None


def prestart() -> None:
    """Start the build workers now (they take a second or two to import Triton), where
    :func:`warm` will use them."""
    if _enabled():
        process_pool()


def warm(launchers, current=None) -> int:
    """Build every reachable class of every launcher (:class:`~.triton.SizeClassLauncher`):
    in worker processes, the classes at sizes ``current`` (the values of the launchers'
    size symbols; None: unknown) first and the others in the background; else in threads,
    all before returning.  Returns the number of variants built or being built."""
    if not launchers or not _enabled():
        return 0
    pool, why = process_pool()
    if pool is None:
        MODE.update(mode="threads", reason=why)
        return warm_threads(launchers)
    MODE.update(mode="processes", reason=None)
    return submit_builds(pool, launchers, current)


def submit_builds(pool, launchers, current=None) -> int:
    """Hand every class of every launcher to ``pool`` (a :class:`~.build_pool.BuildPool`), those
    at sizes ``current`` ahead of every job waiting, in launch order; each launcher's ``pending``
    keeps the builds, for :func:`wait_built`.  Returns the number of variants submitted."""
    now, later = [], []
    for launcher in launchers:
        first = None
        if current is not None:
            try:
                first = launcher.class_at(current)
            except (TypeError, ValueError, ZeroDivisionError, OverflowError):  # no priority, still built
                first = None
        for key, payload in launcher.build_payloads():
            (now if key == first else later).append((launcher, key, repr(payload), payload))
    for launcher, key, job, payload in reversed(now):  # urgent jobs go first: last submitted, first run
        launcher.pending[key] = (pool, job, pool.submit(job, payload, urgent=True))
    for launcher, key, job, payload in later:
        launcher.pending[key] = (pool, job, pool.submit(job, payload))
    return len(now) + len(later)


def wait_built(pending: dict, key) -> None:
    """Wait for the build of variant ``key`` if one is running (and forget it); a failed build
    is recorded in :data:`WARM_ERRORS`, and the launch compiles the variant itself."""
    got = pending.pop(key, None)
    if got is None:
        return
    pool, job_key, fut = got
    if fut.done() and fut.exception() is None:
        return
    t0 = time.perf_counter()
    err = pool.wait(job_key, fut)
    WAITS["s"] += time.perf_counter() - t0
    WAITS["n"] += 1
    if err is not None:
        WARM_ERRORS.append(err[:500])


def warm_threads(launchers, workers: int = 0) -> int:
    """Compile every reachable class of every launcher (``launcher.warm_jobs()``) in parallel
    threads (Triton's asynchronous compile where it has one, else one warm-up per thread),
    before returning; the number of variants built."""
    jobs = [j for launcher in launchers for j in launcher.warm_jobs()]
    if not jobs:
        return 0
    workers = workers or min(32, max(4, os.cpu_count() or 4))
    try:
        from triton.runtime._async_compile import AsyncCompileMode
    except ImportError:  # an older Triton: compile in threads, each one warm-up
        AsyncCompileMode = None
    try:
        with ThreadPoolExecutor(workers) as ex:
            if AsyncCompileMode is not None:
                with AsyncCompileMode(ex):
                    for job in jobs:
                        job()
            else:
                list(ex.map(lambda job: job(), jobs))
    except Exception as e:  # noqa: BLE001 - warming is only ahead of time: a launch still compiles what it needs
        WARM_ERRORS.append(f"{type(e).__name__}: {e}"[:500])
        return 0
    return len(jobs)


__all__ = ["MODE", "WAITS", "WARM_ERRORS", "prestart", "process_pool", "submit_builds", "wait_built", "warm",
           "warm_threads"]
