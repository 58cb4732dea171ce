"""CUDA graphs for dynamic sizes: pad proved-safe dims to a bucket, one graph per bucket.

A call binds its sizes, rounds every dim that :mod:`compiler.padding` proves
safe up to a bucket (:mod:`compiler.buckets`), copies the inputs into that
bucket's preallocated buffers (padded positions zeroed), replays the bucket's
graph and slices the outputs back.  Graphs are recorded on first use, on one
stream into one memory pool all graphs share (:mod:`compiler.graph_capture`),
the dim's largest bucket first, so that later, smaller graphs record into the
memory its intermediates freed.  Dims that cannot pad keep their exact size: a graph per
distinct size, up to ``max_graphs``, then calls run without graphs.  A bucket
size is used only where the same compiled variant's guards hold at it.

Without CUDA (or with ``capture=False``) the same padding and slicing run the
compiled kernels at the bucket sizes without recording graphs, so the bucket
logic is tested on the CPU.

Example::

    >>> import torch, compiler
    >>> f = compiler.compile(lambda x: torch.relu(x).cumsum(1), "x: f32[B, T]", cuda_graphs=True,
    ...                      buckets={"T": [8, 16]})
    >>> x = torch.randn(2, 5)
    >>> torch.allclose(f(x), torch.relu(x).cumsum(1)), f.stats["padded_calls"], [k for _, k in f.graphs]
    (True, 1, [(2, 8)])
"""
from __future__ import annotations

import math
from collections import ChainMap
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Optional

import torch
from torch.utils import _pytree as pytree

from shapes.errors import SymshapeError
from shapes.spec import parse_dims

from .buckets import BucketChoice, bucket_for, buffer_bytes, choose_buckets
from .exprs import compile_exprs
from .graph_capture import GraphRecorder
from .graph_policy import CallCost, graph_blocker, masks_kept
from .lowered import Unsupported
from .lowering import lower
from .padding import PaddingReport, analyze_padding, padding_verdict
from .piecewise import PiecewiseRun
from . import runtime
from .runtime import CompiledProgram


@dataclass
class BucketPlan:
    """What one compiled variant pads: the dims, their buckets, and why others do not."""

    pads: tuple
    exact: tuple
    report: PaddingReport
    choice: BucketChoice
    out_slices: list = field(default_factory=list)
    out_sizes: Any = None
    bounded: tuple = ()


@dataclass
class Route:
    """How calls of one input signature run: ``entry`` is ``None`` where they run without a graph."""

    variant: Any
    values: tuple
    entry: Any = None
    padded: bool = False
    views: list = field(default_factory=list)
    slices: list = field(default_factory=list)
    single: bool = False
    piecewise: Any = None
    #: Policy "auto": the size's first call, run without a graph; its second records one.
    pending: bool = False


@dataclass
class GraphEntry:
    """One recorded size: its input buffers, its graph (``None`` on the CPU) and its output buffers.

    ``written``: per input buffer, the extent the calls since its last zeroing wrote
    (positions beyond it are still zero); ``kept``: bytes its recording left allocated
    (outputs, a library's workspace); ``pool_growth``: bytes the shared pool grew by.
    """

    key: tuple
    inputs: list
    graph: Any = None
    outputs: Any = None
    bytes: int = 0
    pool_growth: int = 0
    kept: int = 0
    padded: bool = False
    written: list = field(default_factory=list)
    #: ``(input index, data pointer)`` of the static inputs the graph reads in place.
    static: list = field(default_factory=list)


