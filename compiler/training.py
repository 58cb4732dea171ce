"""Training steps under ``torch.compile(backend="symshape")``: forward and backward compiled.

When autograd must record (grad enabled and an input, parameters included,
requires grad), dynamo's graph goes through AOTAutograd: it traces the joint
forward/backward ATen graph with dynamo's symbolic sizes, and a min-cut
partition picks the activations the forward saves (recomputing cheap
pointwise ones in the backward).  Each of the two ATen graphs is then
compiled by symshape like an inference graph: every dynamic size becomes a
named dim (``s0``... from dynamo's symbols, so the forward and the backward
share their dims), the graph is retraced at the example sizes and lowered to
fused kernels (C++ or Triton) plus ATen calls; one compiled program serves
every size within symshape's guards, so a new sequence length recompiles
nothing.

AOTAutograd hands each compiled graph its argument list over (a boxed call): the list is
cleared and its tensors passed on as :class:`~compiler.wrapper.Owned`, so the backward frees
each saved activation at its last use rather than at its end (the backward's peak).

Sizes the forward saves for the backward (``SymInt`` outputs) are computed
from the call's dims; mutated buffers (BatchNorm's running stats) are outputs
of the forward graph that AOTAutograd copies back; dropout stays torch's
``native_dropout``, so it draws from torch's RNG.

On CUDA, AOTAutograd traces with cuDNN's SDPA disabled (:func:`attention_without_plans`):
cuDNN builds an execution plan per new shape, which a new sequence length at every
step pays at every step; flash and memory-efficient attention do not.  A boolean mask
proved true everywhere (transformers builds them under ``torch.compile`` where eager
passes none) is removed first (:mod:`compiler.train_masks`): a mask rules out the flash
kernel, and a broadcast one the memory-efficient kernel too, which leaves SDPA's math
path.  With ``SYMSHAPE_PATCH_CONV=1`` a patch embedding (a convolution whose kernel is its
stride) becomes one matmul (:mod:`compiler.patch_conv`, opt-in: measured no faster).  Bicubic and
bilinear ``F.interpolate`` become two matmuls, nearest by 2/4/8 an expand
(:mod:`compiler.separable_resize`): torch's decomposition, which AOTAutograd applies
whatever the table says, makes the backward sixteen (bilinear: four) ``index_put(accumulate=True)``.  Views in the
(functional) ATen graphs become reshapes (:func:`views_as_reshapes`): symshape's
retrace may lay an op's output out otherwise than the fake tensors AOTAutograd saw.

On CUDA the half-precision matmuls of training graphs run on row counts rounded up to
few buckets (:mod:`compiler.row_buckets`): cuBLAS pays milliseconds of host time at the
first call of every new bf16 shape, and a new sequence length is a new shape in every
linear of the step.

A graph symshape cannot compile runs as AOTAutograd's ATen graph instead (the
step is still correct), with a :class:`TrainingFallback` warning that says why,
counted in ``BACKEND_STATS["eager_train_graphs"]``.

Example::

    >>> import torch, compiler
    >>> torch.manual_seed(0)
    <torch._C.Generator object at ...>
    >>> m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 1))
    >>> f = torch.compile(m, backend="symshape", dynamic=True)
    >>> x = torch.randn(5, 8)
    >>> f(x).sum().backward()
    >>> g = m[0].weight.grad.clone(); m.zero_grad()
    >>> m(x).sum().backward()
    >>> torch.allclose(g, m[0].weight.grad, atol=1e-5)
    True
"""
from __future__ import annotations

import enum
import os
import time
import warnings
from dataclasses import dataclass

import torch

from shapes.errors import GuardViolation, SizeConflict, SymshapeError

from torch._functorch.aot_autograd import make_boxed_func
from torch._subclasses.fake_tensor import unset_fake_temporarily

from . import row_buckets, train_graphs
from .graph_inputs import ArgKind, built_at_general_sizes, evaluation_gap, plan_graph
from . import linear_groups
from .linear_groups import copy_graph, group_linears
from .runtime import CompiledProgram
from .patch_conv import patch_convs_as_matmuls
from .separable_resize import resize_as_matmuls
from .train_masks import drop_proved_masks
from .wrapper import Owned

aten = torch.ops.aten


