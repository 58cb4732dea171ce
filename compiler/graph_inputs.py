"""How a graph's arguments (dynamo's or AOTAutograd's) become symshape's input specs and dims.

Dynamo and AOTAutograd hand a backend example inputs whose sizes are torch's
SymInts.  :func:`plan_graph` turns them into what :class:`~compiler.runtime.CompiledProgram`
takes -- one :class:`~shapes.spec.InputSpec` per tensor argument, whose dynamic
sizes are named dims (``s0``... from torch's symbols, so graphs of one frame
share their dims) or expressions of them, with each dim's example value -- and
a layout that rebuilds the graph's argument list from the tensors at a call:
a tensor, a SymInt (an expression of dims that some tensor carries) or a constant.

A symbol no tensor carries alone but one carries linearly (``2*s`` after nearest
upsampling by 2, ``s + 1`` of patches and a class token) is solved for: ``s`` is
a named dim that only dim expressions give, which the binder solves at each call
(:func:`shapes.program._bind_derived`: an odd size where ``2*s`` is written is a
:class:`~shapes.errors.GuardViolation`, never a rounded ``s``).

Example::

    >>> import torch
    >>> plan = plan_graph([torch.randn(2, 3), 4])
    >>> [s.dims for s in plan.specs], [(k.value, v) for k, v in plan.layout]
    ([(2, 3)], [('tensor', 0), ('const', 4)])
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Optional

import sympy
import torch

from shapes.errors import GuardViolation, SymshapeError
from shapes.spec import DimExpr, InputSpec


class ArgKind(enum.Enum):
    """What one argument or output of an ATen graph is, for symshape's compiled program."""

    TENSOR = "tensor"
    EXPR = "expr"  # a SymInt: an expression of the dims
    CONST = "const"


