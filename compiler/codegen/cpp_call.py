"""C++ kernels called from Python through a CPython function instead of ctypes.

A compiled C++ kernel is ``int kernel(void** ptrs, int64_t* sizes)``.  Through ctypes a
call builds a ``c_void_p`` array from the buffers' addresses and converts both arguments:
about 3 us of the host's time per launch on the 2-core CI machine, where a BERT training
step at a few tokens launches 40 kernels (~0.12 ms of a 1.1 ms forward and backward).
:func:`caller` builds, once per Python version and cached on disk beside the kernels, a
one-function extension module: ``call(kernel address, n, *n sizes, *buffer addresses)``
(``METH_FASTCALL``: sizes and addresses are Python ints, read in C onto the stack; the GIL is
released while the kernel runs, as ctypes does), so a launch bound to new sizes (a training
step at a new length) makes no ctypes array either.  Where it cannot be built (no Python headers, no compiler),
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

/* call(kernel, n, *sizes, *buffers): the kernel's return value (its size-class variant, or -1). */
static PyObject* call(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 2) {
    PyErr_SetString(PyExc_TypeError, "call(kernel address, n, *n sizes, *buffer addresses)");
    return NULL;
  }
  kernel_fn fn = (kernel_fn)PyLong_AsVoidPtr(args[0]);
  Py_ssize_t ns = PyLong_AsSsize_t(args[1]);
  if (PyErr_Occurred()) return NULL;
  if (fn == NULL || ns < 0 || ns > nargs - 2) {
    PyErr_SetString(PyExc_ValueError, "a null kernel address, or fewer arguments than sizes");
    return NULL;
  }
  Py_ssize_t np = nargs - 2 - ns;
  int64_t small_sizes[64];
  void* small_ptrs[64];
  int64_t* sizes = ns <= 64 ? small_sizes : (int64_t*)PyMem_Malloc((ns ? ns : 1) * sizeof(int64_t));
  void** ptrs = np <= 64 ? small_ptrs : (void**)PyMem_Malloc((np ? np : 1) * sizeof(void*));
  PyObject* result = NULL;
  if (sizes == NULL || ptrs == NULL) {
    PyErr_NoMemory();
  } else {
    for (Py_ssize_t i = 0; i < ns; i++) sizes[i] = PyLong_AsLongLong(args[2 + i]);
    for (Py_ssize_t i = 0; i < np; i++) ptrs[i] = PyLong_AsVoidPtr(args[2 + ns + i]);
    if (!PyErr_Occurred()) {
      int r;
      Py_BEGIN_ALLOW_THREADS
      r = fn(ptrs, sizes);
      Py_END_ALLOW_THREADS
      result = PyLong_FromLong(r);
    }
  }
  if (sizes != NULL && sizes != small_sizes) PyMem_Free(sizes);
  if (ptrs != NULL && ptrs != small_ptrs) PyMem_Free(ptrs);
  return result;
}

static PyMethodDef methods[] = {
  {"call", (PyCFunction)(void (*)(void))call, METH_FASTCALL, "call(kernel, n, *sizes, *buffers)"},
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
