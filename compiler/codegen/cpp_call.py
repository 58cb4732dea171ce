"""C++ kernels called from Python through a CPython function instead of ctypes.

A compiled C++ kernel is ``int kernel(void** ptrs, int64_t* sizes)``.  Through ctypes a
call builds a ``c_void_p`` array from the buffers' addresses and converts both arguments:
about 3 us of the host's time per launch on the 2-core CI machine, where a BERT training
step at a few tokens launches 40 kernels (~0.12 ms of a 1.1 ms forward and backward).
:func:`caller` builds, once per Python version and cached on disk beside the kernels, a
one-function extension module: ``call(kernel address, sizes address, *buffer addresses)``
(``METH_FASTCALL``: the addresses are Python ints, read in C; the GIL is released while the
kernel runs, as ctypes does).  Where it cannot be built (no Python headers, no compiler),
:func:`caller` returns None and launches stay on ctypes, with the reason in :data:`STATE`.

Example::

    >>> import ctypes, tempfile
    >>> call = caller(tempfile.mkdtemp())
    >>> call is None or callable(call)
    True
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import sysconfig
import tempfile
import threading

#: How the extension fared in this process: ``call`` (the function, or None) and ``why`` it is None.
STATE: dict = {}
_lock = threading.Lock()

MODULE = "symshape_cpp_call"

SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef int (*kernel_fn)(void**, int64_t*);

/* call(kernel, sizes, *buffers): the kernel's return value (its size-class variant, or -1). */
static PyObject* call(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 2) {
    PyErr_SetString(PyExc_TypeError, "call(kernel address, sizes address, *buffer addresses)");
    return NULL;
  }
  kernel_fn fn = (kernel_fn)PyLong_AsVoidPtr(args[0]);
  int64_t* sizes = (int64_t*)PyLong_AsVoidPtr(args[1]);
  Py_ssize_t n = nargs - 2;
  void* small[64];
  void** ptrs = n <= 64 ? small : (void**)PyMem_Malloc(n * sizeof(void*));
  if (ptrs == NULL) return PyErr_NoMemory();
  for (Py_ssize_t i = 0; i < n; i++) ptrs[i] = PyLong_AsVoidPtr(args[i + 2]);
  if (fn == NULL || PyErr_Occurred()) {
    if (ptrs != small) PyMem_Free(ptrs);
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a null kernel address");
    return NULL;
  }
  int r;
  Py_BEGIN_ALLOW_THREADS
  r = fn(ptrs, sizes);
  Py_END_ALLOW_THREADS
  if (ptrs != small) PyMem_Free(ptrs);
  return PyLong_FromLong(r);
}

static PyMethodDef methods[] = {
  {"call", (PyCFunction)(void (*)(void))call, METH_FASTCALL, "call(kernel, sizes, *buffers)"},
  {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "symshape_cpp_call", NULL, -1, methods};

PyMODINIT_FUNC PyInit_symshape_cpp_call(void) { return PyModule_Create(&module); }
"""


def caller(directory: str):
    """The extension's ``call`` (built into ``directory`` once), or None where it cannot be
    built or loaded (``STATE["why"]`` says why); ``SYMSHAPE_CPP_CALL=0`` keeps ctypes."""
    if "call" in STATE:
        return STATE["call"]
    with _lock:
        if "call" not in STATE:
            STATE["call"], STATE["why"] = _load(directory)
    return STATE["call"]


def _load(directory: str) -> tuple:
    if os.environ.get("SYMSHAPE_CPP_CALL", "1") == "0":
        return None, "SYMSHAPE_CPP_CALL=0"
    include = sysconfig.get_paths().get("include")
    if not include or not os.path.exists(os.path.join(include, "Python.h")):
        return None, f"no Python.h under {include}"
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    key = hashlib.sha256((SOURCE + sys.version + include).encode()).hexdigest()[:16]
    so = os.path.join(directory, f"{MODULE}_{key}{suffix}")
    if not os.path.exists(so):
        fd, src = tempfile.mkstemp(suffix=".c", dir=directory)
        with os.fdopen(fd, "w") as f:
            f.write(SOURCE)
        tmp = src[:-2] + suffix
        cc = os.environ.get("CC", "gcc")
        try:
            r = subprocess.run([cc, "-O2", "-shared", "-fPIC", f"-I{include}", src, "-o", tmp],
                               capture_output=True, text=True)
        except OSError as e:  # no compiler on PATH
            return None, f"{cc}: {e}"
        finally:
            os.unlink(src)
        if r.returncode != 0:
            return None, f"{cc} failed: {r.stderr.strip()[-300:]}"
        os.replace(tmp, so)  # atomic: a concurrent builder never loads a half-written file
    try:
        loader = importlib.machinery.ExtensionFileLoader(MODULE, so)
        spec = importlib.util.spec_from_file_location(MODULE, so, loader=loader)
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
    except ImportError as e:
        return None, f"loading {so}: {e}"
    return mod.call, None


__all__ = ["caller", "STATE", "SOURCE"]
