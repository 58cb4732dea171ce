"""Start ``symshape serve`` in a child process on a free loopback port, for scripts and tests.

:func:`running_server` starts the command, reads the address it prints,
waits until ``/api/health`` answers, and stops the server on exit; the soak
benchmark and the server's tests share it.  :func:`request` sends one JSON
request and returns the status, the decoded answer and the seconds it took.

Example (not run here: starting a server takes seconds)::

    with running_server(root=".", workers=2) as url:
        status, answer, seconds = request(url, "GET", "/api/health")
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Iterator, Optional

#: The folder that holds the ``cli`` package: the child imports symshape from here.
SOURCE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class ServerStartError(RuntimeError):
    """The server printed no address, or did not answer ``/api/health`` in time."""


@contextlib.contextmanager
def running_server(root: str, *, timeout: float = 120.0, workers: int = 2, memory_mb: int = 1024,
                   token: Optional[str] = None, startup_s: float = 300.0) -> Iterator[str]:
    """Run ``symshape serve --port 0 --root ROOT ...`` and yield its URL (``http://127.0.0.1:PORT``).

    ``timeout``, ``workers``, ``memory_mb`` and ``token`` are the command's
    options.  Raises :class:`ServerStartError` (with the server's stderr)
    when it does not come up within ``startup_s`` seconds.
    """
    env = dict(os.environ, PYTHONPATH=SOURCE_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "cli.main", "serve", "--host", "127.0.0.1", "--port", "0", "--root", root,
           "--timeout", str(timeout), "--workers", str(workers), "--memory-mb", str(memory_mb)]
    if token:
        cmd += ["--token", token]
    # stderr to a file, not a pipe: a long run would fill a pipe nobody reads and stall the server.
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, cwd=SOURCE_ROOT, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            url = _wait_until_up(proc, err, token, startup_s)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_until_up(proc, err, token, startup_s: float) -> str:
    t0 = time.monotonic()
    line = proc.stdout.readline()
    m = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
    if not m:
        proc.wait(30)
        err.seek(0)
        raise ServerStartError(f"symshape serve printed no address: {line!r}; stderr: {err.read()[-2000:]}")
    url = f"http://127.0.0.1:{m.group(1)}"
    while time.monotonic() - t0 < startup_s:
        try:
            status, _, _ = request(url, "GET", "/api/health", token=token, timeout=5)
            if status == 200:
                return url
        except OSError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    err.seek(0)
    raise ServerStartError(f"symshape serve at {url} did not answer /api/health within {startup_s:g} s; "
                           f"stderr: {err.read()[-2000:]}")


def request(url: str, method: str, path: str, body=None, *, token: Optional[str] = None,
            timeout: float = 120.0) -> tuple:
    """``(status, answer, seconds)`` for one request; ``answer`` is None when it is not JSON.

    HTTP error statuses are answers too (the API explains them in JSON);
    network failures raise ``OSError``.
    """
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method, headers={"content-type": "application/json"})
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    seconds = time.perf_counter() - t0
    try:
        return status, json.loads(raw), seconds
    except ValueError:
        return status, None, seconds
