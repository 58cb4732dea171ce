"""Worker processes that compile Triton kernels while the program runs.

Triton's compiler front end is Python: threads compiling kernels share one
GIL (850 variants took 54 s in 16 threads on the 16-core H100 host).  A pool
of spawned interpreters (:mod:`.build_worker`, started by path as fresh
processes, never forked from a process that initialised CUDA, and never
re-running the user's ``__main__``) compiles them in parallel into Triton's
on-disk cache; the parent's launch of a variant then finds its binary there
(Triton computes the same cache key in both: same source file, module name,
arguments, options, target and environment).

Jobs run in submission order except that :meth:`BuildPool.submit` with
``urgent`` (or :meth:`BuildPool.wait` on a job not started) puts a job
first: the variants a call needs now are built before the rest.  A job is
submitted once per key (a variant is never built twice); its future holds
the error a build met (the parent's launch then compiles it itself, with
Triton's own message).  A worker that dies fails its job; the pool's
processes are ended at interpreter exit (Triton writes each cache entry
atomically, so a build cut short leaves nothing half-written), and a forked
child never waits on its parent's pool.

Example (compiling for an H100 needs no GPU: Triton's ptxas is bundled)::

    >>> pool = BuildPool(("cuda", 90, 32), workers=1)  # doctest: +SKIP
    >>> fut = pool.submit(("k", 1), ("/tmp/tk.py", "symshape_tk", "k", [("dtype", "float32"), 3],
    ...                              {"grid": (1,), "BLOCK": 1024, "num_warps": 4}))  # doctest: +SKIP
    >>> fut.result() is None  # doctest: +SKIP
    True
"""
from __future__ import annotations

import atexit
import os
import pickle
import subprocess
import sys
import threading
import time
from collections import deque
from concurrent.futures import Future

from shapes.enums import TextEnum

from .cpp_build import build_jobs

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "build_worker.py")

#: How the pool fared: workers started, jobs done / failed, worker seconds, failures' messages.
STATS = {"workers": 0, "done": 0, "failed": 0, "worker_s": 0.0, "errors": []}


