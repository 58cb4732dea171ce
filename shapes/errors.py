"""Errors symshape raises at the user: each says what, where, and how to fix."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Iterable

import sympy

if TYPE_CHECKING:  # pragma: no cover
    from .provenance import Provenance


class SymshapeError(Exception):
    """Base of symshape's user-facing errors."""


class SpecError(SymshapeError, ValueError):
    """A malformed input spec (``"x: f32[B, 768]"``) or dims argument."""


class TraceError(SymshapeError, RuntimeError):
    """The program raised while being traced.

    ``exc`` is the original exception, ``provenance`` the user line it came
    from, and ``path`` the guards recorded before it (the sizes for which
    the program takes the same path to the same error).  ``env`` is the
    trace's ShapeEnv as it stood: its ``records`` also hold the runtime
    asserts that passed before the error, and its axioms the assumptions
    (ranges, the 0/1 policy) the guards were simplified under.
    """

    def __init__(self, message, *, exc=None, provenance=None, path=(), env=None):
        super().__init__(message)
        self.exc = exc
        self.provenance = provenance
        self.path = tuple(path)
        self.env = env


class TracerLimitation(SymshapeError, NotImplementedError):
    """symshape itself cannot trace this yet: a limitation of the engine, never
    an error of the program.

    Tools tell it apart by type: dinfer, explain and flops say "symshape cannot
    trace this yet" instead of blaming the program.

    Example::

        >>> import shapes
        >>> from shapes.errors import TracerLimitation, UnsupportedOpError
        >>> issubclass(UnsupportedOpError, TracerLimitation)
        True
    """


class UnsupportedOpError(TracerLimitation):
    """A torch op symshape cannot model symbolically."""


class EngineFailure(TracerLimitation):
    """An unexpected exception inside symshape's own code while tracing.

    ``exc`` is the original exception; the trace stopped at the user line
    ``provenance``.
    """

    def __init__(self, message, *, exc=None, provenance=None, env=None):
        super().__init__(message)
        self.exc = exc
        self.provenance = provenance
        self.env = env


class AdapterGap(TracerLimitation, AttributeError):
    """torch asked symshape's ShapeEnv adapter for something it does not provide
    (an AttributeError too, so torch's ``hasattr`` probes keep working)."""


def program_error(exc: BaseException) -> BaseException:
    """Mark an exception the engine raises *for the program* (the error eager
    PyTorch raises at these sizes), so the tracer does not take it for an
    engine failure."""
    exc.symshape_program_error = True
    return exc


class GuardViolation(SymshapeError, AssertionError):
    """Real inputs violate a guard or runtime assert of a traced program."""

    def __init__(self, message, *, guard=None, values=None):
        super().__init__(message)
        self.guard = guard
        self.values = values or {}


class DataDependentError(SymshapeError, RuntimeError):
    """A decision needs the value of a data-dependent (unbacked) size.

    The message names the user's source line and the op, and says how to
    make the trace go through (``torch._check``).
    """

    def __init__(self, expr, provenance: Provenance, unbacked: Iterable[sympy.Symbol], env):
        self.expr = expr
        self.provenance = provenance
        self.unbacked = tuple(unbacked)
        origins = "; ".join(f"{u} = {env.describe_symbol(u)}" for u in self.unbacked)
        op = f" (asked by {provenance.op})" if provenance.op else ""
        super().__init__(
            f"data-dependent condition {expr} at {provenance.filename}:{provenance.lineno}"
            f"{op}: `{provenance.code}`. {origins}. The value is only known at run time, so "
            f"the trace cannot take a branch on it. State which way it goes for your data before "
            f"this line, with torch._check({python_form(expr)}) or "
            f"torch._check({python_form(sympy.Not(expr))}); the check is asserted at run time and "
            f"assumed while tracing."
        )
        # torch's C++ may catch it on the way out and raise its text as a RuntimeError
        # ("unflatten got an unexpected error: ..."); the tracer finds it here again.
        env.last_data_dependent = self


def python_form(expr) -> str:
    s = str(expr)
    m = re.match(r"^Eq\((.*), (.*)\)$", s)
    if m:
        return f"{m.group(1)} == {m.group(2)}"
    m = re.match(r"^Ne\((.*), (.*)\)$", s)
    if m:
        return f"{m.group(1)} != {m.group(2)}"
    return s
