"""Size classes of Triton kernels: which sizes get their own binary, and which a kernel can meet.

A Triton kernel is compiled per *size class* (:class:`SizeClass`): the size
symbols that are multiples of 16 (passed divided by 16, so that Triton's
alignment analysis knows it) and, for a reduction whose row length is one
expression, persistent (the row in one block of the next power of two) or
looped.  Without care a new size class at a later call means a new compile
there (seconds), which users feel as a stall at a new size.  Two things
prevent it:

- only the symbols whose divisibility changes what Triton can prove about
  the kernel's indexes count (:func:`alignment_symbols`): ``B*T*1024`` is a
  multiple of 16 whatever ``B`` and ``T`` are, so a kernel indexing
  ``[B, T, 1024]`` has one class where it had four;
- every class a kernel can meet is enumerated (:func:`reachable_classes`) and
  built when the program compiles, in worker processes
  (:mod:`.triton_build`), found in Triton's on-disk cache in later processes.

Example::

    >>> import sympy
    >>> B, T, x0 = sympy.symbols("B T x0", integer=True)
    >>> sorted(map(str, alignment_symbols([B * T * 1024, x0 * T * 64 + 5], {B, T})))
    []
    >>> sorted(map(str, alignment_symbols([x0 * T + 3, B * 1024], {B, T})))
    ['T']
    >>> sorted(map(str, alignment_symbols([x0 + 768 * sympy.Min(x0, T - 1)], {B, T})))
    []
    >>> [c.suffix for c in reachable_classes(["ks1"], None)]
    ['', '_lks1']
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy


@dataclass(frozen=True)
class SizeClass:
    """A kernel variant's size class: which sizes are multiples of 16, and whether the
    row fits one block (a persistent reduction).  ``suffix`` names the kernel."""

    div16: frozenset = frozenset()
    persistent: bool = False

    @property
    def suffix(self) -> str:
        if not self.div16 and not self.persistent:
            return ""
        return "_" + ("p" if self.persistent else "l") + "".join(sorted(self.div16))


GENERIC = SizeClass()

#: Rows up to this length run as persistent reductions (the row in registers).
PERSISTENT_MAX = 8192


def pow2_block(n, cap) -> int:
    """The persistent block for a row of ``n``: the next power of two, at least 16, at most ``cap``.

    >>> pow2_block(100, 8192), pow2_block(3, 8192)
    (128, 16)
    """
    return int(min(cap, max(16, 1 << max(0, int(n) - 1).bit_length())))


def alignment_symbols(exprs, size_symbols) -> frozenset:
    """The size symbols whose divisibility by 16 changes the divisibility of some of ``exprs``.

    An expression that is a polynomial with integer coefficients depends on it
    only through its terms whose coefficient is not a multiple of 16; anything
    else (floor division, modulo) counts every size symbol in it.
    """
    size_symbols = set(size_symbols)
    out: set = set()
    for e in exprs:
        e = sympy.sympify(e)
        sizes = e.free_symbols & size_symbols
        if not sizes or sizes <= out:
            continue
        try:
            # Generators picked by sympy: a ``min(r, N - 1)`` or ``j // N`` is one opaque factor,
            # so ``768*min(r, N - 1)`` is a multiple of 16 whatever N is.
            p = sympy.Poly(sympy.expand(e))
            if not p.domain.is_ZZ:
                raise sympy.PolynomialError("non-integer coefficients")
        except (sympy.PolynomialError, sympy.GeneratorsNeeded, ValueError, TypeError):
            out |= sizes
            continue
        for monom, coeff in p.terms():
            if int(coeff) % 16:
                out |= {s for g, k in zip(p.gens, monom) if k for s in g.free_symbols & size_symbols}
    return frozenset(out)


#: The most variants one kernel's classes may take (each aligned size doubles them): past it,
#: the least used aligned sizes stop picking a class (:func:`capped_alignment`).
MAX_CLASS_VARIANTS = 48


def capped_alignment(names, exprs, sym_names, per_subset, cap=MAX_CLASS_VARIANTS) -> list:
    """The aligned size ``names`` a kernel keeps so that its variants (``2 ** len(names) *
    per_subset``) stay within ``cap``: those in the most of the kernel's index ``exprs`` (ties:
    in ``names``' order), at least none.

    >>> import sympy
    >>> a, b, c = sympy.symbols("a b c", integer=True)
    >>> capped_alignment(["ks0", "ks1", "ks2"], [a + 1, b * 3 + a, c + b + a], {a: "ks0", b: "ks1", c: "ks2"}, 12)
    ['ks0', 'ks1']
    """
    keep = len(names)
    while keep and (2 ** keep) * per_subset > cap:
        keep -= 1
    if keep == len(names):
        return list(names)
    uses = dict.fromkeys(names, 0)
    for e in exprs:
        for s in getattr(sympy.sympify(e), "free_symbols", ()):
            n = sym_names.get(s)
            if n in uses:
                uses[n] += 1
    order = {n: i for i, n in enumerate(names)}
    kept = set(sorted(names, key=lambda n: (-uses[n], order[n]))[:keep])
    return [n for n in names if n in kept]


def reachable_classes(names, row_blocks) -> list:
    """Every class over the aligned symbol ``names``: each subset of them divisible by 16, times
    ``row_blocks`` (the persistent blocks a symbolic row length can take; ``None``: the row
    length is fixed, or there is none, and so is the class's persistence)."""
    subsets = [frozenset()]
    for n in names:
        subsets += [s | {n} for s in subsets]
    persist = [False] if row_blocks is None else [False, True]
    return [SizeClass(s, p) for s in subsets for p in persist]


def row_blocks(rowlen, symbols):
    """The persistent blocks a symbolic row length reaches (sizes 0 and 1 get their own trace,
    so every symbol is at least 2); ``None`` for a fixed or missing row length."""
    if rowlen is None:
        return None
    e = sympy.sympify(rowlen)
    if e.is_Integer:
        return None
    try:
        low = int(e.xreplace({s: 2 for s in e.free_symbols}))
    except (TypeError, ValueError):
        low = 1
    low = max(1, low)
    if low > PERSISTENT_MAX:
        return None
    out, b = [], pow2_block(low, PERSISTENT_MAX)
    while b <= PERSISTENT_MAX:
        out.append(b)
        b *= 2
    return out


__all__ = ["SizeClass", "GENERIC", "PERSISTENT_MAX", "MAX_CLASS_VARIANTS", "pow2_block", "alignment_symbols",
           "capped_alignment", "reachable_classes",
           "row_blocks"]
