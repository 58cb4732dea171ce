"""Large CPU buffers served from malloc's heap, not fresh ``mmap`` pages: no page fault per call.

The C++ target's kernels and ATen's calls around them allocate their outputs with torch's CPU
allocator, which is malloc.  glibc serves a block at or over its mmap threshold (dynamic,
128 KiB to 32 MiB) with fresh pages from the kernel and gives them back at ``free``, and trims
freed memory at the top of its heap past the trim threshold; each first write of a fresh 4 KiB
page then faults.  A compiled program that makes and frees megabyte buffers at every call paid
that at every call: HF Gemma (d=256, 2 layers, fp32) at batch 4 x 250 tokens took 5911 minor
page faults per forward call, its tanh-GELU kernel 839 us a call instead of 236 us, and the model
ran at 0.94x of Inductor CPU static (bench/results/cpu_models_s18_2026-12-06.txt).  With the
thresholds raised (:func:`keep_heap_blocks`): 31 faults a call and 1.04x.

The setting is the process's (``mallopt``): it applies to every allocation after it, eager's
included; freed memory stays in the heap up to :data:`TRIM_BYTES` before it goes back to the
system.  Only on glibc; ``SYMSHAPE_MALLOPT=0`` leaves malloc as it is.

Example::

    >>> keep_heap_blocks() in (True, False)  # True where glibc took the settings
    True
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

#: Blocks below this many bytes come from malloc's heap (glibc's M_MMAP_THRESHOLD).
MMAP_BYTES = 64 << 20
#: Freed heap memory past this many bytes at the top is given back (glibc's M_TRIM_THRESHOLD).
TRIM_BYTES = 256 << 20

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_done: list = []


def keep_heap_blocks() -> bool:
    """Raise glibc's mmap and trim thresholds once per process (see the module docstring);
    returns whether they are set (False off glibc, or with ``SYMSHAPE_MALLOPT=0``)."""
    if _done:
        return _done[0]
    ok = False
    if os.environ.get("SYMSHAPE_MALLOPT", "1") != "0" and sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            mallopt = libc.mallopt
        except (OSError, AttributeError):  # not glibc: its malloc keeps its own policy
            mallopt = None
        if mallopt is not None:
            mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
            ok = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_BYTES)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_BYTES))
    _done.append(ok)
    return ok


__all__ = ["keep_heap_blocks", "MMAP_BYTES", "TRIM_BYTES"]
