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
import torch

from shapes.functions import FloorDiv, PyMod

from ..ir import JVAR, RVAR, Kernel, Load, RedRef, compute_dtype, contiguous_strides, flat_index, walk
from .skeleton import KernelGen, Scope

#: Elements of one tile (BLOCK * XBLOCK), 4 warps of 8 elements per thread.  Swept on the H100
#: (``bench/column_reductions.py --sweep``, session 28): against 4096 elements in 8 warps it took
#: column sums of BERT's sizes from 21.0 to 18.9 us ((4696, 768), two sums), 37.2 to 31.5 us
#: (4696 x 3072) and a batch sum of [8, 587, 768] from 52 to 32 us; twelve accumulators (BERT's
#: fused LayerNorm gradients) stay at this size (a quarter of it ran 72.7 against 70.7 us).
TILE = int(os.environ.get("SYMSHAPE_TILE", "1024"))
#: The output widths a launch picks from (one compiled binary each per size class): a row of a
#: tile is XBLOCK adjacent elements, at least one 32-byte sector of 2-byte elements.
XBLOCKS = (16, 32, 64)
#: Programs wanted before a wider XBLOCK is taken: two per SM of an H100 (132 SMs).
MIN_PROGRAMS = 264
#: Programs a split column reduction aims for (:func:`split_count`): eight per SM of an H100, for
#: tiles of 4 warps.  The split count is a launch argument, so this moves no compiled variant.
#: ``$SYMSHAPE_SPLIT_PROGRAMS`` sets it (A/B).
SPLIT_PROGRAMS = int(os.environ.get("SYMSHAPE_SPLIT_PROGRAMS", "1056"))


#: Launch options every tiled kernel takes over the defaults (``num_warps``, ``num_stages``), for
#: A/B sweeps (``bench/column_reductions.py --sweep``); empty: the defaults.
TILE_OPTIONS: dict = {}

#: ``SYMSHAPE_TILED_REDUCTIONS=0`` keeps one program per output everywhere (benches compare both).
ENABLED = os.environ.get("SYMSHAPE_TILED_REDUCTIONS", "1") != "0"


def _without_mod(e):
    """``e`` with each ``a mod b`` written ``a - b*(a // b)``: a row index flattened from two dims
    reads ``32*T*(r // T) + 32*(r % T)``, which is ``32*r`` (the vote only; the kernel computes
    the index as given).

    >>> r, T = sympy.symbols("r T", integer=True, positive=True)
    >>> sympy.expand(_without_mod(32 * T * FloorDiv(r, T) + 32 * PyMod(r, T)))
    32*r
    """
    return e.replace(lambda t: isinstance(t, (PyMod, sympy.Mod)),
                     lambda t: t.args[0] - t.args[1] * FloorDiv(t.args[0], t.args[1]))


def _linear_coeff(e, var):
    """The coefficient of ``var`` in index ``e`` where ``e`` is linear in it, else None."""
    e = sympy.expand(_without_mod(sympy.sympify(e)))
    if not e.has(var):
        return sympy.Integer(0)
    if not e.is_polynomial(var):  # floor division, modulo: no fixed stride
        return None
    c = e.coeff(var, 1)
    # ``c`` may be a sum (``768*(P+1)`` for a ViT's tokens): the rest only loses ``var`` expanded.
    return None if c.has(var) or sympy.expand(e - c * var).has(var) else c


def vector_indexes(kernel: Kernel, exprs) -> list:
    """The expressions of ``exprs`` (a tiled kernel's printed sizes and indexes) whose
    alignment can change its code: indexes contiguous along the tile's rows (vector loads and
    stores of ``XBLOCK`` adjacent elements), and the outer sizes that bound and wrap them.

    A row's mean, the loop over the reduced dim and its mask are the same along a tile's row:
    whether their sizes are multiples of 16 changes no load, so they pick no size class (each
    aligned size doubles the builds).

    >>> import sympy, torch
    >>> from compiler.ir import Reduction, RVAR, loop_var
    >>> N = sympy.Symbol("N", integer=True, positive=True)
    >>> x0 = loop_var("x0")
    >>> k = Kernel(name="k", outer=(768,), reductions=[(Reduction(0, "sum", (768,), N, None, torch.float32), (x0,), Load("a", x0 + 768 * RVAR, torch.float32))])
    >>> vector_indexes(k, [x0 + 768 * RVAR, RVAR, N])
    [768*r + x0, 768]
    """
    xlast = kernel.outer_vars[-1]
    keep = [e for e in exprs if _linear_coeff(e, xlast) == 1]
    return keep + [sympy.sympify(n) for n in kernel.outer]


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
            if cr is None or cx is None or cr == 0 or cx == 0:
                # not per element of the row (a weight, a per-column value) or the same for
                # every output (a row's mean or rstd, read once per row of a tile): no vote
                continue
            if cr == 1:
                contiguous += 1
            elif cx == 1:
                strided += 1
    return strided > 0 and strided >= contiguous


