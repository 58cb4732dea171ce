"""How the C++ target shapes a kernel's loops: column reductions, rows split at their seams,
and which loads are gathers.

* :func:`column_reduction`: sums down the columns of ``[T, C]`` values (bias gradients) run
  rows outer and a block of columns inner, so the inner loop reads stride 1;
* :func:`row_pieces`: a row stored piecewise (a cat) loops once per piece;
* :func:`affine_in_loops`: whether a load's index walks the row loops at a fixed stride;
* :func:`element_cost`: the work per element that decides how many threads a kernel uses.

Example::

    >>> import torch, shapes
    >>> from compiler.lowering import lower
    >>> from compiler.scheduler import schedule
    >>> column_reduction(schedule(lower(shapes.trace(lambda g: g.sum(0), "g: f32[T, 64]")))[0])
    True
"""
from __future__ import annotations

import functools

import sympy

from ..ir import JVAR, RVAR, Const, Load, Op, OpKind, RedRef, SizeVal, compute_dtype, walk


def column_dim(k):
    """The one row dim of kernel ``k`` whose extent is not 1 (others are 1: a ``[1, C]`` bias
    gradient), or None.

    >>> import torch, shapes
    >>> from compiler.lowering import lower
    >>> from compiler.scheduler import schedule
    >>> column_dim(schedule(lower(shapes.trace(lambda g: g.sum(1, keepdim=True), "g: f32[1, T, 8]")))[0])
    2
    """
    dims = [i for i, e in enumerate(k.outer) if sympy.sympify(e) != 1]
    return dims[0] if len(dims) == 1 else None


_SPLITS = {OpKind.LT: 0, OpKind.GE: 0, OpKind.LE: 1, OpKind.GT: 1}
#: At most this many pieces per row loop (each is a copy of the loop body).
MAX_PIECES = 4


def row_pieces(value, extent: str) -> list:
    """``[(lo, hi)]`` C++ bounds covering ``0 <= j < extent``, split where ``value`` compares
    ``j`` with an integer constant (``j < 32``: a cat's or rotate_half's seam).

    >>> import torch
    >>> from compiler.ir import SizeVal
    >>> j, c = SizeVal(JVAR, torch.int64), SizeVal(sympy.Integer(32), torch.int64)
    >>> row_pieces(Op(OpKind.LT, (j, c), torch.bool), "L")
    [('0', 'std::min<int64_t>(32, L)'), ('std::min<int64_t>(32, L)', 'L')]
    """
    cuts = _cuts(value)
    if not cuts:
        return [("0", extent)]
    bounds = ["0"] + [f"std::min<int64_t>({c}, {extent})" for c in cuts] + [extent]
    return list(zip(bounds[:-1], bounds[1:]))


def piece_ranges(value) -> list:
    """``[(lo, hi)]`` integer bounds of :func:`row_pieces`' pieces (``hi`` None: up to the
    extent), each a superset of its piece's ``j`` (a piece ends at ``min(cut, extent)``).

    >>> import torch
    >>> from compiler.ir import SizeVal
    >>> j, c = SizeVal(JVAR, torch.int64), SizeVal(sympy.Integer(32), torch.int64)
    >>> piece_ranges(Op(OpKind.LT, (j, c), torch.bool))
    [(0, 32), (32, None)]
    """
    cuts = _cuts(value)
    bounds = [0, *cuts, None]
    return list(zip(bounds[:-1], bounds[1:]))


def fold_in_range(index, lo: int, hi) -> "sympy.Expr":
    """``index`` with each ``Min``/``Max`` whose winner is the same for every ``j`` in
    ``[lo, hi)`` replaced by that argument (``hi`` None: unbounded above): inside one piece of a
    cat or a rotate_half, the gathered ``Min(j, 7) + 8`` is the affine ``j + 8``.

    >>> fold_in_range(sympy.Min(JVAR, 7) + 8, 0, 8), fold_in_range(sympy.Max(0, JVAR - 8), 8, None)
    (j + 8, j - 8)
    >>> fold_in_range(sympy.Min(JVAR, 7), 0, None)
    Min(7, j)
    """
    e = sympy.sympify(index)
    if not e.has(sympy.Min, sympy.Max):
        return e
    return e.replace(lambda n: isinstance(n, (sympy.Min, sympy.Max)), lambda n: _winner(n, lo, hi))


def _winner(node, lo, hi):
    first = isinstance(node, sympy.Min)
    for a in node.args:
        if all(a == b or _nonneg_in_range(b - a if first else a - b, lo, hi) for b in node.args):
            return a
    return node


def _nonneg_in_range(d, lo, hi) -> bool:
    """Whether ``d`` (affine in ``j``, no other symbol) is >= 0 for every ``j`` in ``[lo, hi)``."""
    d = sympy.expand(d)
    if not d.free_symbols <= {JVAR}:
        return False
    c = d.coeff(JVAR)
    if not (c.is_Number and (d - c * JVAR).is_Number):
        return False
    if c >= 0:
        return bool(d.subs(JVAR, lo) >= 0)
    return hi is not None and bool(d.subs(JVAR, hi - 1) >= 0)


