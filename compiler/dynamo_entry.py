"""The ``torch_dynamo_backends`` entry point ``symshape``, loaded when a program asks for it.

Dynamo loads a backend's entry point when ``torch.compile(model,
backend="symshape")`` is called, seconds before the model's first call
reaches the backend (dynamo then traces the bytecode, AOTAutograd the joint
graph).  Loading it here starts the kernel-build worker processes
(:func:`compiler.codegen.triton_build.prestart`, on a CUDA machine only), so
that they have loaded Triton's compiler by the time the first graph's kernels
are ready to build.  Nothing else imports this module.

Example (no GPU here: nothing is started)::

    >>> from compiler import dynamo_entry
    >>> dynamo_entry.symshape.__name__
    'symshape_backend'
"""
from __future__ import annotations


def __getattr__(name: str):
    if name != "symshape":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from .backend import prestart_builds, symshape_backend
    prestart_builds()
    return symshape_backend
