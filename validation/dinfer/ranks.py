"""Conditions on the rank: a sharded program's path must hold on every rank.

A trace with ``world="W"`` runs as one rank (the ``rank`` symbol, example 0);
a condition that mentions it holds for the job only if it holds for every
rank ``0..W-1``.  With ``W`` bounded by ``W_max`` that is a finite conjunction,
``And(r <= W - 1 -> C(r) for r in 0..W_max-1)``: exact, and free of quantifiers.

Example::

    >>> import sympy
    >>> W, r, H = sympy.symbols("W rank H", integer=True)
    >>> for_all_ranks(sympy.Le((r + 1) * 2, H), r, W, 2)
    (2 <= H) & ((4 <= H) | (W < 2))
"""
from __future__ import annotations

import math
from dataclasses import replace

import sympy

from shapes.distributed import world_symbols

#: A bound past which the conjunction is not built (the world's range is too wide).
MAX_RANKS = 1024


def for_all_ranks(cond, rank, world, world_max: int):
    """``cond`` for every rank below ``world`` (``world <= world_max``), as one sympy condition.

    Raises ValueError when ``world_max`` is unbounded or above :data:`MAX_RANKS`.
    """
    if rank not in cond.free_symbols:
        return cond
    if not isinstance(world_max, int) or world_max > MAX_RANKS:
        raise ValueError(f"the world size's maximum {world_max} is too large to check every rank")
    parts = []
    for r in range(world_max):
        c = cond.subs(rank, r)
        parts.append(c if r == 0 else sympy.Or(sympy.Lt(world, r + 1), c))
    return sympy.And(*parts)


def every_rank(search, point, conds, oc, Status):
    """A per-world trace's class for the whole job at ``point``: ``(conds, outcome)``.

    The trace ran as rank 0 at ``W == point[W]`` (:mod:`shapes.distributed.mesh`), so each
    condition gets ``W == w``; the other ranks are traced at the same point: the first that
    raises gives the job's error (its path, which every size of it takes on that rank), an
    ok job takes every rank's path, and ranks whose outputs differ in shape are not a class
    (symshape reports one output shape per class).
    """
    at = [sympy.Eq(search.symbols[n], point[n]) for n in world_symbols(search.world)]
    w = math.prod(point[n] for n in world_symbols(search.world))
    conds = list(conds) + at
    if oc.status is not Status.OK:
        return conds, oc
    for r in range(1, w):
        other = search._trace(point, rank=r)
        if other.status is Status.OK and tuple(map(str, other.output_shapes)) != tuple(map(str, oc.output_shapes)):
            return conds, replace(other, status=Status.UNSUPPORTED, message=(
                f"unsupported by symshape: rank {r}'s output shapes {other.output_shapes} differ from rank 0's "
                f"{oc.output_shapes} at {point}"))
        more, _ = search._conditions(other.env)
        if more is None or other.status is not Status.OK:
            return (None if more is None else list(more) + at), other
        conds += list(more)
    return conds, oc
