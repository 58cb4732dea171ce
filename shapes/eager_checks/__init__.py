"""Where the tracer must follow eager rather than torch's meta kernels.

The tracer runs each ATen op's meta kernel on symbolic sizes.  Where that
kernel is weaker than the CPU kernel (a missing shape check), computes
another output shape, or is a ``torch._refs`` function with another
signature, a trace would accept sizes where eager fails or give a wrong
shape.  This package holds eager's behaviour for those ops, in three hooks
the tracer calls:

* :func:`intercept` before an op runs: answers ``aten.size`` queries from
  C++ kernels and runs the decomposition eager runs (:mod:`.dispatch`);
* :func:`checks`: the shape conditions eager's kernel requires
  (:mod:`.conv`, :mod:`.losses`, :mod:`.scatter`); the tracer asserts each (a runtime assert
  with the user's line) and raises like eager when it fails at the example
  sizes.  Where the meta kernel already checks the same thing, the engine
  decides the second check statically and records nothing;
* :func:`eager_output`: the output eager's CPU kernel returns where the
  meta kernel's differs (:mod:`.norms`).

Example::

    >>> import torch
    >>> from shapes.eager_checks import checks
    >>> x, w, b = torch.empty(1, 4, 9), torch.empty(6, 4, 3), torch.empty(5)
    >>> conds = checks(torch.ops.aten.convolution.default, (x, w, b, [1], [0], [1], False, [0], 1))
    >>> [str(c) for c, _ in conds]
    ['True', 'True', 'True', 'False', 'True']
"""
from __future__ import annotations

import torch

from . import conv, losses, norms, scatter
from .dispatch import METADATA, eager_decomposition, run_meta  # noqa: F401

aten = torch.ops.aten

_CHECKS = {
    aten.convolution.default: conv.checks,
    aten.nll_loss_forward.default: lambda args, kwargs: losses.nll_loss_checks(*args[:3]),
    aten.nll_loss2d_forward.default: lambda args, kwargs: losses.nll_loss2d_checks(*args[:3]),
    aten.slice_scatter.default: lambda args, kwargs: scatter.slice_scatter_checks(*args, **kwargs),
    aten.select_scatter.default: lambda args, kwargs: scatter.select_scatter_checks(*args, **kwargs),
    aten.diagonal_scatter.default: lambda args, kwargs: scatter.diagonal_scatter_checks(*args, **kwargs),
    aten.index_put.default: lambda args, kwargs: scatter.index_put_checks(*args, **kwargs),
    aten.index_put_.default: lambda args, kwargs: scatter.index_put_checks(*args, **kwargs),
    aten._unsafe_index_put.default: lambda args, kwargs: scatter.index_put_checks(*args, **kwargs),
    aten._unsafe_masked_index_put_accumulate.default:
        lambda args, kwargs: scatter.masked_index_put_checks(*args, **kwargs),
    aten.as_strided.default: lambda args, kwargs: scatter.as_strided_checks(*args, **kwargs),
    aten.as_strided_copy.default: lambda args, kwargs: scatter.as_strided_checks(*args, **kwargs),
    aten.ormqr.default: lambda args, kwargs: scatter.ormqr_checks(*args, **kwargs),
}


def checks(func, args, kwargs=None):
    """[(condition, message)] the eager kernel of ``func`` requires of these args."""
    fn = _CHECKS.get(func)
    if fn is None:
        return []
    return fn(args, kwargs or {})


_NOT_HANDLED = NotImplemented


def intercept(mode, func, args, kwargs):
    """Eager's answer for ``func`` when it is not the meta kernel's, else NotImplemented.

    ``mode`` is the tracer's dispatch mode: decompositions run under it, so
    the ops they call are traced.
    """
    meta = METADATA.get(func)
    if meta is not None:
        return meta(args[0])
    decomp = eager_decomposition(func)
    if decomp is None:
        return _NOT_HANDLED
    with mode:
        return decomp(*args, **kwargs)


def eager_output(func, args, kwargs, out):
    """``out`` as eager's CPU kernel shapes it."""
    fix = norms.OUTPUTS.get(func)
    return fix(func, args, kwargs, out) if fix is not None else out