class FallbackKind(enum.Enum):
    """Why a training graph runs as its ATen graph rather than symshape's kernels."""

    INPUTS = "inputs"  # an input symshape cannot name (a size no tensor carries)
    TRACE = "trace"  # symshape's tracer stopped (a typed limitation or the graph's own error)
    COMPILE = "compile"  # lowering or code generation failed
    AOT = "aot"  # AOTAutograd itself could not trace the joint graph
    SIZES = "sizes"  # a call's tensors contradict the sizes AOTAutograd traced (torch's meta vs kernel)


class TrainingFallback(UserWarning):
    """A training graph runs uncompiled (eager ATen); the message says why, in one line."""


@dataclass(kw_only=True)
class Fallback:
    """One graph that runs uncompiled: which, and why."""

    graph: str
    kind: FallbackKind
    reason: str


#: Every fallback so far (the backend's BACKEND_STATS counts them).
FALLBACKS: list = []


def warn_fallback(stats: dict, *, graph: str, kind: FallbackKind, reason: str) -> None:
    """Record and warn (one line) that ``graph`` runs uncompiled, and why."""
    reason = " ".join(str(reason).split())[:300]
    FALLBACKS.append(Fallback(graph=graph, kind=kind, reason=reason))
    stats["eager_train_graphs"] = stats.get("eager_train_graphs", 0) + 1
    warnings.warn(f"symshape: the {graph} graph runs uncompiled ({kind.value}): {reason}", TrainingFallback,
                  stacklevel=3)


def _outputs(gm) -> list:
    """Per output of ``gm``: ``(ArgKind.TENSOR, None)``, ``(ArgKind.EXPR, e)`` for a SymInt, or ``(ArgKind.CONST, v)``."""
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    res = []
    for a in out_node.args[0]:
        if isinstance(a, torch.fx.Node):
            v = a.meta.get("val")
            if isinstance(v, torch.Tensor):
                res.append((ArgKind.TENSOR, None))
            elif isinstance(v, torch.SymInt) and not v.node.expr.is_Integer:
                res.append((ArgKind.EXPR, v.node.expr))
            elif isinstance(v, (int, torch.SymInt)):
                res.append((ArgKind.CONST, int(v)))
            else:
                return None
        else:
            res.append((ArgKind.CONST, a))
    return res


#: What lowering, code generation and kernel builds raise when they fail (gcc and Triton included).
_COMPILE_ERRORS = (RuntimeError, ValueError, TypeError, KeyError, AttributeError, IndexError, AssertionError,
                   NotImplementedError, OSError, ArithmeticError, ImportError)


def compile_aten_graph(gm, example_inputs, *, target: str, graph: str, stats: dict):
    """Compile one AOTAutograd graph (``graph`` is ``"forward"`` or ``"backward"``) with symshape.

    Returns a callable with the graph's calling convention; on a failure, the
    graph itself after a :class:`TrainingFallback` warning.
    """
    t0 = time.perf_counter()
    try:
        return _compile_aten_graph(gm, example_inputs, target=target, graph=graph, stats=stats)
    finally:
        # Its own key: the backend's compile_s already holds the forward graph's compile (AOTAutograd
        # compiles it inside the backend call), so adding it there would count it twice.
        stats["train_graph_s"] = stats.get("train_graph_s", 0.0) + time.perf_counter() - t0


