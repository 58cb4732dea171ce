"""C++/OpenMP kernels for scheduled groups, built with gcc and loaded by ctypes.

Every kernel is ``extern "C" void NAME(void** bufs, const int64_t* sizes)``:
buffer pointers in the kernel's argument order and the program's dim values,
so one shared object serves every size.  Shared objects are cached by source
hash under ``$SYMSHAPE_CACHE`` (default ``~/.cache/symshape``).

Example::

    >>> import torch, shapes
    >>> from compiler.lowering import lower
    >>> from compiler.scheduler import schedule
    >>> from compiler.cpp_codegen import generate
    >>> lp = lower(shapes.trace(lambda x: torch.relu(x) + 1, "x: f32[N]"))
    >>> "extern \\"C\\" void kernel0" in generate(lp, schedule(lp))[0]
    True
"""
from __future__ import annotations

import ctypes
import hashlib
import math
import os
import subprocess
import tempfile
import threading

import torch

from .exprs import simplify_index, to_cpp
from .ir import JVAR, RVAR, Const, Kernel, Load, Op, RedRef, SizeVal, flat_index

CTYPES = {torch.float32: "float", torch.float64: "double", torch.int64: "int64_t", torch.int32: "int32_t",
          torch.bool: "bool"}

PRELUDE = r"""
#include <cmath>
#include <cstdint>
#include <algorithm>
#include <limits>
// Python semantics for // and % (floor), used where operands may be negative.
static inline int64_t sym_floordiv(int64_t a, int64_t b) {
  int64_t q = a / b; if ((a % b != 0) && ((a < 0) != (b < 0))) q--; return q; }
static inline int64_t sym_mod(int64_t a, int64_t b) {
  int64_t r = a % b; if (r != 0 && ((r < 0) != (b < 0))) r += b; return r; }
static inline int64_t sym_ipow(int64_t b, int64_t e) { int64_t r = 1; while (e-- > 0) r *= b; return r; }
template <typename T> static inline T nan_max(T a, T b) { return (a != a) ? a : ((b != b) ? b : (a > b ? a : b)); }
template <typename T> static inline T nan_min(T a, T b) { return (a != a) ? a : ((b != b) ? b : (a < b ? a : b)); }
"""

# Enough work per call before OpenMP threads pay for themselves.
PARALLEL_WORK = 32768


def _const(v, dtype) -> str:
    if dtype == torch.bool:
        return "true" if v else "false"
    if dtype.is_floating_point:
        v = float(v)
        if math.isnan(v):
            return "NAN"
        if math.isinf(v):
            return ("-" if v < 0 else "") + f"(({CTYPES[dtype]})INFINITY)"
        s = repr(v)
        return s + ("f" if dtype == torch.float32 else "")
    return f"((int64_t){int(v)}LL)" if dtype == torch.int64 else str(int(v))


