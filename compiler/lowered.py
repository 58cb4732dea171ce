"""The lowered program's data types, shared by the lowerer and the per-op lowerings.

A tensor value during lowering is a :class:`TensorBox` (index -> IR value);
the result of lowering is a :class:`LoweredProgram`: buffers, kernel stores
(:class:`StoreItem`) and ATen calls (:class:`ExternItem`) whose argument
templates hold :class:`Ref` for run-time values.

Example::

    >>> import torch
    >>> from compiler.ir import Const
    >>> cast(Const(2.7, torch.float32), torch.int64)
    Const(value=2, dtype=torch.int64)
    >>> Ref("size", 3).kind is RefKind.SIZE
    True
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Optional

import torch
import torch.fx

from .ir import Buffer, Const, Op


class Unsupported(Exception):
    """This op (or use of it) runs as an ATen extern instead."""


@dataclass(eq=False)
class TensorBox:
    shape: tuple
    dtype: torch.dtype
    fn: Any  # idx -> Val
    node: Optional[torch.fx.Node] = None
    buf: Optional[Buffer] = None  # a real tensor exists at run time under buf.name
    view_of: Optional["TensorBox"] = None  # replayable eagerly on view_of's real tensor

    def __call__(self, idx):
        # Memoized per index: ops that use an operand twice would otherwise
        # rebuild its whole expression twice per level (exponential in depth).
        idx = tuple(idx)
        cache = self.__dict__.setdefault("_cache", {})
        v = cache.get(idx)
        if v is None:
            v = cache[idx] = self.fn(idx)
        return v


@dataclass(frozen=True)
class SizeExpr:
    """A size computation (a SymInt in the graph)."""

    expr: Any


@dataclass(frozen=True)
class Ref:
    """A run-time value in an extern's argument template: a buffer, a size or the device."""

    kind: "RefKind"
    value: Any

    def __post_init__(self):
        object.__setattr__(self, "kind", RefKind(self.kind))


class RefKind(str, Enum):
    """What a :class:`Ref` stands for at run time."""

    BUF = "buf"
    SIZE = "size"
    DEVICE = "device"


@dataclass(kw_only=True)
class ExternItem:
    target: Any
    args: Any
    kwargs: Any
    out: Any  # Buffer, or a str key holding a tuple
    node: Optional[torch.fx.Node] = None


@dataclass(kw_only=True)
class StoreItem:
    buffer: Buffer
    box: TensorBox


@dataclass(kw_only=True)
class LoweredProgram:
    inputs: list
    consts: list  # (Buffer, attribute target)
    buffers: dict
    items: list
    reductions: dict
    outputs: list  # Ref | python constant
    symbols: list = field(default_factory=list)
    externs: int = 0
    #: The trace's ShapeEnv: code generators ask it about index expressions (compiler.exprs.IndexFacts).
    env: Any = None


def cast(v, dtype):
    if dtype is None or v.dtype == dtype:
        return v
    if isinstance(v, Const):
        return Const(v.value if dtype.is_floating_point else (bool(v.value) if dtype == torch.bool
                                                               else int(v.value)), dtype)
    return Op("cast", (v,), dtype)
