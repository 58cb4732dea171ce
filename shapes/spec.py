"""Input specs: ``"x: f32[B, T, 768]"`` and dim bounds.

Named dims become symbols (the same name is the same symbol everywhere),
integers are static sizes, and an expression over names (``2*T``,
``T + 1``, ``H // 2``) is a size derived from named dims (a :class:`DimExpr`).

Example::

    >>> from shapes.spec import parse_spec
    >>> s = parse_spec("x: f32[B, T, 768]")
    >>> s.name, s.dtype, s.dims
    ('x', torch.float32, ('B', 'T', 768))
    >>> parse_spec("y: f32[B, 2*T]").dims
    ('B', DimExpr('2*T'))
"""
from __future__ import annotations

import ast
import functools
import math
import re
from dataclasses import dataclass
from typing import Mapping, Optional, Union

import sympy
import torch

from .errors import SpecError

DTYPES = {
    "f16": torch.float16, "half": torch.float16, "float16": torch.float16,
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
    "f32": torch.float32, "float": torch.float32, "float32": torch.float32,
    "f64": torch.float64, "double": torch.float64, "float64": torch.float64,
    "i8": torch.int8, "int8": torch.int8, "u8": torch.uint8, "uint8": torch.uint8,
    "i16": torch.int16, "int16": torch.int16,
    "i32": torch.int32, "int32": torch.int32, "int": torch.int32,
    "i64": torch.int64, "int64": torch.int64, "long": torch.int64,
    "bool": torch.bool, "b8": torch.bool,
    "c64": torch.complex64, "complex64": torch.complex64,
    "c128": torch.complex128, "complex128": torch.complex128,
}

_SPEC = re.compile(r"^\s*([A-Za-z_][A-Za-z_0-9]*)\s*:\s*([A-Za-z_0-9]+)\s*\[(.*)\]"
                   r"(?:\s+in\s+(-?\d+)\s*\.\.\s*(-?\d+))?\s*$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z_0-9]*$")


_DIM_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}


@dataclass(frozen=True)
class DimExpr:
    """A size derived from named dims, written in a spec: ``2*T``, ``T + 1``, ``H // 2``.

    Integers, names, ``+ - * // %`` and parentheses; ``/`` is refused (a
    size is an integer).

    >>> e = DimExpr.parse("2*T + 1")
    >>> e.names, e.evaluate({"T": 5}), e.sympy({"T": sympy.Symbol("T")})
    (('T',), 11, 2*T + 1)
    """

    text: str
    names: tuple = ()

    @staticmethod
    def parse(text: str) -> "DimExpr":
        """Parse ``text``; raises ``ValueError`` saying what is not allowed."""
        try:
            tree = ast.parse(text.strip(), mode="eval").body
        except SyntaxError:
            raise ValueError("not an expression") from None
        names: list[str] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                if node.id not in names:
                    names.append(node.id)
            elif isinstance(node, ast.BinOp):
                if type(node.op) not in _DIM_OPS:
                    op = {ast.Div: "/ (sizes are integers: use //)", ast.Pow: "**"}.get(type(node.op), "this operator")
                    raise ValueError(f"{op} is not allowed in a dim expression; use + - * // %")
            elif isinstance(node, ast.UnaryOp):
                if not isinstance(node.op, ast.USub):
                    raise ValueError("only unary minus is allowed in a dim expression")
            elif isinstance(node, ast.Constant):
                if type(node.value) is not int:
                    raise ValueError(f"{node.value!r} is not an integer")
            elif not isinstance(node, (ast.operator, ast.unaryop, ast.Load)):
                raise ValueError(f"{type(node).__name__} is not allowed in a dim expression; use names, integers "
                                 f"and + - * // %")
        if not names:
            raise ValueError("it names no dim (write a constant size as an integer)")
        return DimExpr(ast.unparse(tree).replace(" * ", "*"), tuple(names))

    def sympy(self, values: Mapping[str, object]) -> sympy.Expr:
        """The expression with each name replaced by ``values[name]`` (symbols or ints)."""
        from .functions import FloorDiv, PyMod

        def conv(node):
            if isinstance(node, ast.Name):
                return sympy.sympify(values[node.id])
            if isinstance(node, ast.Constant):
                return sympy.Integer(node.value)
            if isinstance(node, ast.UnaryOp):
                return -conv(node.operand)
            a, b = conv(node.left), conv(node.right)
            op = type(node.op)
            if op is ast.Add:
                return a + b
            if op is ast.Sub:
                return a - b
            if op is ast.Mult:
                return a * b
            return FloorDiv(a, b) if op is ast.FloorDiv else PyMod(a, b)

        return conv(ast.parse(self.text, mode="eval").body)

    def evaluate(self, values: Mapping[str, int]) -> int:
        """The size at integer ``values`` of its names (Python's ``//`` and ``%``: the
        floor division and modulo the expression means), without building an expression:
        a compiled program checks its derived dims at every call."""
        return _int_function(self.text, self.names)(*(int(values[n]) for n in self.names))

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"DimExpr({self.text!r})"