class _Body:
    """Emits one loop body: each distinct Val once (CSE), in dependency order."""

    def __init__(self, kernel_names, indent, parent=None):
        self.k = kernel_names
        self.lines: list[str] = []
        self.cache = dict(parent.cache) if parent is not None else {}
        self.indent = indent

    def emit(self, v) -> str:
        got = self.cache.get(v)
        if got is not None:
            return got
        ct = CTYPES[v.dtype]
        if isinstance(v, Const):
            return _const(v.value, v.dtype)
        if isinstance(v, RedRef):
            return self.k.kernel.red_var(v.red, v.index)
        if isinstance(v, SizeVal):
            code = f"(({ct})({to_cpp(v.expr, self.k.sym_names)}))"
        elif isinstance(v, Load):
            code = f"{self.k.ptr[v.buf]}[{self.k.index(v.index)}]"
        elif isinstance(v, Op):
            code = self.op(v, [self.emit(a) for a in v.args], ct)
        else:
            raise TypeError(f"unknown IR value {v!r}")
        name = f"t{self.k.counter}"
        self.k.counter += 1
        self.lines.append(f"{self.indent}const {ct} {name} = {code};")
        self.cache[v] = name
        return name

    @staticmethod
    def op(v, a, ct) -> str:
        o = v.op
        fl = v.dtype.is_floating_point
        binary = {"add": "+", "sub": "-", "mul": "*", "div": "/", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
                  "eq": "==", "ne": "!=", "and": "&&", "or": "||"}
        if o in binary:
            return f"{a[0]} {binary[o]} {a[1]}"
        if o == "neg":
            return f"-{a[0]}"
        if o == "not":
            return f"!{a[0]}"
        if o == "cast":
            if v.dtype == torch.bool:
                return f"({a[0]} != 0)"
            return f"static_cast<{ct}>({a[0]})"
        if o == "relu":
            return f"({a[0]} < 0 ? ({ct})0 : {a[0]})"
        if o == "where":
            return f"({a[0]} ? {a[1]} : {a[2]})"
        if o == "rsqrt":
            return f"({ct})1 / std::sqrt({a[0]})"
        if o == "reciprocal":
            return f"({ct})1 / {a[0]}"
        if o == "sigmoid":
            return f"({ct})1 / (({ct})1 + std::exp(-{a[0]}))"
        if o in ("maximum", "minimum"):
            if fl:
                return f"nan_{o[:3]}<{ct}>({a[0]}, {a[1]})"
            return f"std::{o[:3]}<{ct}>({a[0]}, {a[1]})"
        if o == "abs":
            return f"std::abs({a[0]})"
        if o in ("exp", "log", "sqrt", "tanh", "erf", "sin", "cos", "floor", "ceil", "log1p", "expm1", "pow"):
            return f"std::{o}({', '.join(a)})"
        raise NotImplementedError(f"C++ codegen for op {o}")


class _KernelGen:
    def __init__(self, kernel: Kernel, lp, sym_names):
        self.kernel = kernel
        self.lp = lp
        self.sym_names = sym_names
        self.counter = 0
        stores = [b for b, *_ in kernel.inner_stores + kernel.row_stores]
        self.args = sorted(kernel.reads) + [b.name for b in stores]
        self.ptr = {name: f"b{i}" for i, name in enumerate(self.args)}

    def index(self, e) -> str:
        return to_cpp(simplify_index(e), self.sym_names)

    def source(self) -> str:
        k, lp = self.kernel, self.lp
        out = [f'extern "C" void {k.name}(void** bufs, const int64_t* sizes) {{']
        for i, s in enumerate(lp.symbols):
            out.append(f"  const int64_t {self.sym_names[s]} = sizes[{i}]; (void){self.sym_names[s]};")
        written = {b.name for b, *_ in k.inner_stores + k.row_stores}
        for i, name in enumerate(self.args):
            ct = CTYPES[lp.buffers[name].dtype]
            q = "" if name in written else "const "
            out.append(f"  {q}{ct}* __restrict__ {self.ptr[name]} = ({q}{ct}*)bufs[{i}];")
        ov = k.outer_vars
        rows = " * ".join(f"(int64_t)({to_cpp(s, self.sym_names)})" for s in k.outer) or "1"
        work = " + ".join([f"(int64_t)({to_cpp(r.rsize, self.sym_names)})" for r, _, _ in k.reductions]
                          + [f"(int64_t)({to_cpp(L, self.sym_names)})" for _, L, _ in k.inner_stores] + ["1"])
        out.append(f"  const bool par = ({rows}) * ({work}) >= {PARALLEL_WORK};")
        ind = "  "
        if ov:
            coll = f" collapse({len(ov)})" if len(ov) > 1 else ""
            out.append(f"  #pragma omp parallel for{coll} if(par)")
            for v, s in zip(ov, k.outer):
                out.append(f"{ind}for (int64_t {v} = 0; {v} < {to_cpp(s, self.sym_names)}; {v}++)")
                ind += "  "
            out.append(f"{ind[:-2]}{{")
        row = _Body(self, ind)
        for n, (red, _, body) in enumerate(k.reductions):
            ct = CTYPES[red.dtype]
            ident = {"sum": _const(0, red.dtype),
                     "max": _const(-math.inf, red.dtype) if red.dtype.is_floating_point
                     else f"std::numeric_limits<{ct}>::lowest()",
                     "min": _const(math.inf, red.dtype) if red.dtype.is_floating_point
                     else f"std::numeric_limits<{ct}>::max()"}[red.op]
            row.lines.append(f"{ind}{ct} red{n} = {ident};")
            row.lines.append(f"{ind}for (int64_t {RVAR} = 0; {RVAR} < {to_cpp(red.rsize, self.sym_names)}; {RVAR}++) {{")
            inner = _Body(self, ind + "  ", row)
            v = inner.emit(body)
            acc = f"red{n}"
            upd = {"sum": f"{acc} += {v};",
                   "max": f"{acc} = ({v} > {acc} || {v} != {v}) ? {v} : {acc};",
                   "min": f"{acc} = ({v} < {acc} || {v} != {v}) ? {v} : {acc};"}[red.op]
            row.lines += inner.lines + [f"{ind}  {upd}", f"{ind}}}"]
        for buf, value in k.row_stores:
            v = row.emit(value)
            row.lines.append(f"{ind}{self.ptr[buf.name]}[{self.index(flat_index(ov, buf.strides))}] = {v};")
        for buf, L, value in k.inner_stores:
            if not ov and not k.reductions:
                row.lines.append(f"{ind}#pragma omp parallel for if(par)")
            row.lines.append(f"{ind}for (int64_t {JVAR} = 0; {JVAR} < {to_cpp(L, self.sym_names)}; {JVAR}++) {{")
            inner = _Body(self, ind + "  ", row)
            v = inner.emit(value)
            idx = self.index(flat_index(ov + (JVAR,), buf.strides))
            row.lines += inner.lines + [f"{ind}  {self.ptr[buf.name]}[{idx}] = {v};", f"{ind}}}"]
        out += row.lines
        if ov:
            out.append(f"{ind[:-2]}}}")
        out.append("}")
        return "\n".join(out)


