"""Building Triton kernel variants ahead of their launches, so that only what a call needs blocks it.

Every size class a kernel can meet (:mod:`.triton_classes`) is built when a
program compiles, in worker processes (:mod:`.build_pool`; started when the
program asks for the backend, :mod:`compiler.dynamo_entry`, or at its first
graph): where at least half of them are ready, :func:`warm` hands them every
class, this call's first, and returns at once (a training step's backward
graph is traced and lowered while its forward's kernels build); otherwise
the classes of the sizes being compiled for are built in this process's
threads before returning and the rest handed to the workers.  A launch of a
variant whose build is still running waits for that build only
(:func:`wait_built`), then loads the binary (and its host launcher, which
the worker built too) from Triton's on-disk cache; one no worker has started
yet is taken back and built by the launch; a build that failed leaves the
launch to compile the variant itself, with Triton's own error if it fails
there too.  Where another variant of the kernel is built and right at the
call's sizes, a launch runs that one instead of waiting (:mod:`.stand_ins`).
H100, bf16 training steps, compile seconds threads -> workers:
GPT-2 13.9 -> 10.6, BERT 15.6 -> 10.0, Llama 16.3 -> 13.1, ViT 32.9 -> 23.8
(bench/results/train_pairs_procs_h100_s20_2026-12-06.txt).

With ``SYMSHAPE_BUILD_PROCESSES=0`` (or a non-CUDA Triton backend, or
workers that could not start) the older path runs: every variant compiled in
threads before the first call (Triton's asynchronous compile), its reason
kept in ``MODE["reason"]``.  Under the interpreter or without a GPU nothing
is built ahead: a launch builds what it needs.

Example (no GPU here: nothing to build ahead)::

    >>> warm([]), MODE["mode"] in (None, "processes", "threads")
    (0, True)
"""
from __future__ import annotations

import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from . import build_pool, preload
from .stand_ins import general_keys

#: How kernels are built ahead in this process: ``mode`` ("processes" or "threads") and, for
#: threads, why processes are not used.
MODE: dict = {"mode": None, "reason": None}

#: Why builds ahead failed (Triton's message), newest last; their kernels compile at launch instead.
WARM_ERRORS: list = []

