"""What stops a trace: symshape's own limits, and time.

:func:`engine_limitation` is the one place that decides whether an
exception raised during a trace is symshape's limitation (an outcome of its
own, "unsupported by symshape") rather than the program's error.

:func:`time_limit` interrupts a trace that runs past its time (a program
that loops forever, or one trace that would overrun the whole budget).  In
the main thread it uses a ``SIGALRM`` timer; elsewhere a profile hook checks
the clock on every Python call.  Either way the trace ends with
:class:`TraceTimeout`, a ``BaseException`` so that neither the program's nor
torch's ``except Exception`` can swallow it.

Example::

    >>> from validation.dinfer.limits import TraceTimeout, time_limit
    >>> def spin():
    ...     while True:
    ...         sum(range(10))
    >>> try:
    ...     with time_limit(0.2):
    ...         spin()
    ... except TraceTimeout as e:
    ...     print("stopped after", e.seconds, "s")
    stopped after 0.2 s
"""
from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time

from shapes.data_dependent_error import DataDependentError
from shapes.errors import SymshapeError


def engine_limitation(exc: BaseException) -> bool:
    """True if ``exc`` (the exception inside a :class:`~shapes.errors.TraceError`) is symshape's
    limitation, not the program's error: one of symshape's own errors that the program let through.
    The tracer already raises torch's errors about symbolic values as
    :class:`~shapes.errors.UnsupportedOpError` (see :mod:`shapes.failures`).

    Example::

        >>> from shapes.errors import UnsupportedOpError
        >>> engine_limitation(UnsupportedOpError("no model of aten.foo"))
        True
        >>> engine_limitation(RuntimeError("shape '[-1, 4]' is invalid for input of size 6"))
        False
    """
    return isinstance(exc, (SymshapeError, DataDependentError))  # TracerLimitation is a SymshapeError


class TraceTimeout(BaseException):
    """A trace ran past its time limit (``seconds``)."""

    def __init__(self, seconds: float):
        super().__init__(f"the trace ran longer than {seconds:g} s")
        self.seconds = seconds


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise :class:`TraceTimeout` inside the block once ``seconds`` have passed."""
    if seconds is None or seconds == float("inf"):
        yield
        return
    seconds = max(0.001, float(seconds))
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
        def on_alarm(signum, frame):
            raise TraceTimeout(round(seconds, 3))

        old = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        return
    end = time.monotonic() + seconds
    old_profile = sys.getprofile()

    def check(frame, event, arg):
        if event == "call" and time.monotonic() > end:
            sys.setprofile(old_profile)
            raise TraceTimeout(round(seconds, 3))

    sys.setprofile(check)
    try:
        yield
    finally:
        sys.setprofile(old_profile)
