"""Worker processes that run the user's programs, so that the server survives them.

A program may raise, loop forever, exhaust memory, call ``sys.exit`` or
``os._exit``, or crash the interpreter.  The server never imports it:
each request goes to a worker process (forked from a *forkserver* that has
torch and symshape imported, so a fresh worker starts in well under a
second) over a pipe.  The worker has an address-space limit; the server
waits at most ``timeout`` seconds, then kills the worker and starts a new
one.  Whatever happened is answered as a :class:`WorkerError` with a kind
(``timeout``, ``exited``, ``memory``, ``program_error``, ...).

Example::

    >>> pool = WorkerPool(size=1, timeout=30, memory_mb=4096)
    >>> pool.call("trace", {"program": "/nonexistent.py:f", "inputs": ["x: f32[N]"]})
    Traceback (most recent call last):
    ...
    cli.serve.workers.WorkerError: /nonexistent.py:f: no such file under /
    >>> pool.close()
"""
from __future__ import annotations

import enum
import multiprocessing as mp
import os
import pickle
import queue
import threading
import traceback
from dataclasses import dataclass
from typing import Optional

PRELOAD = ["torch", "sympy", "z3", "shapes", "guards", "validation", "cli.verify", "cli.serve.tasks",
           "cli.serve.warmup"]


class ErrorKind(str, enum.Enum):
    """Why a worker could not answer (the API's error ``kind``)."""

    PROGRAM_EXIT = "program_exit"
    MEMORY = "memory"
    BAD_REQUEST = "bad_request"
    PROGRAM_ERROR = "program_error"
    INTERNAL = "internal"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Reply:
    """What a worker sends back for one task: ``result`` when ``error`` is None."""

    result: object = None
    error: Optional[ErrorKind] = None
    message: str = ""


class WorkerError(Exception):
    """A request the worker could not answer; ``kind`` says why, ``status`` is the HTTP status."""

    def __init__(self, kind: str, message: str, status: int = 422, detail=None):
        super().__init__(message)
        self.kind, self.message, self.status, self.detail = kind, message, status, detail


def _vm_bytes() -> int:
    try:
        with open("/proc/self/status") as f:
            for ln in f:
                if ln.startswith("VmSize:"):
                    return int(ln.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _worker_main(conn, memory_mb: int):
    """The worker loop: receive (kind, query), answer with a :class:`Reply`."""
    import resource
    import signal
    import sys
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server's Ctrl-C is the server's to handle
    os.dup2(2, 1)  # a program's prints must not reach the pipe or the server's stdout
    if memory_mb:
        # Limit growth beyond what the preloaded libraries already map.
        limit = _vm_bytes() + memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    from cli.loader import CliError
    from shapes.errors import SymshapeError

    from .tasks import UserError, run_task
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        kind, q = msg
        try:
            conn.send(Reply(result=run_task(kind, q)))
            continue
        except SystemExit as e:
            reply = Reply(error=ErrorKind.PROGRAM_EXIT, message=f"the program called sys.exit({e.code!r})")
        except MemoryError:
            reply = Reply(error=ErrorKind.MEMORY,
                          message=f"the program ran out of memory (limit {memory_mb} MiB per worker)")
        except (UserError, CliError) as e:
            reply = Reply(error=ErrorKind.BAD_REQUEST, message=" ".join(str(e).split()))
        except SymshapeError as e:
            reply = Reply(error=ErrorKind.PROGRAM_ERROR, message=" ".join(str(e).split()))
        except RecursionError as e:
            reply = Reply(error=ErrorKind.PROGRAM_ERROR, message=f"RecursionError: {e}")
        except BaseException as e:  # the worker loop's boundary: report anything, keep serving
            if isinstance(e, Exception):  # symshape itself failed: say so, with where
                tb = traceback.extract_tb(e.__traceback__)[-1]
                reply = Reply(error=ErrorKind.INTERNAL, message=f"symshape failed: {type(e).__name__}: {e} "
                              f"({os.path.basename(tb.filename)}:{tb.lineno})")
            else:  # KeyboardInterrupt or stranger, raised by the program
                reply = Reply(error=ErrorKind.PROGRAM_ERROR, message=f"{type(e).__name__}: {e}")
        try:
            conn.send(reply)
        except (OSError, EOFError, pickle.PicklingError, TypeError):  # the server is gone, or the reply
            sys.exit(3)


class _Worker:
    def __init__(self, ctx, memory_mb):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, memory_mb), daemon=True)
        self.proc.start()
        child.close()
        self.requests = 0

    def kill(self):
        try:
            self.proc.kill()
            self.proc.join(5)
        except (OSError, ValueError):  # already gone (or closed): nothing to kill
            pass
        try:
            self.conn.close()
        except OSError:  # already closed
            pass


