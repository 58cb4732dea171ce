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
import math
import os
from typing import Callable, Optional

import sympy
import torch
import torch.fx
from torch._dispatch.python import enable_python_dispatcher
from torch.utils import _pytree as pytree

from . import devices, distributed, index_bounds, torch_patches
from .layout_reads import ReportedLayout
from .rng_writes import RecordedRngWrites
from .binding import (CapturedState, by_keyword, captured_modules, fsdp_lazy_init, fsdp_managed,
                      module_state)
from .creation import CreationMode
from .env import ShapeEnv
from .errors import SpecError, SymshapeError, TraceError
from .failures import trace_failure
from .program import TracedProgram, UntracedOutput
from .provenance import program_boundary
from .recorder import ModuleScope, Recorder
from .spec import Dim, DimExpr, default_hints, parse_dims, parse_specs
from .symbols import SizeSource
from .symnode import sym_value

from .graph_builder import GraphBuilder, SymTypes, derived_source, expr_of


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
          requires_grad: tuple = (), device=None, world: Optional[str] = None,
          compile_path: Optional[bool] = None, function_modes: tuple = ()) -> TracedProgram:
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
        device: the device the program will run on (``"cpu"``, the default, or
            ``"cuda"``): what its tensors report while traced; a read of it is
            an assumption of the trace (:mod:`shapes.devices`).
        world: the name of a symbolic world size (``"W"``, its range in
            ``dims``): ``torch.distributed`` runs against it in this process
            (see :mod:`shapes.distributed`); ``dims={"rank": r}`` traces as
            rank ``r`` (default 0) where the program asks for its rank.
        compile_path: whether ``torch.compiler.is_compiling()`` and ``is_exporting()`` answer True, as under
            torch.export, so that libraries take their trace-safe path.  None (the default): True, and if the
            program raises there after a library asked, traced again with False (eager's path).  The traced
            program's ``trace_options["compile_path"]`` says which path it holds.
        function_modes: ``TorchFunctionMode`` s entered inside the trace's own while the program runs, so
            that what they call is traced like the program's calls (a compiler rewriting a library call
            into an equal one: :class:`compiler.separable_resize.ResizeAsMatmuls`).  A mode passes the
            calls it leaves alone on through :func:`shapes.creation.pass_through`, so that torch's
            errors there stay the program's.

    Returns a :class:`~shapes.program.TracedProgram`.

    Raises :class:`SpecError` for bad specs, :class:`TraceError` when the
    program raises, :class:`~shapes.env.DataDependentError` when it branches
    on data.
    """
    if not callable(program):
        raise SpecError(f"program must be a function or an nn.Module, got {type(program).__name__}")
    opts = dict(dims=dims, specialize_zero_one=specialize_zero_one, translation_validation=translation_validation,
                kwargs=kwargs, progress=progress, backward=backward, requires_grad=requires_grad, device=device,
                function_modes=tuple(function_modes))
    if isinstance(program, distributed.PerWorld) and world is not None:
        return _trace_per_world(program, specs, world, {**opts, "compile_path": compile_path is not False})
    if world is not None and not isinstance(world, str):
        raise SpecError("a device mesh (world={dim: size name}) needs the program built per world size: give it "
                        "as shapes.distributed.per_world(factory), the factory taking the mesh sizes by dim")
    if compile_path is not None:
        return _trace(program, *specs, world=world, compile_path=compile_path, **opts)
    return _trace_as_eager_runs(program, specs, world, opts)


def _trace_as_eager_runs(program, specs, world, opts: dict) -> TracedProgram:
    """:func:`_trace` on the libraries' compile path (as torch.export traces); if the program raises there after
    a library asked whether it is compiled, again on eager's path, which eager runs.

    A library's compile path is the trace-safe one, but it is not eager's: transformers' LongT5 and
    Switch Transformers raise on theirs where eager runs.  That is no error of the program as eager runs it.
    """
    reads = torch_patches.library_flag_reads()
    try:
        return _trace(program, *specs, world=world, **opts)
    except TraceError as on_compile_path:
        if type(on_compile_path) is not TraceError or torch_patches.library_flag_reads() == reads:
            raise
        try:
            return _trace(program, *specs, world=world, compile_path=False, **opts)
        except TraceError:
            raise on_compile_path from None
        except SymshapeError as on_eager_path:
            e = on_compile_path
            raise TraceError(
                f"{e} (on its libraries' compile path: torch.compiler.is_compiling() is True while symshape traces, "
                f"as under torch.export; on eager's path the trace stops at: {str(on_eager_path).splitlines()[0]})",
                exc=e.exc, provenance=e.provenance, path=e.path, env=e.env) from None


def _trace_per_world(program, specs, world, opts: dict) -> TracedProgram:
    """Trace at one concrete world size or mesh shape (the examples in ``dims``; as ``dims["rank"]``, default 0)
    in torch's fake process group of that size: a device mesh needs it (:mod:`shapes.distributed.mesh`)."""
    _, names = parse_specs(specs)
    syms = distributed.world_symbols(world)
    dmap = parse_dims(opts["dims"], list(names) + syms + [distributed.RANK])
    at = {n: distributed.world_hint(distributed.world_dim(n, dmap)) for n in syms}
    size = math.prod(at.values())
    mesh = tuple((k, v, at[v]) for k, v in world.items()) if not isinstance(world, str) else ()
    rank = dmap[distributed.RANK].hint if distributed.RANK in dmap and dmap[distributed.RANK].hint else 0
    rest = {k: v for k, v in dmap.items() if k not in syms and k != distributed.RANK}
    name = world if isinstance(world, str) else "*".join(syms)
    with distributed.fake_world(size, rank):
        built = program.build(**{k: n for k, _, n in mesh})
        fsdp_lazy_init(built)
        tp = _trace(built, *specs, world=distributed.ConcreteWorld(name=name, size=size, rank=rank, mesh=mesh),
                    **{**opts, "dims": rest})
    tp.program = program
    tp.trace_options["world"] = world
    return tp


