"""Tiled Triton reductions: column sums that read memory coalesced.

The row form of :mod:`compiler.codegen.triton` runs one program per output
and loads ``BLOCK`` elements of the reduced dim per step.  Where the reduced
index is strided and the outer index is the contiguous one (``x.sum(0)`` of
an ``[N, 768]`` tensor reads ``x0 + 768*r``), each of those loads touches
``BLOCK`` cache lines for 2 bytes each: a BERT training step spent 1.6 of
8.9 busy ms in such kernels on the H100.  The tiled form (Inductor's for
"outer" reductions) gives each program ``XBLOCK`` consecutive outputs along
the contiguous dim and loads ``[BLOCK, XBLOCK]`` tiles over the reduced dim:
every row of a tile is ``XBLOCK`` adjacent elements.  The kernel's row stores
are ``[1, XBLOCK]`` vectors and its inner stores ``[BLOCK, XBLOCK]`` tiles
looped over their own length, so a kernel the scheduler fused stays one kernel.

The form is chosen from the loads of the reductions (:func:`wants_tiles`),
never from a program's shape; sizes stay run-time arguments, ``XBLOCK`` is
picked per launch from the number of outputs (:func:`tile_blocks`).

Example::

    >>> import sympy, torch
    >>> from compiler.ir import Kernel, Load, Reduction, RVAR, loop_var
    >>> x0 = loop_var("x0")
    >>> def col(index):
    ...     red = Reduction(0, "sum", (768,), sympy.Symbol("N"), None, torch.float32)
    ...     return Kernel(name="k", outer=(768,), reductions=[(red, (x0,), Load("a", index, torch.float32))])
    >>> wants_tiles(col(x0 + 768 * RVAR)), wants_tiles(col(768 * x0 + RVAR))
    (True, False)
"""
from __future__ import annotations

import os

import sympy

from ..ir import JVAR, RVAR, Kernel, Load, RedRef, compute_dtype, flat_index, walk
from .skeleton import KernelGen, Scope

#: Elements of one tile (BLOCK * XBLOCK): 8 warps of 16 elements per thread, Inductor's size,
#: for up to two reductions sharing a loop; more accumulators get smaller tiles (:func:`tile_size`).
TILE = 4096
#: The output widths a launch picks from (one compiled binary each per size class): a row of a
#: tile is XBLOCK adjacent elements, at least one 32-byte sector of 2-byte elements.
XBLOCKS = (16, 32, 64)
#: Programs wanted before a wider XBLOCK is taken: two per SM of an H100 (132 SMs).
MIN_PROGRAMS = 264


#: ``SYMSHAPE_TILED_REDUCTIONS=0`` keeps one program per output everywhere (benches compare both).
ENABLED = os.environ.get("SYMSHAPE_TILED_REDUCTIONS", "1") != "0"


def _linear_coeff(e, var):
    """The coefficient of ``var`` in index ``e`` where ``e`` is linear in it, else None."""
    e = sympy.expand(sympy.sympify(e))
    if not e.has(var):
        return sympy.Integer(0)
    if not e.is_polynomial(var):  # floor division, modulo: no fixed stride
        return None
    c = e.coeff(var, 1)
    return None if c.has(var) or (e - c * var).has(var) else c


def wants_tiles(kernel: Kernel) -> bool:
    """Whether ``kernel``'s reductions read strided along the reduced dim and contiguous along
    the last outer dim (tiles coalesce them) more often than contiguous along the reduced dim
    (one program per output does)."""
    if not ENABLED or not kernel.reductions or not kernel.outer:
        return False
    xlast = kernel.outer_vars[-1]
    strided = contiguous = 0
    seen = set()
    for _, _, body in kernel.reductions:
        for v in walk(body):
            if not isinstance(v, Load) or (v.buf, v.index) in seen:
                continue
            seen.add((v.buf, v.index))
            cr, cx = _linear_coeff(v.index, RVAR), _linear_coeff(v.index, xlast)
            if cr is None or cx is None or cr == 0:
                continue  # not per element of the row (a weight, a per-row value): no vote
            if cr == 1:
                contiguous += 1
            elif cx == 1:
                strided += 1
    return strided > 0 and strided >= contiguous


def tile_size(kernel: Kernel) -> int:
    """Elements per tile: each reduction of a loop keeps a float32 accumulator tile in registers
    (12 in BERT's LayerNorm-and-bias gradient kernel), so more of them take smaller tiles."""
    most = max((len(g) for g in _loops(kernel)), default=1)
    return TILE if most <= 2 else TILE // 2 if most <= 4 else TILE // 4