class JobState(TextEnum):
    """Where a build job is: waiting in the queue, running in a worker, or finished."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"


def default_workers() -> int:
    """Worker processes: ``$SYMSHAPE_BUILD_WORKERS``, else one per usable core (at most 32).

    >>> default_workers() >= 1
    True
    """
    return build_jobs(cap=32)


class _Worker:
    def __init__(self, pool, target):
        # CUDA hidden: a worker compiles for the target it is told, it never needs a GPU (and
        # sixteen CUDA contexts would cost GPU memory).
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
        env.pop("TRITON_INTERPRET", None)  # a worker compiles: never the interpreter's functions
        self.proc = subprocess.Popen([sys.executable, "-u", WORKER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        self.job = None
        self.ready = False
        pickle.dump(("init", tuple(target)), self.proc.stdin)
        self.proc.stdin.flush()
        self.thread = threading.Thread(target=pool._read, args=(self,), daemon=True,
                                       name=f"symshape-build-{self.proc.pid}")
        self.thread.start()

    def send(self, job) -> None:
        pickle.dump(job, self.proc.stdin)
        self.proc.stdin.flush()


def idle_seconds() -> float:
    """Seconds a pool with nothing to build keeps its workers: ``$SYMSHAPE_BUILD_IDLE_S``, else
    120 (0: until exit).  Sixteen idle workers hold about 2 GB of host memory (140 MB each);
    a program that compiles again later starts new ones (a second), as at its first graph.

    >>> idle_seconds() >= 0
    True
    """
    text = os.environ.get("SYMSHAPE_BUILD_IDLE_S", "120")
    try:
        return max(0.0, float(text))
    except ValueError:
        raise ValueError(f"SYMSHAPE_BUILD_IDLE_S={text!r} is not a number of seconds "
                         "(say 120; 0 keeps idle build workers until exit)") from None


class BuildPool:
    """``workers`` build processes compiling for ``target`` ``(backend, arch, warp_size)``, ended
    after ``idle_s`` seconds with nothing queued or running (default :func:`idle_seconds`)."""

    def __init__(self, target, workers: int = 0, idle_s: float | None = None):
        self.target = tuple(target)
        self.pid = os.getpid()
        #: The Triton cache the workers write to (their environment's, fixed at their start).
        self.cache_dir = os.environ.get("TRITON_CACHE_DIR")
        self._lock = threading.Lock()
        self._queue: deque = deque()
        self._jobs: dict = {}  # key -> [future, job tuple, state: JobState]
        self._by_id: dict = {}
        self._next = 0
        self.broken = None  # why the pool stopped (every worker gone, closed, idle), or None
        self.workers = [_Worker(self, self.target) for _ in range(workers or default_workers())]
        STATS["workers"] = len(self.workers)
        self.idle_s = idle_seconds() if idle_s is None else idle_s
        self._last = time.monotonic()  # the last submit or finished job
        if self.idle_s > 0:
            threading.Thread(target=self._reap_when_idle, daemon=True, name="symshape-build-reaper").start()

    def _reap_when_idle(self) -> None:
        while True:
            time.sleep(min(self.idle_s, 5.0) / 2)
            with self._lock:
                if self.broken is not None:
                    return
                busy = bool(self._queue) or any(w.job is not None for w in self.workers)
                if busy or time.monotonic() - self._last < self.idle_s:
                    continue
            self.close(why=f"idle for {self.idle_s:g} s: workers ended (a later compile starts new ones)")
            return

    # -- submitting and waiting -------------------------------------------------------
    def submit(self, key, payload, urgent: bool = False) -> Future:
        """Build ``payload`` ``(module path, module name, function name, args, kwargs)`` (once per
        ``key``); ``urgent`` puts it ahead of the jobs waiting."""
        with self._lock:
            got = self._jobs.get(key)
            if got is not None:
                if urgent:
                    self._promote(got)
                return got[0]
            fut: Future = Future()
            self._last = time.monotonic()
            if self.broken is not None:
                fut.set_exception(RuntimeError(f"build pool stopped: {self.broken}"))
                return fut
            self._next += 1
            entry = [fut, (self._next, *payload), JobState.QUEUED]
            self._jobs[key] = entry
            self._by_id[self._next] = entry
            (self._queue.appendleft if urgent else self._queue.append)(entry)
            self._dispatch()
            return fut

    def wait(self, key, fut: Future):
        """Wait for the job of ``key`` (first in line if it has not started); its error or None.
        In a forked child (the pool's pipes are the parent's) it returns at once."""
        if os.getpid() != self.pid:
            return "forked: the parent's build pool serves the parent"
        if not fut.done():
            with self._lock:
                entry = self._jobs.get(key)
                if entry is not None:
                    self._promote(entry)
        exc = fut.exception()
        return None if exc is None else f"{type(exc).__name__}: {exc}"

    def promote(self, key) -> None:
        """Put the job of ``key`` first in line if no worker has started it (a call needs it next)."""
        with self._lock:
            entry = self._jobs.get(key)
            if entry is not None:
                self._promote(entry)
                self._dispatch()

    def take(self, key) -> bool:
        """Take back the job of ``key`` if no worker has started it (the caller builds it itself:
        faster than waiting behind the queue); its future fails with "taken"."""
        with self._lock:
            entry = self._jobs.get(key)
            if entry is None or entry[2] is not JobState.QUEUED:
                return False
            try:
                self._queue.remove(entry)
            except ValueError:
                return False
            entry[2] = JobState.DONE
            self._by_id.pop(entry[1][0], None)
            entry[0].set_exception(RuntimeError("taken back: built by the caller"))
            return True

    def drain(self) -> None:
        """Wait for every job submitted so far (benches: the wall time of a whole build)."""
        for entry in list(self._jobs.values()):
            entry[0].exception()

    def ready_workers(self) -> int:
        """Workers that have started (loaded Triton's compiler) and take jobs."""
        with self._lock:
            return sum(1 for w in self.workers if w.ready)

    def pending(self) -> int:
        """Jobs submitted and not finished."""
        return sum(1 for e in list(self._jobs.values()) if not e[0].done())

    # -- inside the lock ---------------------------------------------------------------
    def _promote(self, entry) -> None:
        if entry[2] is JobState.QUEUED and self._queue and self._queue[0] is not entry:
            try:
                self._queue.remove(entry)
            except ValueError:
                return
            self._queue.appendleft(entry)

    def _dispatch(self) -> None:
        for w in self.workers:
            if not self._queue:
                return
            if w.ready and w.job is None:
                entry = self._queue.popleft()
                entry[2] = JobState.RUNNING
                w.job = entry
                try:
                    w.send(entry[1])
                except (BrokenPipeError, OSError, ValueError):
                    pass  # its reader sees the end of the pipe and fails the job

    # -- one reader thread per worker --------------------------------------------------
    def _read(self, w: _Worker) -> None:
        out = w.proc.stdout
        try:
            while True:
                msg = pickle.load(out)
                with self._lock:
                    if msg[0] == "ready":
                        w.ready = True
                    else:
                        job_id, err, secs = msg
                        entry = self._by_id.pop(job_id, None)
                        w.job = None
                        self._last = time.monotonic()
                        if entry is not None:
                            entry[2] = JobState.DONE
                            STATS["worker_s"] += secs
                            if err is None:
                                STATS["done"] += 1
                                entry[0].set_result(None)
                            else:
                                STATS["failed"] += 1
                                STATS["errors"] = (STATS["errors"] + [err[:300]])[-5:]
                                entry[0].set_exception(RuntimeError(err))
                    self._dispatch()
        except (EOFError, OSError, pickle.UnpicklingError, ValueError):
            pass
        with self._lock:  # this worker is gone: its job fails, and all of them if it was the last
            self.workers = [x for x in self.workers if x is not w]
            lost = [w.job] if w.job is not None else []
            w.job = None
            if not self.workers:
                self.broken = self.broken or f"every build worker exited (the last with code {w.proc.poll()})"
                lost += list(self._queue)
                self._queue.clear()
            for entry in lost:
                entry[2] = JobState.DONE
                self._by_id.pop(entry[1][0], None)
                if not entry[0].done():
                    entry[0].set_exception(RuntimeError("the build worker exited before finishing"))
            self._dispatch()

    def close(self, why: str = "closed") -> None:
        """End the workers now (jobs not finished fail; their variants compile at launch)."""
        with self._lock:
            workers, self.workers = self.workers, []
            self.broken = self.broken or why
            queued = list(self._queue)
            self._queue.clear()
            for entry in queued:  # a waiter on one must not wait forever
                entry[2] = JobState.DONE
                self._by_id.pop(entry[1][0], None)
                if not entry[0].done():
                    entry[0].set_exception(RuntimeError(f"build pool stopped: {self.broken}"))
        for w in workers:
            for f in (w.proc.stdin,):
                try:
                    f.close()
                except OSError:
                    pass
            if w.proc.poll() is None:
                w.proc.kill()  # a compile cut short writes nothing: Triton's cache entries are atomic
        deadline = time.monotonic() + 2
        for w in workers:
            try:
                w.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass


_POOL: "BuildPool | None" = None
_POOL_LOCK = threading.Lock()


def pool_for(target) -> BuildPool:
    """This process's pool compiling for ``target`` (started on first use, ended at exit).

    A pool whose workers write another Triton cache than ``$TRITON_CACHE_DIR`` says now is
    replaced: their builds would land where this process's launches never look, and each launch
    would compile its kernel and host launcher itself."""
    global _POOL
    with _POOL_LOCK:
        old = _POOL
        if (old is None or old.pid != os.getpid() or old.target != tuple(target) or old.broken
                or old.cache_dir != os.environ.get("TRITON_CACHE_DIR")):
            if old is not None and old.pid == os.getpid() and not old.broken:
                old.close("replaced: $TRITON_CACHE_DIR or the target changed")
            _POOL = BuildPool(target)
        return _POOL


def current_pool() -> "BuildPool | None":
    """The pool started in this process, if any."""
    return _POOL if _POOL is not None and _POOL.pid == os.getpid() else None


@atexit.register
def _close_at_exit():
    pool = current_pool()
    if pool is not None:
        pool.close()


__all__ = ["BuildPool", "STATS", "current_pool", "default_workers", "idle_seconds", "pool_for"]
