"""Whose fault an exception raised during a trace is: the program's, or symshape's own.

The program's exceptions (raised by its code, a library, or torch as eager
would) become :class:`~shapes.errors.TraceError` with the user's line; an
exception from inside the engine becomes :class:`~shapes.errors.EngineFailure`,
never reported as the program's error.

Example::

    >>> try:
    ...     raise ValueError("bad size\\nmore")
    ... except ValueError as e:
    ...     first_line(e)
    'bad size'
"""
from __future__ import annotations

import linecache
import os
import re
import traceback
from typing import Optional

import torch

from .creation import torch_call_frame
from .errors import EngineFailure, RaisedForProgram, TraceError, UnsupportedOpError
from .provenance import Provenance, is_engine_file, is_library_file

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
# torch raises TypeError when a symbolic value reaches C++ code that wants a plain
# Python value ("argument 'is_causal' must be bool, not SymBool"): a limit of
# symbolic tracing, not something the program does wrong on real tensors.
# The message of torch's TensorImpl::throw_cannot_call_with_symbolic.
_SYMBOLIC_READ = "on tensor with symbolic sizes/strides"
_SYMBOLIC_TYPE = re.compile(r"\bSym(Int|Bool|Float)\b|SymExprNode|symbolic (size|value|shape)")


def user_frame_of(exc: BaseException) -> Provenance:
    """The innermost frame of the user's code in ``exc``'s traceback (empty when none)."""
    best = None
    for fs in traceback.extract_tb(exc.__traceback__):
        if not is_engine_file(fs.filename) and not is_library_file(fs.filename):
            best = fs
    if best is None:
        return Provenance()
    return Provenance(filename=best.filename, lineno=best.lineno or 0,
                      code=(best.line or linecache.getline(best.filename, best.lineno or 0)).strip(),
                      function=best.name)


