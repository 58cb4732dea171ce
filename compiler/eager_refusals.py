"""Eager's size errors for ops a training graph rewrites (a resize as matmuls, a patch
embedding as one matmul).

A rewrite records other ops than eager's, and those lack eager's size checks: under a trace
the rewritten op would return an empty tensor (or fail elsewhere) where eager raises.  So where
eager refuses the sizes, the rewrite raises eager's message as the program's error under a
trace (the backend then runs dynamo's graph, whose call raises it as eager does), and on data
calls eager's own op, which raises it with its exact type.

Example::

    >>> import torch
    >>> refuse_as_eager(torch.ones(2), "never raised", lambda: "eager's own call")
    "eager's own call"
"""
from __future__ import annotations

from torch._subclasses.fake_tensor import is_fake

from shapes.devices import real_device
from shapes.errors import program_error


def is_traced(x) -> bool:
    """Whether ``x`` is a tracer's tensor rather than data: AOTAutograd's (fake, or functional over
    fake) or symshape's (meta, whatever device it reports).

    >>> import torch
    >>> is_traced(torch.ones(1)), is_traced(torch.ones(1, device="meta"))
    (False, True)
    """
    return is_fake(x) or real_device(x).type == "meta"


def refuse_as_eager(x, message: str, eager_call):
    """Eager's error for sizes its op refuses: under a trace of ``x`` a program error with
    ``message`` (eager's text); on data ``eager_call()``, eager's op, which raises it itself."""
    if is_traced(x):
        raise program_error(RuntimeError, message)
    return eager_call()


__all__ = ["is_traced", "refuse_as_eager"]
