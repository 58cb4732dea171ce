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
    >>> from compiler.codegen.triton import TRITON
    >>> lp = lower(shapes.trace(lambda x: torch.softmax(x, -1), "x: f32[B, T]"))
    >>> src, _ = TRITON.generate(lp, schedule(lp))
    >>> "tl.sum(" in src and "for roff in range(0, " in src
    True
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import threading
from dataclasses import dataclass

import sympy
import torch

from shapes.kernel_helpers import TRITON_SOURCE
from shapes.printers import to_triton

from .. import embedding_backward, skinny_matmul
from ..repeated_shapes import cudnn_allowed
from ..ir import JVAR, RVAR, Kernel, OpKind, compute_dtype, contiguous_strides, flat_index, substitute
from .cpp import cache_dir
from .decode_attention import try_decode
from .decompositions import Primitives, spellings
from .skeleton import INFIX, KernelGen, Literals, Scope, Target, call, declare, infix_table, templates
from .triton_build import prestart, warm  # noqa: F401 - warm re-exported
from .triton_classes import GENERIC, PERSISTENT_MAX, SizeClass, pow2_block  # noqa: F401 - re-exported
from .triton_launcher import Grid, SizeClassLauncher
from .triton_tiles import finish as _finish, splittable, tiled_source, unravel, wants_tiles

TL = {torch.float32: "tl.float32", torch.float64: "tl.float64", torch.int64: "tl.int64",
      torch.int32: "tl.int32", torch.bool: "tl.int1", torch.float16: "tl.float16", torch.bfloat16: "tl.bfloat16"}

HEADER = '''import triton
import triton.language as tl

_INF = tl.constexpr(float("inf"))
_NAN = tl.constexpr(float("nan"))


@triton.jit
def _max_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _min_nan(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)
''' + TRITON_SOURCE

BLOCK = 1024


_pow2 = pow2_block


LITERALS = Literals("True", "False", "_NAN", lambda d: "_INF", lambda d: "", lambda v, d: str(v))
_const = LITERALS.spell


def _spell_pow(a) -> str:
    """``a[0] ** a[1]``: products for a small integer literal exponent (RMSNorm's backward
    cubes its rstd; exact, and cheaper than exp/log), ``sqrt`` for 0.5, ``exp(e * log|x|)`` with
    the sign rules for another literal, ``_pow`` for an exponent that is a value.

    >>> _spell_pow(["t3", "3.0"]), _spell_pow(["t1", "-2"]), _spell_pow(["x", "y"])
    ('(t3 * t3 * t3)', '(1.0 / (t1 * t1))', '_pow(x, y)')
    >>> _spell_pow(["x", "0.75"])
    "tl.where((x < 0) & (x != float('-inf')), float('nan'), tl.exp(0.75 * tl.log(tl.abs(x))))"
    """
    try:
        e = float(a[1])
    except ValueError:
        return f"_pow({a[0]}, {a[1]})"
    x = a[0]
    if e != e or abs(e) == float("inf"):
        return f"_pow({x}, {a[1]})"
    if e == 0:
        return f"tl.where({x} == {x}, 1.0, 1.0)"  # 1 for every base, NaN included, as eager
    if e == 0.5:
        return f"tl.sqrt({x})"
    if e == int(e) and 1 <= abs(e) <= 4:
        prod = " * ".join([x] * int(abs(e)))
        return f"({prod})" if e > 0 else f"(1.0 / ({prod}))"
    # A literal exponent: its integrality and parity are known here, not computed per element
    # (``_pow``'s floor tests on a literal fail in Triton's interpreter).
    # C's pow: a negative finite base to a fractional power is NaN (-inf's is |x|'s); an odd
    # power keeps the base's sign, -0.0's included (-0.0 ** -3 = -inf).
    mag = f"tl.exp({e!r} * tl.log(tl.abs({x})))"
    if e != int(e):
        return f"tl.where(({x} < 0) & ({x} != float('-inf')), float('nan'), {mag})"
    if int(e) % 2 == 0:
        return mag
    return f"tl.where(({x} < 0) | (({x} == 0) & (1.0 / {x} < 0)), -{mag}, {mag})"


def _minmax(which):
    def spell(a, v, t):
        nan = ", propagate_nan=tl.PropagateNan.ALL" if v.dtype.is_floating_point else ""
        return f"tl.{which}({a[0]}, {a[1]}{nan})"
    return spell


