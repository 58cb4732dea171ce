"""A status line on stderr while a command works.

On a terminal the line is redrawn in place (and erased at the end); when
stderr is piped or redirected nothing is shown unless asked for
(``--progress``), and then each phase is one plain line.

>>> import io
>>> out = io.StringIO()
>>> with Status(out, enabled=True) as s:
...     s.phase("tracing f")
>>> out.getvalue()
'tracing f\\n'
"""
from __future__ import annotations

import sys
import threading
import time


def wanted(args, stream=None) -> bool:
    """Whether to show progress: ``--progress`` forces it, ``-q`` stops it, else only on a terminal.

    >>> import argparse, io
    >>> wanted(argparse.Namespace(quiet=False, progress=False), io.StringIO())  # piped: quiet
    False
    >>> wanted(argparse.Namespace(quiet=False, progress=True), io.StringIO())
    True
    """
    stream = stream if stream is not None else sys.stderr
    if getattr(args, "quiet", False):
        return False
    if getattr(args, "progress", False):
        return True
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class Status:
    """The current phase (``"tracing model.py:GPT2"``), ops recorded so far, and elapsed time."""

    TICK = 0.1  # seconds between redraws on a terminal

    def __init__(self, stream=None, enabled: bool = False):
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        isatty = getattr(self.stream, "isatty", None)
        self.tty = bool(isatty and isatty())
        self.text = ""
        self.count = 0
        self.t0 = time.monotonic()
        self.width = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = None

    def __enter__(self):
        if self.enabled and self.tty:
            self._thread = threading.Thread(target=self._tick, name="symshape-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self.close()

    def phase(self, text: str) -> None:
        """Start a phase; on a pipe (with ``--progress``) it is printed as one line."""
        self.text, self.count, self.t0 = text, 0, time.monotonic()
        if not self.enabled:
            return
        if self.tty:
            self._draw()
        else:
            self.stream.write(text + "\n")
            self.stream.flush()

    def print(self, text: str) -> None:
        """A message line on the stream, shown whether or not progress is (the status line is redrawn below)."""
        with self._lock:
            if self.enabled and self.tty and self.width:
                self.stream.write("\r" + " " * self.width + "\r")
                self.width = 0
            self.stream.write(text + "\n")
            self.stream.flush()

    def ops(self, n: int) -> None:
        """The tracer's callback: ``n`` ATen ops recorded so far (drawn by the ticker)."""
        self.count = n

    def _line(self) -> str:
        ops = f", {self.count} ops" if self.count else ""
        return f"{self.text}{ops}  [{time.monotonic() - self.t0:.1f} s]"

    def _draw(self) -> None:
        with self._lock:
            text = self._line()
            self.stream.write("\r" + text.ljust(self.width))
            self.width = max(self.width, len(text))
            self.stream.flush()

    def _tick(self) -> None:
        while not self._stop.wait(self.TICK):
            if self.text:
                self._draw()

    def close(self) -> None:
        """Stop redrawing and erase the line (the command's output follows on a clean line)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.enabled and self.tty and self.width:
            with self._lock:
                self.stream.write("\r" + " " * self.width + "\r")
                self.stream.flush()
                self.width = 0
