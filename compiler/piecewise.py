"""CUDA graphs between the steps that depend on a dim that cannot pad: a few graphs serve every size.

A decoder step with a growing KV cache cannot pad its cache length ``S`` (the
new entry is concatenated after the old ones; positions are ``S`` as a value),
so a graph per bucket would be wrong and a graph per size is a graph per token.
But most of the step never sees ``S``: the projections, norms, MLPs and the
LM head work on ``[B, 1, d]``.  A :class:`PiecewiseRun` splits a compiled
variant's straight-line plan into *segments*: runs of steps none of whose
sizes, buffers or kernel expressions involve the dims in ``dims`` are recorded
once as CUDA graphs; the steps that do (``cat`` onto the cache, attention over
it, positions) run as they are, in between.  The graph count is the number of
segments (about one per layer), whatever ``S`` reaches.

A segment's inputs made outside it are read by its graph from fixed buffers:
tensors whose storage did not move between the first two calls (a module's
weights) are read in place (checked at every call: if one moves the call runs
without graphs and the graphs are recorded again); the others are copied into
buffers the graph owns.  Outputs of the program that a graph wrote are cloned
(the next replay overwrites them).  Without CUDA the same segments run without
recording (``capture=False``), so the split is tested on the CPU.

Example::

    >>> import torch, compiler
    >>> from compiler.piecewise import PiecewiseRun
    >>> def step(x, c):
    ...     h = torch.relu(x @ x.T) @ x
    ...     return torch.cat([c, h], 0), torch.tanh(h @ h.T) @ h
    >>> f = compiler.compile(step, "x: f32[1, 8]", "c: f32[S, 8]")
    >>> v = f.variants[0]
    >>> pw = PiecewiseRun(v, {v.tp.env.symbols["S"]}, capture=False)
    >>> [s.graphed for s in pw.segments]  # the matmuls in one graph; the cat onto c (a kernel) sees S
    [True, False]
    >>> x, c = torch.ones(1, 8), torch.zeros(3, 8)
    >>> out = pw((x, c), f.bind((x, c)))
    >>> out[0].shape, out[1].shape
    (torch.Size([4, 8]), torch.Size([1, 8]))
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

import sympy
import torch

from .graph_capture import GraphRecorder
from .wrapper import (FAST_CALLS, BufSlot, ExternStep, KernelStep, SizeSlot, bind_launches, step_buffers,
                      straight_line, template_buffers, template_slots, unbound_launches)

#: ATen ops that launch no GPU work (views): a segment of only these is not worth a graph.
_VIEWS = {"view", "_unsafe_view", "t", "transpose", "permute", "expand", "unsqueeze", "squeeze", "slice", "select",
          "reshape", "alias", "as_strided", "getitem", "detach", "split", "split_with_sizes", "unbind"}


def _symbols(obj, memo: dict) -> frozenset:
    """Every sympy symbol reachable from an IR value (dataclasses, lists, expressions); ``memo``
    is keyed by ``id``: only for objects that outlive the walk (a kernel and its values)."""
    key = id(obj)
    got = memo.get(key)
    if got is not None:
        return got
    memo[key] = frozenset()  # a cycle contributes nothing more
    if isinstance(obj, sympy.Basic):
        out = frozenset(obj.free_symbols)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = frozenset().union(*[_symbols(getattr(obj, f.name), memo) for f in dataclasses.fields(obj)])
    elif isinstance(obj, (list, tuple, set, frozenset)):
        out = frozenset().union(*[_symbols(x, memo) for x in obj]) if obj else frozenset()
    elif isinstance(obj, dict):
        out = frozenset().union(*[_symbols(x, memo) for x in obj.values()]) if obj else frozenset()
    else:
        out = frozenset()
    memo[key] = out
    return out


def _launches_work(step) -> bool:
    if isinstance(step, KernelStep):
        return True
    name = getattr(step.target, "__name__", "") or str(step.target)
    return name.split(".")[0] not in _VIEWS


@dataclass
class Segment:
    """Consecutive plan steps: ``graphed`` ones never see the split dims."""

    steps: list
    graphed: bool
    reads: list = field(default_factory=list)   # buffer names made before the segment
    writes: list = field(default_factory=list)  # buffer names later segments or the outputs read
    fn: Any = None


@dataclass
class Recorded:
    """One graph of a segment at one key: where its inputs live and what it wrote."""

    graph: Any
    inputs: list        # the tensors the graph reads, in the segment's read order
    copied: list        # per input: copy into it at each call (False: read in place)
    ptrs: list          # per in-place input: the data_ptr it was recorded at
    outputs: list
    bytes: int = 0      # memory it holds: its own input copies, its outputs, the pool it grew
    ncopied: int = 0    # inputs copied at each replay
    storage: frozenset = frozenset()  # storages of its inputs and outputs (a replay overwrites them)

    def holds(self, ins) -> bool:
        """Whether every input read in place is still where it was recorded."""
        for t, copy, p in zip(ins, self.copied, self.ptrs):
            if not copy and t.data_ptr() != p:
                return False
        return True


#: Plain functions an extern step may call that write nothing but their result.
_PURE_FUNCTIONS = {"view_as_traced", "linear", "sdpa_by_class", "sdpa_without_cudnn", "scaled_dot_product_attention"}


def _pure(step) -> bool:
    """Whether a step writes only the buffers it makes and draws no random numbers: steps
    around it may run before or after it (where buffers allow)."""
    if isinstance(step, KernelStep):
        return True  # a compiled kernel writes its own allocations only
    t = step.target
    if isinstance(t, torch._ops.OpOverload):
        return not t._schema.is_mutable and torch.Tag.nondeterministic_seeded not in t.tags
    return getattr(t, "__name__", None) in _PURE_FUNCTIONS


def hoisted(steps) -> list:
    """``[(step, depends)]`` with each kernel that does not depend on the split dims moved
    before the run of dependent steps just ahead of it, where it reads nothing they make and
    they read nothing it makes (and all of them are pure): it then joins the graph before
    that run instead of launching outside the graphs.  A decoder layer's query rotary kernel
    sits after the cache's ``cat`` (which sees ``S``) and before attention: one launch per
    layer per token moves into a graph.

    >>> from compiler.wrapper import Alloc
    >>> k = lambda ins, out: KernelStep(None, (*ins, out), (Alloc(out, (), (), torch.float32),), ())
    >>> steps = [(k(["x"], "cat"), True), (k(["q"], "rot"), False), (k(["rot", "cat"], "att"), True)]
    >>> [(st.allocs[0].name, dep) for st, dep in hoisted(steps)]
    [('rot', False), ('cat', True), ('att', True)]
    >>> [st.allocs[0].name for st, _ in hoisted([steps[0], (k(["cat"], "use"), False)])]  # reads the cat
    ['cat', 'use']
    """
    order: list = []
    for step, dep in steps:
        k = len(order)
        while k > 0 and order[k - 1][1]:
            k -= 1
        if not dep and isinstance(step, KernelStep) and k < len(order):
            run = [st for st, _ in order[k:]]
            reads, writes = step_buffers(step)
            made = set().union(*[step_buffers(st)[1] for st in run])
            seen = set().union(*[step_buffers(st)[0] for st in run]) | made
            if not (reads & made) and not (writes & seen) and all(_pure(st) for st in run):
                order.insert(k, (step, dep))
                continue
        order.append((step, dep))
    return order


#: Extern calls that compute attention (SDPA as the Triton target calls it).
_ATTENTION = {"sdpa_by_class", "sdpa_without_cudnn", "scaled_dot_product_attention"}


def _writing(dest, target):
    """``target(...)`` (an attention call) with its result in ``dest``: the decode kernel writes
    there directly (:class:`~compiler.codegen.decode_attention.writing_into`); any other kernel's
    result is copied in."""
    from .codegen.decode_attention import writing_into

    def call(*args, **kwargs):
        with writing_into(dest):
            out = target(*args, **kwargs)
        if out is not dest:
            dest.copy_(out)
        return dest
    return call


def into_graph(seg, next_reads, rec, returned=frozenset()):
    """For eager segment ``seg`` followed by the graph ``rec`` (of a segment reading
    ``next_reads``): ``seg``'s function with each attention result that ``rec`` copies into a
    buffer of its own written into that buffer instead (a decode step's attention output, one
    copy per layer per token less), or None where there is none.  The value is the same:
    the buffer has the result's shape, strides and dtype (recorded from it).  Not for the
    buffers in ``returned`` (the program's outputs: the caller must never hold a graph's buffer)."""
    dests = {name: buf for name, buf, copy in zip(next_reads, rec.inputs, rec.copied)
             if copy and name not in returned}
    steps, changed = [], False
    for st in seg.steps:
        name = getattr(st.target, "__name__", "") if isinstance(st, ExternStep) else ""
        if name in _ATTENTION and st.out in dests:
            target = FAST_CALLS.get(st.target, st.target)
            st = ExternStep(_writing(dests[st.out], target), st.args, st.kwargs, st.out)
            changed = True
        steps.append(st)
    if not changed:
        return None
    return straight_line(steps, seg.reads, [], [BufSlot(n) for n in seg.writes])[1]


def copy_plan(reads, ins, seen, in_place, replayed, force) -> list:
    """Per input of a segment about to be recorded: copy it into a buffer the graph owns at
    each replay (True), or let the graph read it where it is (False).

    Read in place: the program's inputs and constants that did not move since the segment's
    last call (a module's weights), and what an earlier graph of this call wrote (its
    outputs live at fixed addresses).  Copied: what an eager step of this call made (it lives
    wherever the allocator put it), and inputs in ``force`` (positions that moved once).
    Each call checks that the in-place inputs are still where they were (:meth:`Recorded.holds`).

    >>> x, w, a, h = (torch.zeros(2) for _ in range(4))
    >>> copy_plan(["x", "w", "a", "h"], [x, w, a, h], [x.data_ptr(), 0, a.data_ptr(), h.data_ptr()],
    ...           in_place={"x", "w"}, replayed={"h"}, force=set())
    [False, True, True, False]
    """
    return [i in force or not ((r in in_place and t.data_ptr() == p) or r in replayed)
            for i, (r, t, p) in enumerate(zip(reads, ins, seen))]


def sized_launches(steps, cell) -> Optional[tuple]:
    """One ``launch(buffers)`` per kernel step of ``steps`` at the sizes in ``cell[0]`` (set at
    each call), made once (:func:`~compiler.wrapper.unbound_launches`): a call's sizes include
    the split dims, new at nearly every call, so a launch bound per call serves one call, and the
    bindings kept (up to 4096 per kernel) made Python's full garbage collections frequent: about
    185 us per token on the CPU while they accumulate (``bench/decode_launch_host_cpu.py``).
    None where a step's launch has no ``launch_at`` (C++ kernels).

    >>> seen = []
    >>> class L:
    ...     def launch_at(self, tensors, sizes): seen.append((tensors, sizes))
    >>> cell = [None]
    >>> launches = sized_launches([KernelStep(L(), ("x",), (), (False,))], cell)
    >>> cell[0] = (5,); launches[0](["X"]); cell[0] = (6,); launches[0](["X"]); seen
    [(['X'], (5,)), (['X'], (6,))]
    """
    return unbound_launches(steps, lambda: cell[0])


class PiecewiseRun:
    """A compiled variant run as graphs of the segments that never see ``dims``; see the module docstring."""

    def __init__(self, variant, dims, recorder: Optional[GraphRecorder] = None, capture: Optional[bool] = None):
        self.v = variant
        self.dims = frozenset(dims)
        self.recorder = recorder or GraphRecorder()
        self.capture = capture
        self.graphs: dict = {}      # (segment index, key) -> Recorded
        self.failed: dict = {}
        self.seen_ptrs: dict = {}   # (segment, key) -> data_ptrs of its inputs at the last ungraphed call
        self.force_copy: dict = {}  # (segment, key) -> input positions that moved once: always copied
        # (eager segment, key) -> (the next segment's Recorded, its fn writing attention into that graph's input)
        self.into: dict = {}
        self.stats = {"calls": 0, "replays": 0, "eager_segments": 0, "rerecords": 0, "copies": 0}
        self._split()
        #: The kernels' dim values of the call in progress, which ``sized`` launches read.
        self._cell: list = [None]
        #: Per segment: its launches made once (sized_launches), else None.  Graphed segments
        #: too: they run without a graph at their first calls, at recording, and without CUDA.
        self.sized = [sized_launches(s.steps, self._cell) for s in self.segments]

    # -- planning ------------------------------------------------------------------------
    def _depends(self, step, lp, size_exprs, memo) -> bool:
        syms = set()
        for i in {slot.index for slot in template_slots([getattr(step, "args", ()), getattr(step, "kwargs", {})], SizeSlot, set())}:
            # Slots past the size expressions hold mask classes, always KEEP here (sizes_at).
            if i < len(size_exprs):
                syms |= size_exprs[i].free_symbols
        reads, writes = step_buffers(step)
        for n in reads | writes:
            b = lp.buffers.get(n)
            if b is not None:
                for d in tuple(b.shape) + tuple(b.strides):
                    syms |= getattr(d, "free_symbols", set())
        if isinstance(step, KernelStep):
            for al in step.allocs:
                for i in al.shape + al.strides:
                    syms |= size_exprs[i].free_symbols
            syms |= _symbols(step.kernel, memo) if step.kernel is not None else set(lp.symbols)
        return bool(syms & self.dims)

    def _split(self):
        v, lp = self.v, self.v.lp
        size_exprs = [sympy.sympify(e) for e in v.size_exprs]
        memo: dict = {}
        segments: list = []
        plan = v.plan
        if v.masks and v.all_proven:
            # Masks whose class holds at every size (compiler.mask_proofs): the steps that only
            # made a dropped mask are not run at all, inside a graph or out.
            plan, skip = v.plan_at(v.fixed_classes)
            plan = [st for n, st in enumerate(plan) if n not in skip]
        for step, dep in hoisted([(st, self._depends(st, lp, size_exprs, memo)) for st in plan]):
            if not segments or segments[-1].graphed == dep:
                segments.append(Segment([], not dep))
            segments[-1].steps.append(step)
        # A graph of views, or of one launch, saves nothing over running it as it is.
        merged: list = []
        for s in segments:
            if s.graphed and sum(_launches_work(st) for st in s.steps) < 2:
                s.graphed = False
            if merged and not s.graphed and not merged[-1].graphed:  # one function call, not several
                merged[-1].steps += s.steps
            else:
                merged.append(s)
        self.segments = segments = merged
        later_reads: set = set()
        self.out_names = out_names = frozenset(template_buffers(list(v.outputs), set()))
        for s in reversed(segments):
            made = set().union(*[step_buffers(st)[1] for st in s.steps])
            read = set().union(*[step_buffers(st)[0] for st in s.steps])
            s.writes = sorted(made & (later_reads | out_names))
            s.reads = sorted(read - made)
            later_reads |= set(s.reads)
        for s in segments:
            s.fn = straight_line(s.steps, s.reads, [], [BufSlot(n) for n in s.writes])[1]
        self.input_names = [b.name for b in lp.inputs]
        self.const_names = [b.name for b, _ in lp.consts]
        self.in_place = set(self.input_names) | set(self.const_names)

    def worth_it(self) -> bool:
        """Whether the graphs hold most of the work: at least as many launches as run
        outside them (else a graph per size, which holds all of it, serves better); and
        something does run outside (else the dims never matter: one graph serves them all)."""
        inside = sum(_launches_work(st) for s in self.segments if s.graphed for st in s.steps)
        outside = sum(_launches_work(st) for s in self.segments if not s.graphed for st in s.steps)
        return inside > 0 and outside > 0 and inside >= outside

    # -- calls ---------------------------------------------------------------------------
    def _capturing(self, tensors) -> bool:
        return self.capture is not False and torch.cuda.is_available() and any(
            isinstance(t, torch.Tensor) and t.is_cuda for t in tensors)

    def __call__(self, tensors, values):
        """Run at dim ``values`` (in the variant's symbol order)."""
        v = self.v
        self.stats["calls"] += 1
        kvals = tuple(values[i] for i in v.sym_index)
        self._cell[0] = kvals
        # Masks keep their values here: classifying one synchronizes, once per size (every token).
        sizes = v.sizes_at(kvals, classify=False)
        device = tensors[0].device if tensors else torch.device("cpu")
        env = dict(zip(self.input_names, tensors))
        env.update(zip(self.const_names, v.consts(device)))
        key = tuple(x for x, s in zip(kvals, v.lp.symbols) if s not in self.dims)
        capture = self._capturing(tensors)
        graph_storage: set = set()
        replayed: set = set()  # buffers this call took from a graph's outputs (fixed addresses)
        for n, seg in enumerate(self.segments):
            ins = [env[r] for r in seg.reads]
            # Launches are bound to this call's sizes only where they run outside a replay.
            rec = self.graphs.get((n, key)) if seg.graphed and capture else None
            if rec is None or not rec.holds(ins):
                launches = self.sized[n]
                if launches is None:
                    launches = bind_launches(seg.steps, kvals)
                rec = self._graph(n, seg, key, ins, sizes, launches, device, replayed) \
                    if seg.graphed and capture else None
            if rec is None:
                fn = seg.fn
                if not seg.graphed and capture:
                    direct = self.into.get((n, key))
                    if direct is not None and self.graphs.get((n + 1, key)) is direct[0]:
                        fn = direct[1]
                outs = fn(ins, sizes, launches, [], device)
                if seg.graphed:
                    self.stats["eager_segments"] += 1
            else:
                for buf, t, copy in zip(rec.inputs, ins, rec.copied):
                    if copy and t is not buf:  # (an attention output written in place: into_graph)
                        buf.copy_(t)
                        self.stats["copies"] += 1
                rec.graph.replay()
                self.stats["replays"] += 1
                outs = rec.outputs
                replayed.update(seg.writes)
                graph_storage.update(rec.storage)
            env.update(zip(seg.writes, outs))
        leaves = []
        for o in v.outputs:
            if isinstance(o, BufSlot):
                t = env[o.name]
                # A graph's buffers (or a view of them) are overwritten by its next replay: copied out.
                own = isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() in graph_storage
                leaves.append(t.clone() if own else t)
            elif isinstance(o, SizeSlot):
                leaves.append(sizes[o.index])
            else:
                leaves.append(o)
        return v.unflatten(leaves)

    def _graph(self, n, seg, key, ins, sizes, seg_launches, device, replayed=frozenset()) -> Optional[Recorded]:
        """The recorded graph of segment ``n`` at ``key`` (recorded at its second call), or None
        to run it without a graph this call."""
        if (n, key) in self.failed:
            return None
        rec = self.graphs.get((n, key))
        if rec is not None:
            moved = [i for i, (t, copy, p) in enumerate(zip(ins, rec.copied, rec.ptrs))
                     if not copy and t.data_ptr() != p]
            if not moved:
                return rec
            # An input read in place moved (a weight replaced, or a caller's tensor that only
            # happened to come back at one address): copy it from now on, record again.
            self.force_copy.setdefault((n, key), set()).update(moved)
            del self.graphs[(n, key)]
            self.stats["rerecords"] += 1
        seen = self.seen_ptrs.get((n, key))
        self.seen_ptrs[(n, key)] = [t.data_ptr() for t in ins]
        if seen is None or rec is not None:  # first call (or just moved): note where inputs live
            return None
        copied = copy_plan(seg.reads, ins, seen, self.in_place, replayed, self.force_copy.get((n, key), set()))
        statics = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device) if c else t
                   for t, c in zip(ins, copied)]
        for st, t, c in zip(statics, ins, copied):
            if c:
                st.copy_(t)
        try:
            graph, outs, cost = self.recorder.record(lambda: seg.fn(statics, sizes, seg_launches, [], device),
                                                     device)
        except Exception as e:  # noqa: BLE001 - a step that cannot be recorded: this segment runs without a graph
            self.failed[(n, key)] = f"{type(e).__name__}: {e}"
            torch.cuda.synchronize()
            return None
        held = sum(t.numel() * t.element_size() for t, c in zip(statics, copied) if c)
        rec = Recorded(graph, statics, copied, [t.data_ptr() for t in statics], outs,
                       held + cost.kept + cost.pool_growth, ncopied=sum(copied),
                       storage=frozenset(t.untyped_storage().data_ptr() for t in outs + statics
                                         if isinstance(t, torch.Tensor)))
        self.graphs[(n, key)] = rec
        if n > 0 and not self.segments[n - 1].graphed:
            fn = into_graph(self.segments[n - 1], self.segments[n].reads, rec, self.out_names)
            self.into[(n - 1, key)] = (rec, fn) if fn is not None else None
        return rec

    def report(self) -> str:
        """Segments (graphed or not, with their steps) and the graphs recorded."""
        held = sum(r.bytes for r in self.graphs.values()) / 2 ** 20
        st = self.stats
        lines = [f"piecewise graphs over {sorted(map(str, self.dims))}: {len(self.segments)} segments, "
                 f"{sum(s.graphed for s in self.segments)} graphed; {len(self.graphs)} graphs recorded, "
                 f"holding {held:.1f} MiB; {st['calls']} calls, {st['replays']} replays, {st['copies']} input "
                 f"copies, {st['eager_segments']} graphable segments run without a graph, {st['rerecords']} rerecords"]
        for n, s in enumerate(self.segments):
            names = [getattr(st.target, "__name__", str(st.target)) if isinstance(st, ExternStep) else "kernel"
                     for st in s.steps]
            lines.append(f"  {n}: {'graph' if s.graphed else 'eager'} {len(s.steps)} steps "
                         f"({', '.join(names[:6])}{', ...' if len(names) > 6 else ''})")
        for k, why in self.failed.items():
            lines.append(f"  no graph for segment {k}: {why}")
        return "\n".join(lines) + "\n"


__all__ = ["PiecewiseRun", "Segment", "Recorded", "copy_plan", "hoisted", "into_graph", "sized_launches"]