OP_TABLE = {
    **infix_table({**INFIX, OpKind.AND: "&", OpKind.OR: "|"}),
    OpKind.EXP: call("tl.exp"), OpKind.LOG: call("tl.log"), OpKind.SQRT: call("tl.sqrt"),
    OpKind.RSQRT: call("tl.math.rsqrt"), OpKind.ERF: call("tl.math.erf"),
    OpKind.ABS: call("tl.abs"), OpKind.SIN: call("tl.sin"), OpKind.COS: call("tl.cos"),
    OpKind.FLOOR: call("tl.floor"), OpKind.CEIL: call("tl.ceil"), OpKind.POW: lambda a, v, t: _spell_pow(a),
    **templates({OpKind.NEG: "-{0}", OpKind.NOT: "{0} == 0", OpKind.RELU: "tl.where({0} < 0, 0, {0})",
                 OpKind.WHERE: "tl.where({0}, {1}, {2})", OpKind.RECIPROCAL: "1.0 / {0}"}),
    # Core Triton has no log1p, expm1 or tanh: the shared decompositions, precise near 0.
    **spellings(Primitives(exp="tl.exp", log="tl.log", one="1.0", inf="_INF",
                           where=lambda c, a, b: f"tl.where({c}, {a}, {b})", sigmoid="tl.sigmoid")),
    # tl.cast, not .to(): the operand may be a Python literal (a constant widened from a half type).
    OpKind.CAST: lambda a, v, t: f"({a[0]} != 0)" if v.dtype == torch.bool else f"tl.cast({a[0]}, {t})",
    OpKind.MAXIMUM: _minmax("maximum"), OpKind.MINIMUM: _minmax("minimum"),
}


