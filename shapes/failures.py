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

from .errors import EngineFailure, TraceError, UnsupportedOpError
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
    if getattr(exc, "symshape_program_error", False):
        return None
    last = None
    for fs in traceback.extract_tb(exc.__traceback__):
        fn = fs.filename
        if is_engine_file(fn) or not (is_library_file(fn) and not fn.startswith(_TORCH_DIR)):
            # sympy and the standard library are the engine's helpers: the frame
            # that called them decides whose exception it is.
            last = fs
    if last is not None and is_engine_file(last.filename):
        return f"{os.path.basename(last.filename)}:{last.lineno}"
    return None


def trace_failure(e: Exception, env, at: str) -> Exception:
    """The error to raise for ``e``, raised by the program while traced at sizes ``at``.

    A symbolic value (SymInt, SymBool, SymFloat) that reached torch code
    wanting a plain one is symshape's limitation (:class:`UnsupportedOpError`);
    an exception from the engine's own code is an :class:`EngineFailure`;
    anything else is the program's :class:`TraceError`, with the path (guards)
    that led there.
    """
    if symbolic_type_error(e):
        # Not the program's error: eager passes a plain value where the trace has a symbolic one.
        what = ("a size comparison (SymBool) reached a torch function that takes a bool"
                if "not SymBool" in str(e) else "a symbolic size reached torch code that wants a plain value")
        err = UnsupportedOpError(f"{what} ({first_line(e)}); please report it")
        err.env = env
        return err
    dde = getattr(env, "last_data_dependent", None)
    if dde is not None and str(dde) in str(e):
        # Our DataDependentError, re-raised by torch's C++ as its own RuntimeError.
        return dde
    prov = user_frame_of(e)
    if isinstance(e, RuntimeError) and _SYMBOLIC_READ in str(e):
        # A C++ kernel read a size as an int (TensorImpl::throw_cannot_call_with_symbolic):
        # torch's limit on symbolic tensors, which eager never meets.
        err = UnsupportedOpError(
            f"a torch kernel called at {prov.filename}:{prov.lineno} (`{prov.code}`) reads "
            f"the sizes of a tensor as integers ({first_line(e)}), which symbolic tracing cannot give "
            f"it. This is a limitation of symshape (torch.export stops there too), not an error of the "
            f"program; call the op outside the traced part, or at fixed sizes.")
        err.env = env
        return err
    if isinstance(e, RuntimeError) and meta_device_mismatch(e):
        # A real tensor reached the trace where autograd meets it with a meta gradient (or
        # a meta tensor with a real one): the trace's doing, never eager's.
        err = UnsupportedOpError(
            f"a real tensor met the trace's meta tensors at {prov.filename}:{prov.lineno} (`{prov.code}`) "
            f"({first_line(e)}). This is a limitation of symshape, not an error of the program: pass the module "
            f"as the program, or report it with this line.")
        err.env = env
        return err
    engine = engine_frame_of(e)
    if engine is not None:
        return EngineFailure(
            f"its engine failed ({type(e).__name__} at {engine}) while tracing "
            f"{prov.filename}:{prov.lineno} (`{prov.code}`) at {at or 'the given sizes'}: "
            f"{first_line(e)}. This is a limitation of symshape, not an error of the program; "
            f"please report it.", exc=e, provenance=prov, env=env)
    return TraceError(
        f"the program raised {type(e).__name__} at {prov.filename}:{prov.lineno} (`{prov.code}`) "
        f"when traced at {at or 'the given sizes'}: {first_line(e)}",
        exc=e, provenance=prov, path=env.guards, env=env)


def meta_device_mismatch(e: BaseException) -> bool:
    """Is ``e`` torch's complaint that a meta tensor and a real one met (which eager never sees)?

    >>> meta_device_mismatch(RuntimeError("returned an invalid gradient at index 1 - expected device cpu but got meta"))
    True
    >>> meta_device_mismatch(RuntimeError("expected device cuda:0 but got cpu"))
    False
    """
    s = str(e)
    return bool(re.search(r"expected device \S+ but got meta|expected device meta but got", s)) or (
        "meta" in s and "invalid gradient" in s)


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
