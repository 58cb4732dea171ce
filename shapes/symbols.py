"""The symbol table of one trace: names, example values, sources, and which symbols depend on data.

Backed symbols (input dims) carry a hint, the example size they were created
from; unbacked symbols ``u0, u1, ...`` (sizes and scalars computed from data)
carry none.  The table only names and describes symbols: what is known about
them lives in :mod:`shapes.facts`, decisions in :mod:`shapes.decide`.

Example::

    >>> from shapes.symbols import DataRead, DataSource, SizeSource, SymbolTable, UnbackedKind
    >>> table = SymbolTable()
    >>> B = table.add_backed("B", 32, source=SizeSource.input_dim("x", 0))
    >>> u = table.add_unbacked(DataSource(kind=UnbackedKind.FLOAT, read=DataRead.ITEM, op="aten.item",
    ...                                   filename="f.py", lineno=3, code="if x.sum().item() > 0:"))
    >>> table.describe(B), table.describe(u), table.has_unbacked(B + 1)
    ('x.shape[0]', 'value of .item() at f.py:3 `if x.sum().item() > 0:`', False)
"""
from __future__ import annotations

import re
from dataclasses import dataclass
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


class SourceKind(TextEnum):
    """Where a backed size symbol is read from when the program runs."""

    INPUT_DIM = "input_dim"      # a dim of an input tensor (or a dim an input's size is linear in)
    WORLD_SIZE = "world_size"    # torch.distributed.get_world_size()
    RANK = "rank"                # torch.distributed.get_rank()


@dataclass(frozen=True, kw_only=True)
class SizeSource:
    """Where a size symbol comes from; ``str()`` is the user's Python for reading it.

    An input dim may give the symbol through a linear spec (``x: f32[2*T + 1]``):
    the size is ``scale * symbol + offset``, and the symbol reads back as
    ``(x.shape[0] - 1) // 2``.

    >>> str(SizeSource.input_dim("x", 1)), str(SizeSource.input_dim("x", 0, scale=2, offset=1))
    ('x.shape[1]', '((x.shape[0] - 1) // 2)')
    >>> SizeSource(kind=SourceKind.RANK).kind, str(SizeSource(kind=SourceKind.WORLD_SIZE))
    (<SourceKind.RANK: 'rank'>, 'torch.distributed.get_world_size()')

    The symbol table takes no text for a source (its kind would be lost):

    >>> SymbolTable().add_backed("B", 4, source="x.shape[0]")
    Traceback (most recent call last):
    ...
    TypeError: a symbol's source is a SizeSource, got str 'x.shape[0]'
    """

    kind: SourceKind
    input: Optional[str] = None   # the input's name (INPUT_DIM)
    dim: Optional[int] = None     # the dim of that input (INPUT_DIM)
    scale: int = 1                # the input's size is scale * symbol + offset
    offset: int = 0

    @classmethod
    def input_dim(cls, input: str, dim: int, *, scale: int = 1, offset: int = 0) -> "SizeSource":
        return cls(kind=SourceKind.INPUT_DIM, input=input, dim=dim, scale=scale, offset=offset)

    def __str__(self) -> str:
        if self.kind is SourceKind.WORLD_SIZE:
            return "torch.distributed.get_world_size()"
        if self.kind is SourceKind.RANK:
            return "torch.distributed.get_rank()"
        where = f"{self.input}.shape[{self.dim}]"
        b, a = self.offset, self.scale
        src = where if not b else f"({where} {'-' if b > 0 else '+'} {abs(b)})"
        return src if a == 1 else f"({src} // {a})"


class DataRead(TextEnum):
    """What a data-dependent symbol reads from tensor data (one member per producing op)."""

    NONZERO = "nonzero"                      # number of nonzero elements
    MASKED_SELECT = "masked_select"          # number of selected elements
    MASK_INDEX = "mask_index"                # number of True elements of a boolean index mask
    UNIQUE = "unique"                        # number of unique values
    REPEATS = "repeats"                      # sum of repeat_interleave's repeats
    SLICE_LENGTH = "slice_length"            # length of a slice whose bounds are data
    SLICE_START = "slice_start"              # start of a slice whose bounds are data
    ITEM = "item"                            # a value read by .item()
    TRUTH = "truth"                          # bool(tensor)
    ALLCLOSE = "allclose"                    # torch.allclose's result
    EQUAL = "equal"                          # torch.equal's result

    @property
    def is_value(self) -> bool:
        """A value the program reads (named by its variable), not a count of elements (a length).

        >>> DataRead.ITEM.is_value, DataRead.NONZERO.is_value
        (True, False)
        """
        return self in _VALUE_READS


_VALUE_READS = frozenset({DataRead.ITEM, DataRead.TRUTH, DataRead.ALLCLOSE, DataRead.EQUAL})

# How people are told what a data-dependent symbol is; ``{op}`` is the ATen op's short name.
_READ_TEXT = {
    DataRead.NONZERO: "number of nonzero elements (nonzero at {where})",
    DataRead.MASKED_SELECT: "number of selected elements (masked_select at {where})",
    DataRead.MASK_INDEX: "number of True elements of the mask (boolean indexing at {where})",
    DataRead.UNIQUE: "number of unique values ({op} at {where})",
    DataRead.REPEATS: "sum of repeats (repeat_interleave at {where})",
    DataRead.SLICE_LENGTH: "length of a slice from data (at {where})",
    DataRead.SLICE_START: "start of a slice from data (at {where})",
    DataRead.ITEM: "value of .item() at {where}",
    DataRead.TRUTH: "truth value of a tensor (bool(tensor) at {where})",
    DataRead.ALLCLOSE: "result of allclose (at {where})",
    DataRead.EQUAL: "result of torch.equal (at {where})",
}


