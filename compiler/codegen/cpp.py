"""C++/OpenMP kernels for scheduled groups, built with gcc, loaded by ctypes, called through :mod:`.cpp_call`.

Every kernel is ``extern "C" int NAME(void** bufs, const int64_t* sizes)``:
buffer pointers in the kernel's argument order and the program's dim values,
so one shared object serves every size.  Row loops (reductions and row
stores) are ``#pragma omp simd`` loops: gcc vectorizes them, calling glibc's
vector math (libmvec) for exp/erf/tanh/..., with vector accumulators for
reductions; rows run on OpenMP threads only when each thread gets
:data:`PARALLEL_WORK` element-ops.  Each kernel is built in size-class
variants (:func:`size_classes`) and its entry picks one per call from the
sizes and returns its index, so a new size class never retraces.  Shared
objects are cached by source hash under ``$SYMSHAPE_CACHE`` (default
``~/.cache/symshape``): a second process with the same program runs no gcc.

Example::

    >>> import torch, shapes
    >>> from compiler.lowering import lower
    >>> from compiler.scheduler import schedule
    >>> from compiler.codegen.cpp import CPP
    >>> lp = lower(shapes.trace(lambda x: torch.relu(x) + 1, "x: f32[N]"))
    >>> src, meta = CPP.generate(lp, schedule(lp))
    >>> args, tags, fn = meta["kernel0"]
    >>> f'extern "C" int {fn}(' in src, tags
    (True, ['a16', 'any'])
"""
from __future__ import annotations

import ctypes
import hashlib
import math
import os
import tempfile
import threading
from dataclasses import dataclass

import sympy
import torch

from shapes.kernel_helpers import CPP_SOURCE
from shapes.printers import to_cpp

from ..ir import JVAR, RVAR, Const, Op, OpKind, ReductionKind, compute_dtype, flat_index
from .cpu_heap import keep_heap_blocks
from . import cpp_call
from .cpp_build import UNIT, compile_module
from .cpp_loops import (COLUMN_BLOCK, column_dim, affine_in_loops, column_reduction, element_cost, fold_in_range,
                        piece_ranges, row_pieces)
from .decompositions import Primitives, spellings
from .skeleton import INFIX, KernelGen, Literals, Scope, Target, call, declare, infix_table, templates

# Half types are stored as their 16 bits and converted at loads and stores (computed in float).
CTYPES = {torch.float32: "float", torch.float64: "double", torch.int64: "int64_t", torch.int32: "int32_t",
          torch.bool: "bool", torch.float16: "uint16_t", torch.bfloat16: "uint16_t"}
#: Buffer element types: bool tensors as their bytes (0/1), so loads and stores vectorize.
BUF_CTYPES = {**CTYPES, torch.bool: "uint8_t"}
#: Types of values in registers: a bfloat16 value is the float it stands for (see ``rbf``).
REG_CTYPES = {**CTYPES, torch.bfloat16: "float"}