@functools.lru_cache(maxsize=4096)
def _int_function(text: str, names: tuple):
    """``text`` (a parsed :class:`DimExpr`: names, integers, ``+ - * // %``, parentheses)
    as a Python function of ``names``, compiled once."""
    return eval(f"lambda {', '.join(names)}: {text}", {"__builtins__": {}})  # noqa: S307 - checked by DimExpr.parse


def dim_names(dims) -> list[str]:
    """The named dims used by a spec's ``dims``, in order (names inside expressions too).

    >>> dim_names(("B", DimExpr.parse("2*T"), 8, "B"))
    ['B', 'T']
    """
    out: list[str] = []
    for d in dims:
        for n in (d,) if isinstance(d, str) else d.names if isinstance(d, DimExpr) else ():
            if n not in out:
                out.append(n)
    return out


@dataclass(frozen=True, kw_only=True)
class InputSpec:
    """One tensor input: its name, dtype, dims (names or ints), and the values it may hold.

    ``values``: ``(lo, hi)`` for an integer input declared ``in lo..hi``
    (``"attention_mask: i64[B, T] in 0..1"``): the trace knows its values
    lie there, and a run checks it.

    >>> parse_spec("m: i64[B, T] in 0..1").values
    (0, 1)
    """

    name: str
    dtype: torch.dtype
    dims: tuple
    text: str = ""
    values: Optional[tuple] = None

    def __str__(self) -> str:
        short = {v: k for k, v in reversed(list(DTYPES.items()))}
        vals = f" in {self.values[0]}..{self.values[1]}" if self.values else ""
        return f"{self.name}: {short.get(self.dtype, str(self.dtype))}[{', '.join(map(str, self.dims))}]{vals}"


def check_declared_values(spec: InputSpec, t: torch.Tensor) -> None:
    """Refuse a tensor whose values leave the range its spec declares (``in LO..HI``).

    A trace relies on the declared range (index bounds, masks), so data outside it would get an
    answer eager never gives. On CUDA the test is queued on the device (``torch._assert_async``:
    no host sync on a compiled program's hot path) and fails at the next synchronization.

    >>> spec = parse_spec("m: i64[N] in 0..1")
    >>> check_declared_values(spec, torch.tensor([0, 1]))
    >>> check_declared_values(spec, torch.tensor([0, 2]))
    Traceback (most recent call last):
    ...
    shapes.errors.GuardViolation: input m holds 2, outside the values 0..1 its spec `m: i64[N] in 0..1` declares; the trace relied on them (fix the data, or declare the range the data has)
    """
    from .errors import GuardViolation

    if spec.values is None or not t.numel() or t.device.type == "meta":
        return
    lo_ok, hi_ok = spec.values
    what = (f"input {spec.name} holds {{}}, outside the values {lo_ok}..{hi_ok} its spec `{spec}` "
            f"declares; the trace relied on them (fix the data, or declare the range the data has)")
    if t.device.type == "cuda":
        torch._assert_async(((t >= lo_ok) & (t <= hi_ok)).all(), what.format("a value"))
        return
    lo, hi = (int(v) for v in torch.aminmax(t))
    if lo < lo_ok or hi > hi_ok:
        raise GuardViolation(what.format(lo if lo < lo_ok else hi))


def parse_spec(text: Union[str, InputSpec]) -> InputSpec:
    """Parse ``"name: dtype[d0, d1, ...]"``; raises :class:`SpecError` with the fix."""
    if isinstance(text, InputSpec):
        return text
    if not isinstance(text, str):
        raise SpecError(f"input spec must be a string like \"x: f32[B, 768]\", got {type(text).__name__}: {text!r}")
    m = _SPEC.match(text)
    if not m:
        raise SpecError(
            f"malformed input spec {text!r}: expected \"NAME: DTYPE[DIM, ...]\" (optionally \"in LOW..HIGH\" for an "
            f"integer input's values), for example \"x: f32[B, T, 768]\""
        )
    name, dt, body, vlo, vhi = m.groups()
    if dt.lower() not in DTYPES:
        raise SpecError(
            f"unknown dtype {dt!r} in input spec {text!r}; known dtypes: "
            + ", ".join(k for k in DTYPES if len(k) <= 4)
        )
    values = None
    if vlo is not None:
        dtype = DTYPES[dt.lower()]
        if dtype.is_floating_point or dtype.is_complex:
            raise SpecError(f"input spec {text!r} declares values 'in {vlo}..{vhi}' for a {dt} input; value "
                            f"ranges are for integer inputs (\"mask: i64[B, T] in 0..1\")")
        if int(vlo) > int(vhi):
            raise SpecError(f"input spec {text!r}: empty value range {vlo}..{vhi}; write it as LOW..HIGH")
        values = (int(vlo), int(vhi))
    dims = []
    body = body.strip()
    if body:
        for i, part in enumerate(body.split(",")):
            part = part.strip()
            if re.fullmatch(r"-?\d+", part):
                v = int(part)
                if v < 0:
                    raise SpecError(f"negative size {v} at dim {i} of input spec {text!r}")
                dims.append(v)
            elif _NAME.match(part):
                dims.append(part)
            else:
                try:
                    dims.append(DimExpr.parse(part))
                except ValueError as e:
                    raise SpecError(
                        f"bad dim {part!r} at position {i} of input spec {text!r} ({e}): a dim is a name "
                        f"(B, seq_len), a non-negative integer, or an expression over names (2*T, T + 1)"
                    ) from None
    return InputSpec(name=name, dtype=DTYPES[dt.lower()], dims=tuple(dims), text=text, values=values)