def generate(lp, steps):
    """C++ source for every kernel step, and per kernel its buffer argument order."""
    sym_names = {s: f"ks{i}" for i, s in enumerate(lp.symbols)}
    parts, args = [PRELUDE], {}
    for s in steps:
        if isinstance(s, Kernel):
            g = _KernelGen(s, lp, sym_names)
            parts.append(g.source())
            args[s.name] = g.args
    return "\n\n".join(parts), args


def cache_dir() -> str:
    d = os.environ.get("SYMSHAPE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "symshape")
    os.makedirs(os.path.join(d, "cpp"), exist_ok=True)
    return os.path.join(d, "cpp")


CXXFLAGS = ["-O3", "-fopenmp", "-march=native", "-shared", "-fPIC", "-std=c++17", "-fno-math-errno"]
_lock = threading.Lock()
BUILD_COUNT = {"gcc": 0}


def build(source: str) -> ctypes.CDLL:
    """Compile ``source`` (once per distinct source and flags) and load it."""
    key = hashlib.sha256((source + " ".join(CXXFLAGS)).encode()).hexdigest()[:24]
    d = cache_dir()
    so = os.path.join(d, f"k_{key}.so")
    with _lock:
        if not os.path.exists(so):
            fd, tmp_cpp = tempfile.mkstemp(suffix=".cpp", dir=d)
            with os.fdopen(fd, "w") as f:
                f.write(source)
            tmp_so = tmp_cpp[:-4] + ".so"
            cxx = os.environ.get("CXX", "g++")
            r = subprocess.run([cxx, *CXXFLAGS, tmp_cpp, "-o", tmp_so], capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"symshape: C++ kernel build failed:\n{r.stderr[-4000:]}\nsource: {tmp_cpp}")
            os.replace(tmp_so, so)  # atomic: concurrent builders never load a half-written file
            os.unlink(tmp_cpp)
            BUILD_COUNT["gcc"] += 1
        return ctypes.CDLL(so)


def make_launchers(lp, steps) -> dict:
    """Kernel name -> (buffer argument names, launch(tensors, size values))."""
    src, args = generate(lp, steps)
    if not args:
        return {}
    lib = build(src)
    out = {}
    for name, names in args.items():
        fn = getattr(lib, name)
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        fn.restype = None
        n = len(names)

        def launch(tensors, sizes, _fn=fn, _n=n):
            ptrs = (ctypes.c_void_p * _n)(*[t.data_ptr() for t in tensors])
            vals = (ctypes.c_int64 * max(len(sizes), 1))(*sizes)
            _fn(ptrs, vals)
        out[name] = (names, launch)
    return out