def engine_frame_of(exc: BaseException) -> Optional[str]:
    """Where symshape's own code raised ``exc`` ("file:line"), or None when the
    exception is the program's (raised by torch, a library, the user's code, or
    by the engine on purpose for the program)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if isinstance(exc, RaisedForProgram) or (frames and torch_call_frame(frames[-1])):
        return None
    last = None
    for fs in frames:
        fn = fs.filename
        if is_engine_file(fn) or not (is_library_file(fn) and not fn.startswith(_TORCH_DIR)):
            # sympy and the standard library are the engine's helpers: the frame
            # that called them decides whose exception it is.
            last = fs
    if last is not None and is_engine_file(last.filename):
        return f"{os.path.basename(last.filename)}:{last.lineno}"
    return None


# torch's own symbolic-shape machinery, which runs only because symshape traces with
# symbolic sizes: an exception raised there is never one eager raises.
_TORCH_SYMBOLIC = tuple(os.path.join(_TORCH_DIR, p) for p in (
    os.path.join("fx", "experimental", "sym_node.py"), os.path.join("fx", "experimental", "symbolic_shapes.py"),
    os.path.join("fx", "experimental", "_sym_dispatch_mode.py"), "_sympy" + os.sep))


def torch_call_of(exc: BaseException) -> Optional[str]:
    """The torch function the program's innermost line called when ``exc`` was raised
    (``torch.nn.functional.interpolate``), or None.

    >>> torch_call_of(ValueError("plain")) is None
    True
    """
    frames = traceback.extract_tb(exc.__traceback__)
    user = [i for i, fs in enumerate(frames) if not is_engine_file(fs.filename) and not is_library_file(fs.filename)]
    start = user[-1] + 1 if user else 0
    for fs in frames[start:]:
        if fs.filename.startswith(_TORCH_DIR):
            rel = os.path.relpath(fs.filename, _TORCH_DIR)[:-3].replace(os.sep, ".").replace(".__init__", "")
            return f"torch.{rel}.{fs.name}" if rel != "__init__" else f"torch.{fs.name}"
    return None


def torch_symbolic_frame_of(exc: BaseException) -> Optional[str]:
    """Where torch's symbolic-shape code raised ``exc`` ("torch/.../sym_node.py:1849"), when its
    innermost frame is there (None otherwise).

    >>> torch_symbolic_frame_of(ValueError("plain")) is None
    True
    """
    if isinstance(exc, RaisedForProgram):
        return None
    frames = traceback.extract_tb(exc.__traceback__)
    if frames and frames[-1].filename.startswith(_TORCH_SYMBOLIC):
        return f"torch/{os.path.relpath(frames[-1].filename, _TORCH_DIR)}:{frames[-1].lineno}"
    return None


_META_WORDS = re.compile(r"\b(got|on|device) meta\b|device='meta'|\bmeta device\b|\bMeta\b backend")


def _meta_leak(exc: BaseException) -> bool:
    """An error about the ``meta`` device: the trace's tensors live there, eager's never do.

    >>> _meta_leak(RuntimeError("Function AddmmBackward0 returned an invalid gradient at index 2 - "
    ...                         "expected device cpu but got meta"))
    True
    >>> _meta_leak(RuntimeError("shape '[-1, 4]' is invalid for input of size 6"))
    False
    """
    return bool(_META_WORDS.search(str(exc)))


def trace_failure(e: Exception, env, at: str) -> Exception:
    """The error to raise for ``e``, raised by the program while traced at sizes ``at``.

    A symbolic value (SymInt, SymBool, SymFloat) that reached torch code
    wanting a plain one is symshape's limitation (:class:`UnsupportedOpError`);
    an exception from the engine's own code is an :class:`EngineFailure`;
    anything else is the program's :class:`TraceError`, with the path (guards)
    that led there.
    """
    if symbolic_type_error(e) or (not isinstance(e, TypeError) and _SYMBOLIC_TYPE.search(str(e))
                                   and not isinstance(e, RaisedForProgram)):
        # Not the program's error: eager passes a plain value where the trace has a symbolic one.
        what = ("a size comparison (SymBool) reached a torch function that takes a bool"
                if "not SymBool" in str(e) else "a symbolic size reached torch code that wants a plain value")
        prov, op = user_frame_of(e), torch_call_of(e)
        return UnsupportedOpError(f"{what} at {prov.filename}:{prov.lineno} (`{prov.code}`"
                                  f"{f', in {op}' if op else ''}): {type(e).__name__}: {first_line(e)}. This is a "
                                  f"limitation of symshape, not an error of the program; please report it").in_trace(env)
    dde = getattr(env, "last_data_dependent", None)
    if dde is not None and str(dde) in str(e):
        # Our DataDependentError, re-raised by torch's C++ as its own RuntimeError.
        return dde
    prov = user_frame_of(e)
    if isinstance(e, RuntimeError) and _SYMBOLIC_READ in str(e):
        # A C++ kernel read a size as an int (TensorImpl::throw_cannot_call_with_symbolic):
        # torch's limit on symbolic tensors, which eager never meets.
        return UnsupportedOpError(
            f"a torch kernel called at {prov.line()} reads "
            f"the sizes of a tensor as integers ({first_line(e)}), which symbolic tracing cannot give "
            f"it. This is a limitation of symshape (torch.export stops there too), not an error of the "
            f"program; call the op outside the traced part, or at fixed sizes.").in_trace(env)
    engine = engine_frame_of(e) or torch_symbolic_frame_of(e)
    if engine is None and _meta_leak(e):
        engine = "torch, handed the trace's meta tensors where eager has real ones"
    if engine is not None:
        op = torch_call_of(e)
        return EngineFailure(
            f"its engine failed ({type(e).__name__} at {engine}) while tracing "
            f"{prov.filename}:{prov.lineno} (`{prov.code}`{f', in {op}' if op else ''}) at {at or 'the given sizes'}: "
            f"{first_line(e)}. This is a limitation of symshape, not an error of the program; "
            f"please report it.", exc=e, provenance=prov, env=env)
    return TraceError(
        f"the program raised {type(e).__name__} at {prov.line()} "
        f"when traced at {at or 'the given sizes'}: {first_line(e)}",
        exc=e, provenance=prov, path=env.guards, env=env)


def symbolic_type_error(e: BaseException) -> bool:
    """Is ``e`` torch's TypeError for a symbolic value where it takes a plain one?

    >>> symbolic_type_error(TypeError("argument 'is_causal' must be bool, not SymBool"))
    True
    >>> symbolic_type_error(RuntimeError("shape '[-1, 4]' is invalid for input of size 6"))
    False
    """
    return isinstance(e, TypeError) and bool(_SYMBOLIC_TYPE.search(str(e)))


def first_line(e: BaseException) -> str:
    """The first line of ``e``'s message, or its type's name when it has none."""
    s = str(e).strip()
    return s.splitlines()[0] if s else type(e).__name__
