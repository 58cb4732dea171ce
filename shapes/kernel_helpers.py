"""The helpers the C++ and Triton printers call, with their definitions: one contract, in one place.

:class:`shapes.printers.CppPrinter` and :class:`shapes.printers.TritonPrinter`
print Python's floor division, modulo and integer power of sizes as calls to
helper functions (C's and Triton's ``/`` and ``%`` truncate).  The code
generators (:mod:`compiler.codegen.cpp`, :mod:`compiler.codegen.triton`) put
:data:`CPP_SOURCE` and :data:`TRITON_SOURCE` at the top of every module they
build, so each name a printer prints is defined there.

Example::

    >>> CPP.floordiv in CPP_SOURCE and TRITON.floordiv in TRITON_SOURCE
    True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Helpers:
    """The helper names a printer prints: floor division, Python's modulo, integer and real powers."""

    floordiv: str
    mod: str
    int_pow: Optional[str]
    float_pow: str
    #: Integer min and max of two sizes.
    min: str
    max: str


CPP = Helpers(floordiv="sym_floordiv", mod="sym_mod", int_pow="sym_ipow", float_pow="std::pow",
              min="sym_min", max="sym_max")
TRITON = Helpers(floordiv="_floordiv", mod="_pymod", int_pow=None, float_pow="_pow",
                 min="tl.minimum", max="tl.maximum")

#: C++ definitions of :data:`CPP` (``std::pow`` is the standard library's).
CPP_SOURCE = r"""
// Python semantics for // and % (floor), used where operands may be negative.
static inline int64_t sym_floordiv(int64_t a, int64_t b) {
  int64_t q = a / b; if ((a % b != 0) && ((a < 0) != (b < 0))) q--; return q; }
static inline int64_t sym_mod(int64_t a, int64_t b) {
  int64_t r = a % b; if (r != 0 && ((r < 0) != (b < 0))) r += b; return r; }
static inline int64_t sym_ipow(int64_t b, int64_t e) { int64_t r = 1; while (e-- > 0) r *= b; return r; }
// By value: gcc 12 vectorizes no loop gathering at std::min's index (it returns a reference).
static inline int64_t sym_min(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t sym_max(int64_t a, int64_t b) { return a > b ? a : b; }
"""

#: Triton definitions of :data:`TRITON`.
TRITON_SOURCE = '''

@triton.jit
def _pymod(a, b):
    # Python's % (sign of the divisor) from Triton's truncating %.
    r = a % b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)


@triton.jit
def _floordiv(a, b):
    return (a - _pymod(a, b)) // b


@triton.jit
def _pow(a, b):
    # a ** b for real a, b: |a|**b with the sign of an odd integer power; NaN otherwise for a < 0.
    m = tl.exp(b * tl.log(tl.abs(a)))
    bi = tl.floor(b)
    odd = (bi == b) & ((bi - 2.0 * tl.floor(bi * 0.5)) == 1.0)
    res = tl.where((a < 0) & odd, -m, m)
    res = tl.where((a < 0) & (bi != b), float("nan"), res)
    return tl.where(b == 0, 1.0, res)
'''
