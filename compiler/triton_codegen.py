"""Triton kernels for scheduled groups; sizes are run-time integer arguments.

A kernel without reductions runs over a flat index space per store (rows x
row length) in blocks with a tail mask.  A kernel with reductions runs one
program per row: each reduction loops over the row in blocks of ``RBLOCK``
(so any row length works), then the row's stores loop in blocks of
``XBLOCK``.  Size arguments are marked ``do_not_specialize``: one compiled
binary per kernel serves every size.  Runs on CPU under ``TRITON_INTERPRET=1``.

Example::

    >>> import torch, shapes
    >>> from compiler.lowering import lower
    >>> from compiler.scheduler import schedule
    >>> from compiler.triton_codegen import generate
    >>> lp = lower(shapes.trace(lambda x: torch.softmax(x, -1), "x: f32[B, T]"))
    >>> src, _, _ = generate(lp, schedule(lp))
    >>> "tl.sum(" in src and "for roff in range(0, " in src
    True
"""
from __future__ import annotations

import hashlib
import importlib.util
import math
import os

import sympy
import torch

from .exprs import compile_exprs, simplify_index, to_triton
from .ir import JVAR, RVAR, Const, Kernel, Load, Op, RedRef, SizeVal, flat_index

TL = {torch.float32: "tl.float32", torch.float64: "tl.float64", torch.int64: "tl.int64",
      torch.int32: "tl.int32", torch.bool: "tl.int1"}

