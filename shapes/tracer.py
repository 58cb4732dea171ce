"""Run a program on meta tensors with symbolic sizes and record its ATen graph.

Example::

    >>> import torch
    >>> from shapes import trace
    >>> tp = trace(lambda x: torch.relu(x).sum(-1), "x: f32[B, 768]")
    >>> tp.output_shapes
    [(B,)]
"""
from __future__ import annotations

import inspect
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

from . import data_dependent, eager_checks, index_bounds, library_tracing
from .creation import CreationMode
from .env import DataDependentError, ShapeEnv
from .errors import (EngineFailure, SpecError, SymshapeError, TraceError, TracerLimitation, UnsupportedOpError,
                     program_error)
from .functions import FloorDiv, PyMod, ToFloat, TrueDiv, TruncToInt, Where
from .program import TracedProgram
from .provenance import Provenance, _is_engine, _is_library, capture
from .spec import Dim, default_hints, parse_dims, parse_specs
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
        self.sym_nodes: dict[Any, torch.fx.Node] = {}
        self.expr_nodes: dict[Any, Any] = {}
        self.constants: dict[str, torch.Tensor] = {}
        self.module_stack: list[tuple[str, str]] = []
        self.value_bounds: dict[int, tuple] = {}

    def bounds_of(self, t):
        return self.value_bounds.get(id(t))

    # -- registration ------------------------------------------------------------
    def add_placeholder(self, name: str, t: torch.Tensor) -> torch.fx.Node:
        node = self.graph.placeholder(name)
        node.meta["val"] = t
        self._set_shape_meta(node, t)
        self.tensor_nodes[id(t)] = (t, node)
        for i, s in enumerate(t.shape):
            if isinstance(s, torch.SymInt) and s.node.expr.is_Symbol:
                self.sym_sources.setdefault(s.node.expr, (node, i))
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
        self.expr_nodes[e] = n
        return n

    def _build(self, e):
        g = self.graph
        if e.is_Symbol:
            if e in self.sym_nodes:
                return self.sym_nodes[e]
            src = self.sym_sources.get(e)
            if src is None:
                raise TracerLimitation(f"symshape: no graph value defines the symbol {e}")
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
                raise UnsupportedOpError(f"symshape: cannot emit the fractional size expression {e}")
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
            raise TracerLimitation(f"symshape: cannot emit the size expression {e} ({type(e).__name__})")
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
                    if self.module_stack:
                        gi.meta["module_path"] = tuple(self.module_stack)
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


def _expr_of(s):
    if isinstance(s, torch.SymInt):
        return s.node.expr
    return sympy.Integer(s)


def _meta_device_kwargs(kwargs):
    dev = kwargs.get("device")
    if dev is not None and torch.device(dev).type != "meta":
        kwargs = dict(kwargs)
        kwargs["device"] = torch.device("meta")
    return kwargs


class _Recorder(TorchDispatchMode):
    def __init__(self, builder: _GraphBuilder, env: ShapeEnv):
        super().__init__()
        self.builder = builder
        self.env = env

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        b = self.builder
        args = pytree.tree_map(b.adopt, args)
        kwargs = pytree.tree_map(b.adopt, kwargs)
        from .provenance import capture
        op = str(func)
        prov = capture(op)
        self.env.op_stack.append(op)
        try:
            for cond, msg in index_bounds.lookup_checks(func, args, b.bounds_of):
                if not self.env.expect_true(cond, message=msg):
                    raise program_error(IndexError(f"index out of range in self ({msg})"))
            for cond, msg in eager_checks.checks(func, args):
                if not self.env.expect_true(cond, message=msg):
                    raise program_error(RuntimeError(msg))
            handler = data_dependent.HANDLERS.get(func)
            res = handler(self.env, func, args, kwargs) if handler else None
            if res is None:
                out = func(*args, **_meta_device_kwargs(kwargs))
                bindings = {}
            else:
                out, bindings = res
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
        b.record(func, args, kwargs, out, bindings, prov)
        if isinstance(out, torch.Tensor) and not out.dtype.is_floating_point:
            vb = index_bounds.output_bounds(func, args, kwargs, b.bounds_of)
            if vb is not None:
                b.value_bounds[id(out)] = vb
        return out


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