#: Seconds calls spent waiting for builds still running in workers, how many waits, how
#: many builds a launch took back from the queue (and compiled itself), and how many launch
#: plans ran a built variant while their own built (:mod:`.stand_ins`).
WAITS: dict = {"s": 0.0, "n": 0, "taken": 0, "stand_ins": 0}

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
        return None, "SYMSHAPE_BUILD_PROCESSES=0 (builds in threads asked for)"
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
    size symbols; None: unknown) first and the others in the background (all of them in the
    workers, returning at once, where at least half the workers are ready; else this call's
    classes here, in threads, first); else in threads, all before returning.  Returns the
    number of variants built or being built."""
    if not launchers or not _enabled():
        return 0
    pool, why = process_pool()
    if pool is None:
        MODE.update(mode="threads", reason=why)
        return warm_threads(launchers)
    MODE.update(mode="processes", reason=None)
    if pool.ready_workers() * 2 >= len(pool.workers) > 0:
        # Workers started ahead (the backend starts them at its first call, while dynamo and
        # AOTAutograd run) have their compiler loaded: every build goes to them, this call's
        # first, and compiling returns at once.  A training step's backward graph then traces
        # and lowers while its forward's kernels build; the first launch of a variant waits
        # for its build only.
        return submit_builds(pool, launchers, current)
    return build_split(pool, launchers, current)


def build_split(pool, launchers, current=None) -> int:
    """The classes at sizes ``current`` built here in threads, before returning; every other one
    handed to ``pool``'s workers (kept in each launcher's ``pending``).  Returns the number of
    variants built or being built."""
    # Tiled kernels (a workspace, a partials kernel) have no worker payload: all their classes here.
    local = [launcher for launcher in launchers if not getattr(launcher, "process_buildable", True)]
    launchers = [launcher for launcher in launchers if getattr(launcher, "process_buildable", True)]
    now, later = split_classes(launchers, current)
    # The rest first, so that the workers start on them while this process builds what the
    # current call needs in its own threads: its compiler is loaded already, a fresh worker's
    # first build pays seconds for that (measured on the H200: Llama's first call waited 5.1 s
    # for its variants from workers just started, against 4.9 s for every variant in threads).
    _submit(pool, later, urgent=False)
    by_launcher: dict = {}
    for launcher, key in now:
        by_launcher.setdefault(launcher, []).append(key)
    warm_threads(list(by_launcher), classes=by_launcher)
    n_local = warm_threads(local) if local else 0
    return len(now) + len(later) + n_local


def split_classes(launchers, current) -> tuple:
    """``(now, later)``: ``(launcher, (class, BLOCK))`` of the classes at sizes ``current`` (the
    values of the launchers' size symbols; None: unknown), and of every other class, those that
    stand in for any size (:func:`.stand_ins.general_keys`) first: a call at a new size then
    finds a built variant to launch while its own builds."""
    now, general, later = [], [], []
    for launcher in launchers:
        first = None
        if current is not None:
            try:
                first = launcher.class_at(current)
            except (TypeError, ValueError, ZeroDivisionError, OverflowError):  # no priority, still built
                first = None
        keys = launcher.classes()
        anywhere = set(general_keys(keys, launcher.tiled))
        for sc_block in keys:
            (now if sc_block == first else general if sc_block in anywhere else later).append((launcher, sc_block))
    return now, general + later


def _submit(pool, items, urgent: bool) -> None:
    """Hand ``(launcher, (class, BLOCK))`` items to ``pool``; urgent ones ahead of every job
    waiting, in the items' order.  Each launcher's ``pending`` keeps, per item, its builds (a
    split tiled variant has two: its kernel and its partials kernel)."""
    jobs = []
    for launcher, key in items:
        for _, payload in launcher.build_payloads([key]):
            jobs.append((launcher, key, repr(payload), payload))
    futs: dict = {}
    for launcher, key, job, payload in (reversed(jobs) if urgent else jobs):  # urgent: last in, first out
        fut = pool.submit(job, payload, urgent=urgent)
        launcher.pending.setdefault(key, []).append((pool, job, fut))
        futs.setdefault((id(launcher), key), (launcher, key, []))[2].append(fut)
    # Each variant loaded in the background once its builds finish (preload): not at its first launch.
    device = _cuda_device()
    for launcher, key, fs in futs.values():
        preload.load_when_built(launcher, key, fs, device)


def _cuda_device():
    """The current CUDA device's index where CUDA runs (launches happen there), else None."""
    import torch
    return torch.cuda.current_device() if torch.cuda.is_available() and torch.cuda.is_initialized() else None


def submit_builds(pool, launchers, current=None) -> int:
    """Hand every class of every launcher to ``pool`` (a :class:`~.build_pool.BuildPool`), those
    at sizes ``current`` ahead of every job waiting, in launch order; each launcher's ``pending``
    keeps the builds, for :func:`wait_built`.  Launchers no worker can build are left out
    (their launches compile them).  Returns the number of variants submitted."""
    launchers = [launcher for launcher in launchers if getattr(launcher, "process_buildable", True)]
    now, later = split_classes(launchers, current)
    _submit(pool, now, urgent=True)
    _submit(pool, later, urgent=False)
    return len(now) + len(later)


def wait_built(pending: dict, key) -> None:
    """Wait for the builds of variant ``key`` if any are running (and forget them); a failed build
    is recorded in :data:`WARM_ERRORS`, and the launch compiles the variant itself.  A build no
    worker has started yet is taken back: the launch compiles it here, not behind the queue."""
    got = pending.pop(key, None)
    if got is None:
        return
    for pool, job_key, fut in got:
        if fut.done() and fut.exception() is None:
            continue
        if not fut.done() and pool.take(job_key):
            WAITS["taken"] += 1
            continue
        t0 = time.perf_counter()
        err = pool.wait(job_key, fut)
        WAITS["s"] += time.perf_counter() - t0
        WAITS["n"] += 1
        if err is not None:
            WARM_ERRORS.append(err[:500])


def warm_threads(launchers, workers: int = 0, classes=None) -> int:
    """Compile every reachable class of every launcher (``launcher.warm_jobs()``; ``classes``:
    only ``classes[launcher]``) in parallel threads (Triton's asynchronous compile where it has
    one, else one warm-up per thread), before returning; the number of variants built."""
    jobs = [j for launcher in launchers
            for j in launcher.warm_jobs(None if classes is None else classes[launcher])]
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
                    built = [job() for job in jobs]
            else:
                built = list(ex.map(lambda job: job(), jobs))
            build_launchers(built, ex)
    except Exception as e:  # noqa: BLE001 - warming is only ahead of time: a launch still compiles what it needs
        WARM_ERRORS.append(f"{type(e).__name__}: {e}"[:500])
        return 0
    return len(jobs)


def _launcher_key(kernel):
    """What a compiled kernel's host launcher depends on (its arguments' types and constants),
    so that kernels of one signature build it once; the kernel itself where that is not known."""
    src = getattr(kernel, "src", None)
    sig, const = getattr(src, "signature", None), getattr(src, "constants", None)
    # The constants' names, not values: a BLOCK of 256 or 1024 is the same launcher.
    return (repr(sig), repr(sorted(map(str, const or ())))) if sig is not None else id(kernel)


def build_launchers(kernels, executor) -> int:
    """Build the host launchers of compiled ``kernels`` (Triton's warm-up results) on
    ``executor``'s threads, one per distinct signature.

    Triton compiles a small C module per kernel signature, with the host's C compiler, the
    first time a kernel of that signature is launched (0.3-0.4 s each on the H100 host), in the
    launching thread, one after the other: 22 of them made 7.9 s of a GPT-2 training step's
    first run.  Built here, in parallel (the compiler is a subprocess: no GIL), they land in
    Triton's on-disk cache, and the first launch loads them.  Returns the number built; a
    failure is recorded in :data:`WARM_ERRORS` (the launch builds it itself)."""
    try:
        from triton.runtime.driver import driver
        make = getattr(driver.active, "launcher_cls", None)
    except (ImportError, RuntimeError) as e:
        WARM_ERRORS.append(f"no launcher to build ahead: {type(e).__name__}: {e}"[:500])
        return 0
    if make is None:  # a compile-only driver (builds without a GPU): nothing launches here
        return 0
    todo: dict = {}
    for k in kernels:
        k = k.result(ignore_errors=True) if hasattr(type(k), "result") else k
        if k is not None and getattr(k, "metadata", None) is not None:
            todo.setdefault(_launcher_key(k), k)

    def build(k):
        try:
            make(k.src, k.metadata)
        # Ahead of time only: the first launch builds it again (or raises Triton's error there).
        except (OSError, RuntimeError, ImportError, ValueError, TypeError, AttributeError, KeyError,
                subprocess.SubprocessError) as e:
            WARM_ERRORS.append(f"launcher of {getattr(k, 'name', '?')}: {type(e).__name__}: {e}"[:500])
    list(executor.map(build, todo.values()))
    return len(todo)


__all__ = ["MODE", "WAITS", "WARM_ERRORS", "build_launchers", "build_split", "prestart", "process_pool", "split_classes", "submit_builds",
           "wait_built", "warm", "warm_threads"]