HEADER = '''import triton
import triton.language as tl

_INF = tl.constexpr(float("inf"))
_NAN = tl.constexpr(float("nan"))


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

BLOCK = 1024


def _pow2(n, cap):
    return int(min(cap, max(16, 1 << max(0, int(n) - 1).bit_length())))


def _const(v, dtype) -> str:
    if dtype == torch.bool:
        return "True" if v else "False"
    if dtype.is_floating_point:
        v = float(v)
        if math.isnan(v):
            return "_NAN"
        if math.isinf(v):
            return "_INF" if v > 0 else "(-_INF)"
        return repr(v)
    return str(int(v))


class _Scope:
    def __init__(self, gen, indent, mask, parent=None):
        self.g = gen
        self.indent = indent
        self.mask = mask
        self.lines: list[str] = []
        self.cache = dict(parent.cache) if parent is not None else {}

    def emit(self, v) -> str:
        got = self.cache.get(v)
        if got is not None:
            return got
        if isinstance(v, Const):
            return _const(v.value, v.dtype)
        if isinstance(v, RedRef):
            return self.g.kernel.red_var(v.red, v.index)
        if isinstance(v, SizeVal):
            e = sympy.sympify(v.expr)
            if e.is_Integer:
                return _const(int(e), v.dtype)
            code = f"({to_triton(e, self.g.sym_names)}).to({TL[v.dtype]})"
        elif isinstance(v, Load):
            idx = self.g.index(v.index)
            if self.mask:
                # + zvec: a block-shaped pointer even where the index is the same for the
                # whole block (Triton broadcasts the mask to the pointer, not back).
                code = f"tl.load({self.g.ptr[v.buf]} + ({idx}) + zvec, mask={self.mask}, other=0)"
            else:
                code = f"tl.load({self.g.ptr[v.buf]} + ({idx}))"
        elif isinstance(v, Op):
            code = self.op(v, [self.emit(a) for a in v.args])
        else:
            raise TypeError(f"unknown IR value {v!r}")
        name = f"t{self.g.counter}"
        self.g.counter += 1
        self.lines.append(f"{self.indent}{name} = {code}")
        self.cache[v] = name
        return name

    @staticmethod
    def op(v, a) -> str:
        o, dt = v.op, TL[v.dtype]
        binary = {"add": "+", "sub": "-", "mul": "*", "div": "/", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
                  "eq": "==", "ne": "!=", "and": "&", "or": "|"}
        if o in binary:
            return f"{a[0]} {binary[o]} {a[1]}"
        simple = {"exp": "tl.exp", "log": "tl.log", "sqrt": "tl.sqrt", "rsqrt": "tl.math.rsqrt",
                  "sigmoid": "tl.sigmoid", "erf": "tl.math.erf", "abs": "tl.abs", "sin": "tl.sin", "cos": "tl.cos",
                  "floor": "tl.floor", "ceil": "tl.ceil", "pow": "_pow"}
        if o in simple:
            return f"{simple[o]}({', '.join(a)})"
        if o == "neg":
            return f"-{a[0]}"
        if o == "not":
            return f"{a[0]} == 0"
        if o == "cast":
            return f"({a[0]} != 0)" if v.dtype == torch.bool else f"({a[0]}).to({dt})"
        if o == "relu":
            return f"tl.where({a[0]} < 0, 0, {a[0]})"
        if o == "where":
            return f"tl.where({a[0]}, {a[1]}, {a[2]})"
        if o == "reciprocal":
            return f"1.0 / {a[0]}"
        if o == "tanh":  # tanh(x) = 2 sigmoid(2x) - 1: no tanh in core Triton
            return f"2.0 * tl.sigmoid(2.0 * {a[0]}) - 1.0"
        if o == "log1p":
            return f"tl.log(1.0 + {a[0]})"
        if o == "expm1":
            return f"tl.exp({a[0]}) - 1.0"
        if o in ("maximum", "minimum"):
            nan = ", propagate_nan=tl.PropagateNan.ALL" if v.dtype.is_floating_point else ""
            return f"tl.{o}({a[0]}, {a[1]}{nan})"
        raise NotImplementedError(f"Triton codegen for op {o}")


class _KernelGen:
    def __init__(self, kernel: Kernel, lp, sym_names):
        self.kernel, self.lp, self.sym_names = kernel, lp, sym_names
        self.counter = 0
        stores = [b for b, *_ in kernel.inner_stores + kernel.row_stores]
        self.args = sorted(kernel.reads) + [b.name for b in stores]
        self.ptr = {name: f"b{i}" for i, name in enumerate(self.args)}

    def index(self, e) -> str:
        return to_triton(simplify_index(e), self.sym_names)

    def _unravel(self, row, ind) -> list[str]:
        """Row variables x0.. from a flat row number (row-major over ``outer``)."""
        k = self.kernel
        out, rem = [], row
        for i in reversed(range(len(k.outer))):
            size = to_triton(k.outer[i], self.sym_names)
            if i == 0:
                out.append(f"{ind}x{i} = {rem}")
            else:
                out.append(f"{ind}x{i} = ({rem}) % ({size})")
                out.append(f"{ind}q{i} = ({rem}) // ({size})")
                rem = f"q{i}"
        return out

    def source(self):
        k, lp = self.kernel, self.lp
        syms = [self.sym_names[s] for s in lp.symbols]
        params = [self.ptr[n] for n in self.args] + syms
        dns = f"(do_not_specialize={syms!r})" if syms else ""
        lines = [f"@triton.jit{dns}", f"def {k.name}({', '.join(params + ['BLOCK: tl.constexpr'])}):"]
        for s in syms:
            lines.append(f"    {s} = {s}.to(tl.int64)  # int64 index math whatever the size")
        ind = "    "
        lines.append(f"{ind}zvec = tl.zeros([BLOCK], dtype=tl.int64)")
        rows = sympy.Mul(*k.outer) if k.outer else sympy.Integer(1)
        if not k.reductions:
            # Flat blocks over each store's elements.
            lines.append(f"{ind}lin = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)")
            work = []
            for n, (buf, L, value) in enumerate([(b, L, v) for b, L, v in k.inner_stores]
                                                + [(b, sympy.Integer(1), v) for b, v in k.row_stores]):
                total = rows * L
                work.append(total)
                lines.append(f"{ind}m{n} = lin < ({to_triton(total, self.sym_names)})")
                inner = buf in [b for b, *_ in k.inner_stores]
                if inner:
                    lines.append(f"{ind}{JVAR} = lin % ({to_triton(L, self.sym_names)})")
                    lines += self._unravel(f"lin // ({to_triton(L, self.sym_names)})", ind)
                else:
                    lines += self._unravel("lin", ind)
                sc = _Scope(self, ind, f"m{n}")
                v = sc.emit(value)
                ov = k.outer_vars + ((JVAR,) if inner else ())
                idx = self.index(flat_index(ov, buf.strides))
                lines += sc.lines + [f"{ind}tl.store({self.ptr[buf.name]} + ({idx}), tl.where(m{n}, {v}, {v}), "
                                     f"mask=m{n})"]
            return "\n".join(lines), ("flat", work), BLOCK
        lines.append(f"{ind}row = tl.program_id(0).to(tl.int64)")
        lines += self._unravel("row", ind)
        row = _Scope(self, ind, None)
        rmax = [sympy.sympify(r.rsize) for r, _, _ in k.reductions] + [sympy.sympify(L) for _, L, _ in k.inner_stores]
        block = _pow2(max(int(e) for e in rmax), 2048) if all(e.is_Integer for e in rmax) else BLOCK
        for n, (red, _, body) in enumerate(k.reductions):
            dt = TL[red.dtype]
            ident = {"sum": "0", "max": "-_INF" if red.dtype.is_floating_point else "-9223372036854775807",
                     "min": "_INF" if red.dtype.is_floating_point else "9223372036854775807"}[red.op]
            R = to_triton(red.rsize, self.sym_names)
            row.lines.append(f"{ind}acc{n} = tl.full([BLOCK], {ident}, {dt})")
            row.lines.append(f"{ind}for roff in range(0, {R}, BLOCK):")
            row.lines.append(f"{ind}    {RVAR} = roff + tl.arange(0, BLOCK)")
            row.lines.append(f"{ind}    rm = {RVAR} < {R}")
            sc = _Scope(self, ind + "    ", "rm", row)
            v = sc.emit(body)
            upd = {"sum": f"acc{n} + tl.where(rm, {v}, 0)",
                   "max": f"tl.maximum(acc{n}, tl.where(rm, {v}, {ident}), propagate_nan=tl.PropagateNan.ALL)"
                   if red.dtype.is_floating_point else f"tl.maximum(acc{n}, tl.where(rm, {v}, {ident}))",
                   "min": f"tl.minimum(acc{n}, tl.where(rm, {v}, {ident}), propagate_nan=tl.PropagateNan.ALL)"
                   if red.dtype.is_floating_point else f"tl.minimum(acc{n}, tl.where(rm, {v}, {ident}))"}[red.op]
            row.lines += sc.lines + [f"{ind}    acc{n} = {upd}"]
            fin = {"sum": "tl.sum", "max": "tl.max", "min": "tl.min"}[red.op]
            row.lines.append(f"{ind}red{n} = {fin}(acc{n}, 0)")
        for buf, value in k.row_stores:
            v = row.emit(value)
            row.lines.append(f"{ind}tl.store({self.ptr[buf.name]} + ({self.index(flat_index(k.outer_vars, buf.strides))}), {v})")
        for buf, L, value in k.inner_stores:
            Ls = to_triton(L, self.sym_names)
            row.lines.append(f"{ind}for joff in range(0, {Ls}, BLOCK):")
            row.lines.append(f"{ind}    {JVAR} = joff + tl.arange(0, BLOCK)")
            row.lines.append(f"{ind}    jm = {JVAR} < {Ls}")
            sc = _Scope(self, ind + "    ", "jm", row)
            v = sc.emit(value)
            idx = self.index(flat_index(k.outer_vars + (JVAR,), buf.strides))
            row.lines += sc.lines + [f"{ind}    tl.store({self.ptr[buf.name]} + ({idx}), tl.where(jm, {v}, {v}), "
                                     f"mask=jm)"]
        return "\n".join(lines + row.lines), ("rows", [rows]), block


def generate(lp, steps):
    """Module source, per kernel (argument names, grid kind and size exprs, block)."""
    sym_names = {s: f"ks{i}" for i, s in enumerate(lp.symbols)}
    parts, meta = [HEADER], {}
    for s in steps:
        if isinstance(s, Kernel):
            g = _KernelGen(s, lp, sym_names)
            src, grid, block = g.source()
            parts.append(src)
            meta[s.name] = (g.args, grid, block)
    return "\n\n\n".join(parts) + "\n", meta, sym_names


def _load_module(src: str):
    from .cpp_codegen import cache_dir
    d = os.path.join(os.path.dirname(cache_dir()), "triton")
    os.makedirs(d, exist_ok=True)
    key = hashlib.sha256(src.encode()).hexdigest()[:24]
    path = os.path.join(d, f"tk_{key}.py")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(src)
        os.replace(tmp, path)
    spec = importlib.util.spec_from_file_location(f"symshape_tk_{key}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def make_launchers(lp, steps) -> dict:
    """Kernel name -> (buffer argument names, launch(tensors, size values))."""
    src, meta, _ = generate(lp, steps)
    if not meta:
        return {}
    mod = _load_module(src)
    out = {}
    for name, (args, (kind, work), block) in meta.items():
        fn = getattr(mod, name)
        work_fn = compile_exprs(work, lp.symbols)

        def launch(tensors, sizes, _fn=fn, _w=work_fn, _kind=kind, _block=block):
            w = max(_w(*sizes))
            n = (w + _block - 1) // _block if _kind == "flat" else w
            if n > 0:
                _fn[(n,)](*tensors, *sizes, BLOCK=_block)
        out[name] = (args, launch)
    return out