def _compile_aten_graph(gm, example_inputs, *, target, graph, stats):
    stats["train_graphs"] = stats.get("train_graphs", 0) + 1
    views_as_reshapes(gm)
    plan = plan_graph(list(example_inputs), carriers=True)
    outs = _outputs(gm)
    user_outputs = _user_tensor_outputs(outs) if graph == "forward" and outs is not None else None
    if plan is None or outs is None or not all(plan.covers(e) for kind, e in outs if kind is ArgKind.EXPR):
        warn_fallback(stats, graph=graph, kind=FallbackKind.INPUTS,
                      reason="a size argument or output is not an expression of input tensors' sizes")
        return make_boxed_func(gm)
    signed = plan.signed_carriers()
    if signed:
        warn_fallback(stats, graph=graph, kind=FallbackKind.INPUTS,
                      reason=f"the SymInt argument {signed[0]} may be negative (torch's range for it starts at "
                             f"{plan.lower_bounds.get(signed[0], 'no known bound')}): no tensor size can carry it "
                             f"to the kernels")
        return make_boxed_func(gm)
    gaps = [g for g in (evaluation_gap(e) for kind, e in [*plan.layout, *outs] if kind is ArgKind.EXPR) if g]
    if gaps:
        warn_fallback(stats, graph=graph, kind=FallbackKind.INPUTS, reason=gaps[0])
        return make_boxed_func(gm)
    def program(*tensors):
        res = gm(*plan.args(tensors))
        return tuple(r for r, (kind, _) in zip(res, outs) if kind is ArgKind.TENSOR)

    program.__signature__ = None  # takes *tensors; keeps the tracer's arity check quiet
    try:
        # The graph already holds autocast's casts (AOTAutograd traced them): retrace as written.
        # AOTAutograd calls its compilers with its fake mode (and its tracing context) still
        # set: symshape's own trace runs outside them, as dynamo's backend call does.
        with torch._C._DisableAutocast(), unset_fake_temporarily(), torch._guards.tracing(None), \
                row_buckets.training_graphs():
            compiled = built_at_general_sizes(
                lambda d: CompiledProgram(program, plan.specs, plan.with_bounds(d), target,
                                          device=_traced_for(example_inputs, target)),
                plan.dims, example_inputs)
    except SymshapeError as e:
        warn_fallback(stats, graph=graph, kind=FallbackKind.TRACE, reason=f"{type(e).__name__}: {e}")
        return make_boxed_func(gm)
    except _COMPILE_ERRORS as e:  # lowering, code generation, a kernel build: the ATen graph runs, and says why
        warn_fallback(stats, graph=graph, kind=FallbackKind.COMPILE, reason=f"{type(e).__name__}: {e}")
        return make_boxed_func(gm)
    if compiled.variants[0].eager:
        warn_fallback(stats, graph=graph, kind=FallbackKind.COMPILE,
                      reason=f"lowering: {compiled.variants[0].eager_reason}")
        return make_boxed_func(gm)
    compiled.key_inputs = [i for i, s in enumerate(plan.specs) if any(not isinstance(d, int) for d in s.dims)]
    runner = train_graphs.wrap(compiled, role=graph, user_outputs=user_outputs,
                               device=next((t.device for t in example_inputs if isinstance(t, torch.Tensor)), None))
    return _boxed_runner(gm, plan, compiled, outs, stats=stats, graph=graph, runner=runner)


def _user_tensor_outputs(outs):
    """How many leading tensor outputs of the forward graph AOTAutograd compiles now are the
    caller's (its outputs and mutated inputs; the rest are saved for the backward), from its
    metadata; None where it has none or threads effect tokens."""
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None)
    n = getattr(meta, "num_forward", None)
    if meta is None or not isinstance(n, int) or getattr(meta, "tokens", None):
        return None
    return sum(1 for kind, _ in outs[:n] if kind is ArgKind.TENSOR)


def _boxed_runner(gm, plan, compiled, outs, *, stats, graph, runner=None):
    """The boxed callable AOTAutograd runs for a compiled graph: arguments in, symshape's kernels
    run (through ``runner``: ``compiled`` with CUDA graphs, :mod:`compiler.train_graphs`), the
    graph's outputs (tensors, SymInts, constants) out in its order."""
    runner = compiled if runner is None else runner
    sym_outs = [e for kind, e in outs if kind is ArgKind.EXPR]
    tensor_pos = plan.tensor_pos
    simple = not sym_outs and all(kind is ArgKind.TENSOR for kind, _ in outs)
    # The kernels compute SymInt arguments from the tensors' sizes and never read the ones
    # passed: each is checked against them (a size solved from 2*s included), not trusted.
    sym_args = [i for i, (kind, _) in enumerate(plan.layout) if kind is ArgKind.EXPR]
    carriers = bool(plan.carriers)
    sym_arg_exprs = [plan.layout[i][1] for i in sym_args]

    def run(args):
        # AOTAutograd's boxed call hands its argument list over (it steals it): cleared here and
        # passed on as Owned, each input (a backward's saved activation) is freed at its last use.
        tensors = [args[i] for i in tensor_pos]
        if carriers:
            tensors += plan.carrier_tensors(args, tensors[0].device if tensors else None)
        tensors = Owned(tensors)
        syms = ()
        if sym_args:
            syms = [args[i] for i in sym_args]
            _check_size_args(args, sym_args, plan.eval_exprs(sym_arg_exprs, tensors), sym_arg_exprs)
        ints = iter(plan.eval_exprs(sym_outs, tensors)) if sym_outs else iter(())
        if isinstance(args, list):  # a caller that passes a tuple keeps its references
            args.clear()
        try:
            with torch._C._DisableAutocast(), row_buckets.training_graphs():  # a retrace plans as training
                got = runner(tensors)
        except SizeConflict as e:
            # The binding failed before any kernel ran, so every input is still there. Raised here,
            # the sizes are torch's: its meta function promised one size, its kernel made another
            # (CPU embedding_bag's bf16 fast path leaves offset2bag empty). The ATen graph takes them.
            return aten_call(list(tensors), syms, e)
        if simple:
            return list(got)
        it = iter(got)
        return [next(it) if kind is ArgKind.TENSOR else next(ints) if kind is ArgKind.EXPR else v for kind, v in outs]

    warned = []

    def aten_call(tensors, syms, error):
        if not warned:
            warned.append(True)
            warn_fallback(stats, graph=graph, kind=FallbackKind.SIZES,
                          reason=f"{error}: torch's meta function and its kernel disagree on a size; "
                                 "calls whose tensors disagree run as the ATen graph")
        it = iter(syms)
        return list(gm(*[tensors[v] if kind is ArgKind.TENSOR else next(it) if kind is ArgKind.EXPR else v
                         for kind, v in plan.layout]))

    run.compiled = compiled
    run._boxed_call = True
    return run


