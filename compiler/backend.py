"""``torch.compile(model, backend="symshape", dynamic=True)``.

Dynamo hands over a GraphModule and example inputs whose sizes are its own
SymInts.  Each dynamic size becomes a named dim of an input spec (``s0``,
``s1``... from dynamo's symbols; static sizes stay static), the GraphModule is
retraced by symshape's tracer at the example sizes and compiled once; the
returned callable serves every size that satisfies symshape's guards.

Per call the backend runs the plan ``compiler.compile`` makes for the same module (same
kernels, ATen calls, SDPA calls and mask classes: tests/test_backend_vs_compile.py), so its
extra host time is dynamo's frame: its guard check (79-134 us for the 4-layer models of
bench/gpu_models.py on an H200 host), the argument list it builds (every parameter, and each
Python float attribute as a new 0-dim tensor), and the slower run of the plan right after it
(bench/backend_gap.py; bench/results/backend_gap_h200_backend6_2026-11-26.txt).

Example::

    >>> import torch, compiler
    >>> m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU())
    >>> f = torch.compile(m, backend="symshape", dynamic=True)
    >>> with torch.no_grad():
    ...     ok = all(torch.allclose(f(x), m(x), atol=1e-5) for x in (torch.randn(3, 8), torch.randn(9, 8)))
    >>> ok
    True
"""
from __future__ import annotations

import operator
import os
import time
import weakref

import torch

from shapes.errors import RaisedForProgram

from .codegen import TARGETS
from .cuda_graphs import GraphedProgram
from .graph_inputs import built_at_general_sizes, plan_graph
from .runtime import CompiledProgram
from .training import FallbackKind, train_backend, warn_fallback

#: Graphs dynamo handed to the backend, how many of them run eagerly, seconds spent in the
#: backend itself (trace, lowering, code generation) and in compiled graphs' first calls
#: (kernel builds): what a first call costs beyond dynamo's own capture.
#: ``train_graphs``: forward/backward graphs of training steps given to symshape, of which
#: ``eager_train_graphs`` run uncompiled (each with a TrainingFallback warning saying why).
BACKEND_STATS = {"graphs": 0, "eager_graphs": 0, "compile_s": 0.0, "first_call_s": 0.0,
                 "train_graphs": 0, "eager_train_graphs": 0}

#: The CUDA-graphed programs the backend made that are still alive (for reports: graphs, memory).
_GRAPHED: "weakref.WeakSet[GraphedProgram]" = weakref.WeakSet()


def graphed_programs() -> list:
    """The live :class:`~compiler.cuda_graphs.GraphedProgram` s that ``options={"cuda_graphs": True}`` made.

    >>> isinstance(graphed_programs(), list)
    True
    """
    return list(_GRAPHED)