def _trace(program: Callable, *specs, dims=None, specialize_zero_one: bool = False,
           translation_validation: Optional[bool] = None, kwargs: Optional[dict] = None,
           progress: Optional[Callable[[int], None]] = None, backward: Optional[Callable] = None,
           requires_grad: tuple = (), device=None, world=None, compile_path: bool = True,
           function_modes: tuple = ()) -> TracedProgram:
    """:func:`trace` at a symbolic world (``world`` its name), a concrete one (a ``ConcreteWorld``) or none;
    ``compile_path=False`` runs the libraries' eager path (:func:`_trace_as_eager_runs`)."""
    parsed, names = parse_specs(specs)
    device = devices.parse_device(device)
    kwargs = dict(kwargs or {})
    keyword = by_keyword(program, [s.name for s in parsed], kwargs)
    # With a world, dims may give the world size's range and the rank to trace as (default 0).
    dmap = parse_dims(dims, list(names) + ([world, distributed.RANK] if isinstance(world, str) else []))
    hints = default_hints(names, dmap)

    env = ShapeEnv(specialize_zero_one=specialize_zero_one)
    checkers = [c(env) for c in _load_checkers(translation_validation)]
    builder = GraphBuilder(env)
    inputs, dim_symbols = _make_inputs(builder, parsed, dmap, hints,
                                       requires_grad=requires_grad if backward is not None else ())
    args, kw = ((), {**{sp.name: t for sp, t in zip(parsed, inputs)}, **kwargs}) if keyword else (inputs, kwargs)
    world_scope = _world_scope(builder, world, dmap, hints)
    out, device_reads, layout_reads, rng_writes = _run_program(program, builder, args, kw, backward=backward, progress=progress,
                                     at=", ".join(f"{n}={hints[n]}" for n in hints), device=device,
                                     world_scope=world_scope, compile_path=compile_path,
                                     function_modes=function_modes)
    if world_scope.world is not None and isinstance(world_scope.world.size, sympy.Symbol):
        dim_symbols.setdefault(world, world_scope.world.size)
    output_shapes, out_spec = _record_outputs(builder, out)
    builder.settle_shapes()

    tp = TracedProgram(
        program=program, specs=parsed, env=env, graph=builder.graph, constants=builder.constants,
        output_shapes=output_shapes, out_spec=out_spec, hints=hints, dims=dmap,
        dim_symbols=dim_symbols, by_keyword=keyword, device=device, device_reads=device_reads,
        world=world_scope.world, layout_reads=layout_reads, rng_writes=rng_writes,
    )
    # How to trace the same program again at other sizes (a FLOP count's other paths).
    tp.trace_options = {"kwargs": kwargs, "backward": backward, "requires_grad": requires_grad, "device": device,
                        "world": world, "compile_path": compile_path, "function_modes": function_modes}
    for c in checkers:
        c.finish(tp)
    return tp


