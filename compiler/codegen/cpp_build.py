"""gcc builds of a C++ kernel module in parallel: its kernels split over translation units.

A program's C++ kernels are one module, and one ``g++`` process compiles
one translation unit on one core: a model's module (dozens of kernels at
``-O3``) took seconds while the other cores idled.  The module's source
marks where each kernel starts (:data:`UNIT`); :func:`compile_module` splits
the kernels into up to one translation unit per core (each with the shared
prelude: its helpers are ``static inline``, so every unit has its own copy),
compiles them concurrently (``-c``) and links them into the shared library.
Kernels are independent ``extern "C"`` functions, so the code of each is what
a single unit would have produced.  Each unit pays for the prelude (~0.1-0.2 s
of gcc) and the link is one more step, so a machine with fewer than
:data:`MIN_JOBS` cores builds one unit (measured on a loaded 2-core machine:
GPT-2's 13-kernel module 0.56 s as one unit, 0.83 s as two).

Example::

    >>> src = "// prelude" + UNIT + "int a;" + UNIT + "int b;" + UNIT + "int c;"
    >>> [len(u) for u in units(src, 2)]
    [2, 1]
"""
from __future__ import annotations

import os
import subprocess

#: The fewest concurrent gcc processes worth splitting a module for.
MIN_JOBS = 4

#: Where a kernel's code starts in a module's source (after the shared prelude).
UNIT = "\n// -- symshape: kernel --\n"


def build_jobs(cap=None) -> int:
    """Concurrent builds (gcc processes, Triton build workers): ``$SYMSHAPE_BUILD_WORKERS``,
    else the usable cores, at most ``cap``.

    >>> build_jobs() >= 1, build_jobs(cap=1)
    (True, 1)
    """
    n = os.environ.get("SYMSHAPE_BUILD_WORKERS")
    if n:
        return max(1, int(n))
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cap, cores) if cap else cores)


def units(source: str, jobs: int) -> list:
    """The kernels of ``source`` in at most ``jobs`` groups of about equal text (largest first,
    each to the lightest group), each group in the module's order."""
    kernels = source.split(UNIT)[1:]
    n = max(1, min(jobs, len(kernels)))
    groups = [[] for _ in range(n)]
    sizes = [0] * n
    for i in sorted(range(len(kernels)), key=lambda i: -len(kernels[i])):
        g = sizes.index(min(sizes))
        groups[g].append(i)
        sizes[g] += len(kernels[i])
    return [sorted(g) for g in groups if g]


def compile_module(cxx: str, flags: list, ldflags: list, source: str, cpp_path: str, so_path: str,
                   jobs: int = 0):
    """Build ``source`` (already written to ``cpp_path``) into ``so_path``; returns the failed
    ``subprocess`` result, or None.  Splits it over translation units where it has several
    kernels and ``jobs`` (default :func:`build_jobs`) is at least :data:`MIN_JOBS`."""
    jobs = jobs or build_jobs()
    groups = units(source, jobs) if UNIT in source and jobs >= MIN_JOBS else []
    if len(groups) <= 1:
        r = subprocess.run([cxx, *flags, cpp_path, "-o", so_path, *ldflags], capture_output=True, text=True)
        return r if r.returncode else None
    parts = source.split(UNIT)
    prelude, kernels = parts[0], parts[1:]
    base = cpp_path[:-len(".cpp")]
    objs, procs = [], []
    compile_flags = [f for f in flags if f != "-shared"]
    for n, g in enumerate(groups):
        unit, obj = f"{base}.u{n}.cpp", f"{base}.u{n}.o"
        with open(unit, "w") as f:
            f.write(prelude + UNIT + UNIT.join(kernels[i] for i in g))
        procs.append(subprocess.Popen([cxx, *compile_flags, "-c", unit, "-o", obj], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
        objs.append((unit, obj))
    failed = None
    for p in procs:
        out, err = p.communicate()
        if p.returncode and failed is None:
            failed = subprocess.CompletedProcess(p.args, p.returncode, out, err)
    if failed is None:
        r = subprocess.run([cxx, *flags, *[o for _, o in objs], "-o", so_path, *ldflags], capture_output=True,
                           text=True)
        failed = r if r.returncode else None
    for unit, obj in objs:
        for path in (unit, obj):
            if os.path.exists(path) and (failed is None or path.endswith(".o")):
                os.unlink(path)
    return failed


__all__ = ["MIN_JOBS", "UNIT", "build_jobs", "compile_module", "units"]