PRELUDE = r"""
#include <cmath>
#include <cstdint>
#include <algorithm>
#include <limits>
#include <cstring>
#include <omp.h>
// glibc's vector math (libmvec, same special cases as the scalar functions, <= 4 ulp): declared
// SIMD-callable so `#pragma omp simd` loops vectorize exp/erf/... without -ffast-math.
#define SYMSHAPE_SIMD(fn) extern "C" { double fn(double) noexcept __attribute__((__simd__("notinbranch"))); \
  float fn##f(float) noexcept __attribute__((__simd__("notinbranch"))); }
SYMSHAPE_SIMD(exp) SYMSHAPE_SIMD(log) SYMSHAPE_SIMD(sin) SYMSHAPE_SIMD(cos) SYMSHAPE_SIMD(tanh)
SYMSHAPE_SIMD(erf) SYMSHAPE_SIMD(log1p) SYMSHAPE_SIMD(expm1)
extern "C" { double pow(double, double) noexcept __attribute__((__simd__("notinbranch")));
  float powf(float, float) noexcept __attribute__((__simd__("notinbranch"))); }
// float16 through the compiler's _Float16 (IEEE round-to-nearest-even conversions).
static inline float h2f(uint16_t b) { _Float16 h; std::memcpy(&h, &b, 2); return (float)h; }
static inline uint16_t f2h(float f) { _Float16 h = (_Float16)f; uint16_t b; std::memcpy(&b, &h, 2); return b; }
// bfloat16: the high half of a float, rounded to nearest even (NaN stays NaN).
static inline float bf2f(uint16_t b) { uint32_t u = (uint32_t)b << 16; float f; std::memcpy(&f, &u, 4); return f; }
static inline uint16_t f2bf(float f) {
  uint32_t u; std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u); return (uint16_t)(u >> 16); }
// In registers a bfloat16 value is the float it stands for (f2bf then bf2f in one step, same bits):
// a chain of bf16 ops rounds after each op without a trip through 16-bit lanes, which costs gcc's
// vectorized loops a pack and an unpack per rounding (GPT-2's GELU backward: ~20 roundings per
// element, 1.6x slower).  It is stored with its high half (exact: the low half is zero).
static inline float rbf(float f) {
  uint32_t u; std::memcpy(&u, &f, 4);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  const uint32_t q = (u | 0x00400000u) & 0xffff0000u;  // NaN: quiet, payload truncated, as f2bf
  r = (f != f) ? q : r;
  float o; std::memcpy(&o, &r, 4); return o; }
static inline uint16_t bfbits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return (uint16_t)(u >> 16); }
// A 16-bit element read through the aligned 32-bit word that holds it: gcc 12 has no 16-bit gather,
// so a loop loading half values at a non-affine index (a cat, a head transpose) would stay scalar;
// 32-bit gathers vectorize.  The word never leaves the element's 4-byte block (never its page).
typedef uint32_t __attribute__((__may_alias__)) symshape_u32a;
static inline uint16_t gather16(const uint16_t* p, int64_t i) {
  const uintptr_t a = (uintptr_t)(p + i);
  return (uint16_t)(*(const symshape_u32a*)(a & ~(uintptr_t)3) >> ((a & 2) * 8)); }
// erf as ATen's vectorized GELU computes it (Vectorized<float>::erf: Abramowitz & Stegun 7.1.26,
// |error| <= 1.5e-7, one exp): eager's GELU(x) = x / 2 * (1 + erf(x * sqrt(1/2))) runs this.
// Only GELU's erf is spelled so (see _erf in cpp.py).
static inline float gelu_erf(float x) {
  const float t = 1.0f / std::fma(0.3275911f, std::fabs(x), 1.0f);
  const float r = std::fma(std::fma(std::fma(std::fma(1.061405429f, t, -1.453152027f), t, 1.421413741f), t,
                                    -0.284496736f), t, 0.254829592f);
  return std::copysign(std::fma(-std::exp(-(x * x)) * t, r, 1.0f), x); }
template <typename T> static inline T nan_max(T a, T b) { return (a != a) ? a : ((b != b) ? b : (a > b ? a : b)); }
template <typename T> static inline T nan_min(T a, T b) { return (a != a) ? a : ((b != b) ? b : (a < b ? a : b)); }
""" + CPP_SOURCE

# Element-ops (:func:`~compiler.codegen.cpp_loops.element_cost`) per OpenMP thread before another
# thread pays for its start-up, which on a loaded machine is a scheduler time slice, not microseconds.
PARALLEL_WORK = 1 << 18
#: float32 lanes of one AVX-512 register: the aligned size class has row extents divisible by it.
VEC = 16


@dataclass(frozen=True)
class SizeClass:
    """A kernel variant's size class: every loop extent a multiple of :data:`VEC` (``aligned``)."""

    tag: str
    aligned: bool
    extents: tuple

    def predicate(self, g: KernelGen) -> str:
        """The C++ condition on the sizes under which this variant runs."""
        return " && ".join(f"(({g.expr(e)}) % {VEC} == 0)" for e in self.extents) or "true"


