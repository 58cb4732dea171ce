"""Code generation: one skeleton (:mod:`.skeleton`) and a table per target.

``TARGETS`` maps a ``compile(..., target=...)`` name to its :class:`~.skeleton.Target`.

Example::

    >>> from compiler.codegen import TARGETS
    >>> TARGETS["cpp"].name, TARGETS["triton"].name
    ('C++', 'Triton')
"""
from .cpp import CPP
from .skeleton import CodegenError, KernelSignature, Scope, Target
from .triton import TRITON

TARGETS = {"cpp": CPP, "triton": TRITON}

__all__ = ["TARGETS", "Target", "Scope", "KernelSignature", "CodegenError"]