def _input_size(env, s, i, d, dmap, hints, plain, dim_symbols):
    """The size of dim ``i`` of input ``s`` from its spec ``d``: a new symbol, an expression of symbols, or an int."""
    if isinstance(d, str):
        dd = dmap.get(d, Dim())
        e = env.create_symbol(d, hints[d], range=(dd.min, dd.max), source=SizeSource.input_dim(s.name, i))
        dim_symbols.setdefault(d, env.symbols[d])
        return sym_value(env, e)
    if isinstance(d, DimExpr):
        vals = {}
        for n in d.names:
            dd = dmap.get(n, Dim())
            src = None if n in plain or n in env.symbols else derived_source(d, n, s.name, i)
            vals[n] = env.create_symbol(n, hints[n], range=(dd.min, dd.max), source=src)
            dim_symbols.setdefault(n, env.symbols[n])
        try:
            at = d.evaluate(hints)
        except ZeroDivisionError:
            raise SpecError(
                f"dim {d} of input {s.name} divides by zero at the example sizes "
                f"{', '.join(f'{n}={hints[n]}' for n in d.names)}; give example sizes where its "
                f"divisors are non-zero (dims={{...}}, --dim on the command line)") from None
        if at < 0:
            raise SpecError(
                f"dim {d} of input {s.name} is {at} at the example sizes "
                f"{', '.join(f'{n}={hints[n]}' for n in d.names)}; give example sizes where it is "
                f"non-negative (dims={{...}}, --dim on the command line)")
        return sym_value(env, env.simplify(d.sympy(vals)))
    return d


def _make_inputs(builder, parsed, dmap, hints, requires_grad=()):
    """Step 1: a meta tensor with symbolic sizes per input spec, each a placeholder of the graph.

    Returns the tensors and the symbol of each dim name.
    """
    env = builder.env
    inputs, dim_symbols = [], {}
    # Dims some spec names plainly: those get their source there, not from an expression.
    plain = {d for s in parsed for d in s.dims if isinstance(d, str)}
    for s in parsed:
        sizes = [_input_size(env, s, i, d, dmap, hints, plain, dim_symbols) for i, d in enumerate(s.dims)]
        t = torch.empty(sizes, dtype=s.dtype, device="meta")
        if s.name in requires_grad:
            t.requires_grad_()
        builder.add_placeholder(s.name, t)
        if s.values is not None:
            # Declared values: each element independently anywhere in the range, like a data source.
            builder.free_values.pop(id(t), None)
            builder.value_bounds[id(t)] = index_bounds.declared_range(*s.values)
        inputs.append(t)
    return inputs, dim_symbols


def _callable_of(program, builder, trainable: bool):
    """Step 2: the function to run (a module called with its traced state) and the traced parameters."""
    if fsdp_managed(program):
        # Its real shards are graph constants where FSDP2's all-gather reads them.
        return program, {}
    state = module_state(program, builder.add_attr, trainable=trainable)
    if not isinstance(program, torch.nn.Module):
        return program, {}

    def call(*a, **kw):
        return torch.func.functional_call(program, state, a, kw, strict=False, tie_weights=False)
    return call, {n: state[n] for n, _ in program.named_parameters()}