def size_classes(g: KernelGen) -> list:
    """``[(tag, SizeClass or None)]``: the variants to build, tried in order at call time.

    The aligned variant is built where some row extent (reduction length or
    stored row length) is symbolic or a constant multiple of :data:`VEC`; the
    general one (``None``) unless the aligned one holds for every size.

    >>> import torch, shapes
    >>> from compiler.lowering import lower
    >>> from compiler.scheduler import schedule
    >>> lp = lower(shapes.trace(lambda x: torch.softmax(x, -1), "x: f32[B, T]"))
    >>> k = schedule(lp)[0]
    >>> [t for t, _ in size_classes(KernelGen(CPP, k, lp, CPP.sym_names(lp)))]
    ['a16', 'any']
    """
    k = g.kernel
    extents = list(dict.fromkeys([r.rsize for r, _, _ in k.reductions] + [L for _, L, _ in k.inner_stores]))
    if not extents:
        return [("any", None)]
    consts = [sympy.sympify(e) for e in extents if sympy.sympify(e).is_Integer]
    if any(int(c) % VEC for c in consts):
        return [("any", None)]
    cls = SizeClass("a16", True, tuple(extents))
    if len(consts) == len(extents):
        return [("a16", cls)]
    return [("a16", cls), ("any", None)]


def _minmax(which):
    def spell(a, v, t):
        if v.dtype.is_floating_point:
            return f"nan_{which}<{t}>({a[0]}, {a[1]})"
        return f"std::{which}<{t}>({a[0]}, {a[1]})"
    return spell


def _cast(a, v, t):
    x, src, dst = a[0], v.args[0].dtype, v.dtype
    if src == torch.float16:
        x = f"h2f({x})"
    if dst == torch.bool:
        return f"({x} != 0)"
    if dst == torch.float16:
        return f"f2h((float)({x}))"
    if dst == torch.bfloat16:
        return f"rbf((float)({x}))"
    return f"static_cast<{t}>({x})"


def _erf(a, v, t):
    # erf(x * sqrt(1/2)) is GELU's (compiler.ops_lowering lowers aten.gelu so): spelled as eager's
    # GELU kernel computes it (gelu_erf in the prelude, ATen's vectorized erf, |error| <= 1.5e-7,
    # 5x cheaper than glibc's vector erff).  Every other erf stays glibc's (<= 4 ulp).
    m = v.args[0]
    if v.dtype == torch.float32 and isinstance(m, Op) and OpKind(m.op) is OpKind.MUL and any(
            isinstance(c, Const) and abs(float(c.value) - math.sqrt(0.5)) < 1e-9 for c in m.args):
        return f"gelu_erf({a[0]})"
    return f"std::erf({a[0]})"


OP_TABLE = {
    **infix_table({**INFIX, OpKind.AND: "&&", OpKind.OR: "||"}),
    **templates({OpKind.NEG: "-{0}", OpKind.NOT: "!{0}", OpKind.RELU: "({0} < 0 ? ({t})0 : {0})",
                 OpKind.WHERE: "({0} ? {1} : {2})", OpKind.RSQRT: "({t})1 / std::sqrt({0})",
                 OpKind.RECIPROCAL: "({t})1 / {0}"}),
    **spellings(Primitives(exp="std::exp", log="std::log", one="({t})1", inf="(({t})INFINITY)",
                           where=lambda c, a, b: f"({c} ? {a} : {b})",
                           log1p="std::log1p", expm1="std::expm1", tanh="std::tanh")),
    OpKind.CAST: _cast, OpKind.MAXIMUM: _minmax("max"), OpKind.MINIMUM: _minmax("min"),
    OpKind.ERF: _erf,
    **{k: call(f"std::{k.value}") for k in (OpKind.ABS, OpKind.EXP, OpKind.LOG, OpKind.SQRT,
                                          OpKind.SIN, OpKind.FLOOR, OpKind.CEIL, OpKind.POW)},
    # gcc merges sin(x) and cos(x) of one argument into a scalar sincos call (no vector variant:
    # a rotary embedding's loop stays scalar).  cos is even, so cos(x + 0) is cos(x) for every x
    # (-0 becomes +0), and the argument differs from sin's.
    OpKind.COS: lambda a, v, t: f"std::cos({a[0]} + ({t})0)",
}


LITERALS = Literals("true", "false", "NAN", lambda d: f"(({CTYPES[d]})INFINITY)",
                    lambda d: "f" if d == torch.float32 else "",
                    lambda v, d: f"((int64_t){v}LL)" if d == torch.int64 else str(v))
_const = LITERALS.spell