def _check_size_args(args, positions, want, exprs) -> None:
    """Refuse a call whose SymInt arguments are not what its tensors' sizes make them."""
    for i, v, e in zip(positions, want, exprs):
        if args[i] != v:
            raise GuardViolation(f"size argument {i} is {args[i]} but the input tensors' sizes make {e} = {v}")


def _traced_for(example_inputs, target):
    """The device symshape traces a graph for: the one its tensors are on (Triton; where it
    makes tensors and which branches it took), as the inference backend does; else the default."""
    device = next((t.device for t in example_inputs if isinstance(t, torch.Tensor)), None)
    return device if target == "triton" and device is not None and device.type in ("cpu", "cuda") else None


def views_as_reshapes(gm) -> int:
    """Turn ``aten.view`` into ``aten.reshape`` in a functional ATen graph; returns how many.

    AOTAutograd's graphs hold no mutation, so a view and a reshape give equal
    values; but a view is only valid for the strides the fake tensors had when
    AOTAutograd traced (cuDNN attention's gradients come out in (B, T, H, D)
    memory order, so their transpose flattens as a view), and symshape's retrace
    may lay an op's output out otherwise.  A reshape is a view where one exists
    and a copy where none does.

    >>> g = torch.fx.symbolic_trace(lambda x: torch.ops.aten.view.default(x, [4]))
    >>> views_as_reshapes(g), g(torch.ones(2, 2)).shape
    (1, torch.Size([4]))
    """
    n = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is aten.view.default:
            node.target = aten.reshape.default
            n += 1
    if n:
        gm.recompile()
    return n


def attention_without_plans(example_inputs):
    """A context for AOTAutograd's trace: SDPA picks flash/efficient/math kernels, not cuDNN's.

    AOTAutograd writes the attention kernel it picks into the forward and backward
    graphs.  cuDNN's builds an execution plan for every new shape (milliseconds of
    host time, forward and backward): with a new sequence length at every step that
    is paid at every step.  Flash and memory-efficient attention take any length
    as it comes.  Off CUDA (or where ``torch.nn.attention`` lacks it) nothing changes.

    >>> with attention_without_plans([torch.ones(1)]):
    ...     pass
    """
    import contextlib
    if not any(isinstance(t, torch.Tensor) and t.device.type == "cuda" for t in example_inputs):
        return contextlib.nullcontext()
    if os.environ.get("SYMSHAPE_TRAIN_CUDNN_SDPA", "0") == "1":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