class WorkerPool:
    """``size`` workers; :meth:`call` sends a task to an idle one and waits at most ``timeout`` s."""

    def __init__(self, size: int = 2, timeout: float = 60.0, memory_mb: int = 4096, queue_timeout: float = None):
        self.ctx = mp.get_context("forkserver")
        self.ctx.set_forkserver_preload(PRELOAD)
        self.timeout = timeout
        self.memory_mb = memory_mb
        self.queue_timeout = queue_timeout if queue_timeout is not None else max(60.0, 4 * timeout)
        self.size = size
        self.idle: "queue.Queue[_Worker]" = queue.Queue()
        self.lock = threading.Lock()
        self.stats = {"requests": 0, "restarts": 0, "timeouts": 0, "exits": 0}
        self.closed = False
        for _ in range(size):
            self.idle.put(_Worker(self.ctx, memory_mb))

    def call(self, kind: str, q: dict, timeout: float = None) -> dict:
        if self.closed:
            raise WorkerError("unavailable", "the server is shutting down", 503)
        timeout = self.timeout if timeout is None else min(timeout, self.timeout)
        try:
            w = self.idle.get(timeout=self.queue_timeout)
        except queue.Empty:
            raise WorkerError("busy", f"all {self.size} workers stayed busy for {self.queue_timeout:g} s; "
                              f"try again later", 503) from None
        with self.lock:
            self.stats["requests"] += 1
        replace = False
        try:
            try:
                w.conn.send((kind, q))
            except (OSError, EOFError, BrokenPipeError):
                replace = True
                raise WorkerError("exited", "the worker process had exited; retry the request", 503) from None
            if not w.conn.poll(timeout):
                replace = True
                with self.lock:
                    self.stats["timeouts"] += 1
                raise WorkerError("timeout", f"the program did not finish within {timeout:g} s (the worker "
                                  f"was stopped); it may loop forever, or raise --timeout", 504)
            try:
                reply = w.conn.recv()
            except (EOFError, OSError):
                replace = True
                w.proc.join(5)
                code = w.proc.exitcode
                with self.lock:
                    self.stats["exits"] += 1
                why = (f"was killed by signal {-code}" if code is not None and code < 0
                       else f"exited with status {code}")
                raise WorkerError("exited", f"the worker running the program {why} (the program ended the "
                                  f"interpreter, e.g. os._exit, or crashed it)", 422) from None
            if reply.error is None:
                return reply.result
            status = {ErrorKind.BAD_REQUEST: 400, ErrorKind.INTERNAL: 500}.get(reply.error, 422)
            raise WorkerError(reply.error.value, reply.message, status)
        finally:
            if replace:
                w.kill()
                with self.lock:
                    self.stats["restarts"] += 1
                if not self.closed:
                    w = _Worker(self.ctx, self.memory_mb)
            if not self.closed:
                self.idle.put(w)
            else:
                w.kill()

    def close(self):
        self.closed = True
        while True:
            try:
                self.idle.get_nowait().kill()
            except queue.Empty:
                break
