"""The FX graph a trace records: meta tensors and size symbols mapped to graph nodes as the program runs.

:class:`GraphBuilder` is what :func:`shapes.trace` records into: each ATen call's
node, each input's placeholder, the nodes that compute a size symbol from an input's
shape (or from a spec expression such as ``2*T + 1``), and the shape metadata of every
node as expressions in the dims.

Example::

    >>> import torch
    >>> from shapes import trace
    >>> tp = trace(lambda x: x.reshape(-1), "x: f32[B, 4]")
    >>> [n.meta["shape"] for n in tp.graph.nodes if n.op == "call_function"]
    [(4*B,)]
"""
from __future__ import annotations

import operator
from typing import Any, Optional

import sympy
import torch
import torch.fx

from . import index_bounds
from .decide import as_python
from .env import ShapeEnv
from .errors import TracerLimitation, UnsupportedOpError
from .expr_graph import FxExprBuilder
from .provenance import Provenance, capture
from .printers import to_python
from .spec import DimExpr
from .symbols import SizeSource

SymTypes = (torch.SymInt, torch.SymFloat, torch.SymBool)


def _sym_min(a, b):
    return torch.sym_min(a, b)


class GraphBuilder:
    """Maps meta tensors and symbols to FX nodes while the program runs."""

    def __init__(self, env: ShapeEnv):
        self.env = env
        self.graph = torch.fx.Graph()
        self.tensor_nodes: dict[int, tuple[torch.Tensor, torch.fx.Node]] = {}
        self.sym_sources: dict[sympy.Symbol, tuple[torch.fx.Node, int]] = {}
        # Symbols an input gives only through a spec expression a*T + b: (node, dim, a, b).
        self.sym_derived: dict[sympy.Symbol, tuple[torch.fx.Node, int, int, int]] = {}
        self.sym_nodes: dict[Any, torch.fx.Node] = {}
        self.expr_nodes: dict[Any, Any] = {}
        self.constants: dict[str, torch.Tensor] = {}
        self.module_stack: list[tuple[str, str]] = []
        self.value_bounds: dict[int, tuple] = {}
        # Tensors holding data the program does not constrain: its inputs and their views.
        self.free_values: dict[int, bool] = {}  # id -> whether its dtype is floating
        self.determined: set[int] = set()  # ids of tensors whose values the sizes determine
        # Set when the trace records a backward pass (trace(..., backward=...)).
        self.track_autograd = False
        self.phase: Optional[str] = None
        self.seq_paths: dict[int, tuple] = {}

    def bounds_of(self, t):
        return self.value_bounds.get(id(t))

    def determines(self, t) -> bool:
        """Whether the sizes and constants determine ``t``'s values (see :mod:`shapes.index_bounds`)."""
        return id(t) in self.determined

    # -- registration ------------------------------------------------------------
    def add_placeholder(self, name: str, t: torch.Tensor) -> torch.fx.Node:
        node = self.graph.placeholder(name)
        node.meta["val"] = t
        self.free_values[id(t)] = t.dtype.is_floating_point
        self._set_shape_meta(node, t)
        self.tensor_nodes[id(t)] = (t, node)
        for i, s in enumerate(t.shape):
            if isinstance(s, torch.SymInt) and s.node.expr.is_Symbol:
                self.sym_sources.setdefault(s.node.expr, (node, i))
            elif isinstance(s, torch.SymInt):
                lin = _linear(s.node.expr)
                if lin is not None:
                    self.sym_derived.setdefault(lin[0], (node, i, lin[1], lin[2]))
        return node

    def add_attr(self, target: str, t: torch.Tensor) -> torch.fx.Node:
        node = self.graph.get_attr(target)
        node.meta["val"] = t
        self._set_shape_meta(node, t)
        self.tensor_nodes[id(t)] = (t, node)
        return node

    def adopt_as(self, x: torch.Tensor, m: torch.Tensor) -> None:
        """The real tensor ``x`` is a graph constant that the trace sees as the meta tensor ``m``."""
        name = f"_const_{len(self.constants)}"
        self.constants[name] = x
        self.add_attr(name, m)
        vb = index_bounds.constant_range(x)
        if vb is not None:
            self.value_bounds[id(m)] = vb
        self.determined.add(id(m))

    def adopt(self, x):
        """Real tensors the program closes over become graph constants (meta while tracing)."""
        if isinstance(x, torch.Tensor) and id(x) not in self.tensor_nodes:
            if x.device.type == "meta" and x.numel() == 0 and not any(isinstance(d, torch.SymInt) for d in x.shape):
                # An empty meta tensor made outside dispatch (torch.tensor([], device=meta), as
                # caches do): it holds no data, so it is an empty-tensor factory in the graph.
                node = self.graph.call_function(torch.ops.aten.empty.memory_format, (list(x.shape),),
                                                {"dtype": x.dtype, "device": torch.device("meta")})
                node.meta["val"] = x
                self._set_shape_meta(node, x)
                self.tensor_nodes[id(x)] = (x, node)
                return x
            if x.device.type == "meta":
                prov = capture(self.env.current_op())
                raise TracerLimitation(
                    f"{prov.op or 'an op'} at {prov.location()} received a tensor on the meta "
                    f"device that torch made outside the ops symshape records, so its values are unknown "
                    f"to the trace. This is a limitation of symshape; please report it with this line."
                )
            name = f"_const_{len(self.constants)}"
            self.constants[name] = x
            m = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
            node = self.add_attr(name, m)
            vb = index_bounds.constant_range(x)
            if vb is not None:  # a constant index tensor: its values are known exactly
                self.value_bounds[id(m)] = vb
            self.determined.add(id(m))
            self.tensor_nodes[id(x)] = (m, node)
            return m
        if isinstance(x, torch.Tensor):
            return self.tensor_nodes[id(x)][0]
        return x

    def settle_shapes(self) -> None:
        """Rewrite every node's recorded shape with what the trace learned after the node was made.

        A placeholder ``x: [B, C]`` is recorded with ``C``; a later broadcast against ``[D]`` at
        ``C = 1`` fixes ``C = 1`` (a replacement).  Left as ``C``, the shape reads as a dim of the
        output's extent to whoever lowers the graph, which then indexes ``x`` along ``D`` where eager
        broadcasts its single column.  So each shape is simplified by the final replacements.
        """
        repl = self.env.replacements
        if not repl:
            return
        keys = set(repl)

        def settle(shape):
            if not isinstance(shape, tuple):
                return shape
            return tuple(settle(s) if isinstance(s, tuple) or s is None else
                         (self.env.simplify(s) if getattr(s, "free_symbols", set()) & keys else s) for s in shape)

        for node in self.graph.nodes:
            shape = node.meta.get("shape")
            if shape is not None:
                node.meta["shape"] = settle(shape)

    def _set_shape_meta(self, node, t):
        node.meta["shape"] = tuple(expr_of(s) for s in t.shape)
        node.meta["dtype"] = t.dtype
        if self.module_stack:
            node.meta["module_path"] = tuple(self.module_stack)

    # -- symbolic expressions as nodes --------------------------------------------------
    def expr_node(self, e):
        e = self.env.simplify(sympy.sympify(e))
        if e is sympy.true or e is sympy.false or e.is_number:
            return as_python(e)
        n = self.expr_nodes.get(e)
        if n is not None:
            return n
        n = self._build(e)
        n.meta.setdefault("expr", e)  # lets TracedProgram.outputs say what a size output is
        self.expr_nodes[e] = n
        return n

    def _build(self, e):
        return FxExprBuilder(self).visit(e)

    def symbol_node(self, e):
        """The graph node giving the value of the symbol ``e`` (read from an input's size)."""
        g = self.graph
        if e in self.sym_nodes:
            return self.sym_nodes[e]
        src = self.sym_sources.get(e)
        if src is None and e in self.sym_derived:
            # T from a size a*T + b (the spec's expression; run() checks inputs agree with it).
            inp, i, a, b = self.sym_derived[e]
            # Each step keeps its size expression: lowering reads a node without one as a value
            # computed at run time (the sub of 2*T + 1 was, and its size argument failed to lower).
            node = g.call_function(torch.ops.aten.sym_size.int, (inp, i))
            node.meta["expr"] = a * e + b
            if b:
                node = g.call_function(operator.sub, (node, b))
                node.meta["expr"] = a * e
            if a != 1:
                node = g.call_function(operator.floordiv, (node, a))
            node.meta["expr"] = e
            self.sym_nodes[e] = node
            return node
        if src is None:
            raise UnsupportedOpError(f"no graph value defines the symbol {to_python(e)} (a dim named only "
                                     f"inside a spec expression must appear there as a*{e} + b)")
        node = g.call_function(torch.ops.aten.sym_size.int, (src[0], src[1]))
        node.meta["expr"] = e
        self.sym_nodes[e] = node
        return node

    def to_arg(self, a):
        if isinstance(a, torch.Tensor):
            entry = self.tensor_nodes.get(id(a))
            if entry is None:
                raise TracerLimitation("an op received a tensor the tracer does not know")
            return entry[1]
        if isinstance(a, SymTypes):
            return self.expr_node(a.node.expr)
        if isinstance(a, (list, tuple)):
            return type(a)(self.to_arg(x) for x in a) if not hasattr(a, "_fields") else type(a)(*[self.to_arg(x) for x in a])
        if isinstance(a, dict):
            return {k: self.to_arg(v) for k, v in a.items()}
        return a

    # -- recording ops -------------------------------------------------------------------
    def record(self, func, args, kwargs, out, bindings, provenance: Provenance):
        node = self.graph.call_function(func, self.to_arg(tuple(args)), self.to_arg(dict(kwargs)))
        node.meta["val"] = out
        node.meta["provenance"] = provenance
        if self.module_stack:
            node.meta["module_path"] = tuple(self.module_stack)
        if self.track_autograd:
            self._autograd_meta(node)
        if isinstance(out, torch.Tensor):
            self._set_shape_meta(node, out)
            self.tensor_nodes[id(out)] = (out, node)
        elif isinstance(out, (tuple, list)):
            shapes = []
            for i, o in enumerate(out):
                if isinstance(o, torch.Tensor):
                    gi = self.graph.call_function(operator.getitem, (node, i))
                    gi.meta["val"] = o
                    self._set_shape_meta(gi, o)
                    if "module_path" in node.meta:
                        gi.meta["module_path"] = node.meta["module_path"]
                    self.tensor_nodes[id(o)] = (o, gi)
                    shapes.append(gi.meta["shape"])
                else:
                    shapes.append(None)
            node.meta["shape"] = tuple(shapes)
        if bindings:
            node.meta["unbacked_bindings"] = dict(bindings)
            first = out[0] if isinstance(out, (tuple, list)) else out
            for u, path in bindings.items():
                if path[0] == "value":
                    self.sym_nodes[u] = node
                else:
                    src = self.tensor_nodes[id(first)][1]
                    sn = self.graph.call_function(torch.ops.aten.sym_storage_offset.default, (src,)) \
                        if path[0] == "storage_offset" else \
                        self.graph.call_function(torch.ops.aten.sym_size.int, (src, path[1]))
                    sn.meta["expr"] = u
                    self.sym_nodes[u] = sn
        return node

    def _autograd_meta(self, node):
        """Tag ``node`` with its phase and the autograd node that ran it.

        A backward op runs inside the autograd Node that its forward op created;
        both carry that Node's sequence number, so the backward op is charged to
        the module whose forward op created that Node.
        """
        node.meta["phase"] = self.phase
        current = torch._C._current_autograd_node()
        if current is not None:
            seq = current._sequence_nr()
            node.meta["autograd_seq"] = seq
            node.meta["module_path"] = self.seq_paths.get(seq, ())
        else:
            # The autograd kernel creates its Node just before it redispatches
            # here, so the first op to see a sequence number is the one that
            # created that Node; later ops without a Node see the same number.
            seq = torch.autograd._get_sequence_nr() - 1
            if seq not in self.seq_paths:
                node.meta["autograd_seq"] = seq
                self.seq_paths[seq] = tuple(self.module_stack)


def expr_of(s):
    if isinstance(s, torch.SymInt):
        return s.node.expr
    return sympy.Integer(s)


def derived_source(d: DimExpr, name: str, input: str, dim: int) -> Optional[SizeSource]:
    """``(x.shape[1] - 1) // 2`` for T in ``2*T + 1`` at ``x.shape[1]``: how to read T off an input."""
    lin = _linear(d.sympy({name: sympy.Symbol(name, integer=True)})) if len(d.names) == 1 else None
    if lin is None:
        return None
    _, a, b = lin
    return SizeSource.input_dim(input, dim, scale=a, offset=b)


def _linear(e):
    """``(T, a, b)`` when ``e`` is ``a*T + b`` with integers a > 0 and b, else None."""
    free = e.free_symbols
    if len(free) != 1:
        return None
    (sym,) = free
    try:
        poly = sympy.Poly(e, sym)
    except sympy.PolynomialError:
        return None
    if poly.degree() != 1 or not all(c.is_Integer for c in poly.all_coeffs()):
        return None
    a, b = (int(c) for c in poly.all_coeffs())
    return (sym, a, b) if a > 0 else None


__all__ = ["GraphBuilder", "SymTypes", "expr_of", "derived_source"]
