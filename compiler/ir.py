"""The loop-level IR that captured graphs are lowered to.

Values inside a kernel are small immutable expression DAGs (:class:`Load`,
:class:`Const`, :class:`SizeVal`, :class:`Op`, :class:`RedRef`); equal
sub-expressions compare equal, so code generators CSE them with a dict.
Indices are sympy expressions over loop variables (``x0, x1, ..., r``) and
the program's dim symbols, so one kernel serves every size.

Example::

    >>> import sympy, torch
    >>> from compiler.ir import Load, Op, Const
    >>> x0 = sympy.Symbol("x0", integer=True, nonnegative=True)
    >>> v = Op("add", (Load("buf0", x0, torch.float32), Const(1.0, torch.float32)), torch.float32)
    >>> v.args[0].buf
    'buf0'
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import sympy
import torch


def loop_var(name: str) -> sympy.Symbol:
    """A loop index: non-negative, which lets printers use C division on it."""
    return sympy.Symbol(name, integer=True, nonnegative=True)


#: Dtypes the kernel code generators handle; other ops run as ATen externs.
KERNEL_DTYPES = (torch.float32, torch.float64, torch.int64, torch.int32, torch.bool)


@dataclass(frozen=True)
class Load:
    """``buf[index]`` where ``index`` is the flat element offset (a sympy expr)."""

    buf: str
    index: Any
    dtype: torch.dtype


@dataclass(frozen=True)
class Const:
    value: Any
    dtype: torch.dtype


@dataclass(frozen=True)
class SizeVal:
    """A size expression used as a tensor value (``x / T`` in a mean)."""

    expr: Any
    dtype: torch.dtype


@dataclass(frozen=True)
class Op:
    """An elementwise operation; ``op`` names one of :data:`OPS`."""

    op: str
    args: tuple
    dtype: torch.dtype

    def __hash__(self):
        # Cached: DAGs are hashed at every CSE lookup, and recomputing is quadratic.
        h = self.__dict__.get("_h")
        if h is None:
            h = hash((self.op, self.args, self.dtype))
            object.__setattr__(self, "_h", h)
        return h


@dataclass(frozen=True)
class RedRef:
    """The result of reduction ``red`` at its outer index ``index``."""

    red: int
    index: tuple
    dtype: torch.dtype


#: op name -> number of operands.  ``cast`` converts to the Op's dtype.
OPS = {
    "add": 2, "sub": 2, "mul": 2, "div": 2, "neg": 1, "relu": 1, "exp": 1, "log": 1, "sqrt": 1,
    "rsqrt": 1, "tanh": 1, "sigmoid": 1, "erf": 1, "abs": 1, "pow": 2, "maximum": 2, "minimum": 2,
    "where": 3, "cast": 1, "lt": 2, "le": 2, "gt": 2, "ge": 2, "eq": 2, "ne": 2, "and": 2, "or": 2,
    "not": 1, "reciprocal": 1, "sin": 1, "cos": 1, "floor": 1, "ceil": 1, "log1p": 1, "expm1": 1,
}


@dataclass(eq=False)
class Reduction:
    """A reduction over ``rsize`` elements for each point of ``outer``.

    ``body(outer_vars, r)`` returns the Val reduced; ``op`` is sum, max or min.
    """

    id: int
    op: str
    outer: tuple
    rsize: Any
    body: Callable
    dtype: torch.dtype
    buffer: Optional[str] = None  # set when the scheduler must materialize it

    def __repr__(self):
        return f"Reduction#{self.id}({self.op}, outer={self.outer}, r={self.rsize})"


@dataclass
class Buffer:
    """A tensor the compiled program holds at run time.

    ``kind``: ``input``/``const``/``extern`` (made outside kernels; kernels
    read them contiguous) or ``kernel`` (allocated with ``strides``).
    """

    name: str
    shape: tuple
    strides: tuple
    dtype: torch.dtype
    kind: str


def contiguous_strides(shape) -> tuple:
    out, acc = [], sympy.Integer(1)
    for s in reversed(shape):
        out.append(acc)
        acc = acc * s
    return tuple(reversed(out))


def flat_index(idx, strides) -> Any:
    return sympy.expand(sum((i * s for i, s in zip(idx, strides)), sympy.Integer(0)))


@dataclass
class Store:
    """Write ``value(index vars)`` into every element of ``buffer``."""

    buffer: Buffer
    value: Callable  # idx tuple -> Val


@dataclass
class Kernel:
    """One fused loop nest: rows over ``outer``, per row reductions, then stores.

    ``reductions`` ``(Reduction, outer index, body Val)`` are computed in order
    for each row (the outer index is in the kernel's row variables); ``row_stores`` write a
    value per row (shape ``outer``), ``inner_stores`` a value per element of
    rows of ``outer + (L,)``.  A kernel with no reductions is pointwise.
    """

    name: str
    outer: tuple
    reductions: list = field(default_factory=list)
    row_stores: list = field(default_factory=list)   # (Buffer, Val at outer vars)
    inner_stores: list = field(default_factory=list)  # (Buffer, L, Val at outer vars + j)
    reads: set = field(default_factory=set)

    def red_var(self, rid, index) -> str:
        for n, (r, i, _) in enumerate(self.reductions):
            if r.id == rid and tuple(i) == tuple(index):
                return f"red{n}"
        raise KeyError((rid, index))

    @property
    def outer_vars(self):
        return tuple(loop_var(f"x{i}") for i in range(len(self.outer)))


RVAR = loop_var("r")
JVAR = loop_var("j")


def walk(v, seen=None):
    """Yield every node of a Val DAG once."""
    seen = set() if seen is None else seen
    stack = [v]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        yield n
        if isinstance(n, Op):
            stack.extend(n.args)