def _cuts(value) -> list:
    """The integer ``j`` values where ``value``'s comparisons of ``j`` with a constant flip."""
    cuts = set()
    for n in walk(value):
        if not (isinstance(n, Op) and OpKind(n.op) in _SPLITS and len(n.args) == 2):
            continue
        a, b = (_int_of(x) for x in n.args)
        if isinstance(a, sympy.Symbol) and a == JVAR and isinstance(b, int):
            cuts.add(b + _SPLITS[OpKind(n.op)])
        elif isinstance(b, sympy.Symbol) and b == JVAR and isinstance(a, int):
            cuts.add(a + 1 - _SPLITS[OpKind(n.op)])  # c < j is j >= c + 1; c <= j is j >= c
    return sorted(c for c in cuts if c > 0)[:MAX_PIECES - 1]


def _int_of(v):
    """An IR value as JVAR or a Python int where it is one (else None)."""
    if isinstance(v, SizeVal):
        e = sympy.sympify(v.expr)
        return int(e) if e.is_Integer else e if e == JVAR else None
    if isinstance(v, Const) and isinstance(v.value, int) and not isinstance(v.value, bool):
        return v.value
    return None


@functools.lru_cache(maxsize=4096)
def affine_in_loops(index) -> bool:
    """Whether a load's ``index`` is affine in the row loops' variables (``j``, ``r``): then
    consecutive lanes read at a fixed stride; otherwise (a cat's ``min``, a head split's ``//``
    and ``%``) it is a gather.

    >>> affine_in_loops(JVAR * 3 + 5), affine_in_loops(sympy.Min(JVAR, 31))
    (True, False)
    """
    e = sympy.sympify(index)
    if not e.free_symbols & {JVAR, RVAR}:
        return True
    try:
        return sympy.Poly(e, JVAR, RVAR).total_degree() <= 1
    except sympy.PolynomialError:
        return False


#: Ops that are a vector math call (libmvec): each costs about as much as this many plain ops.
_CALLS = frozenset({OpKind.EXP, OpKind.LOG, OpKind.SIN, OpKind.COS, OpKind.TANH, OpKind.ERF, OpKind.POW,
                    OpKind.SIGMOID, OpKind.LOG1P, OpKind.EXPM1})
CALL_COST = 16


def element_cost(value) -> int:
    """Work per element of ``value``: 1 per load or op, :data:`CALL_COST` per vector math call.
    A kernel's threads follow its elements times this, not its elements alone: an erf GELU of
    ``[2, 61, 1024]`` (125K elements, ~50 us on one core) pays for a second thread, an add of
    the same size (~7 us) does not.

    >>> import torch
    >>> x = Load("x", JVAR, torch.float32)
    >>> element_cost(Op(OpKind.ADD, (x, x), torch.float32)), element_cost(Op(OpKind.ERF, (x,), torch.float32))
    (2, 17)
    """
    n = 0
    for v in walk(value):
        if isinstance(v, Op):
            n += CALL_COST if OpKind(v.op) in _CALLS else 1
        elif isinstance(v, Load):
            n += 1
    return max(n, 1)


#: Columns per block of a column reduction (its accumulators live on the stack).
COLUMN_BLOCK = 64


def column_reduction(k) -> bool:
    """Whether kernel ``k`` sums down columns: one row dim (others of extent 1), float sums only (none reading
    another), no per-element stores, and some load walking the rows with a stride while the
    row dim is its stride-1 dim (a bias gradient: ``g.sum(0)`` of a ``[T, C]`` gradient).
    Looping rows inside columns there reads memory with stride C and cannot vectorize.

    >>> import torch, shapes
    >>> from compiler.lowering import lower
    >>> from compiler.scheduler import schedule
    >>> col = schedule(lower(shapes.trace(lambda g: g.sum(0), "g: f32[T, 64]")))[0]
    >>> row = schedule(lower(shapes.trace(lambda g: g.sum(1), "g: f32[T, 64]")))[0]
    >>> column_reduction(col), column_reduction(row)
    (True, False)
    """
    c = column_dim(k)
    if c is None or k.inner_stores or not k.reductions:
        return False
    if len({sympy.sympify(r.rsize) for r, _, _ in k.reductions}) != 1:
        return False
    x0 = k.outer_vars[c]
    strided = False
    for red, _, body in k.reductions:
        if red.op != "sum" or not compute_dtype(red.dtype).is_floating_point:
            return False
        for n in walk(body):
            if isinstance(n, RedRef):
                return False
            if not isinstance(n, Load):
                continue
            e = sympy.sympify(n.index)
            if RVAR not in e.free_symbols:
                continue
            try:
                poly = sympy.Poly(e, x0, RVAR)
            except sympy.PolynomialError:
                return False
            cx, cr = e.diff(x0), e.diff(RVAR)
            if poly.total_degree() > 1 or cx not in (0, 1) or cr.free_symbols & {x0, RVAR}:
                return False
            if cx == 1 and cr == 1:
                return False  # contiguous along the rows: the row form reads it with stride 1
            strided = strided or cx == 1
    return strided
