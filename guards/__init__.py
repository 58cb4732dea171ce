"""Guards: the model (re-exported from the engine), rendering, checking, explaining.

The engine (:mod:`shapes`) records :class:`Guard` objects while it traces;
this package turns them into text a user can act on.
"""
from shapes.guard import Decision, Guard, GuardKind

from .checker import FailedGuard, check, check_sizes
from .explain import Explanation, ExplainError, explain
from .render import render_guard, source_names, to_python

__all__ = ["Guard", "GuardKind", "Decision", "FailedGuard", "check", "check_sizes", "render_guard",
           "source_names", "to_python", "explain", "Explanation", "ExplainError"]
