"""Sizes where a program takes another Python path: solved from the ``!=`` guards of its trace.

A trace records ``a != b`` where the program branched on two sizes being equal and they were
not: transformers' masks ask ``batch_size != position_ids.shape[0]`` (``B != 1``), Hugging Face's
ViT skips interpolating its position embeddings when the image has exactly as many patches as
it was trained for (``(H // 16) * (W // 16) != 196``).  A call at such a size needs a trace of
its own; :class:`~compiler.runtime.CompiledProgram` makes those traces at compile time, at the
sizes found here, rather than stalling the call for seconds.

Each guard over at most two input dims is solved by scanning: one dim from its smallest
allowed size up, two dims at equal sizes (square images).  The first size found wins, the
others keep their example sizes.  A guard with no solution in the scan is left to its call.

Example::

    >>> import sympy
    >>> from shapes.functions import FloorDiv
    >>> H, W, B = sympy.symbols("H W B", integer=True, positive=True)
    >>> guards = [sympy.Ne(FloorDiv(H, 16) * FloorDiv(W, 16), 196), sympy.Ne(B, 1), sympy.Ne(B, 2 * H)]
    >>> branch_sizes(guards, ["B", "H", "W"], {"B": 4, "H": 64, "W": 48}, {})
    [(4, 224, 224), (1, 64, 48)]
"""
from __future__ import annotations

import math
from typing import Mapping

import sympy

from .exprs import compile_exprs

#: Sizes tried per guard (from the dims' smallest allowed size up).
SCAN = 4096
#: ``!=`` guards examined, and variants returned, at most: each is a trace at compile time.
MAX_GUARDS = 64
MAX_SIZES = 2


def branch_sizes(guards, names: list, hints: Mapping[str, int], bounds: Mapping[str, tuple]) -> list:
    """Value tuples (in ``names`` order) at which ``guards`` (sympy ``Ne`` among others) fail.

    ``hints``: every dim's example size; ``bounds``: name -> (min, max) where declared (else 1..inf).
    """
    out: list = []
    seen = 0
    for g in guards:
        if not isinstance(g, sympy.Ne):
            continue
        seen += 1
        if seen > MAX_GUARDS or len(out) >= MAX_SIZES:
            break
        diff = g.args[0] - g.args[1]
        free = sorted(diff.free_symbols, key=lambda s: s.name)
        if not free or len(free) > 2 or any(s.name not in names for s in free):
            continue
        v = _solve(diff, free, bounds)
        if v is None:
            continue
        mine = {s.name for s in free}
        values = tuple(v if n in mine else int(hints[n]) for n in names)
        if values not in out:
            out.append(values)
    return out


def _solve(diff, free, bounds) -> "int | None":
    lo = int(max([1] + [bounds.get(s.name, (1, math.inf))[0] for s in free]))
    hi = min([lo + SCAN - 1] + [bounds.get(s.name, (1, math.inf))[1] for s in free])  # finite: SCAN bounds it
    fn = compile_exprs([diff], free)
    for v in range(lo, int(hi) + 1):
        try:
            if fn(*[v] * len(free))[0] == 0:
                return v
        except (ZeroDivisionError, ValueError, OverflowError):
            continue
    return None


__all__ = ["branch_sizes", "SCAN", "MAX_SIZES"]