class GraphedProgram:
    """A :class:`~compiler.runtime.CompiledProgram` run through CUDA graphs, one per bucket.

    ``buckets``: ``{"T": [16, 32, 64]}`` overrides the engine's choice per dim;
    ``memory_budget``: bytes all graphs may hold (default: a quarter of the GPU's
    memory, 1 GiB without CUDA); ``clone_outputs``: return copies rather than
    views of the graph's buffers (which the next call overwrites); ``kernels``:
    record symshape's compiled kernels (``"compiled"``) or the traced graph's
    ATen ops (``"aten"``: inside a graph their launch cost is gone too);
    ``largest_first``: before the first graph of a bounded padded dim, record its
    largest bucket, whose freed intermediates the smaller graphs then reuse;
    ``piecewise``: where a dim cannot pad, graph the steps that never see it
    (:mod:`compiler.piecewise`); ``max_graph_bytes``: sizes whose buffers are estimated
    larger run without a graph (``None``: no limit).

    ``policy="auto"`` (what :func:`compile` makes by default on CUDA) records a graph only where
    it pays and cannot be told from a call: a size whose GPU time the program's closed forms
    estimate within reach of its host time (:mod:`compiler.graph_policy`), of a program that
    mutates nothing, draws no random numbers and returns no view of an input; and no new graph
    once the graphs hold ``memory_budget``.  A size gets its graph at its second call, not its
    first: a size met once (a decode's cache length, a training step's sequence length) would
    pay a recording and never replay it.  Where a dim cannot pad, the steps that never see it
    run as piecewise graphs, as under ``"always"``.  ``decisions`` keeps each size's verdict,
    and ``blocker`` why a program gets none.

    ``static_inputs``: indices of inputs whose memory stays put between calls (a module's
    parameters and buffers, which dynamo passes to every call): a graph reads them where they
    are instead of copying them in, and a call where one has moved runs without the graph.
    """

    def __init__(self, compiled: CompiledProgram, buckets: Optional[dict] = None,
                 memory_budget: Optional[int] = None, max_graphs: int = 64, capture: Optional[bool] = None,
                 clone_outputs: bool = True, kernels: str = "compiled", largest_first: bool = True,
                 piecewise: bool = True, max_graph_bytes: Optional[int] = 64 * 2 ** 20, policy: str = "always",
                 static_inputs=()):
        if kernels not in ("compiled", "aten"):
            raise ValueError(f"kernels must be 'compiled' (symshape's kernels) or 'aten' (the traced graph's "
                             f"ATen ops), got {kernels!r}")
        if policy not in ("always", "auto"):
            raise ValueError(f"policy must be 'always' (a graph at every size within max_graph_bytes) or 'auto' "
                             f"(where the cost model says a graph pays), got {policy!r}")
        self.policy = policy
        self.static_inputs = frozenset(static_inputs)
        self.costs: dict = {}  # id(variant) -> CallCost (policy "auto")
        #: id(variant) -> why it gets no graph under policy "auto" (None: it may).
        self.not_graphed: dict = {}
        self.decisions: dict = {}  # (id(variant), key) -> GraphVerdict (policy "auto")
        #: Why no call of this program runs as a graph under policy "auto" (None: calls may).
        self.blocker = None
        if policy == "auto":
            max_graph_bytes = None
        self._seen: set = set()  # policy "auto": (id(variant), key) met once, whose graph waits for a second call
        self.kernels = kernels
        self._routes: dict = {}
        self.compiled = compiled
        self.given = {k: list(v) for k, v in (buckets or {}).items()}
        self.memory_budget = memory_budget
        self.max_graphs = max_graphs
        self.capture = capture
        self.clone_outputs = clone_outputs
        self.graphs: dict = {}
        self.failed: dict = {}
        self.plans: dict = {}
        self.recorder = GraphRecorder()
        self.largest_first = largest_first
        self.piecewise = piecewise
        self.max_graph_bytes = max_graph_bytes
        self.pieces: dict = {}  # id(variant) -> PiecewiseRun
        self.piece_dims: dict = {}  # id(variant) -> the dim names its PiecewiseRun splits on
        self._last_values: dict = {}  # id(variant) -> dim values at its last new route
        #: Graph counts first, then the compiled program's own (its traces and variants) read through.
        self.stats = ChainMap({"calls": 0, "replays": 0, "padded_calls": 0, "graphs": 0, "ungraphed_calls": 0},
                              compiled.stats)
        if policy == "auto" and torch.cuda.is_available() and capture is not False:
            self._prepare()

    # -- planning --------------------------------------------------------------------------
    def plan(self, variant) -> BucketPlan:
        """The padding verdict and buckets for one compiled variant (computed once)."""
        plan = self.plans.get(id(variant))
        if plan is not None:
            return plan
        tp = variant.tp
        report = analyze_padding(tp, [n for n in self.compiled.names if n in tp.env.symbols])
        pads = tuple(report.safe_dims)
        exact = tuple(n for n in self.compiled.names if n not in pads)
        ranges = {}
        parsed = parse_dims(self.compiled.dims, self.compiled.names)
        for n in pads:
            d = parsed.get(n)
            ranges[n] = (d.min if d else 1, d.max if d else math.inf)
        hints = {s: int(v) for s, v in tp.env.hints.items()}

        def estimate(name, size):
            return buffer_bytes(variant, {**hints, tp.env.symbols[name]: size})

        choice = choose_buckets(ranges, estimate, self._budget(), self.given)
        plan = BucketPlan(pads, exact, report, choice, bounded=tuple(n for n in pads if ranges[n][1] != math.inf))
        verdict = report.joint if pads else padding_verdict(tp, [])
        out_node = next(n for n in tp.graph.nodes if n.op == "output")
        exprs = []
        for a, dims in zip(out_node.args[0], verdict.outputs or [()] * len(out_node.args[0])):
            shape = a.meta.get("shape") if isinstance(a, torch.fx.Node) else None
            picks = [(d, len(exprs) + k) for k, d in enumerate(dims)]
            exprs += [shape[d] for d in dims]
            plan.out_slices.append(picks)
        plan.out_sizes = compile_exprs(exprs, variant.symbols) if exprs else (lambda *a: ())
        self.plans[id(variant)] = plan
        return plan

    def _budget(self) -> int:
        if self.memory_budget is not None:
            return self.memory_budget
        if torch.cuda.is_available():
            return torch.cuda.get_device_properties(0).total_memory // 4
        return 2 ** 30

    # -- calls -----------------------------------------------------------------------------
    def __call__(self, *tensors):
        self.stats["calls"] += 1
        keyed = self.compiled.key_inputs
        if keyed is not None:
            # Dynamo's guards check every input's dtype, device and static sizes before this
            # graph runs (key_inputs is set by the backend only): the shapes of the inputs with
            # dynamic dims pick the route (dtype and device each made a new object per input).
            sig = tuple([tensors[i].shape for i in keyed])
        else:
            sig = tuple([(t.shape, t.dtype, t.device) if isinstance(t, torch.Tensor) else type(t) for t in tensors])
        route = self._routes.get(sig)
        if route is None:
            route = self._route(tensors)
            # A decode's signature never repeats: keep memory bounded, and keep few piecewise
            # routes (one per token otherwise: thousands of live objects that make Python's
            # full garbage collections more frequent, each walking the whole heap).
            if len(self._routes) >= (64 if route.piecewise is not None else 4096):
                self._routes.clear()
            if not route.pending:
                self._routes[sig] = route
        entry = route.entry
        if route.piecewise is not None:
            return route.piecewise(tensors, route.values)
        if entry is None:
            self.stats["ungraphed_calls"] += 1
            return self._run_ungraphed(route, tensors)
        for i, ptr in entry.static:
            if tensors[i].data_ptr() != ptr:  # a parameter replaced, not updated in place
                self.stats["moved_static_calls"] = self.stats.get("moved_static_calls", 0) + 1
                return self._run_ungraphed(route, tensors)
        if route.padded:
            self.stats["padded_calls"] += 1
        written = entry.written
        for k, (buf, view, t) in enumerate(zip(entry.inputs, route.views, tensors)):
            if buf is t:
                continue  # a static input, read in place
            if view is None:
                buf.copy_(t)
                written[k] = buf.shape
                continue
            # Padded positions must hold zeros (finite, and a valid index): zeroed again only
            # where an earlier call wrote past this call's extent.
            if any(w > n for w, n in zip(written[k], t.shape)):
                buf.zero_()
            view.copy_(t)
            written[k] = t.shape
        self.stats["replays"] += 1
        if entry.graph is not None:
            entry.graph.replay()
            leaves = entry.outputs
        else:
            leaves = pytree.tree_leaves(self._run(route.variant, entry.inputs, entry.key))
        clone = self.clone_outputs and entry.graph is not None
        out = []
        for leaf, idx in zip(leaves, route.slices):
            if isinstance(leaf, torch.Tensor):
                if idx is not None:
                    leaf = leaf[idx]
                if clone:
                    leaf = leaf.clone()
            out.append(leaf)
        return out[0] if route.single else pytree.tree_unflatten(out, route.variant.tp.out_spec)

    def _run_ungraphed(self, route, tensors):
        """A call with no graph: through the compiled program, whose per-shape binding cache binds
        sizes and launches once and classifies masks at a shape's second call (binding at every
        call cost a prefill 1 ms of host time on an H100)."""
        if self.kernels != "compiled" or route.variant.eager:
            return self._run(route.variant, tensors, route.values)
        return self.compiled(*tensors)

    def _run(self, variant, tensors, values):
        if self.kernels == "aten":
            return variant.tp.run(*tensors)
        return variant.run(tensors, values)

    def _route(self, tensors) -> "Route":
        """Where calls with these input sizes go: the variant, the bucket, the graph, and the slices.
        Guards depend on sizes only, so a route is computed once per distinct input signature."""
        c = self.compiled
        values = c.bind(tensors)
        variant = c.variant_for(values, next((t.device for t in tensors if isinstance(t, torch.Tensor)), None))
        if self.policy == "auto" and not (self._capturing(tensors) and self._auto_ready(variant)):
            return Route(variant, values, None)
        plan = self.plan(variant)
        if self.policy == "auto" and plan.exact and not self._pays(variant, values):
            return Route(variant, values, None)
        if plan.exact and self.piecewise and self.kernels == "compiled" and not variant.eager:
            # A dim that cannot pad: graphs of the steps that never see it, the others run as
            # they are (compiler.piecewise) -- a few graphs for every size, not one per size.
            # Where most steps see the dim, little is left to graph: a graph per size, as below.
            names = self._piece_dims(variant, plan, values)
            if self.piece_dims.get(id(variant)) != names:
                self.piece_dims[id(variant)] = names
                split = {variant.tp.env.symbols[n] for n in names} & set(variant.lp.symbols)
                pw = PiecewiseRun(variant, split, self.recorder, self.capture) if split else None
                self.pieces[id(variant)] = pw if pw is not None and pw.worth_it() else None
            pw = self.pieces[id(variant)]
            if pw is not None:
                variant.check_asserts(values)
                return Route(variant, values, None, piecewise=pw)
        key = values
        if plan.pads:
            key = tuple(bucket_for(v, plan.choice.buckets[n]) if n in plan.pads and bucket_for(
                v, plan.choice.buckets[n]) is not None else v for n, v in zip(c.names, values))
            if key != values and not (variant.holds(*key) and all(ok(*key) for _, ok in variant.asserts)):
                key = values  # the bucket size takes another path through the program: no padding
        entry = self.graphs.get((id(variant), key))
        if entry is None and self.policy == "auto":
            if not self._pays(variant, key):
                return Route(variant, values, None)
            if (id(variant), key) not in self._seen:
                if len(self._seen) >= 4096:  # sizes met once each (a decode without piecewise graphs)
                    self._seen.clear()
                self._seen.add((id(variant), key))
                return Route(variant, values, None, pending=True)
        if entry is None and (id(variant), key) not in self.failed and len(self.graphs) < self.max_graphs \
                and self._small(variant, key):
            largest = self._largest_key(variant, plan, key) if key != values else None
            if largest is not None and self._capturing(tensors) and self._small(variant, largest):
                self._record(variant, largest, tensors, True)
            entry = self._record(variant, key, tensors, key != values)
        if entry is None:
            return Route(variant, values, None)
        views = [None if buf.shape == t.shape else buf[tuple(slice(0, n) for n in t.shape)]
                 for buf, t in zip(entry.inputs, tensors)]
        sizes = plan.out_sizes(*values) if key != values else None
        slices = []
        for picks in plan.out_slices:
            if sizes is None or not picks:
                slices.append(None)
                continue
            idx = [slice(None)] * (max(d for d, _ in picks) + 1)
            for d, k in picks:
                idx[d] = slice(0, sizes[k])
            slices.append(tuple(idx))
        return Route(variant, values, entry, key != values, views, slices,
                     single=pytree.tree_structure(0) == variant.tp.out_spec)

    def _piece_dims(self, variant, plan, values) -> frozenset:
        """The dims piecewise graphs split on: the ones that cannot pad, and every dim seen to
        change in the same call as one of them.  A decoder traced with each layer's cache length
        its own symbol (dynamo does so when the first length equals a static size) has one
        unpaddable length and others equal to it at every call: graphs keyed on those would be
        recorded once per token and never replayed."""
        names = self.piece_dims.get(id(variant), frozenset(plan.exact))
        last = self._last_values.get(id(variant))
        self._last_values[id(variant)] = values
        if last is not None:
            changed = {n for n, a, b in zip(self.compiled.names, values, last) if a != b}
            if changed & names and changed - names:
                names = names | changed
        return frozenset(names)

    def _pays(self, variant, key) -> bool:
        """Policy "auto", for a variant :meth:`_auto_ready` admitted: whether a graph at ``key`` is
        recorded (see the class's docstring)."""
        if self.graph_bytes() >= self._budget():
            return False
        verdict = self.decisions.get((id(variant), key))
        if verdict is None:
            if len(self.decisions) >= 4096:  # a size per token: keep the memory bounded
                self.decisions.clear()
            verdict = self.decisions[(id(variant), key)] = self.costs[id(variant)].verdict(
                dict(zip(self.compiled.names, key)))
        return verdict.graph

    def _cost(self, variant) -> Optional[CallCost]:
        """The variant's cost model (made once), or ``None`` where its program may not be graphed."""
        if id(variant) not in self.costs:
            why = graph_blocker(variant.tp)
            if why is not None:
                self.blocker = why
            self.costs[id(variant)] = None if why else CallCost(variant.tp, steps=len(variant.plan),
                                                                masks_kept=masks_kept(variant))
        return self.costs[id(variant)]

    def _auto_ready(self, variant) -> bool:
        """Policy "auto": make the variant's cost model and padding plan (once); whether it may get
        graphs.  Graphs only speed calls up: a variant symshape cannot plan runs as it is, and
        ``not_graphed`` keeps why."""
        if id(variant) not in self.not_graphed:
            why = "it runs its ATen graph" if variant.eager else None
            if why is None:
                try:
                    if self._cost(variant) is None:
                        why = self.blocker
                    else:
                        self.plan(variant)
                except (SymshapeError, Unsupported, NotImplementedError, TypeError, ValueError, KeyError,
                        ZeroDivisionError) as e:  # symshape's own analyses could not plan it: the call runs ungraphed
                    why = f"its graph could not be planned ({type(e).__name__}: {e})"
            self.not_graphed[id(variant)] = why
        return self.not_graphed[id(variant)] is None

    def _prepare(self) -> None:
        """Policy "auto" on CUDA: the padding plan and cost model of every variant compiled so far,
        made now rather than at a size's first call (GPT-2's size-1 variant: a 101 ms first call)."""
        for v in getattr(self.compiled, "variants", []):
            self._auto_ready(v)

    def _small(self, variant, key) -> bool:
        """Whether a graph at ``key`` is estimated within ``max_graph_bytes`` (every buffer at that
        size): a call that large is long on the GPU, so a graph saves little and holds much memory
        (a prefill's logits at every bucket)."""
        if self.max_graph_bytes is None:
            return True
        env_syms = variant.tp.env.symbols
        est = buffer_bytes(variant, {env_syms[n]: v for n, v in zip(self.compiled.names, key) if n in env_syms})
        return est is None or est <= self.max_graph_bytes

    def _largest_key(self, variant, plan, key) -> Optional[tuple]:
        """``key`` with every bounded padded dim at its largest bucket, where no graph of this
        variant is recorded yet and the variant's guards hold there; else ``None``."""
        if not self.largest_first or not plan.bounded or any(v == id(variant) for v, _ in self.graphs):
            return None
        if self.policy == "auto":
            return None  # the cost model decides per size; a bucket it was not asked about is not recorded
        big = tuple(plan.choice.buckets[n][-1] if n in plan.bounded else v for n, v in zip(self.compiled.names, key))
        if big == key or (id(variant), big) in self.failed:
            return None
        if not (variant.holds(*big) and all(ok(*big) for _, ok in variant.asserts)):
            return None
        return big

    def _capturing(self, tensors) -> bool:
        return bool(tensors) and tensors[0].is_cuda and self.capture is not False

    def _record(self, variant, key, tensors, padded) -> Optional[GraphEntry]:
        c = self.compiled
        at = dict(zip(c.names, key))
        bufs, static = [], []
        for i, (t, s) in enumerate(zip(tensors, c.specs)):
            shape = [at[d] if isinstance(d, str) else d for d in s.dims]
            if i in self.static_inputs and list(t.shape) == shape and t.is_cuda:
                bufs.append(t)
                static.append((i, t.data_ptr()))
                continue
            bufs.append(torch.zeros(shape, dtype=t.dtype, device=t.device))
        entry = GraphEntry(key, bufs, padded=padded, written=[(0,) * b.dim() for b in bufs], static=static)
        if not self._capturing(tensors):
            entry.bytes = sum(b.numel() * b.element_size() for b in bufs)  # no graph: its input buffers
        else:
            try:
                self._capture(variant, entry)
            except Exception as e:  # noqa: BLE001 - an op that cannot be recorded: run this size without a graph
                self.failed[(id(variant), key)] = f"{type(e).__name__}: {e}"
                torch.cuda.synchronize()
                return None
        self.graphs[(id(variant), key)] = entry
        self.stats["graphs"] += 1
        return entry

    def _capture(self, variant, entry):
        device = entry.inputs[0].device
        tp = variant.tp
        if tp.constants and any(v.device != device for v in tp.constants.values()):
            # A host-to-device copy cannot be recorded: keep the constants on the device.
            tp.constants = {k: v.to(device) for k, v in tp.constants.items()}
        entry.graph, entry.outputs, cost = self.recorder.record(
            lambda: self._run(variant, entry.inputs, entry.key), device)
        entry.kept, entry.pool_growth = cost.kept, cost.pool_growth
        kept_in = {i for i, _ in entry.static}
        entry.bytes = sum(t.numel() * t.element_size() for k, t in enumerate(entry.inputs) if k not in kept_in) + sum(
            t.numel() * t.element_size() for t in entry.outputs if isinstance(t, torch.Tensor))

    def __getattr__(self, name):
        # What the compiled program knows (its variants, names, specs) reads through: a
        # program compile() graphs by default is still that program to its users.
        if name.startswith("__") or name == "compiled":
            raise AttributeError(name)
        return getattr(self.compiled, name)

    # -- reporting -------------------------------------------------------------------------
    def graph_count(self) -> int:
        """CUDA graphs recorded: one per bucket, plus the piecewise runs' segment graphs."""
        return sum(e.graph is not None for e in self.graphs.values()) + sum(
            len(pw.graphs) for pw in self.pieces.values() if pw is not None)

    def graph_bytes(self) -> int:
        """GPU memory the graphs hold: buffers, what their recording kept, the pool they grew."""
        return sum(e.bytes + e.pool_growth for e in self.graphs.values()) + sum(
            r.bytes for pw in self.pieces.values() if pw is not None for r in pw.graphs.values())

    def report(self) -> str:
        """Which dims pad, which cannot and why, the buckets, and the graphs recorded with their memory."""
        lines = []
        for k, plan in enumerate(self.plans.values()):
            if len(self.plans) > 1:
                lines.append(f"trace {k + 1} of {len(self.plans)}:")
            lines.append(plan.report.text().rstrip())
            for n, bs in plan.choice.buckets.items():
                est = plan.choice.bytes_per_bucket.get(n, {})
                known = [v for v in est.values() if v is not None]
                tail = f" (estimated {max(known) / 2**20:.1f} MiB at the largest)" if known else ""
                lines.append(f"buckets for {n}: {', '.join(map(str, bs))}{tail}")
            if plan.exact:
                lines.append(f"exact sizes (a graph per size, at most {self.max_graphs} graphs): "
                             f"{', '.join(plan.exact)}")
            if plan.choice.note:
                lines.append(plan.choice.note.strip())
        pool = sum(e.pool_growth for e in self.graphs.values())
        lines.append(f"graphs recorded: {len(self.graphs)}; their input/output buffers "
                     f"{sum(e.bytes for e in self.graphs.values()) / 2**20:.1f} MiB"
                     + (f", the shared pool of intermediates {pool / 2**20:.1f} MiB" if pool else ""))
        order = {k: i + 1 for i, k in enumerate(self.graphs)}
        for (v, key), e in sorted(self.graphs.items(), key=lambda kv: kv[0][1]):
            at = ", ".join(f"{n}={v}" for n, v in zip(self.compiled.names, key))
            grew = f", pool +{e.pool_growth / 2**20:.1f} MiB" if e.pool_growth else ""
            kept = f", kept allocated {e.kept / 2**20:.2f} MiB" if e.graph is not None else ""
            lines.append(f"  {at}: buffers {e.bytes / 2**20:.2f} MiB{kept}{grew}"
                         f"{' (padded bucket)' if e.padded else ''}, recorded #{order[(v, key)]}")
        for (_, key), why in self.failed.items():
            lines.append(f"  no graph at {key}: {why}")
        for pw in self.pieces.values():
            if pw is not None:
                lines.append(pw.report().rstrip())
        return "\n".join(lines) + "\n"


