"""How the tracer presents itself to library code: as torch.export does.

Libraries ask whether they are being traced and then take a trace-safe path
(no ``.all()`` on a mask, no ``.item()`` for a fast path, ``torch._check``
instead of ``if ...: raise``).  transformers' ``is_tracing`` /
``is_torchdynamo_compiling``, diffusers, and torch itself
(``torch._dynamo.is_compiling``, ``torch._utils.is_compiling``) all end in
``torch.compiler.is_compiling()`` and ``torch.compiler.is_exporting()``,
which read two module flags.  ``torch.export`` sets exactly those flags for
the duration of a trace (``torch/_export/utils.py``,
``_compiling_state_context``); so does symshape, and restores them after.

It does not claim ``torch.jit.is_tracing()`` or FX proxies: code behind those
checks expects a TorchScript tracer or ``torch.fx.Proxy`` objects, which
torch.export does not provide either.

Example::

    >>> import torch
    >>> from shapes.library_tracing import as_exporting
    >>> with as_exporting():
    ...     torch.compiler.is_compiling(), torch.compiler.is_exporting()
    (True, True)
    >>> torch.compiler.is_compiling()
    False
"""
from __future__ import annotations

import contextlib

import torch.compiler

# The flags torch.export sets (torch >= 2.11 has both; older names are skipped).
_FLAGS = ("_is_compiling_flag", "_is_exporting_flag")


@contextlib.contextmanager
def as_exporting():
    """Answer torch's "am I being compiled/exported?" predicates with True."""
    mod = torch.compiler
    saved = {f: getattr(mod, f) for f in _FLAGS if hasattr(mod, f)}
    try:
        for f in saved:
            setattr(mod, f, True)
        yield
    finally:
        for f, v in saved.items():
            setattr(mod, f, v)
