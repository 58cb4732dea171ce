"""What the padding analysis knows about one tensor of a graph run at a padded size.

A dim is *padded* when its size involves a padded symbol ``T``: the graph runs
at a bucket size ``T' >= T`` and the caller keeps positions ``< T``.  A
:class:`Fact` records, per dim, its *layout* (the atoms it is made of, outermost
first: ``(B, None), (T, T)`` is a ``B*T`` dim that merged ``B`` with a padded
``T`` inside it), whether the kept positions hold exactly what the unpadded
program computes (``mixed`` is ``None``) and what is known about the padded
positions (all finite, or exactly zero along a dim).

Example::

    >>> import sympy
    >>> from compiler.padding_facts import default_layout, view_layout
    >>> B, T = sympy.symbols("B T", positive=True, integer=True)
    >>> x = [default_layout(s, {T}) for s in (B, T, 64)]
    >>> view_layout(x, (B * T, 64))
    (((B, None), (T, T)), ((64, None),))
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

import sympy

from shapes.enums import TextEnum


class MixKind(TextEnum):
    """Whether an op provably reads padded positions into kept ones (``MIXES``), or
    symshape cannot show it does not (``NOT_PROVED``: an op it has no rule for, a size
    used as a value)."""

    MIXES = "mixes"
    NOT_PROVED = "not_proved"


@dataclass(frozen=True)
class Mixing:
    """Where kept positions stop being independent of padded ones.

    ``kind`` is a :class:`MixKind`; ``fix`` says what would make it safe.
    """

    op: str
    where: str
    why: str
    fix: str = ""
    kind: MixKind = MixKind.MIXES

    def __str__(self) -> str:
        text = f"{self.where}: {self.op} {self.why}"
        return text + (f"; to pad safely: {self.fix}" if self.fix else "")


#: One dim's layout: atoms ``(size, padded symbol or None)``, outermost first.
Layout = tuple


@dataclass(frozen=True)
class Fact:
    """A tensor at the padded size: per-dim layouts, kept values exact unless ``mixed``.

    ``finite``: every padded position holds a finite value.  ``zero``: dims
    along which the padded positions (with every other dim kept) are exactly 0.
    """

    layout: tuple
    mixed: tuple = ()
    finite: bool = True
    zero: frozenset = field(default_factory=frozenset)

    def padded_dims(self) -> list[int]:
        return [d for d, lay in enumerate(self.layout) if is_padded(lay)]

    def with_(self, **kw) -> "Fact":
        return replace(self, **kw)


def is_padded(layout: Optional[Layout]) -> bool:
    return layout is None or any(sym is not None for _, sym in layout)


def merge_atoms(atoms) -> Layout:
    """Neighbouring unpadded atoms become one: ``(B, None), (4, None)`` is ``(4*B, None)``."""
    out = []
    for size, sym in atoms:
        size = sympy.sympify(size)
        if size == 1:
            continue
        if sym is None and out and out[-1][1] is None:
            out[-1] = (out[-1][0] * size, None)
        else:
            out.append((size, sym))
    return tuple(out) or ((sympy.Integer(1), None),)


def default_layout(size, padded) -> Optional[Layout]:
    """The layout of a dim made from its size alone; ``None`` where the size
    involves a padded symbol but is not that symbol (``T - 1``, ``2*T``)."""
    size = sympy.sympify(size)
    if not (size.free_symbols & set(padded)):
        return ((size, None),)
    if size in padded:
        return ((size, size),)
    if size.is_Mul:
        # T*64 made as a fresh size: T outermost keeps the kept part a prefix.
        syms = [f for f in size.args if f in padded]
        rest = sympy.Mul(*[f for f in size.args if f not in padded])
        if len(syms) == 1 and not (rest.free_symbols & set(padded)):
            return ((syms[0], syms[0]), (rest, None)) if rest != 1 else ((syms[0], syms[0]),)
    return None


def _divides(q) -> bool:
    q = sympy.cancel(sympy.sympify(q))
    num, den = sympy.fraction(q)
    if den != 1:
        return False
    return q.is_integer is not False and (not q.is_number or (q.is_Integer and q > 0))


def view_layout(layouts, out_shape) -> Optional[tuple]:
    """Layouts after a view to ``out_shape``, or ``None`` where it splits a padded atom
    or merges sizes it cannot match."""
    atoms = [a for a in merge_atoms([a for lay in layouts for a in lay]) if sympy.sympify(a[0]) != 1]
    out, i = [], 0
    for o in out_shape:
        rem, group = sympy.sympify(o), []
        while sympy.simplify(rem) != 1:
            if i >= len(atoms):
                return None
            size, sym = atoms[i]
            if _divides(rem / size):
                group.append(atoms[i])
                rem, i = sympy.cancel(rem / size), i + 1
            elif sym is None and _divides(size / rem):
                group.append((rem, None))
                atoms[i] = (sympy.cancel(size / rem), None)
                rem = sympy.Integer(1)
            else:
                return None
        out.append(merge_atoms(group))
    if i != len(atoms):
        return None
    return tuple(out)


def kept_prefix(layout: Layout) -> bool:
    """The kept positions of a dim are a prefix: one padded atom, outermost."""
    padded = [k for k, (_, sym) in enumerate(layout) if sym is not None]
    return padded == [0]


__all__ = ["Mixing", "Fact", "Layout", "is_padded", "merge_atoms", "default_layout", "view_layout",
           "kept_prefix"]
