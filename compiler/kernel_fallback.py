"""When one of symshape's replacement kernels for an ATen op cannot be built here, ATen's op runs.

The Triton target replaces some ATen calls with its own kernels at call time (the skinny
matmul, the embedding gradient).  Their Triton sources compile at the first call of a
configuration, inside the compiled program's run.  A GPU or Triton version that cannot build one
(a compile error, too little shared memory) is symshape's limitation, not the program's: that
call and every later one of that kernel run ATen's op (same values), after one
:class:`KernelFallback` warning that names the kernel and the error.

Example::

    >>> import warnings
    >>> from triton.runtime.errors import OutOfResources
    >>> def broken():
    ...     raise OutOfResources(1 << 20, 228 << 10, "shared memory")
    >>> with warnings.catch_warnings(record=True) as seen:
    ...     warnings.simplefilter("always")
    ...     got = kernel_or_aten("example", broken, lambda: "aten's value")
    >>> got, kernel_or_aten("example", lambda: "kernel's value", lambda: "aten's value"), len(seen)
    ("aten's value", "aten's value", 1)
    >>> DISABLED.pop("example").startswith("OutOfResources")
    True
"""
from __future__ import annotations

import warnings


class KernelFallback(UserWarning):
    """A replacement kernel of symshape's could not be built; ATen's op runs instead."""


#: Kernel name -> why it is off (its build error), for reports and tests.
DISABLED: dict = {}


def _build_errors() -> tuple:
    """What Triton raises when it cannot build or launch a kernel for this GPU."""
    from triton.compiler.errors import CompilationError
    from triton.runtime import errors as triton_errors
    errors = [CompilationError, triton_errors.OutOfResources]
    for name in ("PTXASError", "InterpreterError"):  # InterpreterError: TRITON_INTERPRET=1's form of all
        cls = getattr(triton_errors, name, None)
        if cls is not None:
            errors.append(cls)
    return tuple(errors)


def kernel_or_aten(name: str, kernel, aten):
    """``kernel()``, or ``aten()`` where kernel ``name`` is off or fails to build now (then off
    from here on, after a :class:`KernelFallback` warning)."""
    if name in DISABLED:
        return aten()
    try:
        return kernel()
    except _build_errors() as e:
        DISABLED[name] = f"{type(e).__name__}: {e}"
        warnings.warn(f"symshape: the {name} kernel could not be built here ({DISABLED[name][:300]}); "
                      f"ATen's op runs instead from now on", KernelFallback, stacklevel=2)
        return aten()


__all__ = ["kernel_or_aten", "KernelFallback", "DISABLED"]