@dataclass(frozen=True, kw_only=True)
class DataSource:
    """What produced a data-dependent symbol; ``str()`` says it in the user's terms.

    ``read`` is None for a symbol made by hand (fuzzers, tests): only its kind is known.

    >>> src = DataSource(kind=UnbackedKind.SIZE, read=DataRead.NONZERO, op="aten.nonzero",
    ...                  filename="f.py", lineno=8, code="idx = torch.nonzero(x)")
    >>> str(src), src.read.is_value
    ('number of nonzero elements (nonzero at f.py:8 `idx = torch.nonzero(x)`)', False)
    >>> str(DataSource(kind=UnbackedKind.INT))
    'int'

    The symbol table takes no text for a producer (its fields would be lost):

    >>> SymbolTable().add_unbacked("nonzero")
    Traceback (most recent call last):
    ...
    TypeError: a data-dependent symbol's source is a DataSource, got str 'nonzero'
    """

    kind: UnbackedKind
    read: Optional[DataRead] = None
    op: Optional[str] = None         # the ATen op that read the data ("aten.nonzero")
    filename: str = "<unknown>"      # where the program read it
    lineno: int = 0
    code: str = ""                   # the user's line there, where known

    def __str__(self) -> str:
        if self.read is None:
            return self.kind.value
        where = (f"{self.filename}:{self.lineno}" if self.lineno else "torch's own code") + (
            f" `{self.code}`" if self.code else "")
        op = (self.op or "").rpartition(".")[2]
        return _READ_TEXT[self.read].format(where=where, op=op)


class SymbolTable:
    """Every symbol of one trace, by name, with its hint, sources and producer.

    ``symbols`` keeps creation order: replacements prefer to keep the dim the
    user named first (see :meth:`creation_index`).
    """

    def __init__(self):
        self.symbols: dict[str, sympy.Symbol] = {}
        self.hints: dict[sympy.Symbol, int] = {}
        self.hint_subs: dict[sympy.Symbol, sympy.Integer] = {}
        self.sources: dict[sympy.Symbol, list[SizeSource]] = {}
        self.unbacked: dict[sympy.Symbol, DataSource] = {}  # symbol -> what produced it
        self.unbacked_float: set[sympy.Symbol] = set()
        self._unbacked_count = 0

    def existing(self, name: str, hint: int, source: Optional[SizeSource]) -> Optional[sympy.Symbol]:
        """The symbol already named ``name`` (its hint must agree), else None.

        >>> t = SymbolTable(); B = t.add_backed("B", 4)
        >>> t.existing("B", 4, SizeSource.input_dim("y", 0)) is B, [str(s) for s in t.sources[B]]
        (True, ['y.shape[0]'])
        """
        check_dim(name, hint)
        _check_source(source)
        sym = self.symbols.get(name)
        if sym is None:
            return None
        if self.hints[sym] != hint:
            raise ValueError(f"dim {name} is used with two sizes: {self.hints[sym]} and {hint}")
        if source:
            self.sources[sym].append(source)
        return sym

    def add_backed(self, name: str, hint: int, *, range: tuple = (0, INF),
                   source: Optional[SizeSource] = None) -> sympy.Symbol:
        """A new integer symbol ``name`` with example value ``hint`` inside ``range``.

        >>> SymbolTable().add_backed("T", 7, range=(1, 8))
        T
        """
        check_dim(name, hint)
        _check_source(source)
        lo, hi = range
        if not (lo <= hint <= hi):
            raise ValueError(f"example size {hint} of dim {name} lies outside its range [{lo}, {hi}]")
        sym = sympy.Symbol(name, integer=True)
        self.symbols[name] = sym
        self.hints[sym] = hint
        self.hint_subs[sym] = sympy.Integer(hint)
        self.sources[sym] = [source] if source else []
        return sym

    def add_unbacked(self, source: DataSource) -> sympy.Symbol:
        """A new data-dependent symbol ``u<N>`` produced by ``source``: real for a
        :attr:`UnbackedKind.FLOAT`, else integer.

        >>> t = SymbolTable()
        >>> t.add_unbacked(DataSource(kind=UnbackedKind.SIZE)), t.add_unbacked(DataSource(kind=UnbackedKind.FLOAT))
        (u0, u1)
        """
        if not isinstance(source, DataSource):
            # Reports name the value from the record's fields: text would lose them.
            raise TypeError(f"a data-dependent symbol's source is a DataSource, got "
                            f"{type(source).__name__} {source!r}")
        kind = source.kind
        name = f"{UNBACKED_PREFIX}{self._unbacked_count}"
        self._unbacked_count += 1
        if kind is UnbackedKind.FLOAT:
            sym = sympy.Symbol(name, real=True)
            self.unbacked_float.add(sym)
        else:
            sym = sympy.Symbol(name, integer=True)
        self.symbols[name] = sym
        self.unbacked[sym] = source
        return sym

    def describe(self, s) -> str:
        """Where ``s`` comes from, in the user's terms (``x.shape[0]``, the op that produced it)."""
        if s in self.unbacked:
            return str(self.unbacked[s])
        src = self.sources.get(s)
        return str(src[0]) if src else str(s)

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


def _check_source(source) -> None:
    # A source is read back by reports and suggestions: text would lose its kind.
    if source is not None and not isinstance(source, SizeSource):
        raise TypeError(f"a symbol's source is a SizeSource, got {type(source).__name__} {source!r}")


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