def explain_cuda_graphs(tp, buckets: Optional[dict] = None, memory_budget: Optional[int] = None) -> str:
    """The CUDA-graph plan of a traced program, before any call: which dims pad and why
    others cannot, the buckets the engine would choose, and each bucket's estimated memory.

    >>> import shapes
    >>> from compiler.cuda_graphs import explain_cuda_graphs
    >>> print(explain_cuda_graphs(shapes.trace(lambda x: x.cumsum(1), "x: f32[B, T]", dims={"T": (1, 64)}),
    ...                           buckets={"B": [8]}))
    padding to a bucket size (outputs sliced back):
      B  pads: kept outputs never read a padded position
      T  pads: kept outputs never read a padded position
    buckets:
      B: 8 (given)
      T: 1, 2, 4, 8, 16, 32, 64
    estimated memory per graph (every buffer at the bucket size, other dims at the example size):
      T=1: 0.00 MiB ... T=64: 0.00 MiB
    <BLANKLINE>
    """
    report = analyze_padding(tp)
    lines = [report.text().rstrip()]
    pads = report.safe_dims
    if not pads:
        lines.append("no dim pads: every distinct size gets its own graph")
        return "\n".join(lines) + "\n"
    try:
        lowered = SimpleNamespace(lp=lower(tp), eager=False)
    except Unsupported:
        lowered = None
    hints = {s: int(v) for s, v in tp.env.hints.items()}

    def estimate(name, size):
        return buffer_bytes(lowered, {**hints, tp.env.symbols[name]: size}) if lowered is not None else None

    ranges = {n: (tp.dims[n].min, tp.dims[n].max) if n in tp.dims else (1, math.inf) for n in pads}
    budget = memory_budget if memory_budget is not None else 2 ** 30
    choice = choose_buckets(ranges, estimate, budget, buckets)
    lines.append("buckets:")
    for n, bs in choice.buckets.items():
        lines.append(f"  {n}: {', '.join(map(str, bs))}{' (given)' if buckets and n in buckets else ''}")
    if choice.note:
        lines.append(choice.note.strip())
    lines.append("estimated memory per graph (every buffer at the bucket size, other dims at the example size):")
    for n, per in choice.bytes_per_bucket.items():
        if buckets and n in buckets:
            continue
        known = [(b, v) for b, v in per.items() if v is not None]
        if not known:
            lines.append(f"  {n}: unknown (the program runs with ATen ops the compiler does not lower)")
            continue
        first, last = known[0], known[-1]
        lines.append(f"  {n}={first[0]}: {first[1] / 2**20:.2f} MiB ... {n}={last[0]}: {last[1] / 2**20:.2f} MiB")
    return "\n".join(lines) + "\n"


