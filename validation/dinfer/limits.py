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


#: After the first alarm, how often it fires again: torch's C++ calls back
#: into Python while it parses arguments and clears whatever those callbacks
#: raise, so one alarm can be swallowed; and an alarm that lands in an
#: import waits for the next one.
REFIRE_SECONDS = 0.05


def _importing(frame) -> bool:
    """True while ``frame`` runs inside an import: interrupting one would leave a
    half-initialised module in ``sys.modules`` that breaks every later trace
    (torch imports hundreds of modules lazily during the first trace)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise :class:`TraceTimeout` inside the block once ``seconds`` have passed.

    Once the time is up, the block never ends with anything but
    :class:`TraceTimeout`: an alarm may land inside torch's C++ argument
    parsing, which swallows it and raises an error of its own (a
    ``TypeError: unsupported operand type(s)`` for ``tensor + 1``, say).  That
    error is symshape's timeout, not the program's, so it is re-raised as the
    timeout, and a block that goes on after a swallowed alarm is stopped by the
    next one or, at the latest, on exit.
    """
    if seconds is None or seconds == float("inf"):
        yield
        return
    seconds = max(0.001, float(seconds))
    fired: list = []

    def timeout() -> TraceTimeout:
        return TraceTimeout(round(seconds, 3))

    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
        def on_alarm(signum, frame):
            if _importing(frame):
                return
            fired.append(True)
            raise timeout()

        old = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds, REFIRE_SECONDS)

        def disarm():
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    else:
        end = time.monotonic() + seconds
        old_profile = sys.getprofile()

        def check(frame, event, arg):
            # "c_call" too: a loop of tensor operators makes no Python calls
            if event in ("call", "c_call") and time.monotonic() > end and not _importing(frame):
                fired.append(True)
                raise timeout()

        sys.setprofile(check)

        def disarm():
            sys.setprofile(old_profile)
    # An alarm that lands in a finalizer (``__del__``, a weakref callback) cannot propagate:
    # Python reports it as "unraisable" and goes on.  That is no error of anyone's: the
    # next alarm stops the block, so the report is dropped (other reports pass through).
    old_hook = sys.unraisablehook

    def on_unraisable(unraisable):
        if isinstance(unraisable.exc_value, TraceTimeout):
            fired.append(True)
            return
        old_hook(unraisable)

    sys.unraisablehook = on_unraisable
    arm_disarm = disarm

    def disarm():
        arm_disarm()
        sys.unraisablehook = old_hook
    try:
        yield
    except TraceTimeout:
        disarm()
        raise
    except BaseException as e:  # whatever torch made of a swallowed alarm is the timeout; else re-raised
        disarm()
        if fired:  # the error is what torch made of a swallowed alarm
            raise timeout() from e
        raise
    disarm()
    if fired:  # an alarm was swallowed and the block went on: its result is not to be trusted
        raise timeout()
