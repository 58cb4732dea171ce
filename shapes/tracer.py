"""Run a program on meta tensors with symbolic sizes and record its ATen graph.

Example::

    >>> import torch
    >>> from shapes import trace
    >>> tp = trace(lambda x: torch.relu(x).sum(-1), "x: f32[B, 768]")
    >>> tp.output_shapes
    [(B,)]
"""
from __future__ import annotations

import contextlib
import inspect
import math
import operator
import os
import traceback
from typing import Any, Callable, Optional

import sympy
import torch
import torch.fx
from torch._dispatch.python import enable_python_dispatcher
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from . import data_dependent, eager_checks, index_bounds, library_tracing, limits
from .creation import CreationMode
from .env import DataDependentError, ShapeEnv
from .errors import (EngineFailure, SpecError, SymshapeError, TraceError, TracerLimitation, UnsupportedOpError,
                     program_error)
from .functions import FloorDiv, PyMod, ToFloat, TrueDiv, TruncToInt, Where
from .program import TracedProgram
from .provenance import Provenance, is_engine_file, is_library_file, capture
from .python_syntax import to_python
from .spec import Dim, DimExpr, default_hints, parse_dims, parse_specs
from .size_oblivious import decided_bool_flags
from .symnode import sym_value

SymTypes = (torch.SymInt, torch.SymFloat, torch.SymBool)


def _sym_min(a, b):
    return torch.sym_min(a, b)