def eval_size(e, values: dict):
    """``e`` (a size expression from torch's ShapeEnv) at ``values`` (symbol -> int or SymInt).

    >>> a, b = sympy.symbols("a b", integer=True)
    >>> eval_size(a * b + 2, {a: 3, b: 5})
    17
    >>> from torch.utils._sympy.functions import Max
    >>> eval_size(Max(1, a - b), {a: 3, b: 5})
    1
    """
    if e.is_Integer:
        return int(e)
    if e.is_Symbol:
        return values[e]
    args = [eval_size(a, values) for a in e.args]
    if e.is_Add:
        out = args[0]
        for a in args[1:]:
            out = out + a
        return out
    if e.is_Mul:
        out = args[0]
        for a in args[1:]:
            out = out * a
        return out
    if e.is_Pow and e.exp.is_Integer and int(e.exp) >= 0:
        return args[0] ** int(e.exp)
    name = type(e).__name__
    if name in ("FloorDiv", "CleanDiv"):  # CleanDiv: a division torch proved exact
        return args[0] // args[1]
    if name in ("Mod", "PythonMod"):
        return args[0] % args[1]
    if name == "ModularIndexing":
        return (args[0] // args[1]) % args[2]
    if name == "PowByNatural" and isinstance(args[1], int):
        return args[0] ** args[1]
    if name in ("Max", "Min", "CeilDiv") and not any(isinstance(a, _Text) for a in args):
        # Qwen3.5's padded chunk count is Max(1, ...): a SymInt the forward graph hands its backward.
        if name == "CeilDiv":
            return -(-args[0] // args[1])
        pick = torch.sym_max if name == "Max" else torch.sym_min
        out = args[0]
        for a in args[1:]:
            out = pick(out, a)
        return out
    raise SymshapeError(f"size expression {e} ({name}) has no evaluation rule in symshape's training backend")


def evaluation_gap(e) -> Optional[str]:
    """Why :func:`eval_size` cannot evaluate ``e`` at a call (a kind of expression it has no rule
    for), or None: a graph whose SymInts hold such a kind runs uncompiled, saying so, rather than
    failing at its first call.

    >>> from torch.utils._sympy.functions import FloorDiv
    >>> a = sympy.Symbol("a", integer=True)
    >>> evaluation_gap(FloorDiv(a, 2) + 1) is None, "no evaluation rule" in evaluation_gap(sympy.sqrt(a))
    (True, True)
    """
    try:
        eval_size(e, {x: 7 for x in e.free_symbols})
    except SymshapeError as err:
        return str(err)
    except ArithmeticError:  # a rule exists; 7 merely divides by zero somewhere
        pass
    return None


class _Text:
    """Spec-language text of a size expression, built by :func:`eval_size` through these operators."""

    def __init__(self, text: str):
        self.text = text

    def _op(self, other, op, swap=False):
        a, b = (_text(other), self.text) if swap else (self.text, _text(other))
        return _Text(f"({a} {op} {b})")

    def __add__(self, o): return self._op(o, "+")
    def __radd__(self, o): return self._op(o, "+", swap=True)
    def __mul__(self, o): return self._op(o, "*")
    def __rmul__(self, o): return self._op(o, "*", swap=True)
    def __floordiv__(self, o): return self._op(o, "//")
    def __rfloordiv__(self, o): return self._op(o, "//", swap=True)
    def __mod__(self, o): return self._op(o, "%")
    def __rmod__(self, o): return self._op(o, "%", swap=True)

    def __pow__(self, n: int):
        return _Text("1") if n == 0 else _Text("(" + " * ".join([self.text] * n) + ")")


def _text(x) -> str:
    return x.text if isinstance(x, _Text) else f"({x})" if x < 0 else str(x)


def spec_text(e) -> str:
    """``e`` (a size expression from torch's ShapeEnv) in the spec language (``+ - * // %``):
    a power becomes a product, so ``(s0//16)**2 + 1`` is a dim expression, not a dim of its own.

    >>> s = sympy.Symbol("s", integer=True)
    >>> DimExpr.parse(spec_text(s**2 + 1)).evaluate({"s": 3})
    10
    """
    return _text(eval_size(e, {x: _Text(str(x)) for x in e.free_symbols}))


def _hint(s) -> int:
    if isinstance(s, int):
        return s
    h = s.node.hint
    if h is None:
        h = s.node.shape_env.size_hint(s.node.expr)
    return int(h)


@dataclass(kw_only=True)
class GraphPlan:
    """How one ATen graph's arguments map to symshape's tensor inputs and dims.

    ``layout``: per argument, ``(ArgKind.TENSOR, k)`` (the k-th tensor input),
    ``(ArgKind.EXPR, e)`` (a SymInt: its expression of the dims) or ``(ArgKind.CONST, v)``.
    ``where``: each dim symbol -> (tensor input, axis) that carries it.
    ``solved``: each symbol no tensor carries alone -> :class:`Solved` (a dim ``a*s + b``
    that gives it), in the order they were solved (``b`` may hold earlier ones).

    >>> plan = plan_graph([torch.randn(2, 3), 4])
    >>> plan.args([torch.randn(5, 3)])[1]
    4
    """

    specs: list
    dims: dict
    layout: list
    where: dict
    tensor_pos: list
    symbols: list = field(default_factory=list)
    solved: dict = field(default_factory=dict)
    carriers: list = field(default_factory=list)
    lower_bounds: dict = field(default_factory=dict)
    _cache: dict = field(default_factory=dict)

    def with_bounds(self, dims: dict) -> dict:
        """``dims`` (name -> example size) with each dim's least value torch's ShapeEnv knows,
        as ``(least, inf, example)``, where it is 0 or above 1 and the example lies within.

        Dynamo guards every call of its graph on these bounds (an image side ``>= 16`` after a
        patch embedding's check), so the compiled program may assume them: ``(H // 16)**2 //
        (H // 16)`` then cancels to ``H // 16``, which it cannot where ``H // 16`` may be 0.

        >>> GraphPlan(specs=[], dims={}, layout=[], where={}, tensor_pos=[],
        ...           lower_bounds={"s0": 16, "s2": 0}).with_bounds({"s0": 64, "s1": 3, "s2": 8})
        {'s0': (16, inf, 64), 's1': 3, 's2': (0, inf, 8)}
        """
        out = dict(dims)
        for name, v in dims.items():
            lo = self.lower_bounds.get(name)
            if lo is not None and (lo == 0 or 1 < lo) and lo <= v:
                out[name] = (lo, math.inf, v)
        return out

    def carrier_tensors(self, args, device) -> list:
        """The empty tensors that carry, as their first dim, the values of the SymInt arguments
        no tensor's size gives (``carriers``: argument position, symbol): passed after the
        graph's tensors, so the compiled program reads every dim from a size.

        >>> from torch.fx.experimental.symbolic_shapes import ShapeEnv
        >>> from torch._dynamo.source import ConstantSource
        >>> env = ShapeEnv()
        >>> s = env.create_symintnode(env.create_symbol(7, ConstantSource("s")), hint=7)
        >>> plan = plan_graph([torch.randn(3, 3), 7], [torch.empty(3, s // 2, device="meta"), s], carriers=True)
        >>> [str(sp).replace(str(s), "s") for sp in plan.specs], [tuple(t.shape) for t in plan.carrier_tensors([None, 9], "cpu")]
        (['arg0: f32[3, s // 2]', 'arg1: f32[s, 0]'], [(9, 0)])
        """
        return [torch.empty((int(args[i]), 0), device=device) for i, _ in self.carriers]

    def signed_carriers(self) -> list:
        """The carried SymInt arguments torch's ShapeEnv lets be negative, or gives no lower bound
        (a Python int such as a ``dim`` or ``alpha`` argument, made symbolic): no tensor's size
        can carry them.

        >>> GraphPlan(specs=[], dims={}, layout=[], where={}, tensor_pos=[], carriers=[(1, "s3")],
        ...           lower_bounds={"s3": -1}).signed_carriers()
        ['s3']
        """
        return [str(s) for _, s in self.carriers if self.lower_bounds.get(str(s), -1) < 0]

    def covers(self, e) -> bool:
        """Whether the size expression ``e`` can be computed from the input tensors' sizes."""
        return e.free_symbols <= set(self.where) | set(self.solved)

    def values(self, tensors) -> dict:
        """Each symbol's value at a call on ``tensors`` (ints, or the trace's sizes while symshape traces).

        Raises :class:`~shapes.errors.GuardViolation` where a solved symbol has no integer value
        (an odd size where ``2*s`` is expected).
        """
        out = {s: tensors[k].shape[d] for s, (k, d) in self.where.items()}
        for s, sol in self.solved.items():
            out[s] = sol.value(tensors[sol.tensor].shape[sol.axis], out, self.specs[sol.tensor].name)
        return out

    def dim_values(self, tensors) -> tuple:
        if not self.solved:
            return tuple(int(tensors[k].shape[d]) for k, d in (self.where[s] for s in self.symbols))
        vals = self.values(tensors)
        return tuple(int(vals[s]) for s in self.symbols)

    def args(self, tensors) -> list:
        """The graph's argument list for a call on ``tensors`` (SymInts computed from their sizes)."""
        out = []
        vals = None
        for kind, v in self.layout:
            if kind is ArgKind.TENSOR:
                out.append(tensors[v])
            elif kind is ArgKind.EXPR:
                if vals is None:
                    vals = self.values(tensors)
                out.append(eval_size(v, vals))
            else:
                out.append(v)
        return out

    def eval_exprs(self, exprs, tensors) -> list:
        """Integer values of ``exprs`` (sympy, over the dims) for a call on ``tensors`` (cached per size)."""
        vals = self.dim_values(tensors)
        key = (id(exprs), vals)
        got = self._cache.get(key)
        if got is None:
            sub = dict(zip(self.symbols, vals))
            got = self._cache[key] = [int(eval_size(e, sub)) for e in exprs]
        return got


@dataclass(frozen=True)
class Solved:
    """A symbol ``s`` given by a tensor's dim of size ``a*s + b`` (``a`` a non-zero integer,
    ``b`` a size expression of symbols known before ``s``): ``s = (size - b) / a``.

    >>> s, t = sympy.symbols("s t", integer=True)
    >>> sol = Solved(tensor=0, axis=1, a=2, b=t + 1)
    >>> sol.value(11, {t: 4}, "arg0")
    3
    >>> sol.value(10, {t: 4}, "arg0")
    Traceback (most recent call last):
    ...
    shapes.errors.GuardViolation: arg0.shape[1] is 10, but no size s makes it 2*s + (t + 1) at t=4 (10 - 5 is not a multiple of 2)
    """

    tensor: int
    axis: int
    a: int
    b: sympy.Expr

    def value(self, size, known: dict, name: str = "input"):
        """``s`` for a dim of ``size`` (an int at a call, the trace's size while symshape traces),
        ``known`` the values of the symbols in ``b``; a GuardViolation where no integer fits."""
        # Decided on b's expression, not its value: a test of a traced size would be a guard.
        rest = size if self.b == 0 else size - eval_size(self.b, known)
        if self.a == 1:
            return rest
        if isinstance(rest, int) and rest % self.a:
            at = ", ".join(f"{k}={known[k]}" for k in sorted(self.b.free_symbols, key=str))
            raise GuardViolation(f"{name}.shape[{self.axis}] is {size}, but no size s makes it "
                                 f"{self.a}*s + ({self.b}){f' at {at}' if at else ''} ({size} - {size - rest} is "
                                 f"not a multiple of {self.a})")
        # Exact: at a call checked above; in the trace the size is a*s + b itself, and the
        # engine simplifies the floor division to s.
        return rest // self.a


def linear_in(e, s) -> Optional[tuple]:
    """``(a, b)`` with ``e == a*s + b``, ``a`` a non-zero integer and ``b`` free of ``s``; else None.

    >>> s, t = sympy.symbols("s t", integer=True)
    >>> linear_in(4 * s + 2, s), linear_in(2 * (s + t) + 1, s), linear_in(s * t, s), linear_in(s**2, s)
    ((4, 2), (2, 2*t + 1), None, None)
    """
    a, b = sympy.Integer(0), sympy.Integer(0)
    for term in sympy.Add.make_args(sympy.expand(e)):
        if s not in term.free_symbols:
            b += term
            continue
        c, rest = term.as_coeff_Mul()
        if rest != s or not c.is_Integer:
            return None
        a += c
    return (int(a), b) if a != 0 else None


def _solve_symbols(sym, example_inputs, tensor_pos, known: dict) -> dict:
    """Symbols that tensor dims give only linearly (``2*s``, ``s + 1``), solved one at a time.

    ``known``: symbol -> hint of those read directly.  Returns symbol -> :class:`Solved`,
    and adds each solved symbol's hint to ``known``.
    """
    solved: dict = {}
    progress = True
    while progress:
        progress = False
        for k, i in enumerate(tensor_pos):
            for d, (size, real) in enumerate(zip(sym[k].shape, example_inputs[i].shape)):
                if not isinstance(size, torch.SymInt):
                    continue
                e = size.node.expr
                unknown = e.free_symbols - set(known)
                if len(unknown) != 1:
                    continue
                (s,) = unknown
                lin = linear_in(e, s)
                if lin is None:
                    continue
                a, b = lin
                try:
                    # The dim must be a dim expression: the binder solves s from it at each call.
                    DimExpr.parse(spec_text(e))
                    rest = _hint(real) - int(eval_size(b, known))
                except (ValueError, SymshapeError):
                    continue
                if rest % a or rest // a < 0:
                    continue  # the example itself disagrees: leave the size its own dim
                solved[s] = Solved(tensor=k, axis=d, a=a, b=b)
                known[s] = rest // a
                progress = True
    return solved


def _input_spec(name, ex, sym, k, known, dims) -> InputSpec:
    """The spec of tensor input ``k`` (real ``ex``, symbolic sizes ``sym``): each dim an int, a
    named dim (added to ``dims`` with its example value) or an expression of ``known`` symbols."""
    spec_dims = []
    for d, (s, real) in enumerate(zip(sym.shape, ex.shape)):
        e = s.node.expr if isinstance(s, torch.SymInt) else sympy.Integer(int(s))
        if e.is_Integer:
            spec_dims.append(int(e))
        elif e.is_Symbol:
            spec_dims.append(str(e))
            dims[str(e)] = _hint(real)
        else:
            # A compound size (s0*s1 of a flattened view): an expression of named dims when
            # the spec language writes it and every symbol is some tensor's dim; else its own dim.
            expr = None
            if e.free_symbols <= known:
                try:
                    expr = DimExpr.parse(spec_text(e))
                except (ValueError, SymshapeError):
                    expr = None
            if expr is not None and expr.sympy({n: sympy.Symbol(n, integer=True) for n in expr.names}) is not None:
                spec_dims.append(expr)
            else:
                spec_dims.append(f"a{k}_{d}")
                dims[f"a{k}_{d}"] = _hint(real)
    return InputSpec(name=name, dtype=ex.dtype, dims=tuple(spec_dims))


def plan_graph(example_inputs, symbolic=None, carriers: bool = False) -> Optional[GraphPlan]:
    """A :class:`GraphPlan` for a graph's example inputs (tensors, SymInts, numbers).

    ``symbolic``: where the example tensors are real (dynamo's backend call), the
    same arguments with symbolic sizes (placeholders' ``example_value``; None for
    an argument that has none): sizes are read from them, example values from the
    real tensors.  A symbol that no tensor's dim is, but one's dim is linearly
    (``2*s``), becomes a named dim that only dim expressions give (:class:`Solved`).
    Returns None when a SymInt argument is no expression of sizes some tensor
    input carries; with ``carriers``, a SymInt argument that is a symbol no tensor
    gives is read from an empty tensor made at each call instead
    (:meth:`GraphPlan.carrier_tensors`: a backward graph that gets an image's
    height only as a number, its saved activations holding ``H // 16``).

    >>> from torch.fx.experimental.symbolic_shapes import ShapeEnv
    >>> from torch._dynamo.source import ConstantSource
    >>> env = ShapeEnv()
    >>> s = env.create_symintnode(env.create_symbol(5, ConstantSource("s")), hint=5)
    >>> plan = plan_graph([torch.randn(10, 3), 5], [torch.empty(2 * s, 3, device="meta"), s])
    >>> str(plan.specs[0]).replace(str(s), "s"), list(plan.dims.values()), plan.layout[1][0]
    ('arg0: f32[2*s, 3]', [5], <ArgKind.EXPR: 'expr'>)
    >>> plan.args([torch.randn(14, 3)])[1]  # s solved from the tensor's size
    7
    """
    tensor_pos = [i for i, ex in enumerate(example_inputs) if isinstance(ex, torch.Tensor)]
    sym = [symbolic[i] if symbolic is not None and i < len(symbolic) and isinstance(symbolic[i], torch.Tensor)
           else example_inputs[i] for i in tensor_pos]
    where: dict = {}
    for k, i in enumerate(tensor_pos):
        for d, s in enumerate(sym[k].shape):
            if isinstance(s, torch.SymInt) and s.node.expr.is_Symbol:
                where.setdefault(s.node.expr, (k, d))
    hints = {s: _hint(example_inputs[tensor_pos[k]].shape[d]) for s, (k, d) in where.items()}
    solved = _solve_symbols(sym, example_inputs, tensor_pos, hints)
    known = set(where) | set(solved)
    dims = {str(s): hints[s] for s in solved}
    carried = _carried(example_inputs, symbolic, known) if carriers else []
    for j, (i, s) in enumerate(carried):
        where[s] = (len(tensor_pos) + j, 0)
        known.add(s)
    specs = [_input_spec(f"arg{i}", example_inputs[i], sym[k], k, known, dims) for k, i in enumerate(tensor_pos)]
    for i, s in carried:
        dims[str(s)] = _hint(example_inputs[i])
        specs.append(InputSpec(name=f"arg{i}", dtype=torch.float32, dims=(str(s), 0)))
    layout = []
    counter = 0
    for i, ex in enumerate(example_inputs):
        if symbolic is not None and i < len(symbolic) and isinstance(symbolic[i], torch.SymInt):
            ex = symbolic[i]
        if isinstance(ex, torch.Tensor):
            layout.append((ArgKind.TENSOR, counter))
            counter += 1
        elif isinstance(ex, torch.SymInt):
            e = ex.node.expr
            if e.is_Integer:
                layout.append((ArgKind.CONST, int(e)))
            elif e.free_symbols <= known:
                layout.append((ArgKind.EXPR, e))
            else:
                return None
        elif ex is None or isinstance(ex, (int, float, bool)):
            layout.append((ArgKind.CONST, ex))
        else:
            return None
    return GraphPlan(specs=specs, dims=dims, layout=layout, where=where, tensor_pos=tensor_pos,
                     symbols=sorted(known, key=str), solved=solved, carriers=carried,
                     lower_bounds=_lower_bounds(sym, known))


def _lower_bounds(sym_tensors, symbols) -> dict:
    """Symbol name -> the least value torch's ShapeEnv gives it (where it has a range)."""
    env = next((s.node.shape_env for t in sym_tensors for s in t.shape if isinstance(s, torch.SymInt)), None)
    if env is None:
        return {}
    out = {}
    for s in symbols:
        r = env.var_to_range.get(s)
        if r is not None:
            # -inf for an unbounded one: a Python int argument (index_add's alpha = -1).
            # (torch's -int_oo says is_integer and is_finite: only a sympy Integer is a number.)
            out[str(s)] = int(r.lower) if isinstance(r.lower, sympy.Integer) else -math.inf
    return out


def _carried(example_inputs, symbolic, known) -> list:
    """``(position, symbol)`` of each SymInt argument that is a symbol outside ``known`` (first
    occurrence)."""
    out, seen = [], set(known)
    for i, ex in enumerate(example_inputs):
        if symbolic is not None and i < len(symbolic) and isinstance(symbolic[i], torch.SymInt):
            ex = symbolic[i]
        # A backed symbol only: an unbacked one (a size from data) has no example value to trace at.
        if (isinstance(ex, torch.SymInt) and ex.node.expr.is_Symbol and ex.node.expr not in seen
                and ex.node.has_hint()):
            seen.add(ex.node.expr)
            out.append((i, ex.node.expr))
    return out


def general_hints(dims: dict, values) -> dict:
    """``dims`` (symbol name -> example size) with each 0 or 1 moved to an unused size inside the
    symbol's range (from the ShapeEnv of ``values``' symbolic sizes; a multiple of 8 where there is
    one), for a trace whose variant serves size 1 too; a symbol whose range holds no other size
    keeps its example.

    Dynamo's example sizes are a trace's hints.  A size of 1 among them (dynamo captures one
    under torch's ``backed_size_oblivious``) makes a trace there answer size-1 questions for
    that size alone (a linear's view of a permuted input holds only at B = 1: ``Eq(B, 1)``),
    and the next batch size traces again.

    >>> general_hints({"s0": 1, "s1": 8, "s2": 5}, [])
    {'s0': 16, 's1': 8, 's2': 5}
    """
    if all(v > 1 for v in dims.values()):
        return dims
    ranges = {}
    for val in values:
        for s in (val.shape if isinstance(val, torch.Tensor) else ()):
            if isinstance(s, torch.SymInt) and s.node.expr.is_Symbol:
                ranges.setdefault(str(s.node.expr), s.node.shape_env.var_to_range.get(s.node.expr))
    used = set(dims.values())
    out = dict(dims)
    for name, v in dims.items():
        if v > 1:
            continue
        r = ranges.get(name)
        lo, hi = (2, 1 << 20) if r is None else (
            max(2, int(r.lower)) if isinstance(r.lower, sympy.Integer) else 2,
            min(1 << 20, int(r.upper)) if isinstance(r.upper, sympy.Integer) else 1 << 20)
        # An unremarkable size (a multiple of 8) where the range has one; else the largest other.
        hint = next((h for h in range(8, int(hi) + 1, 8) if h >= lo and h not in used), None)
        if hint is None:
            hint = next((h for h in range(int(hi), lo - 1, -1) if h not in used), None)
        if hint is None:
            continue  # no size but 0 or 1 (or taken ones): the example's size it is
        out[name] = hint
        used.add(hint)
    return out


def built_at_general_sizes(build, dims: dict, values):
    """``build(dims)`` at :func:`general_hints` (a compiled program whose first variant is traced
    where no dim is 0 or 1); at ``dims`` themselves where the program refuses those sizes (a
    check dynamo kept in the graph): the example's sizes are a call that runs.

    >>> built_at_general_sizes(lambda d: d, {"s0": 1}, [])
    {'s0': 8}
    """
    general = general_hints(dims, values)
    if general != dims:
        try:
            return build(general)
        except SymshapeError:
            pass
    return build(dims)


__all__ = ["plan_graph", "general_hints", "built_at_general_sizes", "GraphPlan", "ArgKind", "Solved", "eval_size", "evaluation_gap", "linear_in", "spec_text"]