class TritonTarget(Target):
    """Triton: flat masked blocks for pointwise kernels, one program per row with reductions."""

    name = "Triton"
    op_table, type_names = OP_TABLE, TL
    const = staticmethod(_const)

    def __init__(self):
        #: Kernel modules built in this process, by file: the same source is one module.
        self._modules: dict = {}
        self._build_lock = threading.RLock()

    def extern_call(self, op, dtype):
        """mm/addmm of a dtype the skinny kernel wins for choose it or cuBLAS per call
        (:mod:`compiler.skinny_matmul`); SDPA without cuDNN (:func:`sdpa_without_cudnn`); an
        embedding's weight gradient by atomic adds (:mod:`compiler.embedding_backward`)."""
        if op is torch.ops.aten.scaled_dot_product_attention.default:
            return sdpa_without_cudnn
        own = embedding_backward.extern_calls().get(op)
        if own is not None:
            return own
        return skinny_matmul.extern_calls(dtype).get(op, op)

    def declare(self, name, code, dtype) -> str:
        return f"{name} = {code}"

    def load(self, scope: Scope, v) -> str:
        g = scope.g
        idx = g.index(v.index)
        if scope.mask:
            # + zvec: a block-shaped pointer even where the index is the same for the
            # whole block (Triton broadcasts the mask to the pointer, not back).
            return f"tl.load({g.ptr[v.buf]} + ({idx}) + {scope.zero}, mask={scope.mask}, other=0)"
        return f"tl.load({g.ptr[v.buf]} + ({idx}))"

    def size_value(self, gen, v):
        e = sympy.sympify(v.expr)
        if e.is_Integer:
            return _const(int(e), v.dtype)
        # Printed directly, not through gen.expr: a size used as a value says nothing about alignment.
        return declare(f"({self.print_expr(e, gen.sym_names, gen.facts.nonneg)}).to({TL[v.dtype]})")

    def print_expr(self, e, names, nonneg) -> str:
        return to_triton(e, names, nonneg)

    def kernel_source(self, g: KernelGen, variant: "SizeClass" = None):
        """Source of one kernel for a size class (default: the generic one, every size)."""
        variant = variant or GENERIC
        k = g.kernel
        syms = [g.sym_names[s] for s in g.lp.symbols]
        div = [s in variant.div16 for s in syms]
        # A size proved a multiple of 16 for the class is passed divided by 16 and multiplied
        # back: Triton's alignment analysis then knows it (aligned, vectorized loads).
        params = [g.ptr[n] for n in g.args] + [f"{s}_16" if d else s for s, d in zip(syms, div)]
        dns = [p for p in params[len(g.args):]]
        dns = f"(do_not_specialize={dns!r})" if dns else ""
        name = (g.fn_base or k.name) + variant.suffix
        head = [f"    {s} = {s}_16.to(tl.int64) * 16" if d else f"    {s} = {s}.to(tl.int64)  # int64 index math whatever the size"
                for s, d in zip(syms, div)]
        ind = "    "
        rows = sympy.Mul(*k.outer) if k.outer else sympy.Integer(1)
        if wants_tiles(k):  # columns read strided along the reduced dim: coalesced tiles, no persistent class
            rlen = k.reductions[0][0].rsize if splittable(k) else None
            return tiled_source(self, g, name, params, head, rows), (Grid.TILES, [rows], None, rlen)
        lines = [f"@triton.jit{dns}", f"def {name}({', '.join(params + ['BLOCK: tl.constexpr'])}):"] + head
        lines.append(f"{ind}zvec = tl.zeros([BLOCK], dtype=tl.int64)")
        if k.reductions and variant.persistent:
            return self._persistent(g, lines, rows), (Grid.ROWS, [rows], None, _row_length(k))
        if not k.reductions:
            return self._flat(g, lines, rows)
        return self._looped_rows(g, lines, rows)

    def _flat(self, g: KernelGen, lines, rows):
        """Flat blocks over each store's elements (a kernel with no reduction)."""
        k, ind = g.kernel, "    "
        lines.append(f"{ind}lin = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)")
        work = []
        inner_bufs = [b for b, *_ in k.inner_stores]
        for n, (buf, L, value) in enumerate([(b, L, v) for b, L, v in k.inner_stores]
                                            + [(b, sympy.Integer(1), v) for b, v in k.row_stores]):
            total = rows * L
            work.append(total)
            lines.append(f"{ind}m{n} = lin < ({g.expr(total)})")
            inner = buf in inner_bufs
            if inner:
                lines.append(f"{ind}{JVAR} = lin % ({g.expr(L)})")
                lines += unravel(self, g, f"lin // ({g.expr(L)})", ind)
            else:
                lines += unravel(self, g, "lin", ind)
            ov = k.outer_vars + ((JVAR,) if inner else ())
            # Where a buffer is read or written densely in the store's own row-major order,
            # its index is `lin` itself: no 64-bit div/mod per element to rebuild it.
            dense = flat_index(ov, contiguous_strides(tuple(k.outer) + ((L,) if inner else ())))
            g.index_names = {g.facts.simplify_index(dense): "lin"}
            sc = Scope(g, ind, f"m{n}")
            v = sc.emit(value)
            idx = g.index(flat_index(ov, buf.strides))
            lines += sc.lines + [f"{ind}tl.store({g.ptr[buf.name]} + ({idx}), tl.where(m{n}, {v}, {v}), "
                                 f"mask=m{n})"]
            g.index_names = {}
        return "\n".join(lines), (Grid.FLAT, work, BLOCK, None)

    def _looped_rows(self, g: KernelGen, lines, rows):
        """One program per row, looping over the row in blocks (reductions, then the row's stores)."""
        k, ind = g.kernel, "    "
        lines.append(f"{ind}row = tl.program_id(0).to(tl.int64)")
        lines += unravel(self, g, "row", ind)
        row = Scope(g, ind)
        rmax = [sympy.sympify(r.rsize) for r, _, _ in k.reductions] + [sympy.sympify(L) for _, L, _ in k.inner_stores]
        block = _pow2(max(int(e) for e in rmax), 2048) if all(e.is_Integer for e in rmax) else BLOCK
        for n, (red, _, body) in enumerate(k.reductions):
            dt = TL[compute_dtype(red.dtype)]
            fl = red.dtype.is_floating_point
            ident = {"sum": "0", "max": "-_INF" if fl else "-9223372036854775807",
                     "min": "_INF" if fl else "9223372036854775807"}[red.op]
            R = g.expr(red.rsize)
            row.lines.append(f"{ind}acc{n} = tl.full([BLOCK], {ident}, {dt})")
            row.lines.append(f"{ind}for roff in range(0, {R}, BLOCK):")
            row.lines.append(f"{ind}    {RVAR} = roff + tl.arange(0, BLOCK)")
            row.lines.append(f"{ind}    rm = {RVAR} < {R}")
            sc = Scope(g, ind + "    ", "rm", row)
            v = sc.emit(g.accumulated(body))
            nan = ", propagate_nan=tl.PropagateNan.ALL" if fl else ""
            upd = {"sum": f"acc{n} + tl.where(rm, {v}, 0)",
                   "max": f"tl.maximum(acc{n}, tl.where(rm, {v}, {ident}){nan})",
                   "min": f"tl.minimum(acc{n}, tl.where(rm, {v}, {ident}){nan})"}[red.op]
            row.lines += sc.lines + [f"{ind}    acc{n} = {upd}"]
            row.lines.append(f"{ind}red{n} = {_finish(red, f'acc{n}')}")
        for buf, value in k.row_stores:
            v = row.emit(value)
            row.lines.append(f"{ind}tl.store({g.ptr[buf.name]} + ({g.index(flat_index(k.outer_vars, buf.strides))}), {v})")
        for buf, L, value in k.inner_stores:
            Ls = g.expr(L)
            row.lines.append(f"{ind}for joff in range(0, {Ls}, BLOCK):")
            row.lines.append(f"{ind}    {JVAR} = joff + tl.arange(0, BLOCK)")
            row.lines.append(f"{ind}    jm = {JVAR} < {Ls}")
            sc = Scope(g, ind + "    ", "jm", row)
            v = sc.emit(value)
            idx = g.index(flat_index(k.outer_vars + (JVAR,), buf.strides))
            row.lines += sc.lines + [f"{ind}    tl.store({g.ptr[buf.name]} + ({idx}), tl.where(jm, {v}, {v}), "
                                     f"mask=jm)"]
        return "\n".join(lines + row.lines), (Grid.ROWS, [rows], block, _row_length(k))

    def _persistent(self, g: KernelGen, lines, rows) -> str:
        """One program per row, the whole row in one block: each input is loaded once and
        shared by the reductions and the stores (they index the row with one variable)."""
        k = g.kernel
        ind = "    "
        R = g.expr(_row_length(k))
        lines.append(f"{ind}row = tl.program_id(0).to(tl.int64)")
        lines += unravel(self, g, "row", ind)
        lines.append(f"{ind}{RVAR} = tl.arange(0, BLOCK)")
        lines.append(f"{ind}rm = {RVAR} < {R}")
        sc = Scope(g, ind, "rm")
        for n, (red, _, body) in enumerate(k.reductions):
            fl = red.dtype.is_floating_point
            ident = {"sum": "0", "max": "-_INF" if fl else "-9223372036854775807",
                     "min": "_INF" if fl else "9223372036854775807"}[red.op]
            v = sc.emit(g.accumulated(body))
            masked = f"tl.where(rm, {v}, {ident})"
            if red.op == "sum":
                fin = f"tl.sum({masked}, 0)"
            elif fl:  # a NaN anywhere in the row is the result, as in eager
                fin = f"tl.reduce({masked}, 0, _{red.op.value}_nan)"
            else:
                fin = f"tl.{red.op.value}({masked}, 0)"
            sc.lines.append(f"{ind}red{n} = {fin}")
        for buf, L, value in k.inner_stores:
            v = sc.emit(substitute(value, {JVAR: RVAR}))
            idx = g.index(flat_index(k.outer_vars + (RVAR,), buf.strides))
            sc.lines.append(f"{ind}tl.store({g.ptr[buf.name]} + ({idx}), tl.where(rm, {v}, {v}), mask=rm)")
        row = Scope(g, ind)  # values per row are scalars: no block mask
        for buf, value in k.row_stores:
            v = row.emit(value)
            row.lines.append(f"{ind}tl.store({g.ptr[buf.name]} + ({g.index(flat_index(k.outer_vars, buf.strides))}), {v})")
        return "\n".join(lines + sc.lines + row.lines)

    def module_source(self, parts) -> str:
        return "\n\n\n".join([HEADER] + parts) + "\n"

    def module_file(self, source) -> tuple:
        """``(path, module name)`` of the file holding ``source`` (written once, named by content):
        the parent imports it at a launch, a build worker at a build."""
        d = os.path.join(os.path.dirname(cache_dir()), "triton")
        os.makedirs(d, exist_ok=True)
        key = hashlib.sha256(source.encode()).hexdigest()[:24]
        path = os.path.join(d, f"tk_{key}.py")
        if not os.path.exists(path):
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                f.write(source)
            os.replace(tmp, path)
        return path, f"symshape_tk_{key}"

    def build(self, source):
        """The module of ``source``: one per file (named by content) in this process, so that
        kernels with the same source (a model's layers) share one JIT function, built once."""
        return self.load_module(*self.module_file(source))

    def load_module(self, path, name):
        """The module of file ``path`` (:meth:`module_file`), imported once in this process as ``name``."""
        mod = self._modules.get(path)
        if mod is None:
            # One module per file also when the preload thread (.preload) builds it at the same time.
            with self._build_lock:
                mod = self._modules.get(path)
                if mod is None:
                    spec = importlib.util.spec_from_file_location(name, path)
                    mod = importlib.util.module_from_spec(spec)
                    spec.loader.exec_module(mod)
                    self._modules[path] = mod
        return mod

    def make_launchers(self, lp, steps) -> dict:
        """Kernel name -> (buffer argument names, a :class:`SizeClassLauncher`)."""
        src, meta = self.generate(lp, steps)
        if not meta:
            return {}
        module = self.build(src)
        kernels = {s.name: s for s in steps if isinstance(s, Kernel)}
        return {name: (args, SizeClassLauncher(self, module, kernels[name], lp, *m,
                                               dtypes=[lp.buffers[a].dtype for a in args], fn_base=base))
                for name, (args, m, base) in meta.items()}

    def prestart(self) -> None:
        """Start the build workers (:func:`.triton_build.prestart`) while the program lowers."""
        prestart()

    def warm(self, launchers: dict, current=None) -> int:
        """Build every size class of every kernel ahead (:func:`.triton_build.warm`): those of
        the ``current`` sizes first."""
        return warm([launch for _, launch in launchers.values()], current)

    def variant_source(self, kernel, lp, variant, fn_base=None) -> str:
        """A module holding one size-class variant of ``kernel``, its function named
        ``fn_base`` (default: the kernel's name) and the class's suffix."""
        g = KernelGen(self, kernel, lp, self.sym_names(lp))
        g.fn_base = fn_base
        src, _ = self.kernel_source(g, variant)
        return self.module_source([src])