def _specialize_scalars(gm, example_inputs):
    """Dynamo passes Python float attributes (LayerNorm's eps) as 0-dim tensors read
    with ``.item()``: bake in the example value (checked on every call) so the
    graph has no data-dependent values.  Returns the new module and the checks."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    todo = []
    for i, (p, ex) in enumerate(zip(placeholders, example_inputs)):
        if isinstance(ex, torch.Tensor) and ex.dim() == 0 and ex.device.type == "cpu" and p.users and all(
                u.op == "call_method" and u.target == "item" for u in p.users):
            todo.append((i, ex.item()))
    if not todo:
        return gm, []
    g = torch.fx.Graph()
    env = {}
    out = g.graph_copy(gm.graph, env)
    g.output(out)
    new_ph = [n for n in g.nodes if n.op == "placeholder"]
    for i, value in todo:
        for item in list(new_ph[i].users):
            for u in list(item.users):
                u.args = torch.fx.node.map_arg(u.args, lambda a: value if a is item else a)
                u.kwargs = torch.fx.node.map_arg(u.kwargs, lambda a: value if a is item else a)
            g.erase_node(item)
    return torch.fx.GraphModule(gm, g), todo


def _restart_with_floats_specialized(gm) -> None:
    """Ask dynamo to trace the frame again with its unspecialized Python floats (LayerNorm's eps,
    dropout's p, attention's scaling: 0-dim tensor inputs read with ``.item()``) as constants.

    Under ``dynamic=True`` dynamo makes each such float a new 0-dim tensor at every call and passes
    it in (25 for a 4-layer BERT, about 10 us each of the H100 machine's host time with this
    backend's check that it did not change).  Specialized, each is a constant of the graph that
    dynamo's guards check (a new value compiles again), as Inductor's ``tensorify_python_scalars``
    pass asks for the floats it cannot keep symbolic: the same mechanism
    (``TensorifyState`` and ``TensorifyScalarRestartAnalysis``).  Where this torch has no such
    mechanism, the floats stay inputs and :func:`_specialize_scalars` bakes them in, checked per call.
    """
    if _specialize_floats(gm):
        from torch._dynamo.exc import TensorifyScalarRestartAnalysis
        raise TensorifyScalarRestartAnalysis


def _specialize_floats(gm) -> bool:
    """Mark ``gm``'s Python floats (:func:`_float_symbols`) specialized in dynamo's
    ``TensorifyState``; whether there were any.

    Without a restart (a training graph) this only tells AOTAutograd's
    ``tensorify_python_scalars`` pass that they are dealt with (:func:`_specialize_scalars` bakes
    them in, checked per call), so that it does not make dynamo trace the frame again: 2-3 s of
    GPT-2's first training step on the H100 host (``compile_attempt_0`` of torch's compile
    timers), where a step is milliseconds and the per-call checks cost about 10 us a float."""
    names, state = _float_symbols(gm)
    for name in names:
        state.specialize(name)
    return bool(names)


def _float_symbols(gm) -> tuple:
    """(names of the backed float symbols of ``gm``'s 0-dim float inputs read only with
    ``.item()`` and not yet specialized, dynamo's ``TensorifyState``); ``([], None)`` where this
    torch has no such mechanism."""
    try:
        from torch._dynamo.exc import TensorifyScalarRestartAnalysis  # noqa: F401 - the mechanism's presence
        from torch._dynamo.symbolic_convert import TensorifyState
    except ImportError:
        return [], None
    names = []
    for n in gm.graph.nodes:
        if n.op != "placeholder" or not n.users:
            continue
        ev = n.meta.get("example_value")
        node = getattr(getattr(ev, "item_memo", None), "node", None)
        name = getattr(getattr(node, "_expr", None), "name", None)
        # A Python float's symbol is backed (its value is the hint); a tensor's .item() is not (data).
        if (isinstance(ev, torch.Tensor) and ev.dim() == 0 and isinstance(name, str) and ev.dtype.is_floating_point
                and getattr(node, "hint", None) is not None
                and all(u.op == "call_method" and u.target == "item" for u in n.users)
                and not TensorifyState.should_specialize(name)):
            names.append(name)
    return names, TensorifyState


def symshape_backend(gm: torch.fx.GraphModule, example_inputs, **options):
    """The dynamo backend; ``options["target"]`` picks ``cpp`` or ``triton``
    (default: triton for CUDA inputs, cpp otherwise; ``$SYMSHAPE_TARGET`` overrides);
    ``options["cuda_graphs"]``: ``"auto"`` (the default) runs inference calls on CUDA through
    CUDA graphs where :mod:`compiler.graph_policy` says they pay, ``True`` at every size bucket
    (:mod:`compiler.cuda_graphs`; ``buckets`` and ``memory_budget`` as there), ``False`` never;
    ``options["host_rewrites"]=False`` plans without :mod:`compiler.view_folding` and
    :mod:`compiler.shared_masks` (for measuring them); ``options["causal_masks"]`` (training
    graphs; default ``$SYMSHAPE_TRAIN_CAUSAL=1``) turns attention masks proved causal into
    ``is_causal=True`` (:mod:`compiler.train_masks`)."""
    t0 = time.perf_counter()
    try:
        return _compile(gm, example_inputs, options)
    finally:
        BACKEND_STATS["compile_s"] += time.perf_counter() - t0


def _compile(gm, example_inputs, options):
    # torch.compile(..., options={...}) hands the dict over as one keyword.
    options = {**(options.pop("options", None) or {}), **options}
    training = torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs)
    if training:
        _specialize_floats(gm)  # a training step is milliseconds: no retrace for 10 us a float
    elif os.environ.get("SYMSHAPE_SPECIALIZE_FLOATS", "1") != "0":
        _restart_with_floats_specialized(gm)  # raises dynamo's restart where there are floats to specialize
    BACKEND_STATS["graphs"] += 1
    eager_gm = gm
    gm, scalars = _specialize_scalars(gm, example_inputs)
    cuda = any(isinstance(t, torch.Tensor) and t.device.type == "cuda" for t in example_inputs)
    target = options.get("target") or os.environ.get("SYMSHAPE_TARGET") or ("triton" if cuda else "cpp")
    TARGETS[target].prestart()  # kernel-build workers start now, while AOTAutograd and tracing run
    if training:
        # AOTAutograd plans its own graphs' inputs (sizes passed as SymInts included).
        return _compile_training(eager_gm, gm, scalars, example_inputs, target, options.get("causal_masks"))
    symbolic = [n.meta.get("example_value") for n in gm.graph.nodes if n.op == "placeholder"]  # their sizes as symbols
    plan = plan_graph(list(example_inputs), symbolic)
    if plan is None:
        BACKEND_STATS["eager_graphs"] += 1
        return eager_gm.forward
    specs, dims = plan.specs, plan.dims

    def program(*tensors):
        return gm(*plan.args(tensors))

    program.__signature__ = None  # takes *tensors; keeps the tracer's arity check quiet
    # Traced for the device the graph runs on (where it makes tensors, which branches it took).
    device = next((t.device for t in example_inputs if isinstance(t, torch.Tensor)), None)
    traced_for = device if target == "triton" and device is not None and device.type in ("cpu", "cuda") else None
    compiled = built_at_general_sizes(  # not traced at a size of 1: that variant would serve it alone
        lambda d: CompiledProgram(program, specs, d, target, device=traced_for, host_rewrites=options.get("host_rewrites")),
        dims, symbolic)
    # Dynamo's guards check every input's dtype and static sizes before this graph runs:
    # the per-shape binding cache need only key on the inputs with dynamic dims.
    compiled.key_inputs = [i for i, s in enumerate(specs) if any(not isinstance(d, int) for d in s.dims)]
    runner = compiled
    tensor_pos = [i for i, ex in enumerate(example_inputs) if isinstance(ex, torch.Tensor)]
    graphs = options.get("cuda_graphs", "auto")
    if graphs not in (True, False, "auto"):
        raise ValueError(f"options['cuda_graphs'] must be True, False or 'auto', got {graphs!r}")
    if graphs is True or (graphs == "auto" and cuda and target == "triton"):
        # Parameters and buffers dynamo passes to every call stay where they are: graphs read them
        # in place (copying GPT-2's 250 MiB of weights into a graph's buffers at every call would
        # cost more than the launches it saves).
        static = [j for j, i in enumerate(tensor_pos) if isinstance(example_inputs[i], torch.nn.Parameter)
                  or getattr(example_inputs[i], "_dynamo_static_input_type", None) is not None]
        extra = {k: options[k] for k in ("max_graph_bytes", "piecewise") if k in options}
        runner = GraphedProgram(compiled, buckets=options.get("buckets"), memory_budget=options.get("memory_budget"),
                                policy="always" if graphs is True else "auto", static_inputs=static, **extra)
        _GRAPHED.add(runner)
    # The tensors out of dynamo's argument list in one C call (dynamo passes every parameter too).
    pick = operator.itemgetter(*tensor_pos) if len(tensor_pos) > 1 else (lambda a: tuple(a[i] for i in tensor_pos))
    checks = tuple(scalars)

    def first_call(args):
        run.first = False
        t0 = time.perf_counter()
        try:
            return run(*args)
        finally:
            BACKEND_STATS["first_call_s"] += time.perf_counter() - t0

    def run(*args):
        if run.first:
            return first_call(args)  # kernel builds, timed apart
        for i, v in checks:
            if args[i].item() != v:
                return eager_gm(*args)  # a baked-in scalar changed: dynamo's graph as it is
        tensors = pick(args)
        if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
            # Kernels compute values only: when autograd must record, run dynamo's graph as it is.
            return eager_gm(*args)
        return runner(*tensors)

    run.first = True
    run.compiled = compiled
    run.runner = runner
    return run


def _compile_training(eager_gm, gm, scalars, example_inputs, target, causal_masks=None):
    """Autograd records this graph (dynamo guards on grad mode and requires_grad): compile
    its forward and backward (:mod:`compiler.training`)."""
    try:
        step = train_backend(gm, example_inputs, target=target, stats=BACKEND_STATS, causal=causal_masks)
    except torch._dynamo.exc.RestartAnalysis:
        raise  # dynamo's own control flow (it retraces the frame), not a failure
    except Exception as e:  # noqa: BLE001 -- the compiler boundary: run dynamo's graph, and say why
        BACKEND_STATS["eager_graphs"] += 1
        if not _raised_for_program(e):
            warn_fallback(BACKEND_STATS, graph="training", kind=FallbackKind.AOT, reason=f"{type(e).__name__}: {e}")
        # (The program's own error at these sizes, where eager's op refuses them: dynamo's graph raises
        # it as eager does, and no symshape limitation is reported.)
        return eager_gm.forward
    if not scalars:
        return step

    def run(*args):
        if any(args[i].item() != v for i, v in scalars):
            return eager_gm(*args)  # a baked-in scalar changed: dynamo's graph as it is
        return step(*args)
    return run


def _raised_for_program(e: BaseException) -> bool:
    """Whether ``e``, or an exception it was raised from, is one symshape raised for the program
    (:func:`shapes.errors.program_error`: eager raises it at these sizes too).

    >>> from shapes.errors import program_error
    >>> try:
    ...     try:
    ...         raise program_error(RuntimeError, "Input and output sizes should be greater than 0")
    ...     except RuntimeError as inner:
    ...         raise ValueError("while tracing") from inner
    ... except ValueError as e:
    ...     outer = e
    >>> _raised_for_program(outer), _raised_for_program(ValueError("x"))
    (True, False)
    """
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, RaisedForProgram):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def prestart_builds() -> None:
    """Start the kernel-build workers now where kernels will be built for a GPU: called when
    a program asks for the backend (:mod:`compiler.dynamo_entry`, :func:`register`), before
    its first graph arrives."""
    if torch.cuda.is_available():
        TARGETS["triton"].prestart()


def register() -> None:
    """Register ``backend="symshape"`` with dynamo explicitly.

    Installed packages need no call: dynamo finds the ``torch_dynamo_backends``
    entry point in pyproject.toml on first lookup.  Call this when running
    from a source tree that was not pip-installed.

    >>> import torch, compiler
    >>> compiler.register()
    >>> torch._dynamo.list_backends().count("symshape")
    1
    """
    from torch._dynamo.backends import registry
    registry.list_backends()  # loads the entry points: an installed symshape is found, not shadowed
    if "symshape" not in registry._BACKENDS:
        registry.register_backend(symshape_backend, name="symshape")
    prestart_builds()