def graphed(compiled: CompiledProgram, **options) -> GraphedProgram:
    """Wrap a compiled program in CUDA graphs per bucket (see :class:`GraphedProgram`)."""
    return GraphedProgram(compiled, **options)


def compile(program, *specs, dims=None, target: str = "cpp", cuda_graphs="auto",
            buckets: Optional[dict] = None, memory_budget: Optional[int] = None, max_graphs: int = 64,
            graph_kernels: str = "compiled", device=None):
    """:func:`compiler.runtime.compile`, run through CUDA graphs where they pay.

    ``cuda_graphs="auto"`` (the default): for ``target="triton"`` on a machine with CUDA, a
    :class:`GraphedProgram` with ``policy="auto"`` (a graph per size where the call is
    launch-bound and a replay cannot be told from a call); otherwise the compiled program
    itself.  ``True``: a graph at every size bucket (``policy="always"``); ``False``: none.

    >>> import torch, compiler
    >>> f = compiler.compile(lambda x: x * 2, "x: f32[N]", cuda_graphs=True)
    >>> f(torch.ones(3)).tolist(), f.plans and list(f.plans.values())[0].pads
    ([2.0, 2.0, 2.0], ('N',))
    >>> type(compiler.compile(lambda x: x * 2, "x: f32[N]")).__name__   # C++ kernels: no graphs
    'CompiledProgram'
    """
    if cuda_graphs not in (True, False, "auto"):
        raise ValueError(f"cuda_graphs must be True, False or 'auto', got {cuda_graphs!r}")
    c = runtime.compile(program, *specs, dims=dims, target=target, device=device)
    if cuda_graphs == "auto":
        if target != "triton" or not torch.cuda.is_available() or (
                device is not None and torch.device(device).type != "cuda"):
            return c
        return GraphedProgram(c, buckets=buckets, memory_budget=memory_budget, max_graphs=max_graphs,
                              kernels=graph_kernels, policy="auto")
    if not cuda_graphs:
        return c
    return GraphedProgram(c, buckets=buckets, memory_budget=memory_budget, max_graphs=max_graphs,
                          kernels=graph_kernels)


__all__ = ["GraphedProgram", "BucketPlan", "GraphEntry", "Route", "graphed", "compile", "explain_cuda_graphs"]
