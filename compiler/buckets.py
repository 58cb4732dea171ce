"""Bucket sizes for padded dims: which sizes get a CUDA graph, within the traced range and a memory budget.

Example::

    >>> from compiler.buckets import default_buckets, bucket_for
    >>> default_buckets(1, 512)
    (1, 2, 4, 8, 16, 32, 64, 128, 192, 256, 320, 384, 448, 512)
    >>> bucket_for(70, default_buckets(1, 512)), bucket_for(600, default_buckets(1, 512))
    (128, None)
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Optional

import sympy

#: The largest bucket when a dim's traced range has no upper bound.
UNBOUNDED_CAP = 2048


def default_buckets(lo: int, hi, *, step: int = 64, powers_only: bool = False) -> tuple:
    """Powers of 2 below ``step``, then multiples of ``step`` (or powers of 2 only), within ``[lo, hi]``.

    ``hi`` itself is the last bucket when it is finite and not already one.
    """
    hi = UNBOUNDED_CAP if hi is None or hi == math.inf else int(hi)
    lo = max(int(lo), 1)
    out, p = [], 1
    while p < (hi if powers_only else min(step, hi)):
        if p >= lo:
            out.append(p)
        p *= 2
    if not powers_only:
        m = step
        while m < hi:
            if m >= lo:
                out.append(m)
            m += step
    else:
        pass
    if not out or out[-1] != hi:
        out.append(hi)
    return tuple(sorted(set(out)))


def bucket_for(value: int, buckets) -> Optional[int]:
    """The smallest bucket ``>= value``; ``None`` above the largest."""
    i = bisect.bisect_left(buckets, value)
    return buckets[i] if i < len(buckets) else None


@dataclass
class BucketChoice:
    """Buckets per padded dim, and the memory estimate that chose them.

    ``bytes_per_bucket``: estimated bytes a graph at each bucket holds (inputs,
    outputs, and every intermediate buffer at that size: an upper bound);
    ``note`` says when the budget made the set coarser.
    """

    buckets: dict = field(default_factory=dict)
    bytes_per_bucket: dict = field(default_factory=dict)
    note: str = ""


def buffer_bytes(variant, sizes: dict) -> Optional[int]:
    """Bytes of every buffer of a compiled variant at ``sizes`` (dim symbol -> int), or ``None``
    when the variant has no lowered program (it runs with ATen)."""
    lp = getattr(variant, "lp", None)
    if lp is None or getattr(variant, "eager", False):
        return None
    total = 0
    for b in lp.buffers.values():
        try:
            n = 1
            for s in b.shape:
                n *= int(sympy.sympify(s).xreplace(sizes))
        except (TypeError, ValueError):
            return None
        total += n * b.dtype.itemsize
    return total


def choose_buckets(ranges: dict, estimate, budget: Optional[int], given: Optional[dict] = None) -> BucketChoice:
    """Buckets for each padded dim in ``ranges`` (name -> (lo, hi)).

    ``estimate(name, size)`` gives the bytes of a graph at that size (or None);
    the default set (powers of 2, then multiples of 64) becomes powers of 2
    only, then loses its largest buckets, until the estimated memory of all
    graphs fits ``budget``.  ``given`` buckets are kept as they are.
    """
    choice = BucketChoice()
    for name, (lo, hi) in ranges.items():
        if given and name in given:
            choice.buckets[name] = tuple(sorted(set(int(b) for b in given[name])))
            continue
        cands = default_buckets(lo, hi)
        if budget is not None:
            for powers in (False, True):
                cands = default_buckets(lo, hi, powers_only=powers)
                if _total(name, cands, estimate) <= budget:
                    break
            else:
                while len(cands) > 1 and _total(name, cands, estimate) > budget:
                    cands = cands[:-1]
                choice.note += (f"{name}: buckets stop at {cands[-1]} to fit the memory budget of "
                                f"{budget / 2**20:.0f} MiB; larger sizes get no graph. ")
            if cands != default_buckets(lo, hi) and not choice.note:
                choice.note += f"{name}: powers of 2 only, to fit the memory budget of {budget / 2**20:.0f} MiB. "
        choice.buckets[name] = cands
    for name, bs in choice.buckets.items():
        choice.bytes_per_bucket[name] = {b: estimate(name, b) for b in bs}
    return choice


def _total(name, cands, estimate) -> float:
    sizes = [estimate(name, b) for b in cands]
    return sum(s for s in sizes if s is not None)


__all__ = ["default_buckets", "bucket_for", "choose_buckets", "BucketChoice", "buffer_bytes", "UNBOUNDED_CAP"]
