"""The error a decision on a data-dependent size raises: where, which sizes, and the ``torch._check`` that fixes it.

Example::

    >>> import torch
    >>> from shapes import trace
    >>> from shapes.data_dependent_error import DataDependentError
    >>> def f(x):
    ...     n = int(x.nonzero().shape[0])
    ...     return x[:n] if n > 3 else x
    >>> try:
    ...     trace(f, "x: f32[N]")
    ... except Exception as e:
    ...     print("torch._check(" in str(e))
    True
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Mapping

import sympy

from .data_names import name_from_source
from .errors import SymshapeError
from .printers import to_python

if TYPE_CHECKING:  # pragma: no cover
    from .provenance import Provenance
    from .symbols import DataSource


class DataDependentError(SymshapeError, RuntimeError):
    """A decision needs the value of a data-dependent (unbacked) size.

    The message names the user's source line and the op, and says how to
    make the trace go through (``torch._check``).
    """

    def __init__(self, expr, provenance: Provenance, unbacked: Iterable[sympy.Symbol], *,
                 sources: Mapping[sympy.Symbol, DataSource]):
        self.expr = expr
        self.provenance = provenance
        self.unbacked = tuple(unbacked)
        # The user's names for the values (x.sum().item(), n), never the engine's u0.
        names = {u: name_from_source(sources.get(u), u.name) for u in self.unbacked}
        what = {u: str(sources.get(u, u)) for u in self.unbacked}
        # A name read off the user's line needs no origin: the line is in the message already.
        origins = "; ".join(f"{names[u]} = {what[u]}" for u in self.unbacked if _bare(names[u]) not in what[u])
        op = f" (asked by {provenance.op})" if provenance.op else ""
        super().__init__(
            f"data-dependent condition {to_python(expr, names)} at {provenance.filename}:{provenance.lineno}"
            f"{op}: `{provenance.code}`." + (f" {origins}." if origins else "") + " The value is only known "
            f"at run time, so the trace cannot take a branch on it. State which way it goes for your data "
            f"before this line, with torch._check({to_python(expr, names)}) or "
            f"torch._check({to_python(sympy.Not(expr), names)}); the check is asserted at run time and "
            f"assumed while tracing."
        )


def _bare(name: str) -> str:
    """``name`` without the parentheses that make it one operand (``(x.sum() > 0)``)."""
    return name[1:-1] if name.startswith("(") and name.endswith(")") else name