def tile_blocks(outputs: int, tile: int = TILE) -> tuple:
    """``(XBLOCK, BLOCK)`` for a launch over ``outputs``: the widest XBLOCK that still leaves
    :data:`MIN_PROGRAMS` programs (coalesced rows of a tile, enough programs to fill the GPU).

    >>> tile_blocks(768), tile_blocks(587 * 768)
    ((16, 256), (64, 64))
    """
    xb = XBLOCKS[0]
    for b in XBLOCKS:
        if -(-outputs // b) >= MIN_PROGRAMS:
            xb = b
    return xb, tile // xb


def _identity(red) -> str:
    fl = red.dtype.is_floating_point
    return {"sum": "0", "max": "-_INF" if fl else "-9223372036854775807",
            "min": "_INF" if fl else "9223372036854775807"}[red.op]


def _loops(kernel) -> list:
    """The kernel's reductions in groups that share one loop over the reduced dim: consecutive,
    of one length, none reading another's result (a variance reads its mean: a new loop)."""
    groups: list = []
    for n, (red, _, body) in enumerate(kernel.reductions):
        if groups:
            last = groups[-1]
            ids = {kernel.reductions[m][0].id for m in last}
            reads = {v.red for v in walk(body) if isinstance(v, RedRef)}
            if sympy.sympify(kernel.reductions[last[0]][0].rsize) == sympy.sympify(red.rsize) and not reads & ids:
                last.append(n)
                continue
        groups.append([n])
    return groups


def _unravel(target, g, ind) -> list:
    """Row variables x0.. as ``[1, XBLOCK]`` vectors from the flat output numbers ``xrow``."""
    k, out, rem = g.kernel, [], "xrow"
    for i in reversed(range(len(k.outer))):
        size = target.print_expr(k.outer[i], g.sym_names, g.facts.nonneg)
        if i == 0:
            out.append(f"{ind}x{i} = {rem}")
        else:
            out.append(f"{ind}x{i} = ({rem}) % ({size})")
            out.append(f"{ind}q{i} = ({rem}) // ({size})")
            rem = f"q{i}"
    return out


def tiled_source(target, g: KernelGen, lines: list, rows) -> str:
    """The body of a tiled reduction kernel (``lines``: its signature and size arguments)."""
    from .triton import TL  # the dtype spellings (triton imports this module)
    k, ind = g.kernel, "    "
    lines.append(f"{ind}xrow = tl.program_id(0).to(tl.int64) * XBLOCK + tl.arange(0, XBLOCK)[None, :]")
    lines.append(f"{ind}xm = xrow < ({g.expr(rows)})")
    lines += _unravel(target, g, ind)
    # Loads add a zero tile so that a pointer the same for every lane still has the mask's shape.
    lines.append(f"{ind}zx = tl.zeros([1, XBLOCK], dtype=tl.int64)")
    lines.append(f"{ind}zvec = tl.zeros([BLOCK, XBLOCK], dtype=tl.int64)")
    row = Scope(g, ind, "xm", zero="zx")
    for group in _loops(k):
        R = g.expr(k.reductions[group[0]][0].rsize)
        fins = []
        for n in group:
            red = k.reductions[n][0]
            ident = _identity(red)
            row.lines.append(f"{ind}acc{n} = tl.full([BLOCK, XBLOCK], {ident}, {TL[compute_dtype(red.dtype)]})")
        row.lines.append(f"{ind}for roff in range(0, {R}, BLOCK):")
        row.lines.append(f"{ind}    {RVAR} = roff + tl.arange(0, BLOCK)[:, None]")
        row.lines.append(f"{ind}    rm = ({RVAR} < {R}) & xm")
        # One loop, one scope for the group: a tile loaded once serves every reduction reading it.
        sc = Scope(g, ind + "    ", "rm", row)
        for n in group:
            red, _, body = k.reductions[n]
            ident, fl = _identity(red), red.dtype.is_floating_point
            v = sc.emit(g.accumulated(body))
            nan = ", propagate_nan=tl.PropagateNan.ALL" if fl else ""
            upd = {"sum": f"acc{n} + tl.where(rm, {v}, 0)",
                   "max": f"tl.maximum(acc{n}, tl.where(rm, {v}, {ident}){nan})",
                   "min": f"tl.minimum(acc{n}, tl.where(rm, {v}, {ident}){nan})"}[red.op]
            sc.lines.append(f"{ind}    acc{n} = {upd}")
            op = getattr(red.op, "value", red.op)
            if red.op == "sum":
                fin = f"tl.sum(acc{n}, 0)"
            elif fl:  # a NaN anywhere in the column is the result, as in eager
                fin = f"tl.reduce(acc{n}, 0, _{op}_nan)"
            else:
                fin = f"tl.{op}(acc{n}, 0)"
            fins.append(f"{ind}red{n} = {fin}[None, :]")
        row.lines += sc.lines + fins
    for buf, value in k.row_stores:
        v = row.emit(value)
        idx = g.index(flat_index(k.outer_vars, buf.strides))
        row.lines.append(f"{ind}tl.store({g.ptr[buf.name]} + ({idx}) + zx, tl.where(xm, {v}, {v}), mask=xm)")
    for buf, L, value in k.inner_stores:
        Ls = g.expr(L)
        row.lines.append(f"{ind}for joff in range(0, {Ls}, BLOCK):")
        row.lines.append(f"{ind}    {JVAR} = joff + tl.arange(0, BLOCK)[:, None]")
        row.lines.append(f"{ind}    jm = ({JVAR} < {Ls}) & xm")
        sc = Scope(g, ind + "    ", "jm", row)
        v = sc.emit(value)
        idx = g.index(flat_index(k.outer_vars + (JVAR,), buf.strides))
        row.lines += sc.lines + [f"{ind}    tl.store({g.ptr[buf.name]} + ({idx}) + zvec, tl.where(jm, {v}, {v}), "
                                 f"mask=jm)"]
    return "\n".join(lines + row.lines)


__all__ = ["TILE", "XBLOCKS", "wants_tiles", "tile_size", "tile_blocks", "tiled_source"]