def tile_size(kernel: Kernel) -> int:
    """Elements per tile: each reduction of a loop keeps a float32 accumulator tile in registers,
    8 registers a thread at :data:`TILE`; past the 12 of BERT's LayerNorm-and-bias gradient
    kernel, more of them take smaller tiles."""
    most = max((len(g) for g in _loops(kernel)), default=1)
    return TILE if most <= 2 else min(TILE, 2048) if most <= 4 else min(TILE, 1024) if most <= 12 else min(TILE, 512)


def tile_blocks(outputs: int, tile: int = TILE) -> tuple:
    """``(XBLOCK, BLOCK)`` for a launch over ``outputs``: the widest XBLOCK that still leaves
    :data:`MIN_PROGRAMS` programs (coalesced rows of a tile, enough programs to fill the GPU).

    >>> tile_blocks(768), tile_blocks(587 * 768)
    ((16, 64), (64, 16))
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


def unravel(target, g, row: str, ind: str) -> list:
    """Lines binding the row variables x0.. from the flat row number ``row`` (a Triton
    expression; row-major over the kernel's ``outer`` dims), e.g. ``x1 = (row) % (s0)``.

    Example: for outer dims ``(s1, s0)`` and ``row="xrow"`` the lines are ``x1 = (xrow) % (s0)``,
    ``q1 = (xrow) // (s0)``, ``x0 = q1``.
    """
    k, out, rem = g.kernel, [], row
    for i in reversed(range(len(k.outer))):
        # Not through g.expr: row numbers are scalars, the sizes dividing them decide no alignment.
        size = target.print_expr(k.outer[i], g.sym_names, g.facts.nonneg)
        if i == 0:
            out.append(f"{ind}x{i} = {rem}")
        else:
            out.append(f"{ind}x{i} = ({rem}) % ({size})")
            out.append(f"{ind}q{i} = ({rem}) // ({size})")
            rem = f"q{i}"
    return out


def splittable(kernel: Kernel) -> bool:
    """Whether the reduced dim can be split over programs: one loop holds every reduction
    (none reads another's result), so partial results combine in a second kernel."""
    # Partials are float32: an integer or float64 sum would lose bits there.
    return len(_loops(kernel)) == 1 and all(compute_dtype(r.dtype) == torch.float32 for r, _, _ in kernel.reductions)


def split_count(outputs: int, rlen: int, block: int, xblock: int) -> tuple:
    """``(splits, chunk)`` of a launch's reduced dim: few outputs (BERT's 768 columns are 48
    programs of 16) leave most of the GPU idle, so the rows are cut into ``splits`` chunks of
    ``chunk`` (a multiple of ``block``) for :data:`SPLIT_PROGRAMS` programs; ``(1, rlen)`` where
    there are programs enough or rows too few.

    >>> split_count(768, 4696, 64, 16), split_count(587 * 768, 8, 16, 64), split_count(17, 300, 64, 16)
    ((19, 256), (1, 8), (5, 64))
    """
    progs = -(-outputs // xblock)
    want = min(-(-SPLIT_PROGRAMS // progs), -(-rlen // block))
    if want < 2:
        return 1, rlen
    chunk = -(-(-(-rlen // want)) // block) * block
    return -(-rlen // chunk), chunk


def _combine(red, acc, v, mask, ident) -> str:
    nan = ", propagate_nan=tl.PropagateNan.ALL" if red.dtype.is_floating_point else ""
    return {"sum": f"{acc} + tl.where({mask}, {v}, 0)",
            "max": f"tl.maximum({acc}, tl.where({mask}, {v}, {ident}){nan})",
            "min": f"tl.minimum({acc}, tl.where({mask}, {v}, {ident}){nan})"}[red.op]


def finish(red, acc) -> str:
    """The combine of accumulator block ``acc`` along axis 0 for ``red``; a float max/min keeps
    NaN (``tl.max`` alone drops it: a looped row's max of a NaN column was finite).

    >>> import torch
    >>> from compiler.ir import Reduction
    >>> finish(Reduction(0, "max", (), 4, None, torch.float32), "acc0")
    'tl.reduce(acc0, 0, _max_nan)'
    """
    op = getattr(red.op, "value", red.op)
    if red.op == "sum":
        return f"tl.sum({acc}, 0)"
    if red.dtype.is_floating_point:  # a NaN anywhere in the column is the result, as in eager
        return f"tl.reduce({acc}, 0, _{op}_nan)"
    return f"tl.{op}({acc}, 0)"


def _prologue(target, g, rows, ind) -> list:
    out = [f"{ind}xrow = tl.program_id(0).to(tl.int64) * XBLOCK + tl.arange(0, XBLOCK)[None, :]",
           f"{ind}xm = xrow < ({g.expr(rows)})"] + unravel(target, g, "xrow", ind)
    # Loads add a zero tile so that a pointer the same for every lane still has the mask's shape.
    return out + [f"{ind}zx = tl.zeros([1, XBLOCK], dtype=tl.int64)",
                  f"{ind}zvec = tl.zeros([BLOCK, XBLOCK], dtype=tl.int64)"]


def _loop(g, row, group, ind, start, stop, TL) -> tuple:
    """Lines of one loop over the reduced dim for ``group``'s reductions, from ``start`` to
    ``stop``, and the names of their ``[BLOCK, XBLOCK]`` accumulators."""
    k, out = g.kernel, []
    for n in group:
        red = k.reductions[n][0]
        out.append(f"{ind}acc{n} = tl.full([BLOCK, XBLOCK], {_identity(red)}, {TL[compute_dtype(red.dtype)]})")
    R = g.expr(k.reductions[group[0]][0].rsize)
    out.append(f"{ind}for roff in range({start}, {stop}, BLOCK):")
    out.append(f"{ind}    {RVAR} = roff + tl.arange(0, BLOCK)[:, None]")
    out.append(f"{ind}    rm = ({RVAR} < {R}) & xm")
    # One loop, one scope for the group: a tile loaded once serves every reduction reading it.
    sc = Scope(g, ind + "    ", "rm", row)
    upd = []
    for n in group:
        red, _, body = k.reductions[n]
        v = sc.emit(g.accumulated(body))
        upd.append(f"{ind}    acc{n} = {_combine(red, f'acc{n}', v, 'rm', _identity(red))}")
    return out + sc.lines + upd


def _inner_store(g, buf, L, value, parent, ind, start, stop) -> list:
    """A loop writing inner store ``buf`` (rows of ``L``) as ``[BLOCK, XBLOCK]`` tiles from ``start``."""
    k, Ls = g.kernel, g.expr(L)
    out = [f"{ind}for joff in range({start}, {stop or Ls}, BLOCK):",
           f"{ind}    {JVAR} = joff + tl.arange(0, BLOCK)[:, None]",
           f"{ind}    jm = ({JVAR} < {Ls}) & xm"]
    sc = Scope(g, ind + "    ", "jm", parent)
    v = sc.emit(value)
    idx = g.index(flat_index(k.outer_vars + (JVAR,), buf.strides))
    return out + sc.lines + [f"{ind}    tl.store({g.ptr[buf.name]} + ({idx}) + zvec, tl.where(jm, {v}, {v}), mask=jm)"]


def _part_kernel(target, g, lines, group, rows, free) -> list:
    """The partial kernel's lines after its signature ``lines``: program ``(i, s)`` reduces rows
    chunk ``s`` into the workspace and writes chunk ``s`` of each inner store in ``free``."""
    k, ind = g.kernel, "    "
    part = Scope(g, ind, "xm", zero="zx")
    lines = lines + _prologue(target, g, rows, ind)
    lines.append(f"{ind}start = tl.program_id(1).to(tl.int64) * CH")
    lines.append(f"{ind}stop = tl.minimum(start + CH, {g.expr(k.reductions[group[0]][0].rsize)})")
    lines += _loop(g, part, group, ind, "start", "stop", target.type_names)
    for i, n in enumerate(group):
        lines.append(f"{ind}tl.store(ws + ({i} * S + tl.program_id(1)) * ({g.expr(rows)}) + xrow, "
                     f"{finish(k.reductions[n][0], f'acc{n}')}[None, :], mask=xm)")
    for m, ((buf, L, value), f) in enumerate(zip(k.inner_stores, free)):
        if f:  # chunk program_id(1) of S of the store's rows, in whole blocks
            Ls = g.expr(L)
            lines.append(f"{ind}jch{m} = ((({Ls}) + S - 1) // S + BLOCK - 1) // BLOCK * BLOCK")
            lines.append(f"{ind}j0{m} = tl.program_id(1).to(tl.int64) * jch{m}")
            lines += _inner_store(g, buf, L, value, part, ind, f"j0{m}", f"tl.minimum(j0{m} + jch{m}, {Ls})")
    return lines


def tiled_source(target, g: KernelGen, name: str, params: list, head: list, rows) -> str:
    """A tiled reduction kernel ``name`` (``params``: pointers then sizes; ``head``: the lines
    turning size arguments into int64), and where :func:`splittable`, its ``name_part`` kernel:
    program ``(i, s)`` reduces chunk ``s`` of the rows into workspace ``ws``
    (``[reductions, S, outputs]`` float32), which the main kernel, launched with ``SPLIT``,
    combines instead of looping over the rows."""
    TL = target.type_names
    k, ind = g.kernel, "    "
    nptr = len(g.args)
    # Indexes reading the outer dims row-major print through ``xrow`` (contiguous for Triton).
    g.flat_rows = (k.outer_vars, flat_index(k.outer_vars, contiguous_strides(tuple(k.outer))), "xrow")
    split = splittable(k)
    sizes = params[nptr:]
    extra_p = (["ws"] if split else [])
    extra_s = (["S", "CH"] if split else [])
    consts = ["BLOCK: tl.constexpr", "XBLOCK: tl.constexpr"] + (["SPLIT: tl.constexpr"] if split else [])
    dns = sizes + extra_s

    def signature(fname, cs):
        dn = f"(do_not_specialize={dns!r})" if dns else ""
        return [f"@triton.jit{dn}",
                f"def {fname}({', '.join(params[:nptr] + extra_p + sizes + extra_s + cs)}):"] + head
    rowsx = g.expr(rows)
    row = Scope(g, ind, "xm", zero="zx")
    groups = _loops(k)
    body = []
    if split:
        (group,) = groups
        nred = len(group)
        body.append(f"{ind}if SPLIT:  # the rows' partial results, from {name}_part")
        for i, n in enumerate(group):
            red = k.reductions[n][0]
            ident = _identity(red)
            body.append(f"{ind}    acc{n} = tl.full([BLOCK, XBLOCK], {ident}, tl.float32)")
            body.append(f"{ind}    for soff in range(0, S, BLOCK):")
            body.append(f"{ind}        s = soff + tl.arange(0, BLOCK)[:, None]")
            body.append(f"{ind}        sm = (s < S) & xm")
            body.append(f"{ind}        p = tl.load(ws + ({i} * S + s) * ({rowsx}) + xrow, mask=sm, other={ident})")
            body.append(f"{ind}        acc{n} = {_combine(red, f'acc{n}', 'p', 'sm', ident)}")
            body.append(f"{ind}    red{n} = {finish(red, f'acc{n}')}[None, :]")
        body.append(f"{ind}else:")
        body += _loop(g, row, group, ind + "    ", "0", g.expr(k.reductions[group[0]][0].rsize), TL)
        body += [f"{ind}    red{n} = {finish(k.reductions[n][0], f'acc{n}')}[None, :]" for n in group]
    else:
        for group in groups:
            body += _loop(g, row, group, ind, "0", g.expr(k.reductions[group[0]][0].rsize), TL)
            body += [f"{ind}red{n} = {finish(k.reductions[n][0], f'acc{n}')}[None, :]" for n in group]
    for buf, value in k.row_stores:
        v = row.emit(value)
        idx = g.index(flat_index(k.outer_vars, buf.strides))
        row.lines.append(f"{ind}tl.store({g.ptr[buf.name]} + ({idx}) + zx, tl.where(xm, {v}, {v}), mask=xm)")
    # Inner stores that read no reduction (BERT's weight-gradient casts beside its LayerNorm
    # sums: 80 MB) run in the split's partial kernel, over all its programs, not in 48.
    free = [split and not any(isinstance(v, RedRef) for v in walk(value)) for _, _, value in k.inner_stores]
    for (buf, L, value), f in zip(k.inner_stores, free):
        if f:
            row.lines.append(f"{ind}if not SPLIT:  # else written by {name}_part")
        row.lines += _inner_store(g, buf, L, value, row, ind + "    " * f, "0", None)
    main = "\n".join(signature(name, consts) + _prologue(target, g, rows, ind) + body + row.lines)
    if not split:
        return main
    lines = _part_kernel(target, g, signature(name + "_part", consts[:2]), group, rows, free)
    return main + "\n\n\n" + "\n".join(lines)


__all__ = ["TILE_OPTIONS", "unravel", "vector_indexes", "TILE", "XBLOCKS", "wants_tiles", "tile_size", "tile_blocks", "splittable", "split_count", "finish",
           "tiled_source"]
