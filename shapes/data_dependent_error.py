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

from .data_names import distinct_names
from .errors import SymshapeError
from .printers import to_python
from .symbols import UnbackedKind

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
        # Named among all the trace's values: two values one line read get two names.
        every = distinct_names({**sources, **{u: sources.get(u) for u in self.unbacked}})
        names = {u: every[u] for u in self.unbacked}
        what = {u: str(sources.get(u, u)) for u in self.unbacked}
        # A name read off the user's line needs no origin: the line is in the message already.
        origins = "; ".join(f"{names[u]} = {what[u]}" for u in self.unbacked if _bare(names[u]) not in what[u])
        op = f" (asked by {provenance.op})" if provenance.op else ""
        # No frame of the program asked (it is torch's own function, an OpInfo's): the op says where.
        where = f" at {provenance.filename}:{provenance.lineno}" if provenance.lineno else ""
        code = f": `{provenance.code}`" if provenance.code else ""
        super().__init__(
            f"data-dependent condition {to_python(expr, names)}{where}{op}{code}."
            + (f" {origins}." if origins else "") + " The value is only known "
            "at run time, so the trace cannot take a branch on it. "
            + _how_to_check(expr, names, {u for u in self.unbacked if _is_truth(sources.get(u))})
            + " The check is asserted at run time and assumed while tracing."
        )


def _is_truth(source) -> bool:
    return source is not None and source.kind is UnbackedKind.BOOL


def _how_to_check(expr, names: dict, truth: set) -> str:
    """The ``torch._check`` that settles ``expr``, in the user's names.

    A name that is an expression (``x.sum().item()``) reads the data again each time it runs: a
    check on it before the line would constrain another read, so the value is read once into a
    variable, checked, and branched on.
    """
    rereads = {u: n for u, n in names.items() if not n.isidentifier()}
    if not rereads:
        return (f"State which way it goes for your data before this line, with "
                f"torch._check({_check_text(expr, names, truth)}) or "
                f"torch._check({_check_text(sympy.Not(expr), names, truth)}).")
    variables = {u: "value" if len(rereads) == 1 else f"value{i}" for i, u in enumerate(rereads)}
    reads = "; ".join(f"{variables[u]} = {_read_of(rereads[u])}" for u in rereads)
    named = {**names, **variables}
    yes, no = _check_text(expr, named, truth), _check_text(sympy.Not(expr), named, truth)
    return (f"Each evaluation of {' and '.join(_bare(n) for n in rereads.values())} reads the data "
            f"again, so read it once before this line and state which way it goes: {reads}; then "
            f"torch._check({yes}) or torch._check({no}), and use "
            f"{' and '.join(variables.values())} here instead of the expression.")


def _read_of(name: str) -> str:
    """The Python that reads the value ``name`` names once (``bool(t)`` -> ``(t).item()``)."""
    if name.startswith("bool(") and name.endswith(")"):
        return f"({name[5:-1]}).item()"  # .item() keeps a truth value symbolic; bool() would decide it
    for python_bool, tensor_op in (("torch.allclose(", "torch.isclose("), ("torch.equal(", "torch.eq(")):
        if name.startswith(python_bool) and name.endswith(")"):
            # These return a Python bool, which a trace can only decide: the same test as a tensor
            # read by .item() stays symbolic (torch.equal's form assumes one shape for both).
            return f"{tensor_op}{name[len(python_bool):]}.all().item()"
    if name.startswith("len(") and name.endswith(")"):
        return f"{name[4:-1]}.shape[0]"
    return name


def _check_text(expr, named: dict, truth: set) -> str:
    """``expr`` as torch._check's argument; a truth value is checked as itself (a SymBool has no
    ``== 1``: Python would decide it while tracing)."""
    if len(expr.free_symbols) == 1 and expr.free_symbols <= truth:
        (u,) = expr.free_symbols
        var = named[u]
        if expr in (sympy.Eq(u, 1), sympy.Ne(u, 0)):
            return var
        if expr in (sympy.Ne(u, 1), sympy.Eq(u, 0)):
            return f"torch.sym_not({var})"  # `not` would decide the value while tracing
    return to_python(expr, named)


def _bare(name: str) -> str:
    """``name`` without the parentheses that make it one operand (``(x.sum() > 0)``)."""
    return name[1:-1] if name.startswith("(") and name.endswith(")") else name
