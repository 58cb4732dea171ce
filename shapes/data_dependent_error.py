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

from typing import TYPE_CHECKING, Callable, Iterable

import sympy

from .errors import SymshapeError
from .printers import to_python

if TYPE_CHECKING:  # pragma: no cover
    from .provenance import Provenance


class DataDependentError(SymshapeError, RuntimeError):
    """A decision needs the value of a data-dependent (unbacked) size.

    The message names the user's source line and the op, and says how to
    make the trace go through (``torch._check``).
    """

    def __init__(self, expr, provenance: Provenance, unbacked: Iterable[sympy.Symbol], *,
                 describe: Callable[[sympy.Symbol], str]):
        self.expr = expr
        self.provenance = provenance
        self.unbacked = tuple(unbacked)
        origins = "; ".join(f"{u} = {describe(u)}" for u in self.unbacked)
        op = f" (asked by {provenance.op})" if provenance.op else ""
        super().__init__(
            f"data-dependent condition {expr} at {provenance.filename}:{provenance.lineno}"
            f"{op}: `{provenance.code}`. {origins}. The value is only known at run time, so "
            f"the trace cannot take a branch on it. State which way it goes for your data before "
            f"this line, with torch._check({to_python(expr)}) or "
            f"torch._check({to_python(sympy.Not(expr))}); the check is asserted at run time and "
            f"assumed while tracing."
        )
