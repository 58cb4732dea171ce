"""Errors symshape raises at the user: each says what, where, and how to fix."""
from __future__ import annotations


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


class UnsupportedOpError(SymshapeError, NotImplementedError):
    """A torch op symshape cannot model symbolically."""


class GuardViolation(SymshapeError, AssertionError):
    """Real inputs violate a guard or runtime assert of a traced program."""

    def __init__(self, message, *, guard=None, values=None):
        super().__init__(message)
        self.guard = guard
        self.values = values or {}