def cache_dir() -> str:
    """Where built kernels are cached (``$SYMSHAPE_CACHE`` or ``~/.cache/symshape``)."""
    d = os.environ.get("SYMSHAPE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "symshape")
    os.makedirs(os.path.join(d, "cpp"), exist_ok=True)
    return os.path.join(d, "cpp")


# -fno-tree-pre: gcc 12's partial redundancy elimination turns a row's store loop that reads a
# reduction's result and calls vector math (BERT's LayerNorm + GELU backward) into a loop the
# vectorizer refuses ("latch block not empty"): it ran scalar, 6x slower (461 -> 77 us).
CXXFLAGS = ["-O3", "-fopenmp", "-march=native", "-shared", "-fPIC", "-std=c++17", "-fno-math-errno", "-fno-tree-pre"]
LDFLAGS = ["-lmvec", "-lm"]
_lock = threading.Lock()
BUILD_COUNT = {"gcc": 0}


def build(source: str) -> ctypes.CDLL:
    """Compile ``source`` (once per distinct source and flags) and load it."""
    keep_heap_blocks()  # the kernels' buffers from malloc's heap, not fresh pages (cpu_heap)
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
            # Its kernels over translation units compiled on every core (compiler.codegen.cpp_build).
            r = compile_module(cxx, CXXFLAGS, LDFLAGS, source, tmp_cpp, tmp_so)
            if r is not None:
                raise RuntimeError(f"symshape: C++ kernel build failed:\n{r.stderr[-4000:]}\nsource: {tmp_cpp}")
            os.replace(tmp_so, so)  # atomic: concurrent builders never load a half-written file
            os.unlink(tmp_cpp)
            BUILD_COUNT["gcc"] += 1
        return ctypes.CDLL(so)


def _bound_launch(fn, tags, calls, name, sizes, addr=None, call=None):
    """A C++ kernel's launch at fixed ``sizes`` (the wrapper binds once per input shape), so a call
    passes only its buffers' addresses: through :mod:`compiler.codegen.cpp_call`'s ``call`` where it
    is built (``addr``: the kernel's address), else ctypes (the size array built here once, a pointer array
    per call).  The arrays are the call's own (the GIL is released while the kernel runs: nothing
    shared is written).

    >>> got = []
    >>> class Fn:
    ...     def __call__(self, ptrs, vals): got.append((ptrs[0], vals[0], vals[1])); return 0
    >>> launch = _bound_launch(Fn(), ["all"], {"all": 0}, "k", (5, 7))
    >>> launch([torch.zeros(2)]); got[0][1:]
    (5, 7)
    """
    if call is not None and addr is not None:
        # Through the extension (compiler.codegen.cpp_call): sizes and addresses as ints, read in C.
        head = (addr, len(sizes), *sizes)

        def direct(tensors):
            i = call(*head, *[x.data_ptr() for x in tensors])
            if i < 0:
                raise RuntimeError(f"symshape: no size-class variant of {name} holds for sizes {tuple(sizes)}")
            calls[tags[i]] += 1
        direct.kernel = fn  # its library stays loaded while the launch lives
        return direct
    vals = (ctypes.c_int64 * max(len(sizes), 1))(*sizes)
    ptr_types: dict = {}

    def launch(tensors):
        n = len(tensors)
        t = ptr_types.get(n)
        if t is None:
            t = ptr_types[n] = ctypes.c_void_p * n
        i = fn(t(*[x.data_ptr() for x in tensors]), vals)
        if i < 0:
            raise RuntimeError(f"symshape: no size-class variant of {name} holds for sizes {tuple(sizes)}")
        calls[tags[i]] += 1
    return launch


class CppTarget(Target):
    """C++17 with OpenMP: rows of a kernel in parallel, row loops vectorized (``omp simd``)."""

    name = "C++"
    op_table, type_names = OP_TABLE, CTYPES
    const = staticmethod(_const)

    def declare(self, name, code, dtype) -> str:
        if dtype == torch.bool:
            # gcc 12 vectorizes no loop holding a C++ bool value; a 0/1 int vectorizes with floats.
            return f"const int {name} = (int)(bool)({code});"
        return f"const {REG_CTYPES[dtype]} {name} = {code};"

    def load(self, scope: Scope, v) -> str:
        g = scope.g
        dt = g.lp.buffers[v.buf].dtype
        index = v.index
        j_range = scope.j_range
        if j_range is not None and not affine_in_loops(index):
            # In one piece of a row split at a seam the seam's min/max has one winner: the load
            # is affine there (a plain vector load, not a gather).
            index = fold_in_range(index, *j_range)
        if BUF_CTYPES[dt] == "uint16_t" and not affine_in_loops(index):
            code = f"gather16({g.ptr[v.buf]}, {g.index(index)})"
        else:
            code = f"{g.ptr[v.buf]}[{g.index(index)}]"
        return f"bf2f({code})" if dt == torch.bfloat16 else code

    @staticmethod
    def stored(buf, v: str) -> str:
        """The code storing register value ``v`` into an element of ``buf``."""
        return f"bfbits({v})" if buf.dtype == torch.bfloat16 else v

    def size_value(self, gen, v):
        return declare(f"(({CTYPES[v.dtype]})({gen.expr(v.expr)}))")

    def print_expr(self, e, names, nonneg) -> str:
        return to_cpp(e, names, nonneg)

    def kernel_source(self, g: KernelGen):
        k = g.kernel
        simd = not (set(k.reads) & g.written)  # no buffer is both read and written: lanes are independent
        variants = size_classes(g) if simd and not column_reduction(k) else [("any", None)]
        fns, checks = [], []
        for tag, cls in variants:
            fname = f"{g.fn_base or k.name}__{tag}"
            fns.append(f"static void {fname}(void** bufs, const int64_t* sizes) {{")
            fns += self._body(g, cls, simd)
            fns.append("}")
            checks.append((cls.predicate(g) if cls else "true", fname))
        out = fns + [f'extern "C" int {g.fn_base or k.name}(void** bufs, const int64_t* sizes) {{']
        out += self._sym_lines(g)
        for i, (pred, fname) in enumerate(checks):
            out.append(f"  if ({pred}) {{ {fname}(bufs, sizes); return {i}; }}")
        out += ["  return -1;", "}"]
        return "\n".join(out), [tag for tag, _ in variants]

    def _sym_lines(self, g):
        return [f"  const int64_t {g.sym_names[s]} = sizes[{i}]; (void){g.sym_names[s]};"
                for i, s in enumerate(g.lp.symbols)]

    def _pointers(self, g: KernelGen) -> list:
        out = []
        for i, name in enumerate(g.args):
            ct = BUF_CTYPES[g.lp.buffers[name].dtype]
            q = "" if name in g.written else "const "
            out.append(f"  {q}{ct}* __restrict__ {g.ptr[name]} = ({q}{ct}*)bufs[{i}];")
        return out

    def _body(self, g: KernelGen, cls, simd: bool):
        """One size-class variant's statements; ``cls`` None is the general one."""
        k = g.kernel
        out = self._sym_lines(g) + self._pointers(g)
        vec = simd
        if simd and column_reduction(k):
            return out + self._column_body(g)

        def extent(e):
            # Under the aligned class every extent is a multiple of the vector width: saying so
            # in the trip count lets gcc drop the scalar epilogue.
            x = g.expr(e)
            return f"(({x}) & ~(int64_t){VEC - 1})" if cls is not None and cls.aligned else x

        ov = k.outer_vars
        rows = " * ".join(f"(int64_t)({g.expr(s)})" for s in k.outer) or "1"
        work = " + ".join([f"(int64_t)({g.expr(r.rsize)}) * {element_cost(body)}" for r, _, body in k.reductions]
                          + [f"(int64_t)({g.expr(L)}) * {element_cost(v)}" for _, L, v in k.inner_stores] + ["1"])
        # Threads only where each gets at least PARALLEL_WORK element-ops: tiny sizes stay serial.
        out.append(f"  const int64_t nt = std::min<int64_t>(omp_get_max_threads(), "
                   f"({rows}) * ({work}) / {PARALLEL_WORK});")
        ind = "  "
        if ov:
            coll = f" collapse({len(ov)})" if len(ov) > 1 else ""
            out.append(f"  #pragma omp parallel for{coll} num_threads(nt > 1 ? nt : 1) if(parallel: nt > 1)")
            for v, s in zip(ov, k.outer):
                out.append(f"{ind}for (int64_t {v} = 0; {v} < {g.expr(s)}; {v}++)")
                ind += "  "
            out.append(f"{ind[:-2]}{{")
        row = Scope(g, ind)
        for n, (red, _, body) in enumerate(k.reductions):
            acc_dt = compute_dtype(red.dtype)
            ct = CTYPES[acc_dt]
            fl = acc_dt.is_floating_point
            ident = {"sum": _const(0, acc_dt),
                     "max": _const(-math.inf, acc_dt) if fl else f"std::numeric_limits<{ct}>::lowest()",
                     "min": _const(math.inf, acc_dt) if fl else f"std::numeric_limits<{ct}>::max()"}[red.op]
            acc = f"red{n}"
            row.lines.append(f"{ind}{ct} {acc} = {ident};")
            nan = fl and red.op != "sum"
            if nan:
                # NaN propagates through max/min (eager's semantics): tracked apart from the
                # comparison so the loop stays an OpenMP max/min reduction.
                row.lines.append(f"{ind}int {acc}_nan = 0;")
            if vec and acc_dt != torch.bool:
                clause = f"reduction({'+' if red.op == 'sum' else ReductionKind(red.op).value}:{acc})"
                row.lines.append(f"{ind}#pragma omp simd {clause}" + (f" reduction(|:{acc}_nan)" if nan else ""))
            row.lines.append(f"{ind}for (int64_t {RVAR} = 0; {RVAR} < {extent(red.rsize)}; {RVAR}++) {{")
            inner = Scope(g, ind + "  ", parent=row)
            v = inner.emit(g.accumulated(body))
            cmp = ">" if red.op == "max" else "<"
            if red.op == "sum":
                upd = f"{acc} += {v};"
            elif nan:
                upd = f"{acc} = {v} {cmp} {acc} ? {v} : {acc}; {acc}_nan |= ({v} != {v});"
            else:
                upd = f"{acc} = {v} {cmp} {acc} ? {v} : {acc};"
            row.lines += inner.lines + [f"{ind}  {upd}", f"{ind}}}"]
            if nan:
                row.lines.append(f"{ind}if ({acc}_nan) {acc} = NAN;")
        for buf, value in k.row_stores:
            v = row.emit(value)
            row.lines.append(f"{ind}{g.ptr[buf.name]}[{g.index(flat_index(ov, buf.strides))}] = {self.stored(buf, v)};")
        for buf, L, value in k.inner_stores:
            self._store_loops(g, row, ind, buf, value, extent(L), vec)
        out += row.lines
        if ov:
            out.append(f"{ind[:-2]}}}")
        return out

    def _store_loops(self, g: KernelGen, row: Scope, ind: str, buf, value, extent: str, vec: bool):
        """The loops storing one row of ``buf`` (``extent`` elements) into ``row``'s lines."""
        k, ov = g.kernel, g.kernel.outer_vars
        flat = not ov and not k.reductions
        # A row stored piecewise (a cat, a rotary's rotate_half) loops once per piece: in each,
        # gcc knows j's range, folds the piece's select and min/max, and loads run at stride 1.
        pieces = [("0", extent)] if flat else row_pieces(value, extent)
        ranges = [None] if flat else piece_ranges(value)
        for (lo, hi), j_range in zip(pieces, ranges):
            if flat:
                row.lines.append(f"{ind}#pragma omp parallel for{' simd' if vec else ''} "
                                 f"num_threads(nt > 1 ? nt : 1) if(parallel: nt > 1)")
            elif vec:
                row.lines.append(f"{ind}#pragma omp simd")
            row.lines.append(f"{ind}for (int64_t {JVAR} = {lo}; {JVAR} < {hi}; {JVAR}++) {{")
            inner = Scope(g, ind + "  ", parent=row, j_range=j_range)
            v = inner.emit(value)
            idx = g.index(flat_index(ov + (JVAR,), buf.strides))
            row.lines += inner.lines + [f"{ind}  {g.ptr[buf.name]}[{idx}] = {self.stored(buf, v)};", f"{ind}}}"]

    def module_source(self, parts) -> str:
        # UNIT before each kernel: where gcc's translation units may split (cpp_build).
        return PRELUDE + "".join(UNIT + p for p in parts)

    def build(self, source):
        return build(source)

    def launcher(self, module, name, meta, lp):
        fn = getattr(module, name)
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        fn.restype = ctypes.c_int
        calls = dict.fromkeys(meta, 0)

        def launch(tensors, sizes, _fn=fn, _tags=meta, _calls=calls):
            ptrs = (ctypes.c_void_p * len(tensors))(*[t.data_ptr() for t in tensors])
            vals = (ctypes.c_int64 * max(len(sizes), 1))(*sizes)
            i = _fn(ptrs, vals)
            if i < 0:
                raise RuntimeError(f"symshape: no size-class variant of {name} holds for sizes {tuple(sizes)}")
            _calls[_tags[i]] += 1
        launch.variant_calls = calls  # size-class tag -> launches (selected by the kernel's C++ predicate)
        addr = ctypes.cast(fn, ctypes.c_void_p).value
        call = cpp_call.caller(cache_dir())
        launch.bind = lambda sizes: _bound_launch(fn, meta, calls, name, sizes, addr, call)
        if call is not None:
            # Unbound (a shape's first call, compiler.runtime): the sizes go with the addresses, so
            # a training step at a new length binds nothing per kernel.
            def launch_at(tensors, sizes, _fn=fn):
                i = call(addr, len(sizes), *sizes, *[t.data_ptr() for t in tensors])
                if i < 0:
                    raise RuntimeError(f"symshape: no size-class variant of {name} holds for sizes {tuple(sizes)}")
                calls[meta[i]] += 1
            launch.launch_at = launch_at
        return launch


    def _column_body(self, g: KernelGen) -> list:
        """A column reduction's statements: per block of :data:`COLUMN_BLOCK` columns, one
        accumulator per column, rows outer and the block's columns inner (stride 1, vectorized),
        then the row stores of each column."""
        k = g.kernel
        c = column_dim(k)
        x0, cols = k.outer_vars[c], k.outer[c]
        n_rows, ncols = g.expr(k.reductions[0][0].rsize), g.expr(cols)
        ones = [f"  const int64_t {v} = 0;" for i, v in enumerate(k.outer_vars) if i != c]  # extent-1 dims
        out = ones + [f"  const int64_t nt = std::min<int64_t>(omp_get_max_threads(), ((int64_t)({ncols}) * "
               f"(int64_t)({n_rows}) * {sum(element_cost(b) for _, _, b in k.reductions)}) / {PARALLEL_WORK});",
               "  #pragma omp parallel for num_threads(nt > 1 ? nt : 1) if(parallel: nt > 1)",
               f"  for (int64_t xb = 0; xb < {ncols}; xb += {COLUMN_BLOCK}) {{",
               f"    const int64_t xe = std::min<int64_t>({ncols}, xb + {COLUMN_BLOCK});"]
        cts = [CTYPES[compute_dtype(red.dtype)] for red, _, _ in k.reductions]
        out += [f"    {ct} acc{n}[{COLUMN_BLOCK}] = {{}};" for n, ct in enumerate(cts)]
        out += [f"    for (int64_t {RVAR} = 0; {RVAR} < {n_rows}; {RVAR}++) {{", "      #pragma omp simd",
                f"      for (int64_t {x0} = xb; {x0} < xe; {x0}++) {{"]
        body = Scope(g, "        ")
        upd = [f"        acc{n}[{x0} - xb] += {body.emit(g.accumulated(v))};" for n, (_, _, v) in enumerate(k.reductions)]
        out += body.lines + upd + ["      }", "    }", f"    for (int64_t {x0} = xb; {x0} < xe; {x0}++) {{"]
        row = Scope(g, "      ")
        row.lines += [f"      const {ct} red{n} = acc{n}[{x0} - xb];" for n, ct in enumerate(cts)]
        for buf, value in k.row_stores:
            v = row.emit(value)
            row.lines.append(f"      {g.ptr[buf.name]}[{g.index(flat_index(k.outer_vars, buf.strides))}] = "
                             f"{self.stored(buf, v)};")
        return out + row.lines + ["    }", "  }"]


CPP = CppTarget()
