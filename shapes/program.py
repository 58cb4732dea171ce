"""A traced program: its graph, env, guards, and a runner for real tensors."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
import torch.fx
from torch.utils import _pytree as pytree

from .env import ShapeEnv
from .errors import GuardViolation, SpecError
from .guard import Guard, GuardKind


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

    @property
    def guards(self) -> list[Guard]:
        return self.env.guards

    @property
    def runtime_asserts(self) -> list[Guard]:
        return self.env.runtime_asserts

    @property
    def records(self) -> list[Guard]:
        return list(self.env.records)

    @property
    def path_condition(self) -> sympy.Basic:
        """The conjunction of all guards: the sizes that take this same path."""
        return sympy.And(*[g.expr for g in self.guards])

    def symbol(self, name: str) -> sympy.Symbol:
        return self.env.symbols[name]

    # -- binding sizes ------------------------------------------------------------------
    def bind_sizes(self, tensors) -> dict[sympy.Symbol, int]:
        """Check real tensors against the specs; return the dim values they give."""
        if len(tensors) != len(self.specs):
            raise SpecError(
                f"the program was traced with {len(self.specs)} input(s) "
                f"({', '.join(s.name for s in self.specs)}) but {len(tensors)} were given"
            )
        values: dict[str, tuple[int, str]] = {}
        for t, s in zip(tensors, self.specs):
            if not isinstance(t, torch.Tensor):
                raise SpecError(f"input {s.name} must be a tensor, got {type(t).__name__}")
            if t.dim() != len(s.dims):
                raise SpecError(f"input {s.name} has {t.dim()} dims, the spec `{s}` has {len(s.dims)}")
            if t.dtype != s.dtype:
                raise SpecError(f"input {s.name} has dtype {t.dtype}, the spec `{s}` says {s.dtype}")
            for i, d in enumerate(s.dims):
                n = int(t.shape[i])
                where = f"{s.name}.shape[{i}]"
                if isinstance(d, int):
                    if n != d:
                        raise GuardViolation(f"{where} is {n} but the spec `{s}` fixes it to {d}")
                elif d in values and values[d][0] != n:
                    raise GuardViolation(
                        f"dim {d} is {values[d][0]} at {values[d][1]} but {n} at {where}; "
                        f"dims with one name must be equal"
                    )
                else:
                    values.setdefault(d, (n, where))
        return {self.env.symbols[k]: v for k, (v, _) in values.items()}

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
        bad = []
        for g in (self.env.constraints if constraints else []) + self.env.records:
            if not g.expr.free_symbols <= subs.keys():
                continue
            try:
                holds = g.expr.xreplace(subs) is sympy.true
            except ZeroDivisionError:  # e.g. (H//4) % ... at H < 4: the guard's sizes do not exist
                holds = False
            if not holds:
                bad.append(g)
        return bad

    # -- running ----------------------------------------------------------------------
    def run(self, *tensors):
        """Check the guards against real inputs, then execute the graph on them.

        Raises :class:`~shapes.errors.GuardViolation` naming the first guard
        or runtime assert that fails, with its source line.
        """
        sym_vals = self.bind_sizes(tensors)
        for g in self.failing_guards(sym_vals):
            raise GuardViolation(_violation_message(g, sym_vals), guard=g, values=sym_vals)
        device = tensors[0].device if tensors else torch.device("cpu")
        mod = self.program if isinstance(self.program, torch.nn.Module) else None
        env: dict[torch.fx.Node, Any] = {}
        inputs = iter(tensors)
        pending = [g for g in self.env.runtime_asserts if not g.expr.free_symbols <= sym_vals.keys()]
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
                env[node] = out
                bindings = node.meta.get("unbacked_bindings")
                if bindings:
                    first = out[0] if isinstance(out, (tuple, list)) else out
                    for u, path in bindings.items():
                        sym_vals[u] = int(first.shape[path[1]]) if path[0] == "size" else first
                    still = []
                    for g in pending:
                        if g.expr.free_symbols <= sym_vals.keys():
                            subs = {k: sympy.sympify(v) for k, v in sym_vals.items()}
                            if g.expr.xreplace(subs) is not sympy.true:
                                raise GuardViolation(_violation_message(g, sym_vals), guard=g, values=sym_vals)
                        else:
                            still.append(g)
                    pending = still
            elif node.op == "output":
                leaves = [env[a] if isinstance(a, torch.fx.Node) else a for a in node.args[0]]
                return pytree.tree_unflatten(leaves, self.out_spec)
        raise RuntimeError("graph has no output node")

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


def _violation_message(g: Guard, vals) -> str:
    at = ", ".join(f"{k}={v}" for k, v in vals.items() if not isinstance(v, torch.Tensor))
    what = {GuardKind.GUARD: "guard", GuardKind.SPECIALIZATION: "specialization",
            GuardKind.RUNTIME_ASSERT: "runtime assert"}[g.kind]
    if g.index < 0:
        what = "input constraint"
    return f"{what} {g.expr} fails at {at}; it comes from {g.provenance}"


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