class _GraphBuilder:
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
                prov = capture(self.env._current_op())
                raise TracerLimitation(
                    f"symshape: {prov.op or 'an op'} at {prov.location()} received a tensor on the meta "
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

    def _set_shape_meta(self, node, t):
        node.meta["shape"] = tuple(_expr_of(s) for s in t.shape)
        node.meta["dtype"] = t.dtype
        if self.module_stack:
            node.meta["module_path"] = tuple(self.module_stack)

    # -- symbolic expressions as nodes --------------------------------------------------
    def expr_node(self, e):
        e = self.env.simplify(sympy.sympify(e))
        if e is sympy.true:
            return True
        if e is sympy.false:
            return False
        if e.is_Integer:
            return int(e)
        if e.is_number:
            return float(e)
        n = self.expr_nodes.get(e)
        if n is not None:
            return n
        n = self._build(e)
        n.meta.setdefault("expr", e)  # lets TracedProgram.outputs say what a size output is
        self.expr_nodes[e] = n
        return n

    def _build(self, e):
        g = self.graph
        if e.is_Symbol:
            if e in self.sym_nodes:
                return self.sym_nodes[e]
            src = self.sym_sources.get(e)
            if src is None and e in self.sym_derived:
                # T from a size a*T + b (the spec's expression; run() checks inputs agree with it).
                inp, i, a, b = self.sym_derived[e]
                node = g.call_function(torch.ops.aten.sym_size.int, (inp, i))
                if b:
                    node = g.call_function(operator.sub, (node, b))
                if a != 1:
                    node = g.call_function(operator.floordiv, (node, a))
                node.meta["expr"] = e
                self.sym_nodes[e] = node
                return node
            if src is None:
                raise UnsupportedOpError(f"symshape: no graph value defines the symbol {to_python(e)} (a dim named only "
                                         f"inside a spec expression must appear there as a*{e} + b)")
            node = g.call_function(torch.ops.aten.sym_size.int, (src[0], src[1]))
            node.meta["expr"] = e
            self.sym_nodes[e] = node
            return node
        args = [self.expr_node(a) for a in e.args]

        def fold(fn):
            acc = args[0]
            for a in args[1:]:
                acc = g.call_function(fn, (acc, a))
            return acc

        if e.is_Add:
            node = fold(operator.add)
        elif e.is_Mul:
            if any(a.is_Rational and not a.is_Integer for a in e.args):
                raise UnsupportedOpError(f"symshape: cannot emit the fractional size expression {to_python(e)}")
            node = fold(operator.mul)
        elif e.is_Pow:
            node = g.call_function(operator.pow, tuple(args))
        elif isinstance(e, FloorDiv):
            node = g.call_function(operator.floordiv, tuple(args))
        elif isinstance(e, PyMod):
            node = g.call_function(operator.mod, tuple(args))
        elif isinstance(e, TrueDiv):
            node = g.call_function(operator.truediv, tuple(args))
        elif isinstance(e, sympy.Min):
            node = fold(torch.sym_min)
        elif isinstance(e, sympy.Max):
            node = fold(torch.sym_max)
        elif isinstance(e, ToFloat):
            node = g.call_function(torch.sym_float, tuple(args))
        elif isinstance(e, TruncToInt):
            node = g.call_function(torch.sym_int, tuple(args))
        elif isinstance(e, sympy.floor):
            node = g.call_function(math.floor, tuple(args))
        elif isinstance(e, sympy.ceiling):
            node = g.call_function(math.ceil, tuple(args))
        elif isinstance(e, Where):
            node = g.call_function(torch.sym_ite, tuple(args))
        elif isinstance(e, sympy.Rel):
            op = {sympy.Eq: operator.eq, sympy.Ne: operator.ne, sympy.Lt: operator.lt,
                  sympy.Le: operator.le, sympy.Gt: operator.gt, sympy.Ge: operator.ge}[type(e)]
            node = g.call_function(op, tuple(args))
        elif isinstance(e, sympy.Not):
            node = g.call_function(torch.sym_not, tuple(args))
        elif isinstance(e, sympy.And):
            node = fold(operator.and_)
        elif isinstance(e, sympy.Or):
            node = fold(operator.or_)
        else:
            raise TracerLimitation(f"symshape: cannot emit the size expression {to_python(e)} ({type(e).__name__})")
        if isinstance(node, torch.fx.Node):
            node.meta["expr"] = e
        return node

    def to_arg(self, a):
        if isinstance(a, torch.Tensor):
            entry = self.tensor_nodes.get(id(a))
            if entry is None:
                raise TracerLimitation("symshape: an op received a tensor the tracer does not know")
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
                    sn = self.graph.call_function(torch.ops.aten.sym_size.int, (src, path[1]))
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


def _expr_of(s):
    if isinstance(s, torch.SymInt):
        return s.node.expr
    return sympy.Integer(s)


def _derived_source(d: DimExpr, name: str, where: str) -> Optional[str]:
    """``(x.shape[1] - 1) // 2`` for T in ``2*T + 1`` at ``x.shape[1]``: how to read T off an input."""
    lin = _linear(d.sympy({name: sympy.Symbol(name, integer=True)})) if len(d.names) == 1 else None
    if lin is None:
        return None
    _, a, b = lin
    src = where if not b else f"({where} {'-' if b > 0 else '+'} {abs(b)})"
    return src if a == 1 else f"({src} // {a})"


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


def _meta_device_kwargs(kwargs):
    dev = kwargs.get("device")
    if dev is not None and torch.device(dev).type != "meta":
        kwargs = dict(kwargs)
        kwargs["device"] = torch.device("meta")
    return kwargs


class _Recorder(TorchDispatchMode):
    def __init__(self, builder: _GraphBuilder, env: ShapeEnv, progress=None):
        super().__init__()
        self.builder = builder
        self.env = env
        self.progress = progress
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        b = self.builder
        args = pytree.tree_map(b.adopt, args)
        kwargs = pytree.tree_map(b.adopt, kwargs)
        r = eager_checks.intercept(self, func, args, kwargs)
        if r is not NotImplemented:
            return r
        from .provenance import capture
        op = str(func)
        prov = capture(op)
        self.env.op_stack.append(op)
        try:
            for chk in index_bounds.lookup_checks(func, args, b.bounds_of, self._nonempty, b.determines):
                self._index_check(chk, prov)
            for cond, msg in eager_checks.checks(func, args, kwargs):
                if not self.env.expect_true(cond, message=msg):
                    raise program_error(RuntimeError(msg))
            handler = data_dependent.HANDLERS.get(func)
            res = handler(self.env, func, args, kwargs) if handler else None
            if res is None:
                out = eager_checks.run_meta(func, args, _meta_device_kwargs(kwargs))
                bindings = {}
            else:
                out, bindings = res
            out = eager_checks.eager_output(func, args, kwargs, out)
        except (SymshapeError, DataDependentError):
            raise
        except NotImplementedError as e:
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            if "data-dependent" in msg or "DynamicOutputShape" in type(e).__name__ or "meta" in msg.lower():
                raise UnsupportedOpError(
                    f"symshape: {op} at {prov.filename}:{prov.lineno} (`{prov.code}`) cannot run on meta tensors "
                    f"with symbolic sizes ({msg}); its output shape may depend on data. Please report it."
                ) from e
            raise
        finally:
            self.env.op_stack.pop()
        self._check_limits(func, out, prov)
        b.record(func, args, kwargs, out, bindings, prov)
        if self.progress is not None:
            self.ops += 1
            self.progress(self.ops)
        if index_bounds.writes_integer_tensor(func, args, kwargs):
            # An in-place write changes the values of the tensor and of every view of it.
            b.value_bounds.clear()
        if isinstance(out, torch.Tensor) and not out.dtype.is_floating_point:
            vb = index_bounds.output_bounds(func, args, kwargs, b.bounds_of, self._nonempty)
            if vb is not None:
                b.value_bounds[id(out)] = vb
        tensors = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        if index_bounds.determines_values(func, tensors, all(b.determines(t) for t in tensors)):
            b.determined.update(id(t) for _, t in limits.tensor_outputs(out))
        else:
            # An in-place write of values the sizes do not determine makes its target data.
            b.determined.difference_update(id(t) for _, t in limits.tensor_outputs(out))
        return out

    def _index_check(self, chk, prov):
        """Record one :class:`~shapes.index_bounds.IndexCheck`, or stop where eager's outcome is unknown."""
        if chk.kind == "assert":
            if not self.env.expect_true(chk.condition, message=chk.message):
                raise program_error(chk.exception(chk.message))
            return
        if chk.kind == "unknown":
            # Values the sizes determine but the engine cannot follow (T5's log buckets, OPT's
            # cumsum positions): no condition to state.  Not silent: the trace keeps a note,
            # and dinfer reports the sizes it covers as symshape's limitation, never as ok.
            self.env.unchecked_indices.append((prov, chk.message))
            return
        if chk.kind == "guard" and self.env.evaluate(chk.condition, provenance=prov):
            return
        raise TracerLimitation(f"symshape: at {prov.location()} {chk.message}; a limitation of "
                               f"symshape, not an error of the program; an index tensor built by arange, + - * by "
                               f"a constant, clamp, cat and views is followed exactly")

    def _nonempty(self, t) -> bool:
        n = sympy.Integer(1)
        for s in t.shape:
            n = n * _expr_of(s)
        return self.env.static_bool(sympy.Ge(n, 1), log=False) is True

    def _check_limits(self, func, out, prov):
        """Eager's storage-size overflow check for each tensor this op allocates."""
        env = self.env
        for i, t in limits.tensor_outputs(out):
            sizes = [limits.expr_of(s) for s in t.shape]
            if all(s.is_number for s in sizes) or not limits.allocates(func, i):
                continue
            maybe_zero = lambda s: env.static_bool(sympy.Ge(s, 1), log=False) is not True  # noqa: E731
            for cond, what in limits.storage_conditions(sizes, t.element_size(), maybe_zero):
                msg = (f"{func}: the {what} of a {t.dtype} tensor of sizes [{', '.join(to_python(s) for s in sizes)}] must fit in "
                       f"{'uint64' if what == 'size product' else 'int64'} (eager raises "
                       f"'{limits.OVERFLOW_MESSAGE}...' otherwise)")
                if not env.check_limit(cond, provenance=prov, message=msg):
                    at = [env.hint_of(s) for s in sizes]
                    raise program_error(RuntimeError(f"{limits.OVERFLOW_MESSAGE}{at}"))


class _ModuleScope:
    """Tracks the nn.Module hierarchy so nodes know which module emitted them."""

    def __init__(self, root, builder):
        self.names = {}
        if isinstance(root, torch.nn.Module):
            for name, m in root.named_modules():
                self.names[id(m)] = name
        self.builder = builder
        self.handles = []

    def __enter__(self):
        from torch.nn.modules import module as mod

        def pre(m, args):
            name = self.names.get(id(m))
            if name is not None:
                self.builder.module_stack.append((name, type(m).__name__))

        def post(m, args, out):
            if self.names.get(id(m)) is not None and self.builder.module_stack:
                self.builder.module_stack.pop()

        self.handles = [mod.register_module_forward_pre_hook(pre), mod.register_module_forward_hook(post)]
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        self.builder.module_stack.clear()


def _binding(program, names: list, kwargs=()) -> bool:
    """How inputs are passed: True to pass them by keyword (every spec is named
    after a parameter and they are not simply the leading positionals, e.g.
    ``ids`` and ``attention_mask`` of a transformers model), False for
    positional.  ``kwargs`` names the non-tensor arguments passed by keyword.
    Raises SpecError when the inputs cannot be passed at all."""
    fn = program.forward if isinstance(program, torch.nn.Module) else program
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    params = list(sig.parameters.values())
    fname = getattr(fn, "__qualname__", repr(fn))
    given = set(kwargs)
    if given:
        takes = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        unknown = sorted(given - takes)
        if unknown and not any(p.kind is p.VAR_KEYWORD for p in params):
            raise SpecError(f"{fname} has no parameter named {', '.join(map(repr, unknown))} "
                            f"(its parameters: {', '.join(p.name for p in params) or 'none'})")
        clash = [k for k in names if k in given]
        if clash:
            raise SpecError(f"{', '.join(map(repr, clash))} is given both as an input spec and as an argument")
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    by_name = {p.name: p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    n = len(names)
    if names and all(nm in by_name for nm in names) and names != [p.name for p in positional[:n]]:
        missing = [p.name for p in params if p.default is p.empty and p.name not in names
                   and p.name not in given and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if missing:
            raise SpecError(f"{fname} needs input(s) {', '.join(missing)}, which no spec names")
        return True
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return False
    if n > len(positional):
        raise SpecError(
            f"{fname} takes {len(positional)} positional input(s) ({', '.join(p.name for p in positional)}) "
            f"but {n} input spec(s) were given; name a spec after a parameter to pass it by keyword"
        )
    taken = [p.name for p in positional[:n] if p.name in given]
    if taken:
        raise SpecError(f"the input specs fill {fname}'s parameter(s) {', '.join(taken)} by position, which are "
                        f"also given as arguments; name each spec after its parameter")
    missing = [p.name for p in positional[n:] if p.default is p.empty and p.name not in given]
    if missing:
        required = len([p for p in positional if p.default is p.empty and p.name not in given])
        raise SpecError(f"{fname} needs {required} input(s) but {n} spec(s) were given; missing: "
                        f"{', '.join(missing)}")
    return False


def _user_frame_of(exc: BaseException) -> Provenance:
    import linecache
    best = None
    for fs in traceback.extract_tb(exc.__traceback__):
        if not is_engine_file(fs.filename) and not is_library_file(fs.filename):
            best = fs
    if best is None:
        return Provenance()
    return Provenance(filename=best.filename, lineno=best.lineno or 0,
                      code=(best.line or linecache.getline(best.filename, best.lineno or 0)).strip(),
                      function=best.name)


def _engine_frame_of(exc: BaseException) -> Optional[str]:
    """Where symshape's own code raised ``exc`` ("file:line"), or None when the
    exception is the program's (raised by torch, a library, the user's code, or
    by the engine on purpose for the program)."""
    if getattr(exc, "symshape_program_error", False):
        return None
    last = None
    for fs in traceback.extract_tb(exc.__traceback__):
        fn = fs.filename
        if is_engine_file(fn) or not (is_library_file(fn) and not fn.startswith(_TORCH_DIR)):
            # sympy and the standard library are the engine's helpers: the frame
            # that called them decides whose exception it is.
            last = fs
    if last is not None and is_engine_file(last.filename):
        return f"{os.path.basename(last.filename)}:{last.lineno}"
    return None


_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


def _meta_like(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


@contextlib.contextmanager
def _composite_autograd_on_meta():
    """Let autograd differentiate composite ops on meta tensors under the Python dispatcher.

    torch registers Python meta kernels for some CompositeImplicitAutograd ops
    (``nll_loss``, ...).  The Python dispatcher then resolves AutogradMeta to
    the autograd fallback instead of the composite kernel (it sees a "backend
    kernel"), so the op gets no backward formula and its gradient is silently
    lost.  While recording a backward pass those Meta kernels are set aside, so
    the composite decomposes above autograd as it does in eager mode.
    """
    from torch._C import DispatchKey
    from torch._decomp import global_decomposition_table
    removed = []
    ops = {op for table in global_decomposition_table.values() for op in table}
    for op in ops:
        if (isinstance(op, torch._ops.OpOverload) and DispatchKey.Meta in op.py_kernels
                and torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")):
            removed.append((op, op.py_kernels.pop(DispatchKey.Meta)))
            _clear_dispatch_cache(op)
    try:
        yield
    finally:
        for op, fn in removed:
            op.py_kernels[DispatchKey.Meta] = fn
            _clear_dispatch_cache(op)


def _clear_dispatch_cache(op):
    cache = getattr(op, "_dispatch_cache", None)
    if cache is not None:
        cache.clear()


def _load_checkers(enabled: Optional[bool]):
    """Trace checkers registered by other packages (entry point group ``symshape.checkers``).

    ``shapes`` never imports them directly: translation validation lives in
    :mod:`validation` and plugs in here.
    """
    if enabled is None:
        enabled = os.environ.get("SYMSHAPE_TRANSLATION_VALIDATION", "") not in ("", "0", "false", "False")
    if not enabled:
        return []
    from importlib.metadata import entry_points
    eps = entry_points(group="symshape.checkers")
    found = [ep.load() for ep in eps if ep.name == "translation_validation"]
    if not found:
        raise SymshapeError(
            "translation validation was requested but no checker is registered; "
            "install symshape with `pip install -e .` so its entry points exist"
        )
    return found


def trace(program: Callable, *specs, dims=None, specialize_zero_one: bool = False,
          translation_validation: Optional[bool] = None, kwargs: Optional[dict] = None,
          progress: Optional[Callable[[int], None]] = None, backward: Optional[Callable] = None,
          requires_grad: tuple = ()) -> TracedProgram:
    """Trace ``program`` (a function or nn.Module) at symbolic input sizes.

    Args:
        program: the function or module to run.
        *specs: one spec string per positional input, e.g. ``"x: f32[B, T, 768]"``.
        dims: per named dim an int example size, a ``(min, max)`` range, a
            ``(min, max, example)`` triple or a :class:`~shapes.spec.Dim`.
        specialize_zero_one: PyTorch's policy of specializing sizes 0 and 1
            (off by default: sizes 1 and 0 stay in the dims' ranges, see
            :mod:`shapes.size_oblivious`).
        translation_validation: check every engine decision with Z3 while
            tracing (default: the ``SYMSHAPE_TRANSLATION_VALIDATION`` variable).
        kwargs: non-tensor arguments (ints, floats, flags) passed by keyword
            on the call; they are constants of the trace.
        progress: called with the number of ATen ops recorded so far after
            each op (for a progress display; keep it cheap).
        backward: record a training step too: the module's parameters require
            grad (as the module's do) and, after the program, ``backward(out,
            params, phase)`` runs inside the recording, where ``params`` maps
            parameter names to the traced ones and ``phase(name)`` tags the ops
            recorded from then on (``meta["phase"]``); what it returns is the
            graph's output.  Backward ops carry the module of their forward op.
            Used by ``count_flops(mode="train")``.
        requires_grad: names of inputs that require grad (with ``backward``).

    Returns a :class:`~shapes.program.TracedProgram`.

    Raises :class:`SpecError` for bad specs, :class:`TraceError` when the
    program raises, :class:`~shapes.env.DataDependentError` when it branches
    on data.
    """
    if not callable(program):
        raise SpecError(f"program must be a function or an nn.Module, got {type(program).__name__}")
    parsed, names = parse_specs(specs)
    kwargs = dict(kwargs or {})
    by_keyword = _binding(program, [s.name for s in parsed], kwargs)
    dmap = parse_dims(dims, names)
    hints = default_hints(names, dmap)

    env = ShapeEnv(specialize_zero_one=specialize_zero_one)
    checkers = [c(env) for c in _load_checkers(translation_validation)]
    builder = _GraphBuilder(env)
    inputs = []
    dim_symbols = {}
    # Dims some spec names plainly: those get their source there, not from an expression.
    plain = {d for s in parsed for d in s.dims if isinstance(d, str)}
    for s in parsed:
        sizes = []
        for i, d in enumerate(s.dims):
            if isinstance(d, str):
                dd = dmap.get(d, Dim())
                e = env.create_symbol(d, hints[d], range=(dd.min, dd.max), source=f"{s.name}.shape[{i}]")
                dim_symbols.setdefault(d, env.symbols[d])
                sizes.append(sym_value(env, e))
            elif isinstance(d, DimExpr):
                vals = {}
                for n in d.names:
                    dd = dmap.get(n, Dim())
                    src = None if n in plain or n in env.symbols else _derived_source(d, n, f"{s.name}.shape[{i}]")
                    vals[n] = env.create_symbol(n, hints[n], range=(dd.min, dd.max), source=src)
                    dim_symbols.setdefault(n, env.symbols[n])
                at = d.evaluate(hints)
                if at < 0:
                    raise SpecError(
                        f"dim {d} of input {s.name} is {at} at the example sizes "
                        f"{', '.join(f'{n}={hints[n]}' for n in d.names)}; give example sizes where it is "
                        f"non-negative (dims={{...}}, --dim on the command line)")
                sizes.append(sym_value(env, env.simplify(d.sympy(vals))))
            else:
                sizes.append(d)
        t = torch.empty(sizes, dtype=s.dtype, device="meta")
        if backward is not None and s.name in requires_grad:
            t.requires_grad_()
        builder.add_placeholder(s.name, t)
        inputs.append(t)

    if isinstance(program, torch.nn.Module):
        state = {}
        for n, p in program.named_parameters(remove_duplicate=False):
            state[n] = _meta_like(p)
            if backward is not None and p.requires_grad:
                state[n].requires_grad_()
        for n, bf in program.named_buffers(remove_duplicate=False):
            state[n] = _meta_like(bf)
        # Tied weights are one tensor: give them one meta tensor too.
        by_id = {}
        for n, p in list(program.named_parameters(remove_duplicate=False)) + list(
                program.named_buffers(remove_duplicate=False)):
            if id(p) in by_id:
                state[n] = state[by_id[id(p)]]
            else:
                by_id[id(p)] = n
                builder.add_attr(n, state[n])

        def call(*a, **kw):
            return torch.func.functional_call(program, state, a, kw, strict=False, tie_weights=False)
    else:
        state = {}
        call = program
    params = {n: state[n] for n, _ in program.named_parameters()} if isinstance(program, torch.nn.Module) else {}

    def phase(name):
        builder.phase = name

    if backward is not None:
        builder.track_autograd = True
        phase("forward")
    grad_mode = contextlib.nullcontext()
    if backward is not None:
        grad_mode = contextlib.ExitStack()
        grad_mode.enter_context(torch.enable_grad())
        grad_mode.enter_context(_composite_autograd_on_meta())
    with grad_mode, enable_python_dispatcher(), library_tracing.as_exporting(), eager_checks.eager_kernels(), \
            _ModuleScope(program, builder), _Recorder(builder, env, progress), CreationMode(builder), \
            decided_bool_flags():
        try:
            if by_keyword:
                out = call(**{sp.name: t for sp, t in zip(parsed, inputs)}, **kwargs)
            else:
                out = call(*inputs, **kwargs)
            if backward is not None:
                out = backward(out, params, phase)
        except (SymshapeError, DataDependentError) as e:
            # Where the trace stood (records, axioms): the path to a data-dependent decision
            # or an unsupported op is a region of sizes, which validation.dinfer reports.
            if getattr(e, "env", None) is None:
                e.env = env
            raise
        except Exception as e:  # the user's program raised: say where, and on which path
            if isinstance(e, TypeError) and "not SymBool" in str(e):
                # Not the program's error: eager passes a bool where the trace has a size comparison.
                err = UnsupportedOpError(f"symshape: a size comparison (SymBool) reached a torch function that "
                                         f"takes a bool ({_first_line(e)}); please report it")
                err.env = env
                raise err from e
            prov = _user_frame_of(e)
            at = ", ".join(f"{n}={hints[n]}" for n in names)
            engine = _engine_frame_of(e)
            if engine is not None:
                raise EngineFailure(
                    f"symshape failed inside its engine ({type(e).__name__} at {engine}) while tracing "
                    f"{prov.filename}:{prov.lineno} (`{prov.code}`) at {at or 'the given sizes'}: "
                    f"{_first_line(e)}. This is a limitation of symshape, not an error of the program; "
                    f"please report it.", exc=e, provenance=prov, env=env) from e
            raise TraceError(
                f"the program raised {type(e).__name__} at {prov.filename}:{prov.lineno} (`{prov.code}`) "
                f"when traced at {at or 'the given sizes'}: {_first_line(e)}",
                exc=e, provenance=prov, path=env.guards, env=env,
            ) from e

    leaves, out_spec = pytree.tree_flatten(out)
    out_nodes = []
    output_shapes = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            if id(leaf) not in builder.tensor_nodes:
                builder.adopt(leaf)
            out_nodes.append(builder.tensor_nodes[id(leaf)][1])
            output_shapes.append(tuple(env.simplify(_expr_of(s)) for s in leaf.shape))
        elif isinstance(leaf, SymTypes):
            out_nodes.append(builder.expr_node(leaf.node.expr))
        elif leaf is None or isinstance(leaf, (bool, int, float, str, torch.dtype, torch.device)):
            out_nodes.append(leaf)
        else:
            # An object the graph does not reproduce (e.g. a transformers cache that
            # holds meta tensors): run() returns a marker that says so when used.
            out_nodes.append(UntracedOutput(type(leaf).__qualname__))
    builder.graph.output(tuple(out_nodes))

    tp = TracedProgram(
        program=program, specs=parsed, env=env, graph=builder.graph, constants=builder.constants,
        output_shapes=output_shapes, out_spec=out_spec, hints=hints, dims=dmap,
        dim_symbols=dim_symbols, by_keyword=by_keyword,
    )
    # How to trace the same program again at other sizes (a FLOP count's other paths).
    tp.trace_options = {"kwargs": kwargs, "backward": backward, "requires_grad": requires_grad}
    for c in checkers:
        c.finish(tp)
    return tp


class UntracedOutput:
    """Stands in for an output object the traced graph does not reproduce."""

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


def _first_line(e: BaseException) -> str:
    s = str(e).strip()
    return s.splitlines()[0] if s else type(e).__name__