def _row_length(k):
    """The common row length of a reduction kernel (reductions and inner stores), or None."""
    lens = {sympy.sympify(r.rsize) for r, _, _ in k.reductions} | {sympy.sympify(L) for _, L, _ in k.inner_stores}
    return lens.pop() if len(lens) == 1 else None




_cudnn_sdp_enabled = torch.backends.cuda.cudnn_sdp_enabled
_enable_cudnn_sdp = torch.backends.cuda.enable_cudnn_sdp
_sdpa = torch.nn.functional.scaled_dot_product_attention


#: Decode steps' attention (one query position) through :mod:`.decode_attention` on CUDA;
#: ``SYMSHAPE_DECODE_KERNEL=0`` keeps ATen's SDPA (benches compare both).
DECODE_KERNEL = os.environ.get("SYMSHAPE_DECODE_KERNEL", "1") != "0"


def sdpa_without_cudnn(*args, **kwargs):
    """``scaled_dot_product_attention`` choosing among ATen's flash, memory-efficient and math
    kernels, not cuDNN's at a shape's first two calls: cuDNN builds an execution plan per new
    shape (measured 8.7 ms of host time per call on an H200 with torch 2.11 when the KV length
    grows by one each decode step, 35 ms per token for 4 layers), which a dynamic-shape program
    meets at every size.  From a shape's third call on (:mod:`compiler.repeated_shapes`), and where the
    user turned cuDNN's attention off, ATen chooses as in eager.
    A decode step's attention on CUDA (one query position, no mask) runs
    :func:`~compiler.codegen.decode_attention.decode_attention` instead: one kernel launch.

    >>> q = torch.randn(1, 2, 3, 8)
    >>> torch.allclose(sdpa_without_cudnn(q, q, q, is_causal=True), _sdpa(q, q, q, is_causal=True))
    True
    """
    if DECODE_KERNEL and len(args) >= 3 and getattr(args[0], "is_cuda", False):
        # One query position over a KV cache: one Triton launch, not SDPA's host cost.
        out = try_decode(*args, **kwargs)
        if out is not None:
            return out
    was = _cudnn_sdp_enabled()
    if not was or cudnn_allowed(args[0] if args else None):  # a repeated shape: as eager (compiler.repeated_shapes)
        return _sdpa(*args, **kwargs)
    _enable_cudnn_sdp(False)
    try:
        return _sdpa(*args, **kwargs)
    finally:
        _enable_cudnn_sdp(True)




TRITON = TritonTarget()
