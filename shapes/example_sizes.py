"""Automatic example sizes that make a general trace: no derived size 0 or 1 by accident.

:func:`shapes.spec.default_hints` picks small distinct sizes (8, 16, 24, ...) before the
program runs, so it cannot know what the program divides them by: ViT's patch embedding
at ``H=16, W=24`` makes ``H // 16 == 1`` patch rows, and a trace whose guards pin a
derived size to 1 (``Eq(H // 16, 1)``: PyTorch's 0/1 policy, a broadcast, a squeeze)
serves ``16 <= H <= 31`` only, a size no real image has.  A compiler that compiles that
trace first pays a second trace, and its kernels, at the first real call.

:func:`trace_general` traces at the automatic sizes and, where the trace's guards pin a
derived size to 0 or 1 (or make two derived sizes equal) and the dims' ranges allow
otherwise, traces again at larger sizes of the dims involved (2x, 3x, ... their hints)
before returning.  Only automatic example sizes move: a size the caller gave is kept.

Example::

    >>> import torch, shapes
    >>> def rows(x):  # rows of 8, the first one dropped where there is only one
    ...     return x.view(x.shape[0] // 8, 8).squeeze(0)
    >>> [str(g.expr) for g in shapes.trace(rows, "x: f32[N]").guards]
    ['Eq((N//8), 1)']
    >>> tp = trace_general(rows, "x: f32[N]")
    >>> tp.hints, [str(g.expr) for g in tp.guards]
    ({'N': 16}, ['Ne((N//8), 1)'])
"""
from __future__ import annotations

from typing import Callable, Optional

import sympy

from .errors import SymshapeError
from .spec import Dim, parse_dims, parse_specs

#: The factors tried on the hints of a degenerate guard's dims, smallest first.
FACTORS = (2, 3, 4, 8, 16)
#: Traces at most (the automatic sizes included).
MAX_TRACES = 3


def _is_mod(e) -> bool:
    return isinstance(e, sympy.Mod) or type(e).__name__ == "PyMod"


def _pinned(expr):
    """What ``expr`` pins: ``("small", e)`` where it holds only for a derived size ``e`` of 0 or 1
    (``Eq(H // 16, 1)``, ``H // 16 < 2``), ``("equal", a, b)`` where two sizes are equal, else None.
    A divisibility (``Eq(T % 8, 0)``) is something the program asks for, not an accident; a bare dim
    equal to 0 or 1 is the caller's example size (automatic ones are >= 2) or its range."""
    if not isinstance(expr, sympy.core.relational.Relational) or isinstance(expr, sympy.Ne):
        return None
    lhs, rhs = expr.lhs, expr.rhs
    if _is_mod(lhs) or _is_mod(rhs):
        return None
    if lhs.free_symbols and rhs.free_symbols:
        return ("equal", lhs, rhs) if isinstance(expr, sympy.Eq) else None
    if not (lhs.free_symbols or rhs.free_symbols):
        return None
    size, c, left = (lhs, rhs, True) if lhs.free_symbols else (rhs, lhs, False)
    if isinstance(size, sympy.Symbol) or not c.is_Integer:
        return None
    if isinstance(expr, sympy.Eq):
        top = c if c in (0, 1) else None
    elif isinstance(expr, (sympy.StrictLessThan, sympy.StrictGreaterThan)):
        # size < c, or c > size: an upper bound c - 1 (a lower bound is no pin)
        top = c - 1 if left == isinstance(expr, sympy.StrictLessThan) else None
    else:
        top = c if left == isinstance(expr, sympy.LessThan) else None
    return ("small", size) if top is not None and top <= 1 else None


def degenerate_guards(tp) -> list:
    """The guards of ``tp`` that pin a derived size to 0 or 1, or two sizes equal.

    >>> import shapes
    >>> tp = shapes.trace(lambda x: x.view(x.shape[0] // 8, 8).squeeze(0), "x: f32[N]")
    >>> [str(g.expr) for g in degenerate_guards(tp)]
    ['Eq((N//8), 1)']
    """
    return [g for g in tp.guards if _pinned(g.expr) is not None]


def _value(expr, at: dict):
    v = expr.xreplace({s: sympy.Integer(at[s.name]) for s in expr.free_symbols if s.name in at})
    return v if v.is_Integer else None


def _still_degenerate(expr, at: dict) -> bool:
    pin = _pinned(expr)
    vals = [_value(e, at) for e in pin[1:]]
    if any(v is None for v in vals):
        return True
    return vals[0] == vals[1] if pin[0] == "equal" else vals[0] in (0, 1)


def less_special_hints(tp, automatic) -> Optional[dict]:
    """Hints where no degenerate guard of ``tp`` holds, moving only the dims in ``automatic``
    (names whose hint the caller did not give) within their ranges; None if there are none.

    >>> import shapes
    >>> tp = shapes.trace(lambda x: x.view(x.shape[0] // 8, 8).squeeze(0), "x: f32[N]")
    >>> less_special_hints(tp, {"N"})
    {'N': 16}
    """
    bad = [g.expr for g in degenerate_guards(tp)]
    names = sorted({s.name for e in bad for s in e.free_symbols if s.name in automatic})
    if not bad or not names:
        return None
    hints = dict(tp.hints)
    others = {v for n, v in hints.items() if n not in names}
    for f in FACTORS:
        at = dict(hints)
        for n in names:
            d = tp.dims.get(n, Dim())
            at[n] = int(min(max(hints[n] * f, d.min), d.max))
        moved = [at[n] for n in names]
        if len(set(moved)) < len(moved) or others & set(moved) or all(at[n] == hints[n] for n in names):
            continue  # distinct sizes keep unrelated dims from looking equal
        if not any(_still_degenerate(e, at) for e in bad):
            return at
    return None


def trace_general(program: Callable, *specs, dims=None, trace: Optional[Callable] = None, **opts):
    """``shapes.trace(program, *specs, dims=dims, **opts)``, traced again at larger automatic
    example sizes while its guards pin a derived size to 0 or 1 that the ranges do not force
    (at most :data:`MAX_TRACES` traces).  ``trace`` replaces :func:`shapes.trace` (same
    arguments).  A retrace refused at the larger sizes (the program raises there, or symshape
    cannot trace it) keeps the trace before it: both are correct, the first is only more special."""
    if trace is None:
        from .tracer import trace
    _, names = parse_specs(specs)
    given = parse_dims(dims, names) if dims else {}
    automatic = {n for n in names if given.get(n, Dim()).hint is None}
    tp = trace(program, *specs, dims=dims, **opts)
    for _ in range(MAX_TRACES - 1):
        at = less_special_hints(tp, automatic)
        if at is None:
            return tp
        retry = dict(dims or {})
        for n in automatic:
            d = given.get(n, Dim())
            retry[n] = Dim(d.min, d.max, at[n])
        try:
            tp = trace(program, *specs, dims=retry, **opts)
        except SymshapeError:
            # The program (or symshape) refuses the larger sizes: the trace before is correct, only special.
            return tp
    return tp
