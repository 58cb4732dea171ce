"""A traced program: its graph, env, guards, and a runner for real tensors."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional

import sympy
import torch
import torch.fx
from torch.utils import _pytree as pytree

from .data_names import data_names
from .devices import DeviceMismatch
from .layout_reads import LayoutMismatch, strided_input
from .env import ShapeEnv
from .errors import GuardViolation, SpecError
from .functions import substitute
from .enums import TextEnum
from .printers import to_python
from .guard import Decision, Guard, GuardKind
from .spec import DimExpr, check_declared_values


class OutputKind(TextEnum):
    """What an :class:`Output` is: a tensor (``shape`` holds its sympy sizes, ``dtype``
    its dtype), a size (``value`` is the sympy expression of an int/float/bool the
    program computed from sizes) or a value (``value`` is the constant itself)."""

    TENSOR = "tensor"
    SIZE = "size"
    VALUE = "value"


@dataclass(frozen=True)
class Output:
    """One output leaf of a traced program (see :meth:`TracedProgram.outputs`).

    ``path`` reads like Python (``out``, ``out[1]``, ``out["logits"]``,
    ``out.last_hidden_state``); ``kind`` is an :class:`OutputKind`.
    """

    path: str
    kind: OutputKind
    shape: Optional[tuple]
    dtype: Any
    value: Any
    #: data-dependent symbols -> the user's names for them (``x.sum().item()``, never ``u0``)
    names: Optional[dict] = field(default=None, repr=False, compare=False)

    def text(self) -> str:
        """What the output is, in Python syntax: ``f32[B, T // 8, 64]`` for a tensor, the
        expression for a size, the repr of a constant.

        Example::

            >>> import shapes
            >>> tp = shapes.trace(lambda x: (x.view(-1, 8), x.shape[0] + 1), "x: f32[N]")
            >>> [o.text() for o in tp.outputs()]
            ['f32[N // 8, 8]', 'N + 1']
            >>> print(tp.outputs()[0])
            out[0]: f32[N // 8, 8]
        """
        if self.kind is OutputKind.TENSOR:
            from .spec import DTYPES
            short = {v: k for k, v in reversed(list(DTYPES.items()))}  # f32, not float32
            dtype = short.get(self.dtype, str(self.dtype).replace("torch.", ""))
            return f"{dtype}[{', '.join(to_python(e, self.names) for e in self.shape)}]"
        if self.kind is OutputKind.SIZE:
            return to_python(self.value, self.names)
        return repr(self.value)

    def __str__(self) -> str:
        return f"{self.path}: {self.text()}"


@dataclass
class TracedProgram:
    """What :func:`shapes.trace` returns.

    Attributes:
        graph: the recorded ``torch.fx.Graph`` of ATen ops; every tensor node
            has ``meta["val"]`` (a meta tensor with symbolic sizes) and
            ``meta["shape"]`` (sympy expressions).
        env: the :class:`~shapes.env.ShapeEnv` with the decision log.
        guards: conditions decided by the example sizes, and specializations.
        runtime_asserts: conditions assumed via ``torch._check``.
        output_shapes: one tuple of sympy sizes per output tensor.
    """

    program: Any
    specs: list
    env: ShapeEnv
    graph: torch.fx.Graph
    constants: dict
    output_shapes: list
    out_spec: Any
    hints: dict
    dims: dict
    dim_symbols: dict = field(default_factory=dict)
    by_keyword: bool = False  # inputs were passed to the program by parameter name
    #: The device the program was traced for (what its tensors reported), and each
    #: place it read that device: the trace assumes it there (:mod:`shapes.devices`).
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    device_reads: list = field(default_factory=list)
    #: where the program read a trace tensor's layout (:mod:`shapes.layout_reads`): the trace then
    #: holds for contiguous inputs only
    layout_reads: list = field(default_factory=list)
    #: where the program set torch's random generator (:mod:`shapes.rng_writes`): no node replays it,
    #: so the graph alone does not give eager's random values
    rng_writes: list = field(default_factory=list)
    #: the symbolic world (:class:`shapes.distributed.World`) of a trace with ``world=``, else None
    world: Any = None

    @property
    def guards(self) -> list[Guard]:
        return self.env.guards

    @property
    def runtime_asserts(self) -> list[Guard]:
        return self.env.runtime_asserts

    @property
    def limits(self) -> list[Guard]:
        """Size limits eager enforces (storage size within int64) that the
        ranges do not prove; :meth:`run` checks them with the guards."""
        return list(self.env.limits)

    @property
    def unchecked_indices(self) -> list:
        """``[(provenance, message)]``: ops indexing by a tensor whose values the sizes
        determine but symshape cannot bound, so no guard says where eager's index check
        passes.  Empty for every trace whose answers cover index bounds too."""
        return list(self.env.unchecked_indices)

    @property
    def records(self) -> list[Guard]:
        return list(self.env.records)

    @property
    def path_condition(self) -> sympy.Basic:
        """The conjunction of all guards: the sizes that take this same path."""
        return sympy.And(*[g.expr for g in self.guards])

    def symbol(self, name: str) -> sympy.Symbol:
        return self.env.symbols[name]

    def outputs(self) -> list["Output"]:
        """Every output leaf with its pytree path, in the order pytree flattens them.

        >>> import shapes
        >>> tp = shapes.trace(lambda x: {"y": x.view(-1, 8), "n": x.shape[0] * 2}, "x: f32[N]")
        >>> [(o.path, str(o.kind), o.text()) for o in tp.outputs()]
        [('out["y"]', 'tensor', 'f32[N // 8, 8]'), ('out["n"]', 'size', '2*N')]
        """
        out_node = next(n for n in self.graph.nodes if n.op == "output")
        leaves = []
        for a in out_node.args[0]:
            if isinstance(a, torch.fx.Node) and isinstance(a.meta.get("val"), torch.Tensor):
                shape = tuple(self.env.simplify(e) for e in a.meta["shape"])
                leaves.append(dict(kind=OutputKind.TENSOR, shape=shape, dtype=a.meta["val"].dtype, value=None))
            elif isinstance(a, torch.fx.Node) and "expr" in a.meta:
                leaves.append(dict(kind=OutputKind.SIZE, shape=None, dtype=None,
                                   value=self.env.simplify(a.meta["expr"])))
            else:
                leaves.append(dict(kind=OutputKind.VALUE, shape=None, dtype=None, value=a))
        tree = pytree.tree_unflatten(list(range(len(leaves))), self.out_spec)
        flat, _ = pytree.tree_flatten_with_path(tree)
        names = data_names(self.env) or None
        return [Output(path=_path_text(path), **leaves[i], names=names) for path, i in flat]

    # -- binding sizes ------------------------------------------------------------------
    def bind_sizes(self, tensors) -> dict[sympy.Symbol, int]:
        """Check real tensors against the specs; return the dim values they give."""
        if len(tensors) != len(self.specs):
            raise SpecError(
                f"the program was traced with {len(self.specs)} input(s) "
                f"({', '.join(s.name for s in self.specs)}) but {len(tensors)} were given"
            )
        values: dict[str, tuple[int, str]] = {}
        derived = []
        for t, s in zip(tensors, self.specs):
            if not isinstance(t, torch.Tensor):
                raise SpecError(f"input {s.name} must be a tensor, got {type(t).__name__}")
            if t.dim() != len(s.dims):
                raise SpecError(f"input {s.name} has {t.dim()} dims, the spec `{s}` has {len(s.dims)}")
            if t.dtype != s.dtype:
                raise SpecError(f"input {s.name} has dtype {t.dtype}, the spec `{s}` says {s.dtype}")
            check_declared_values(s, t)
            for i, d in enumerate(s.dims):
                n = int(t.shape[i])
                where = f"{s.name}.shape[{i}]"
                if isinstance(d, int):
                    if n != d:
                        raise GuardViolation(f"{where} is {n} but the spec `{s}` fixes it to {d}")
                elif isinstance(d, DimExpr):
                    derived.append((d, n, where, s))
                elif d in values and values[d][0] != n:
                    raise GuardViolation(
                        f"dim {d} is {values[d][0]} at {values[d][1]} but {n} at {where}; "
                        f"dims with one name must be equal"
                    )
                else:
                    values.setdefault(d, (n, where))
        _bind_derived(derived, values)
        out = {self.env.symbols[k]: v for k, (v, _) in values.items()}
        if self.world is not None:
            out.update(world_values(self.world))
        return out

    @property
    def input_constraints(self) -> list[Guard]:
        """What the trace assumed about input dims before the program ran: the
        0/1 policy (``B >= 2``) and user-given ranges.  Checked by :meth:`run`."""
        return list(self.env.constraints)

    def failing_guards(self, sizes: dict, *, constraints: bool = True) -> list[Guard]:
        """Input constraints, guards and runtime asserts over input dims that
        fail at ``sizes`` (a dict dim name or symbol -> int)."""
        subs = {}
        for k, v in sizes.items():
            sym = self.env.symbols[k] if isinstance(k, str) else k
            subs[sym] = sympy.Integer(v)
        bad, undefined, off_path = [], [], []
        for g in (self.env.constraints if constraints else []) + self.env.records + self.env.limits:
            if not g.expr.free_symbols <= subs.keys():
                continue
            if g.defined_when is not sympy.true and not _holds(g.defined_when, subs):
                off_path.append(g)
                continue
            v = _holds(g.expr, subs)
            if v is None:
                undefined.append(g)
            elif not v:
                bad.append(g)
        # A guard that divides by zero at these sizes (C % (C // 4) at C = 3) fails too,
        # but the guard that excludes the zero divisor (C // 4 != 0) explains it best.
        # A limit whose sizes do not exist here belongs to a path these sizes do not
        # take: another record fails and says so; if none does, the sizes are refused.
        return bad + undefined + ([] if bad or undefined else off_path)

    # -- running ----------------------------------------------------------------------
    def run(self, *tensors):
        """Check the guards against real inputs, then execute the graph on them.

        Raises :class:`~shapes.errors.GuardViolation` naming the first guard
        or runtime assert that fails, with its source line.
        """
        sym_vals = self.bind_sizes(tensors)
        # A layout the trace did not see first: the guards hold for the trace's layout.
        self.check_layout(tensors)
        for g in self.failing_guards(sym_vals):
            raise GuardViolation(violation_message(g, sym_vals), guard=g, values=sym_vals)
        self.check_device(tensors)
        # Every guard held: the size arithmetic of the graph below is defined.
        device = tensors[0].device if tensors else torch.device("cpu")
        mod = self.program if isinstance(self.program, torch.nn.Module) else None
        env: dict[torch.fx.Node, Any] = {}
        inputs = iter(tensors)
        pending = [g for g in self.env.runtime_asserts + self.env.limits
                   if not g.expr.free_symbols <= sym_vals.keys()]
        for node in self.graph.nodes:
            if node.op == "placeholder":
                env[node] = next(inputs)
            elif node.op == "get_attr":
                if node.target in self.constants:
                    env[node] = self.constants[node.target].to(device)
                else:
                    env[node] = _fetch_attr(mod, node.target)
            elif node.op == "call_function":
                args = torch.fx.node.map_arg(node.args, lambda n: env[n])
                kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n])
                kwargs = _real_device(kwargs, device)
                out = node.target(*args, **kwargs)
                if isinstance(out, torch.Tensor) and not out.is_contiguous() and self._traced_contiguous(node):
                    # The CPU kernel chose another layout than the meta kernel did (convolution picks
                    # channels-last from its input); the ops after it were traced on the meta layout,
                    # where a `.contiguous()` was a no-op that left no node.
                    out = out.contiguous()
                env[node] = out
                bindings = node.meta.get("unbacked_bindings")
                if bindings:
                    first = out[0] if isinstance(out, (tuple, list)) else out
                    for u, path in bindings.items():
                        sym_vals[u] = int(first.shape[path[1]]) if path[0] == "size" else \
                            int(first.storage_offset()) if path[0] == "storage_offset" else \
                            int(first) if isinstance(first, bool) else first  # a truth value is 0/1
                    still = []
                    for g in pending:
                        if g.expr.free_symbols <= sym_vals.keys():
                            subs = {k: sympy.sympify(v) for k, v in sym_vals.items()}
                            if not _holds(g.expr, subs):
                                raise GuardViolation(violation_message(g, sym_vals), guard=g, values=sym_vals)
                        else:
                            still.append(g)
                    pending = still
            elif node.op == "output":
                leaves = [env[a] if isinstance(a, torch.fx.Node) else a for a in node.args[0]]
                return pytree.tree_unflatten(leaves, self.out_spec)
        raise RuntimeError("graph has no output node")

    def check_device(self, tensors) -> None:
        """Refuse inputs on another device than the one the program read while traced.

        >>> import torch, shapes
        >>> tp = shapes.trace(lambda x: x.float() if x.device.type == "cpu" else x.int(), "x: i64[N]")
        >>> tp.check_device([torch.ones(2, device="meta")])
        Traceback (most recent call last):
        ...
        shapes.devices.DeviceMismatch: input x is on meta but the program was traced for cpu and read that device (Tensor.device read as cpu at <doctest shapes.program.TracedProgram.check_device[1]>:1); trace it again for the inputs' device (device=...)
        """
        if not self.device_reads:
            return  # the program never looked: its graph runs wherever its inputs are
        for t, s in zip(tensors, self.specs):
            if isinstance(t, torch.Tensor) and t.device.type != self.device.type:
                raise DeviceMismatch(
                    f"input {s.name} is on {t.device} but the program was traced for {self.device} and read "
                    f"that device ({self.device_reads[0].text()}); trace it again for the inputs' device (device=...)")

    def check_layout(self, tensors) -> None:
        """Refuse a strided input where the program read a layout while traced (the trace saw
        contiguous inputs only: :mod:`shapes.layout_reads`).

        >>> import torch, shapes
        >>> tp = shapes.trace(lambda x: x.reshape(-1) if x.is_contiguous() else x, "x: f32[A, B]")
        >>> tp.check_layout([torch.ones(3, 2).t()])
        Traceback (most recent call last):
        ...
        shapes.layout_reads.LayoutMismatch: input x is not laid out as the trace's inputs are (contiguous, at offset 0), but the program read a layout while traced (Tensor.is_contiguous at <doctest shapes.program.TracedProgram.check_layout[1]>:1), so the trace holds for that layout only: pass x.contiguous().clone(), or run the program itself
        """
        if not self.layout_reads:
            return  # the program never looked: its graph gives the same values for any layout
        name = strided_input(tensors, self.specs)
        if name is not None:
            raise LayoutMismatch(
                f"input {name} is not laid out as the trace's inputs are (contiguous, at offset 0), but the program "
                f"read a layout while traced ({self.layout_reads[0].text()}), so the trace holds for that layout "
                f"only: pass {name}.contiguous().clone(), or run the program itself")

    def _traced_contiguous(self, node) -> bool:
        """Whether ``node``'s output was contiguous in the trace, at every size (cached)."""
        cache = self.__dict__.setdefault("_contiguous_cache", {})
        if node not in cache:
            v = node.meta.get("val")
            cache[node] = isinstance(v, torch.Tensor) and _contiguous_strides(v)
        return cache[node]

    @property
    def graph_module(self) -> torch.fx.GraphModule:
        """The graph as a GraphModule (parameters taken from the traced module)."""
        root = torch.nn.Module()
        for n, t in self.constants.items():
            root.register_buffer(n, t)
        if isinstance(self.program, torch.nn.Module):
            for node in self.graph.nodes:
                if node.op == "get_attr" and node.target not in self.constants:
                    _set_attr(root, node.target, _fetch_attr(self.program, node.target))
        return torch.fx.GraphModule(root, self.graph)

    def __repr__(self) -> str:
        ins = ", ".join(str(s) for s in self.specs)
        outs = ", ".join("[" + ", ".join(map(str, s)) + "]" for s in self.output_shapes)
        return (f"<TracedProgram ({ins}) -> ({outs}); {len(self.guards)} guards, "
                f"{len(self.runtime_asserts)} runtime asserts, {len(self.graph.nodes)} nodes>")


def world_values(world) -> dict:
    """The world symbols' values in the running process group (a traced graph runs on each rank)."""
    import torch.distributed as dist
    if not dist.is_initialized():
        raise SpecError(f"the program was traced with world={world.name!r}: run it on each rank of an "
                        f"initialized process group")
    if getattr(world, "concrete", False) and (dist.get_world_size(), dist.get_rank()) != (world.size, world.rank):
        raise SpecError(f"the program was traced at {world.name}={world.size} as rank {world.rank} (a device mesh "
                        f"needs a concrete world): run it there, or trace it at this world size and rank")
    vals = {world.size: dist.get_world_size()} if isinstance(world.size, sympy.Symbol) else {}
    if isinstance(world.rank, sympy.Symbol):
        vals[world.rank] = dist.get_rank()
    return vals


def _holds(expr, subs):
    """``expr`` at ``subs``: True/False, or None where it divides by zero."""
    try:
        v = substitute(expr, subs)
    except ZeroDivisionError:
        return None
    if v is sympy.true or v is sympy.false:
        return v is sympy.true
    if isinstance(v, (bool, int)):
        return bool(v)
    return None


def _bind_derived(derived, values: dict) -> None:
    """Check sizes given by expressions (``x: f32[B, 2*T]``) and solve the names only they give.

    An expression with all its names known must equal the size; one with a
    single unknown name is solved for it (exactly one non-negative integer
    solution); repeated until nothing changes.
    """
    while derived:
        still, moved = [], False
        for d, n, where, s in derived:
            unknown = [m for m in d.names if m not in values]
            if not unknown:
                v = d.evaluate({m: values[m][0] for m in d.names})
                if v != n:
                    given = ", ".join(f"{m}={values[m][0]} from {values[m][1]}" for m in d.names)
                    raise GuardViolation(f"{where} is {n} but the spec `{s}` says it is {d} = {v} ({given})")
                moved = True
            elif len(unknown) == 1:
                m = unknown[0]
                values[m] = (_solve(d, m, n, {k: values[k][0] for k in d.names if k in values}, where, s),
                             f"{where} = {d}")
                moved = True
            else:
                still.append((d, n, where, s))
        if still and not moved:
            d, n, where, s = still[0]
            raise SpecError(f"cannot read {', '.join(m for m in d.names if m not in values)} off {where} = {d} "
                            f"(spec `{s}`): give all but one of its dims a plain dim of their own in some spec")
        derived = still


def _solve(d, name, n, known, where, spec) -> int:
    sym = sympy.Symbol(name, integer=True)
    expr = d.sympy({**known, name: sym})
    # a*T + b (2*T, T + 1: the training backend's sizes solved from upsampled or class-token dims),
    # solved by a division: sympy.solve takes ~1 ms, paid at every new size of every graph.
    b, term = expr.as_independent(sym, as_Add=True)
    a, rest = term.as_coeff_Mul()
    if rest == sym and a.is_Integer and a != 0 and b.is_Integer:
        q, r = divmod(n - int(b), int(a))
        if r == 0 and q >= 0:
            return q
        raise GuardViolation(f"{where} is {n}, but no size {name} makes {d} equal {n} (spec `{spec}`)")
    try:
        sols = sympy.solve(sympy.Eq(expr, n), sym)
    except NotImplementedError:
        sols = None
    if sols is None or any(not getattr(v, "is_number", False) for v in sols):
        raise SpecError(f"cannot solve {name} from {where} = {d} (spec `{spec}`); give {name} a plain dim in "
                        f"some spec")
    hits = sorted({int(v) for v in sols if v.is_integer and v >= 0 and d.evaluate({**known, name: int(v)}) == n})
    if len(hits) > 1:
        raise SpecError(f"{where} = {d} = {n} holds for {name} in {hits} (spec `{spec}`); give {name} a plain "
                        f"dim in some spec")
    if not hits:
        raise GuardViolation(f"{where} is {n}, but no size {name} makes {d} equal {n} (spec `{spec}`)")
    return hits[0]


def _path_text(path) -> str:
    text = "out"
    for k in path:
        if isinstance(k, pytree.SequenceKey):
            text += f"[{k.idx}]"
        elif isinstance(k, pytree.MappingKey):
            text += f"[{json.dumps(k.key) if isinstance(k.key, str) else repr(k.key)}]"
        elif isinstance(k, pytree.GetAttrKey):
            text += f".{k.name}"
        else:
            text += str(k)
    return text


def violation_message(g: Guard, vals) -> str:
    """What a :class:`GuardViolation` says: which record fails, at which sizes, from where.

    >>> import shapes, sympy
    >>> tp = shapes.trace(lambda x: x.view(-1, 4), "x: f32[N]", dims={"N": 8})
    >>> g = tp.runtime_asserts[0]
    >>> violation_message(g, {tp.symbol("N"): 6}).split(";")[0]
    'runtime assert N % 4 == 0 fails at N=6'
    """
    at = ", ".join(f"{k}={v}" for k, v in vals.items() if not isinstance(v, torch.Tensor))
    what = {GuardKind.GUARD: "guard", GuardKind.SPECIALIZATION: "specialization",
            GuardKind.RUNTIME_ASSERT: "runtime assert"}[g.kind]
    if g.decided_by is Decision.EAGER_LIMIT:
        what = "size limit of eager PyTorch"
    elif g.index < 0:
        what = "input constraint"
    how = "fails" if _holds(g.expr, {k: sympy.sympify(v) for k, v in vals.items()
                                      if not isinstance(v, torch.Tensor)}) is not None else "divides by zero"
    return f"{what} {to_python(g.expr)} {how} at {at}; it comes from {g.provenance}"


def _fetch_attr(mod, target: str):
    obj = mod
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _set_attr(root, target, value):
    parts = target.split(".")
    obj = root
    for p in parts[:-1]:
        if not hasattr(obj, p):
            obj.add_module(p, torch.nn.Module())
        obj = getattr(obj, p)
    if isinstance(value, torch.nn.Parameter):
        obj.register_parameter(parts[-1], value)
    else:
        obj.register_buffer(parts[-1], value)


def _real_device(kwargs, device):
    dev = kwargs.get("device")
    if dev is not None and torch.device(dev).type == "meta":
        kwargs = dict(kwargs)
        kwargs["device"] = device
    return kwargs


class UntracedOutput:
    """Stands in for an output object the traced graph does not reproduce.

    >>> UntracedOutput("DynamicCache")
    <untraced DynamicCache>
    """

    def __init__(self, typename: str):
        self._typename = typename

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"symshape: this output was a {self._typename}, which the traced graph does not reproduce "
            f"(only tensors, sizes and plain values are outputs of the graph)"
        )

    def __repr__(self) -> str:
        return f"<untraced {self._typename}>"


def _contiguous_strides(t: torch.Tensor) -> bool:
    """Whether a (symbolic) tensor's strides are the row-major ones of its shape, as expressions."""
    expected = sympy.Integer(1)
    for size, stride in reversed(list(zip(t.shape, t.stride()))):
        size, stride = _expr(size), _expr(stride)
        if size != 1 and sympy.expand(stride - expected) != 0:
            return False
        expected = expected * size
    return True


def _expr(x):
    return x.node.expr if isinstance(x, torch.SymInt) else sympy.Integer(int(x))
