"""The symbol table of one trace: names, example values, sources, and which symbols depend on data.

Backed symbols (input dims) carry a hint, the example size they were created
from; unbacked symbols ``u0, u1, ...`` (sizes and scalars computed from data)
carry none.  The table only names and describes symbols: what is known about
them lives in :mod:`shapes.facts`, decisions in :mod:`shapes.decide`.

Example::

    >>> from shapes.symbols import SymbolTable, UnbackedKind
    >>> table = SymbolTable()
    >>> B = table.add_backed("B", 32, source="x.shape[0]")
    >>> u = table.add_unbacked(UnbackedKind.FLOAT, "x.sum().item()")
    >>> table.describe(B), table.describe(u), table.has_unbacked(B + 1)
    ('x.shape[0]', 'x.sum().item()', False)
"""
from __future__ import annotations

import re
from typing import Optional

import sympy

from .enums import TextEnum
from .value_ranges import INF

UNBACKED_PREFIX = "u"
_UNBACKED_NAME = re.compile(r"^u\d+$")


class UnbackedKind(TextEnum):
    """What a data-dependent symbol stands for: a count of elements (at least 0), any
    integer, a truth value (0 or 1) or a real number."""

    SIZE = "size"
    INT = "int"
    BOOL = "bool"
    FLOAT = "float"


class SymbolTable:
    """Every symbol of one trace, by name, with its hint, sources and producer.

    ``symbols`` keeps creation order: replacements prefer to keep the dim the
    user named first (see :meth:`creation_index`).
    """

    def __init__(self):
        self.symbols: dict[str, sympy.Symbol] = {}
        self.hints: dict[sympy.Symbol, int] = {}
        self.hint_subs: dict[sympy.Symbol, sympy.Integer] = {}
        self.sources: dict[sympy.Symbol, list[str]] = {}
        self.unbacked: dict[sympy.Symbol, str] = {}  # symbol -> what produced it
        self.unbacked_float: set[sympy.Symbol] = set()
        self._unbacked_count = 0

    def existing(self, name: str, hint: int, source: Optional[str]) -> Optional[sympy.Symbol]:
        """The symbol already named ``name`` (its hint must agree), else None.

        >>> t = SymbolTable(); B = t.add_backed("B", 4)
        >>> t.existing("B", 4, "y.shape[0]") is B, t.sources[B]
        (True, ['y.shape[0]'])
        """
        check_dim(name, hint)
        sym = self.symbols.get(name)
        if sym is None:
            return None
        if self.hints[sym] != hint:
            raise ValueError(f"dim {name} is used with two sizes: {self.hints[sym]} and {hint}")
        if source:
            self.sources[sym].append(source)
        return sym

    def add_backed(self, name: str, hint: int, *, range: tuple = (0, INF),
                   source: Optional[str] = None) -> sympy.Symbol:
        """A new integer symbol ``name`` with example value ``hint`` inside ``range``.

        >>> SymbolTable().add_backed("T", 7, range=(1, 8))
        T
        """
        check_dim(name, hint)
        lo, hi = range
        if not (lo <= hint <= hi):
            raise ValueError(f"example size {hint} of dim {name} lies outside its range [{lo}, {hi}]")
        sym = sympy.Symbol(name, integer=True)
        self.symbols[name] = sym
        self.hints[sym] = hint
        self.hint_subs[sym] = sympy.Integer(hint)
        self.sources[sym] = [source] if source else []
        return sym

    def add_unbacked(self, kind: UnbackedKind, what: str) -> sympy.Symbol:
        """A new data-dependent symbol ``u<N>``: real for a :attr:`UnbackedKind.FLOAT`, else integer.

        >>> t = SymbolTable(); t.add_unbacked(UnbackedKind.SIZE, "nonzero"), t.add_unbacked(UnbackedKind.INT, "")
        (u0, u1)
        """
        kind = UnbackedKind(kind)
        name = f"{UNBACKED_PREFIX}{self._unbacked_count}"
        self._unbacked_count += 1
        if kind is UnbackedKind.FLOAT:
            sym = sympy.Symbol(name, real=True)
            self.unbacked_float.add(sym)
        else:
            sym = sympy.Symbol(name, integer=True)
        self.symbols[name] = sym
        self.unbacked[sym] = what or kind.value
        return sym

    def describe(self, s) -> str:
        """Where ``s`` comes from, in the user's terms (``x.shape[0]``, the op that produced it)."""
        if s in self.unbacked:
            return self.unbacked[s]
        src = self.sources.get(s)
        return src[0] if src else str(s)

    def is_unbacked(self, s) -> bool:
        return s in self.unbacked

    def has_unbacked(self, e) -> bool:
        if not self.unbacked:
            return False  # most programs read no sizes from data: no free_symbols walk
        return any(s in self.unbacked for s in e.free_symbols)

    def creation_index(self, s) -> int:
        """Position of ``s`` in creation order (-1 for a symbol of no table)."""
        for i, n in enumerate(self.symbols):
            if n == s.name:
                return i
        return -1

    @property
    def input_symbols(self) -> list[sympy.Symbol]:
        return list(self.hints)


def check_dim(name: str, hint) -> None:
    """An example size is a plain int (``True`` is not a size), and ``u<N>`` names data-dependent sizes.

    >>> check_dim("B", 2.0)
    Traceback (most recent call last):
    TypeError: hint for B must be an int, got 2.0
    """
    if not isinstance(hint, int) or isinstance(hint, bool):
        raise TypeError(f"hint for {name} must be an int, got {hint!r}")
    if _UNBACKED_NAME.match(name):
        raise ValueError(f"dim name {name!r} is reserved for data-dependent sizes; pick another name")
