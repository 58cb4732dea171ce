"""The size limits eager PyTorch enforces when it allocates a tensor.

Meta kernels with symbolic sizes compute no storage size, so nothing in a
trace says that ``x.repeat(N, N)`` on a ``uint8`` input fails for
``N >= 2**21``.  Eager does fail there: every new tensor's storage size is
computed in ``computeStorageNbytesContiguous`` with overflow checks (the
product of the sizes must fit in uint64, and that times the element size in
int64), raising ``Storage size calculation overflowed with sizes=[...]``.

:func:`storage_conditions` states that check for one output; the tracer
passes each to :meth:`shapes.env.ShapeEnv.check_limit`, which keeps it in
``env.limits`` (checked by ``TracedProgram.run``, searched by ``dinfer``)
unless the ranges prove it, and raises like eager when it fails at the
example sizes.  Views and in-place results allocate nothing and are skipped.

A limit speaks only where its sizes exist: ``Linear`` on ``[B, T, 32]``
allocates ``[B, (B*T) // B, 96]``, a tensor of this path, which ``B = 0``
does not take.  The env gives each limit ``defined_when`` (its divisors are
not 0); where that fails, :meth:`~shapes.program.TracedProgram.failing_guards`
reports the path's own guards instead of the limit.

Example::

    >>> import sympy, torch
    >>> from shapes.limits import storage_conditions
    >>> N = sympy.Symbol("N", integer=True, positive=True)
    >>> [str(c) for c, _ in storage_conditions([N, N**2], 1, maybe_zero=lambda s: False)]
    ['N**3 <= 9223372036854775807']
    >>> [str(c) for c, _ in storage_conditions([N, N**2], 1)]  # N**2 == 0 would hide an overflow of N
    ['N <= 18446744073709551615', 'N**3 <= 9223372036854775807']
"""
from __future__ import annotations

import functools

import sympy
import torch

I64_MAX = 2**63 - 1
U64_MAX = 2**64 - 1
OVERFLOW_MESSAGE = "Storage size calculation overflowed with sizes="


def allocates(func, i: int = 0) -> bool:
    """Whether output ``i`` of the ATen op ``func`` is a new tensor (not a view or in-place)."""
    try:
        rets = func._schema.returns
    except AttributeError:
        return False
    if not rets:
        return False
    r = rets[min(i, len(rets) - 1)]
    return r.alias_info is None


@functools.lru_cache(maxsize=16384)
def _at_most(e, bound: int):
    # One per allocated tensor, mostly of sizes seen before: sympy's evaluating
    # Le (which asks assumptions of the product) is not cached by sympy.
    return sympy.Le(e, bound)


def storage_conditions(sizes, itemsize: int, maybe_zero=lambda s: True):
    """[(condition, what)] for eager's storage-size overflow check of a
    contiguous tensor of ``sizes`` (sympy) and ``itemsize`` bytes.

    The running product of the sizes must stay within uint64 (once it
    overflows, a later size 0 does not undo it), and the total times the
    element size within int64.  The first check only matters before a size
    that may be 0 (``maybe_zero``); otherwise the total bounds every prefix.
    """
    out = []
    prod = sympy.Integer(1)
    for i, s in enumerate(sizes):
        if i > 0 and not s.is_number and maybe_zero(s) and not prod.is_number:
            out.append((_at_most(prod, U64_MAX), "size product"))
        prod = prod * s
    if not prod.is_number:
        out.append((_at_most(prod * itemsize, I64_MAX), "storage size"))
    return out


def tensor_outputs(out):
    if isinstance(out, torch.Tensor):
        return [(0, out)]
    if isinstance(out, (tuple, list)):
        return [(i, o) for i, o in enumerate(out) if isinstance(o, torch.Tensor)]
    return []


def expr_of(s):
    return s.node.expr if isinstance(s, torch.SymInt) else sympy.Integer(int(s))