def _world_scope(builder, world, dmap, hints):
    """The stand-in for torch.distributed's default group (:func:`shapes.distributed.open_world`);
    the world size's example goes into ``hints``."""
    if isinstance(world, distributed.ConcreteWorld):
        return distributed.ConcreteWorldScope(builder, world)
    if world is not None:
        hints.setdefault(world, distributed.world_hint(distributed.world_dim(world, dmap)))
    rank = dmap.get(distributed.RANK)
    return distributed.open_world(builder.env, builder, world, distributed.world_dim(world, dmap), hints.get(world),
                                  rank.hint if rank is not None and rank.hint is not None else 0)


def _run_program(program, builder, args, kwargs, *, backward, progress, at: str, device, world_scope=None,
                 compile_path: bool = True, function_modes: tuple = ()):
    """Step 3: run the program (and ``backward``) under the recorder, with torch patched for tracing,
    its tensors reporting ``device`` and ``torch.distributed`` answered by ``world_scope``
    (:func:`shapes.distributed.open_world`) where given.

    ``at`` names the example sizes, for the error when the program raises.  Returns what the
    program returned, where it read the device (:class:`~shapes.devices.DeviceRead`), where it
    read a layout (:class:`~shapes.layout_reads.LayoutRead`) and where it set torch's random
    generator (:class:`~shapes.rng_writes.RngWrite`).
    """
    env = builder.env
    call, params = _callable_of(program, builder, trainable=backward is not None)

    def phase(name):
        builder.phase = name

    if backward is not None:
        builder.track_autograd = True
        phase("forward")
    grad_mode = torch.enable_grad() if backward is not None else contextlib.nullcontext()
    # Modules the program closes over: meta tensors while it runs (their gradients are meta too).
    # Only for a training step: inference adopts their real tensors as constants (with known values).
    captured = (CapturedState(captured_modules(program), builder.adopt_as, trainable=True)
                if backward is not None else contextlib.nullcontext())
    recorder = Recorder(builder, env, progress)
    # What the program's tensors report as their device (process-wide: entered under tracing()'s lock).
    reported = devices.ReportedDevice(device, recorder)
    layouts = ReportedLayout(recorder).watch_inputs(pytree.tree_leaves((args, kwargs)))
    rng = RecordedRngWrites()
    device_args = devices.DeviceArgs(device) if device.type != "cpu" else contextlib.nullcontext()
    with torch_patches.tracing(backward=backward is not None, compile_path=compile_path), grad_mode, enable_python_dispatcher(), \
            ModuleScope(program, builder), recorder, reported, layouts, rng, CreationMode(builder), device_args, \
            (world_scope if world_scope is not None else contextlib.nullcontext()), captured, \
            contextlib.ExitStack() as modes:
        for mode in function_modes:
            modes.enter_context(mode)
        try:
            out = call(*args, **kwargs)
            if backward is not None:
                out = backward(out, params, phase)
        except SymshapeError as e:  # DataDependentError too
            # Where the trace stood (records, axioms): the path to a data-dependent decision
            # or an unsupported op is a region of sizes, which validation.dinfer reports.
            raise e.in_trace(env)
        except Exception as e:  # the user's program raised: say where, and on which path
            raise trace_failure(e, env, at) from e
    return out, list(reported.reads), list(layouts.reads), list(rng.writes)


program_boundary(_run_program.__code__)  # decisions inside a program run are blamed inside it


def _record_outputs(builder, out):
    """Step 4: the graph's output node from what the program returned; the output shapes and pytree spec."""
    env = builder.env
    leaves, out_spec = pytree.tree_flatten(out)
    out_nodes = []
    output_shapes = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            if id(leaf) not in builder.tensor_nodes:
                builder.adopt(leaf)
            out_nodes.append(builder.tensor_nodes[id(leaf)][1])
            output_shapes.append(tuple(env.simplify(expr_of(s)) for s in leaf.shape))
        elif isinstance(leaf, SymTypes):
            out_nodes.append(builder.expr_node(leaf.node.expr))
        elif leaf is None or isinstance(leaf, (bool, int, float, str, torch.dtype, torch.device)):
            out_nodes.append(leaf)
        else:
            # An object the graph does not reproduce (e.g. a transformers cache that
            # holds meta tensors): run() returns a marker that says so when used.
            out_nodes.append(UntracedOutput(type(leaf).__qualname__))
    builder.graph.output(tuple(out_nodes))
    return output_shapes, out_spec