def train_backend(gm, example_inputs, *, target: str, stats: dict, causal=None):
    """Compile a dynamo graph for training through AOTAutograd; returns the callable dynamo runs.
    ``causal``: turn masks proved causal into ``is_causal=True`` (None: ``$SYMSHAPE_TRAIN_CAUSAL``,
    default on)."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    def fw(g, ex):
        return compile_aten_graph(g, ex, target=target, graph="forward", stats=stats)

    def bw(g, ex):
        return compile_aten_graph(g, ex, target=target, graph="backward", stats=stats)

    backend = aot_autograd(fw_compiler=fw, bw_compiler=bw, partition_fn=min_cut_rematerialization_partition,
                           decompositions=decompositions(target))
    grouped, before = 0, None
    if os.environ.get("SYMSHAPE_TRAIN_REWRITES", "1") != "0":  # "0": AOTAutograd sees dynamo's graph as is (A/B)
        if causal is None:  # on by default since session 13's A/B (train_masks); "0" turns it off
            causal = os.environ.get("SYMSHAPE_TRAIN_CAUSAL", "1") == "1"
        stats["masks_dropped"] = stats.get("masks_dropped", 0) + drop_proved_masks(gm, causal=causal)
        stats["resizes_as_matmuls"] = stats.get("resizes_as_matmuls", 0) + resize_as_matmuls(gm)
        stats["patch_convs_as_matmuls"] = stats.get("patch_convs_as_matmuls", 0) + patch_convs_as_matmuls(gm)
        if linear_groups.ENABLED:  # the graph as dynamo gave it, kept only where a rewrite may need undoing
            before = copy_graph(gm.graph)
            grouped = group_linears(gm)
    with attention_without_plans(example_inputs):
        if not grouped:
            return backend(gm, example_inputs)
        try:
            out = backend(gm, example_inputs)
        except _TRACE_ERRORS as e:
            # A consumer of a grouped linear's output needed what a slice of the stacked output is
            # not (compiler.linear_groups): the graph as dynamo gave it traces instead (an
            # optimization of ours not taken; the program is compiled all the same).
            stats["linear_groups_reverted"] = stats.get("linear_groups_reverted", 0) + grouped
            stats["linear_groups_last_error"] = f"{type(e).__name__}: {e}"[:300]
            gm.graph = before
            gm.recompile()
            return backend(gm, example_inputs)
        stats["linear_groups"] = stats.get("linear_groups", 0) + grouped
        return out


#: What AOTAutograd's trace of a rewritten graph raises where an op refuses its inputs.
_TRACE_ERRORS = (RuntimeError, ValueError, TypeError, AssertionError, NotImplementedError, IndexError)


def decompositions(target: str = "cpp") -> dict:
    """Ops written as pointwise ops and reductions, so symshape fuses them.

    Backward ops, and the forward ops whose outputs the min-cut partition would
    otherwise save whole: decomposed, the partition saves their (smaller, lower
    precision) inputs and a row's reductions and the backward recomputes the rest
    (``_log_softmax`` of bf16 logits saved an fp32 copy of the logits).

    For ``target="triton"`` ``embedding_dense_backward`` stays whole: decomposed, it
    is an ``index_put`` with ``accumulate=True``, whose CUDA kernel handles the
    updates of one row one after another; BERT's token-type embedding (every id 0)
    then took 2.4 ms of an 8.9 ms step on an H100, where ATen's embedding
    backward (sort, then a sum per segment) takes 0.05 ms.  Whole, the Triton
    target runs it as one atomic-add kernel (:mod:`compiler.embedding_backward`).

    >>> aten._log_softmax.default in decompositions()
    True
    >>> aten.embedding_dense_backward.default in decompositions("triton")
    False
    """
    from torch._decomp import get_decompositions
    ops = [aten._log_softmax, aten._softmax, aten.gelu, aten.silu, aten.detach, aten.zeros_like,
           aten.gelu_backward, aten.threshold_backward, aten.tanh_backward, aten.sigmoid_backward,
           aten.silu_backward, aten._softmax_backward_data, aten._log_softmax_backward_data,
           aten.native_dropout_backward, aten.native_layer_norm_backward, aten.embedding_dense_backward,
           aten.nll_loss_backward, aten.nll_loss_forward, aten.hardtanh_backward]
    if target == "triton":
        ops.remove(aten.embedding_dense_backward)
    if os.environ.get("SYMSHAPE_TRAIN_DECOMP", "1") == "0":
        return {}
    return get_decompositions(ops)


__all__ = ["train_backend", "compile_aten_graph", "TrainingFallback", "FallbackKind",
           "Fallback", "FALLBACKS", "warn_fallback", "decompositions",
           "views_as_reshapes", "attention_without_plans"]