def _binding(program, names: list) -> bool:
    """How inputs are passed: True to pass them by keyword (every spec is named
    after a parameter and they are not simply the leading positionals, e.g.
    ``ids`` and ``attention_mask`` of a transformers model), False for
    positional.  Raises SpecError when the inputs cannot be passed at all."""
    fn = program.forward if isinstance(program, torch.nn.Module) else program
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    params = list(sig.parameters.values())
    fname = getattr(fn, "__qualname__", repr(fn))
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    by_name = {p.name: p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    n = len(names)
    if names and all(nm in by_name for nm in names) and names != [p.name for p in positional[:n]]:
        missing = [p.name for p in params if p.default is p.empty and p.name not in names
                   and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if missing:
            raise SpecError(f"{fname} needs input(s) {', '.join(missing)}, which no spec names")
        return True
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return False
    required = [p for p in positional if p.default is p.empty]
    if n > len(positional):
        raise SpecError(
            f"{fname} takes {len(positional)} positional input(s) ({', '.join(p.name for p in positional)}) "
            f"but {n} input spec(s) were given; name a spec after a parameter to pass it by keyword"
        )
    if n < len(required):
        missing = ", ".join(p.name for p in required[n:])
        raise SpecError(f"{fname} needs {len(required)} input(s) but {n} spec(s) were given; missing: {missing}")
    return False


def _user_frame_of(exc: BaseException) -> Provenance:
    import linecache
    best = None
    for fs in traceback.extract_tb(exc.__traceback__):
        if not _is_engine(fs.filename) and not _is_library(fs.filename):
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
        if _is_engine(fn) or not (_is_library(fn) and not fn.startswith(_TORCH_DIR)):
            # sympy and the standard library are the engine's helpers: the frame
            # that called them decides whose exception it is.
            last = fs
    if last is not None and _is_engine(last.filename):
        return f"{os.path.basename(last.filename)}:{last.lineno}"
    return None


_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


def _meta_like(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


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


def trace(program: Callable, *specs, dims=None, specialize_zero_one: bool = True,
          translation_validation: Optional[bool] = None) -> TracedProgram:
    """Trace ``program`` (a function or nn.Module) at symbolic input sizes.

    Args:
        program: the function or module to run.
        *specs: one spec string per positional input, e.g. ``"x: f32[B, T, 768]"``.
        dims: per named dim an int example size, a ``(min, max)`` range, a
            ``(min, max, example)`` triple or a :class:`~shapes.spec.Dim`.
        specialize_zero_one: PyTorch's policy of specializing sizes 0 and 1.
        translation_validation: check every engine decision with Z3 while
            tracing (default: the ``SYMSHAPE_TRANSLATION_VALIDATION`` variable).

    Returns a :class:`~shapes.program.TracedProgram`.

    Raises :class:`SpecError` for bad specs, :class:`TraceError` when the
    program raises, :class:`~shapes.env.DataDependentError` when it branches
    on data.
    """
    if not callable(program):
        raise SpecError(f"program must be a function or an nn.Module, got {type(program).__name__}")
    parsed, names = parse_specs(specs)
    by_keyword = _binding(program, [s.name for s in parsed])
    dmap = parse_dims(dims, names)
    hints = default_hints(names, dmap)

    env = ShapeEnv(specialize_zero_one=specialize_zero_one)
    checkers = [c(env) for c in _load_checkers(translation_validation)]
    builder = _GraphBuilder(env)
    inputs = []
    dim_symbols = {}
    for s in parsed:
        sizes = []
        for i, d in enumerate(s.dims):
            if isinstance(d, str):
                dd = dmap.get(d, Dim())
                e = env.create_symbol(d, hints[d], range=(dd.min, dd.max), source=f"{s.name}.shape[{i}]")
                dim_symbols.setdefault(d, env.symbols[d])
                sizes.append(sym_value(env, e))
            else:
                sizes.append(d)
        t = torch.empty(sizes, dtype=s.dtype, device="meta")
        builder.add_placeholder(s.name, t)
        inputs.append(t)

    if isinstance(program, torch.nn.Module):
        state = {}
        for n, p in program.named_parameters(remove_duplicate=False):
            state[n] = _meta_like(p)
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
        call = program

    with enable_python_dispatcher(), library_tracing.as_exporting(), _ModuleScope(program, builder), \
            _Recorder(builder, env), CreationMode(builder):
        try:
            out = call(**{sp.name: t for sp, t in zip(parsed, inputs)}) if by_keyword else call(*inputs)
        except (SymshapeError, DataDependentError) as e:
            # Where the trace stood (records, axioms): the path to a data-dependent decision
            # or an unsupported op is a region of sizes, which validation.dinfer reports.
            if getattr(e, "env", None) is None:
                e.env = env
            raise
        except Exception as e:  # the user's program raised: say where, and on which path
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