@dataclass(frozen=True)
class Dim:
    """Bounds and example size of a named dim.

    ``Dim(1, 4096)`` bounds B to [1, 4096]; ``hint`` is the example size the
    trace runs at (chosen automatically when omitted).  A dim's range starts
    at 1 unless it says 0 (``Dim(0, 64)``, or an example size of 0).
    """

    min: int = 1
    max: float = math.inf
    hint: Optional[int] = None


def parse_dims(dims: Optional[Mapping], names) -> dict[str, Dim]:
    """Normalize ``dims``: each value an int (hint), (lo, hi), (lo, hi, hint) or Dim."""
    out: dict[str, Dim] = {}
    dims = dict(dims or {})
    unknown = [k for k in dims if k not in names]
    if unknown:
        raise SpecError(
            f"dims names {', '.join(map(repr, unknown))}, which no input spec uses (spec dims: "
            f"{', '.join(names) or 'none'})"
        )
    for k, v in dims.items():
        if isinstance(v, Dim):
            d = v
        elif isinstance(v, bool):
            raise SpecError(f"dims[{k!r}] = {v!r}: give an int example size, a (min, max) range or a Dim")
        elif isinstance(v, int):
            d = Dim(min(v, 1), hint=v)
        elif isinstance(v, (tuple, list)) and len(v) in (2, 3):
            d = Dim(v[0], v[1], v[2] if len(v) == 3 else None)
        else:
            raise SpecError(f"dims[{k!r}] = {v!r}: give an int example size, a (min, max) range or a Dim")
        lo, hi = d.min, d.max
        if not isinstance(lo, int) or not (isinstance(hi, int) or hi == math.inf):
            raise SpecError(f"dims[{k!r}]: range bounds must be integers, got ({lo!r}, {hi!r})")
        if lo < 0 or lo > hi:
            raise SpecError(f"dims[{k!r}]: empty or negative range [{lo}, {hi}]")
        if d.hint is not None and not (lo <= d.hint <= hi):
            raise SpecError(f"dims[{k!r}]: example size {d.hint} lies outside the range [{lo}, {hi}]")
        out[k] = d
    return out


def default_hints(names, dims: Mapping[str, Dim]) -> dict[str, int]:
    """Distinct, unremarkable example sizes (8, 16, 24, ...) clamped into each range.

    Distinct values keep unrelated dims from looking equal by accident;
    multiples of 8 keep the common divisibility requirements satisfied.
    """
    hints = {}
    used = set()
    k = 1
    for n in names:
        d = dims.get(n, Dim())
        if d.hint is not None:
            hints[n] = d.hint
            used.add(d.hint)
            continue
        while True:
            cand = 8 * k
            k += 1
            if cand not in used:
                break
        lo = max(d.min, 2)
        v = min(max(cand, lo), d.max)
        if v < d.min:
            v = d.min
        hints[n] = int(v)
        used.add(int(v))
    return hints


def parse_specs(specs) -> tuple[list[InputSpec], list[str]]:
    """Parse several specs; returns them and their dim names in first-use order.

    Raises :class:`SpecError` for a malformed spec or two inputs with one name.

    >>> parsed, names = parse_specs(["a: f32[B, N]", "b: f32[B, M]"])
    >>> names
    ['B', 'N', 'M']
    """
    parsed = [parse_spec(s) for s in specs]
    seen = set()
    for s in parsed:
        if s.name in seen:
            raise SpecError(f"two inputs are named {s.name!r}; give each input spec its own name")
        seen.add(s.name)
    names: list[str] = []
    for s in parsed:
        for n in dim_names(s.dims):
            if n not in names:
                names.append(n)
    return parsed, names


_POINT = re.compile(r"^\s*([A-Za-z_]\w*)\s*=\s*(\d+)\s*$")


def parse_sizes(text: str) -> dict[str, int]:
    """``"B=1,T=7"`` -> ``{"B": 1, "T": 7}``; raises :class:`SpecError` with the expected form.

    >>> parse_sizes("B=1, T=7")
    {'B': 1, 'T': 7}
    """
    out = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        m = _POINT.match(part)
        if not m:
            raise SpecError(f"bad size {part!r} in {text!r}: expected NAME=INT, comma separated (B=1,T=7)")
        out[m.group(1)] = int(m.group(2))
    return out
