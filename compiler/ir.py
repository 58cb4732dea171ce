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
from enum import Enum
from typing import Any, Callable, Optional

import sympy
import torch


def loop_var(name: str) -> sympy.Symbol:
    """A loop index: non-negative, which lets printers use C division on it."""
    return sympy.Symbol(name, integer=True, nonnegative=True)


#: Dtypes the kernel code generators handle; other ops run as ATen externs.
KERNEL_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.bool)

#: Storage-only float types: kernels load and store them, and compute in float32.
HALF_DTYPES = (torch.float16, torch.bfloat16)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype kernels compute a value of ``dtype`` in (float32 for half types, as Inductor does)."""
    return torch.float32 if dtype in HALF_DTYPES else dtype


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


class OpKind(str, Enum):
    """The elementwise operations kernels compute; each code generator has one table entry per kind.

    A ``str`` enum, so ``Op("add", ...)`` and ``Op(OpKind.ADD, ...)`` build the same value.

    >>> OpKind("add") is OpKind.ADD, OpKind.WHERE.arity
    (True, 3)
    """

    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    NEG = "neg"
    RELU = "relu"
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    TANH = "tanh"
    SIGMOID = "sigmoid"
    ERF = "erf"
    ABS = "abs"
    POW = "pow"
    MAXIMUM = "maximum"
    MINIMUM = "minimum"
    WHERE = "where"
    CAST = "cast"  # converts to the Op's dtype
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    EQ = "eq"
    NE = "ne"
    AND = "and"
    OR = "or"
    NOT = "not"
    RECIPROCAL = "reciprocal"
    SIN = "sin"
    COS = "cos"
    FLOOR = "floor"
    CEIL = "ceil"
    LOG1P = "log1p"
    EXPM1 = "expm1"

    @property
    def arity(self) -> int:
        return 3 if self is OpKind.WHERE else 2 if self.value in _BINARY_KINDS else 1


_BINARY_KINDS = {"add", "sub", "mul", "div", "pow", "maximum", "minimum", "lt", "le", "gt", "ge", "eq", "ne",
                 "and", "or"}


class UnknownOpKind(ValueError):
    """An IR ``Op`` named an operation that no code generator knows."""


@dataclass(frozen=True)
class Op:
    """An elementwise operation of kind :class:`OpKind` on ``args`` (IR values).

    >>> Op("mul", (Const(2.0, torch.float32), Const(3.0, torch.float32)), torch.float32).op is OpKind.MUL
    True
    """

    op: OpKind
    args: tuple
    dtype: torch.dtype

    def __post_init__(self):
        try:
            kind = OpKind(self.op)
        except ValueError:
            raise UnknownOpKind(f"IR op {self.op!r} is not an OpKind; add it to compiler.ir.OpKind and to "
                                f"every code generator's op table") from None
        if len(self.args) != kind.arity:
            raise ValueError(f"IR op {kind.value} takes {kind.arity} operand(s), got {len(self.args)}")
        object.__setattr__(self, "op", kind)

    def __eq__(self, other):
        # Structural, each pair of nodes compared once: the generated __eq__ recursed through the
        # args tuples without a memo, so two equal copies of a DAG whose nodes are shared along
        # many paths took time exponential in its depth (HF glm5_next_text's training step did
        # not finish codegen in 300 s).
        if self is other:
            return True
        if other.__class__ is not Op:
            return NotImplemented
        return _same_dag(self, other)

    def __hash__(self):
        # Cached: DAGs are hashed at every CSE lookup, and recomputing is quadratic.
        h = self.__dict__.get("_h")
        if h is None:
            h = hash((self.op, self.args, self.dtype))
            object.__setattr__(self, "_h", h)
        return h


def _same_dag(a: "Op", b: "Op") -> bool:
    """Whether IR values ``a`` and ``b`` are the same expression: each pair of nodes met along
    several paths is compared once, so the cost is the size of the two DAGs, not of their trees.

    >>> x = Load("x", 0, torch.float32)
    >>> def tower(n):
    ...     v = x
    ...     for _ in range(n):
    ...         v = Op("add", (v, v), torch.float32)
    ...     return v
    >>> tower(200) == tower(200), tower(200) == tower(199)
    (True, False)
    """
    seen = set()
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if x is y:
            continue
        if x.__class__ is not y.__class__:
            return False
        if x.__class__ is not Op:
            if x != y:
                return False
            continue
        pair = (id(x), id(y))
        if pair in seen:
            continue
        seen.add(pair)
        if hash(x) != hash(y) or x.op is not y.op or x.dtype != y.dtype or len(x.args) != len(y.args):
            return False
        stack.extend(zip(x.args, y.args))
    return True


@dataclass(frozen=True)
class RedRef:
    """The result of reduction ``red`` at its outer index ``index``."""

    red: int
    index: tuple
    dtype: torch.dtype


class ReductionKind(str, Enum):
    """How a reduction combines a row: every target has an identity and an update for each."""

    SUM = "sum"
    MAX = "max"
    MIN = "min"


class BufferKind(str, Enum):
    """Where a buffer's values come from at run time."""

    INPUT = "input"    # a program input
    CONST = "const"    # a parameter, buffer or constant of the traced program
    EXTERN = "extern"  # the result of an ATen call (kernels read it contiguous)
    KERNEL = "kernel"  # allocated with the planned strides and written by a kernel
    TUPLE = "tuple"    # an ATen call's tuple result, indexed by later steps


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

    def __post_init__(self):
        self.op = ReductionKind(self.op)

    def __repr__(self):
        return f"Reduction#{self.id}({self.op}, outer={self.outer}, r={self.rsize})"


@dataclass(kw_only=True)
class Buffer:
    """A tensor the compiled program holds at run time.

    ``kind``: ``input``/``const``/``extern`` (made outside kernels; kernels
    read them contiguous) or ``kernel`` (allocated with ``strides``).
    """

    name: str
    shape: tuple
    strides: tuple
    dtype: torch.dtype
    kind: BufferKind

    def __post_init__(self):
        self.kind = BufferKind(self.kind)


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


@dataclass(kw_only=True)
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


def substitute(v, mapping: dict, memo=None):
    """``v`` with the index variables in ``mapping`` replaced (in loads and reduction reads).

    >>> import torch
    >>> substitute(Load("b", JVAR + 1, torch.float32), {JVAR: RVAR}).index
    r + 1
    """
    memo = {} if memo is None else memo
    got = memo.get(v)
    if got is not None:
        return got
    if isinstance(v, Load):
        out = Load(v.buf, sympy.sympify(v.index).xreplace(mapping), v.dtype)
    elif isinstance(v, RedRef):
        out = RedRef(v.red, tuple(sympy.sympify(i).xreplace(mapping) for i in v.index), v.dtype)
    elif isinstance(v, SizeVal):
        out = SizeVal(sympy.sympify(v.expr).xreplace(mapping), v.dtype)
    elif isinstance(v, Op):
        out = Op(v.op, tuple(substitute(a, mapping, memo) for a in v.args), v.dtype)
    else:
        out = v
    memo[v] = out
    return out


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
