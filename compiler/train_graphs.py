"""CUDA graphs for training steps at sizes met before: the forward and the backward replayed.

At sizes a model has met, a training step's compiled graphs are bound by the host: ViT bf16 on
the H100 ran ~4.4 ms of kernels under ~10 ms of host work a step (session 32's profile), where
eager took 9.6 ms.  A CUDA graph replays a program's launches with one call.  Opt-in
(``SYMSHAPE_TRAIN_GRAPHS=1``; ``=emulate`` records nothing and replays by running the program
again, which tests every rule below on the CPU) until it is measured on the GPU.

What a replay keeps of a call, and how:

* Inputs.  A graph reads fixed addresses.  A parameter (a leaf that requires grad, at the
  address it had at the program's previous call) is read in place, and so is an activation the
  forward's graph wrote into the forward arena; a replay is taken only while each is still at its
  address.  Any other input (the batch, the loss's gradient, a buffer) is copied into the input
  arena before the replay.
* Outputs.  Inside its graph the forward copies its outputs into the forward arena, which every
  forward graph shares: the activations it saves for the backward are handed out as views of it
  (the backward's graph reads them in place), its user outputs are copied out.  The backward's
  gradients go to the output arena and are copied out (autograd keeps them as ``.grad``).  An
  output that is a view of an input is made again from the call's own input.
* Memory.  Every graph records into one private pool and keeps none of its recording's tensors:
  nothing handed out lives in the pool, so a replay may reuse all of it.  The forward arena is the
  one place where a replay overwrites memory a caller may hold: a forward replays only while no
  view of it is alive (its storage's use count), a backward only while the arena holds what its
  forward wrote (the arena's writer).  Otherwise the call runs as it would without graphs.
* What a replay cannot repeat: a program that mutates a tensor or draws random numbers
  (:func:`~compiler.graph_policy.state_blocker`) never records.

A size's second call runs as usual, then its forward graph records (after one more run, so that
every lazy set-up happens outside the recording), and the backward records at the same step,
reading the forward's arena slots where its inputs are the forward's outputs.  Later calls at
that size replay.  Where most recent calls met a size seen before, a new size records at its
first call; a run that meets a new length at every step records nothing.  :data:`STATS` counts records, replays and plain calls.

Example (the size rules, on the CPU)::

    >>> Layout.dense(torch.zeros(3, 4).t())
    Layout(shape=(4, 3), stride=(1, 4), dtype=torch.float32)
    >>> Layout.dense(torch.zeros(3, 1).expand(3, 4))
    Layout(shape=(3, 4), stride=(4, 1), dtype=torch.float32)
    >>> _aligned(1)
    256
"""
from __future__ import annotations

import contextlib
import enum
import os
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from . import cublas_warm, row_buckets
from .graph_policy import state_blocker
from .wrapper import Owned

_MODE = os.environ.get("SYMSHAPE_TRAIN_GRAPHS", "0")
#: ``"1"``: CUDA programs record graphs; ``"emulate"``: any program "records" without running and
#: replays by running again (tests on the CPU); ``"0"``: off.
MODE = _MODE if _MODE in ("1", "emulate") else "0"
#: Graphs kept per program (sizes beyond it run without graphs).
MAX_GRAPHS = 128
#: Calls over which a program's share of layouts met before is taken (:meth:`TrainGraphs._worth_recording`).
RECENT = 16
#: Records, replays, plain calls of programs with graphs, and why a record was refused (newest last).
STATS: dict = {"recorded": 0, "replays": 0, "plain": 0, "refused": []}


class Refused(Exception):
    """A graph not recorded, and why (a plain call serves that size): for good (``lasting``: the
    program draws random numbers, the capture failed) or for this call only (the arena in use)."""

    def __init__(self, reason: str, lasting: bool = True):
        super().__init__(reason)
        self.lasting = lasting


class OutKind(enum.Enum):
    """Where a recorded graph's output comes from at a replay."""

    INPUT = "input"  # a view of one of the call's inputs (a saved parameter)
    CLONED = "cloned"  # an arena slot copied out (user outputs, gradients)
    SAVED = "saved"  # a forward arena slot handed out as it is (an activation the backward reads)


class SourceKind(enum.Enum):
    """Where a recorded graph reads one input from."""

    IN_PLACE = "in_place"  # the call's own tensor, which must be at the recorded address
    ARENA = "arena"  # a slot of the forward arena (the backward reading saved activations)
    COPIED = "copied"  # the input arena, filled from the call's tensor before the replay


@dataclass(frozen=True, kw_only=True)
class Layout:
    """A tensor's shape, strides and dtype."""

    shape: tuple
    stride: tuple
    dtype: torch.dtype

    @staticmethod
    def of(t) -> "Layout":
        return Layout(shape=tuple(t.shape), stride=tuple(t.stride()), dtype=t.dtype)

    @staticmethod
    def dense(t) -> "Layout":
        """``t``'s layout where no two of its elements share memory (an arena slot keeps its strides:
        a backward then meets the layout it met without graphs), else row-major."""
        if _disjoint(t.shape, t.stride()):
            return Layout.of(t)
        return Layout(shape=tuple(t.shape), stride=tuple(torch.empty(t.shape, device="meta").stride()), dtype=t.dtype)



def _disjoint(shape, stride) -> bool:
    """Whether no two elements of a tensor of ``shape`` and ``stride`` share memory (each dim's
    stride, in increasing order, passes the extent of the smaller ones: sufficient, not necessary).

    >>> _disjoint((3, 4), (1, 3)), _disjoint((3, 4), (8, 1)), _disjoint((3, 4), (0, 1))
    (True, True, False)
    """
    reach = 0
    for d, st in sorted(((d, st) for d, st in zip(shape, stride) if d != 1), key=lambda p: p[1]):
        if d == 0:
            return True
        if st <= reach:
            return False
        reach += (d - 1) * st
    return True


def _aligned(n: int) -> int:
    return -(-n // 256) * 256


def _use_count(t) -> int:
    return torch._C._storage_Use_Count(t.untyped_storage()._cdata)


class Arena:
    """One buffer that graphs read or write at fixed offsets; a new (larger) buffer is a new
    generation, and graphs recorded against an older one are not replayed."""

    def __init__(self):
        self.buf = None
        self.gen = 0
        self.writer = None  # the forward graph whose replay (or recording step) filled it last
        self._base = 0

    def fit(self, nbytes: int, device) -> int:
        """Make room for ``nbytes`` on ``device``; the generation graphs recorded now hold."""
        if self.buf is None or self.buf.numel() < nbytes or self.buf.device != device:
            # Doubled: each new buffer drops the graphs recorded against the old one (recorded again
            # at their next call), so a run whose sizes grow pays that a few times, not at each size.
            grown = self.buf.numel() * 2 if self.buf is not None and self.buf.device == device else 0
            self.buf = torch.empty(max(nbytes, grown), dtype=torch.uint8, device=device)
            self.gen += 1
            self.writer = None
            self._base = _use_count(self.buf)
        return self.gen

    def view(self, offset: int, layout: Layout):
        """The slot at byte ``offset`` seen as ``layout`` (a new tensor object each time)."""
        out = torch.empty(0, dtype=layout.dtype, device=self.buf.device)
        return out.set_(self.buf.untyped_storage(), offset // layout.dtype.itemsize, layout.shape, layout.stride)

    def holds(self, t) -> bool:
        """Whether ``t`` views this arena's current buffer."""
        return self.buf is not None and t.untyped_storage().data_ptr() == self.buf.untyped_storage().data_ptr()

    def in_use(self) -> bool:
        """Whether a view of the buffer made by :meth:`view` is alive outside this object."""
        return self.buf is not None and _use_count(self.buf) > self._base


#: The forward graphs' outputs; the inputs copied in before forward and before backward replays; the
#: backward graphs' outputs.
FORWARD, FORWARD_INPUTS, BACKWARD_INPUTS, OUTPUTS = Arena(), Arena(), Arena(), Arena()


@dataclass(frozen=True, kw_only=True)
class Source:
    """Where input ``k`` of a recorded graph comes from (``ptr``: the address it must have)."""

    kind: SourceKind
    layout: Layout
    ptr: int = 0
    offset: int = 0
    inputs: Optional[Arena] = None  # COPIED: the input arena of the graph's role

    def tensor(self, given):
        """The tensor the graph's program reads: ``given`` (the call's) or the arena slot."""
        if self.kind is SourceKind.IN_PLACE:
            return given
        return (FORWARD if self.kind is SourceKind.ARENA else self.inputs).view(self.offset, self.layout)


@dataclass(frozen=True, kw_only=True)
class OutSlot:
    """Where one output of a recorded graph is found after a replay."""

    kind: OutKind
    layout: Layout
    offset: int = 0  # CLONED / SAVED: byte offset in the graph's output arena
    input: int = -1  # INPUT: the input it views ...
    elem_offset: int = 0  # ... at this storage offset from the input's own


@dataclass(kw_only=True)
class Recorded:
    """One recorded graph: how to replay it, what it reads and writes, and the arena generations
    it was recorded against (``reads``: the forward graph whose arena slots a backward reads)."""

    replay: Callable[[list], None]
    sources: tuple
    outs: tuple
    gens: tuple
    out_arena: Arena
    reads: Optional["Recorded"] = None


_REFUSED = object()


class CudaRecorder:
    """Records on one side stream into one private pool (every graph shares it)."""

    def __init__(self, device: int):
        self.device, self.stream, self.pool = device, None, None

    def warm(self, run) -> None:
        """``run()`` once on the recording stream (libraries set up per stream there: cuBLAS's
        workspace), its results dropped."""
        if self.stream is None:
            self.stream = torch.cuda.Stream(self.device)
            with torch.cuda.device(self.device):
                self.pool = torch.cuda.graph_pool_handle()
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            run()
        current.wait_stream(self.stream)

    def record(self, body, inputs) -> Callable[[list], None]:
        graph = torch.cuda.CUDAGraph()
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)
        with cublas_warm.exclusive(), torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            # Not torch.cuda.graph: it collects garbage and empties the allocator's cache on entry
            # (a full collection of a compiler's heap takes 100s of ms).  thread_local: the loader
            # thread may load kernels meanwhile.
            graph.capture_begin(pool=self.pool, capture_error_mode="thread_local")
            recorded = False
            try:
                body(inputs)
                recorded = True
            finally:
                if not recorded:  # the failure propagates; the capture it invalidated ends first
                    with contextlib.suppress(RuntimeError):
                        graph.capture_end()
            graph.capture_end()
        current.wait_stream(self.stream)
        return lambda _: graph.replay()


class EmulatedRecorder:
    """Records nothing; a replay runs the program again (CPU tests of the replay rules)."""

    def warm(self, run) -> None:
        run()

    def record(self, body, inputs) -> Callable[[list], None]:
        return body


def recorder_for(device) -> Any:
    """The recorder for programs on ``device`` under :data:`MODE` (or, where that is off, the
    environment's ``SYMSHAPE_TRAIN_GRAPHS`` at this compile), or None (no graphs)."""
    mode = MODE if MODE != "0" else os.environ.get("SYMSHAPE_TRAIN_GRAPHS", "0")
    if mode == "emulate":
        return EmulatedRecorder()
    if mode == "1" and device is not None and device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        if index not in _CUDA:
            _CUDA[index] = CudaRecorder(index)
        return _CUDA[index]
    return None


#: One recorder (stream and private pool) per CUDA device.
_CUDA: dict = {}


#: A forward call that recorded: its outputs' (address, layout) -> (its graph, slot), which that
#: step's backward maps its inputs by when it records.  Cleared at every forward call.
_LAST_FORWARD: dict = {}


def _parameter(t) -> bool:
    return t.is_leaf and t.requires_grad


def _extent(layout: Layout) -> int:
    """Bytes from a tensor's first element to past its last, for ``layout``."""
    if any(d == 0 for d in layout.shape):
        return 0
    return (1 + sum((d - 1) * abs(s) for d, s in zip(layout.shape, layout.stride))) * layout.dtype.itemsize


def _forward_slot(t):
    """``(forward graph, slot)`` whose output ``t`` is (a forward arena view, or an output of the
    forward call that just recorded), or None."""
    hit = _LAST_FORWARD.get((t.data_ptr(), Layout.of(t)))
    if hit is not None:
        return hit
    writer = FORWARD.writer
    if writer is None or not FORWARD.holds(t):
        return None
    offset, layout = t.data_ptr() - FORWARD.buf.data_ptr(), Layout.of(t)
    for slot in writer.outs:
        if slot.kind is OutKind.SAVED and slot.offset == offset and slot.layout == layout:
            return writer, slot
    return None


@dataclass(kw_only=True)
class _Prepared:
    """What a record needs from the inputs of the plain call before that call consumes them."""

    sources: list
    kept: list  # the in-place inputs (None elsewhere)
    storages: list  # per input held: (storage address, storage offset), for outputs that view one
    held: list  # the inputs whose storages ``storages`` names, alive until the record is made
    reads: Optional[Recorded] = None


class TrainGraphs:
    """A compiled training graph (``role``: ``"forward"`` or ``"backward"``) that records a CUDA
    graph per input layout and replays it where the rules of the module docstring allow;
    ``user_outputs``: how many leading tensor outputs of a forward are the caller's (copied out).

    >>> import compiler
    >>> f = compiler.compile(lambda x: (x * 2,), "x: f32[N]")
    >>> g = TrainGraphs(f, role="forward", user_outputs=1, recorder=EmulatedRecorder())
    >>> [g(Owned([torch.ones(n)]))[0].sum().item() for n in (2, 3, 2, 3, 2)]  # records at 2, 3; replays
    [4.0, 6.0, 4.0, 6.0, 4.0]
    >>> STATS["replays"] >= 1
    True
    """

    def __init__(self, compiled, *, role: str, user_outputs: int, recorder):
        self.compiled, self.role, self.user_outputs, self.recorder = compiled, role, user_outputs, recorder
        self.graphs: dict = {}
        self.last_ptrs: Optional[list] = None
        self.calls: dict = {}  # calls per input layout so far (bounded)
        self.repeats: list = []  # whether each of the last calls met a layout seen before

    def _note(self, key) -> int:
        """Count a call at ``key``; how many calls met it before."""
        n = self.calls.get(key, 0)
        if n or len(self.calls) < 4 * MAX_GRAPHS:
            self.calls[key] = n + 1
        self.repeats = (self.repeats + [n > 0])[-RECENT:]
        return n

    def _worth_recording(self, before: int) -> bool:
        """Whether a call at a layout met ``before`` times should record now: at its second call,
        or at its first where most recent calls met a layout seen before (a run that keeps coming
        back to its sizes: the recording then pays from the next call); a run that meets a new
        length at every step records nothing."""
        if len(self.graphs) >= MAX_GRAPHS:
            return False
        return before >= 1 or (len(self.repeats) >= RECENT // 2 and 2 * sum(self.repeats) >= len(self.repeats))

    def __call__(self, tensors):
        key = tuple((tuple(t.shape), tuple(t.stride()), t.dtype, t.device) for t in tensors)
        if self.role == "forward":
            _LAST_FORWARD.clear()
        before = self._note(key)
        g = self.graphs.get(key)
        if isinstance(g, Recorded):
            if self._replayable(key, g, tensors):
                return self._replay(g, tensors)
            g = self.graphs.get(key)
        ptrs = [t.data_ptr() for t in tensors]
        last, self.last_ptrs = self.last_ptrs, ptrs
        prep = None
        if g is None and last is not None and self._worth_recording(before):
            stable = [k < len(last) and last[k] == p and _parameter(t) for k, (p, t) in enumerate(zip(ptrs, tensors))]
            try:
                prep = self._prepare(tensors, stable)
            except Refused as e:
                self._refuse(key, e)
        STATS["plain"] += 1
        out = self.compiled(tensors)
        if prep is not None:
            try:
                self.graphs[key] = self._record(prep, out)
            except Refused as e:
                self._refuse(key, e)
        return out

    def _refuse(self, key, e) -> None:
        if e.lasting:
            self.graphs[key] = _REFUSED
        if len(STATS["refused"]) < 64:
            STATS["refused"].append(f"{self.role}: {e}")

    def _replayable(self, key, g: Recorded, tensors) -> bool:
        if any(arena.gen != gen for arena, gen in g.gens):
            del self.graphs[key]  # recorded against a buffer since replaced: recorded again
            return False
        for src, t in zip(g.sources, tensors):
            if src.kind is not SourceKind.COPIED and t.data_ptr() != src.ptr:
                return False
        if self.role == "forward" and FORWARD.in_use():
            return False  # the saved activations of an earlier replay are alive
        return g.reads is None or FORWARD.writer is g.reads

    def _replay(self, g: Recorded, tensors) -> tuple:
        for src, t in zip(g.sources, tensors):
            if src.kind is SourceKind.COPIED:
                src.inputs.view(src.offset, src.layout).copy_(t)
        g.replay(list(tensors))
        if self.role == "forward":
            FORWARD.writer = g
        STATS["replays"] += 1
        out = []
        for slot in g.outs:
            if slot.kind is OutKind.INPUT:
                base = tensors[slot.input]
                out.append(base.as_strided(slot.layout.shape, slot.layout.stride,
                                           base.storage_offset() + slot.elem_offset))
            else:
                v = g.out_arena.view(slot.offset, slot.layout)
                out.append(v if slot.kind is OutKind.SAVED else v.clone())
        return tuple(out)

    def _prepare(self, tensors, stable) -> _Prepared:
        """Classify the inputs (in place, forward arena, copied) and fill the arenas with the
        copied ones (and, for a backward whose forward ran without its graph, the saved
        activations), before the plain call consumes them."""
        for v in getattr(self.compiled, "variants", ()):
            why = state_blocker(v.tp)
            if why is not None:
                raise Refused(why)
        device = tensors[0].device if tensors else None
        inputs = FORWARD_INPUTS if self.role == "forward" else BACKWARD_INPUTS
        sources, kept, to_arena, copies, reads, off = [], [], [], [], None, 0
        for k, t in enumerate(tensors):
            lay = Layout.of(t)
            hit = _forward_slot(t) if self.role == "backward" else None
            if hit is not None:
                if reads is not None and hit[0] is not reads:
                    raise Refused("inputs from two forward graphs", lasting=False)
                reads, slot = hit
                sources.append(Source(kind=SourceKind.ARENA, layout=lay, offset=slot.offset))
                kept.append(None)
                if not FORWARD.holds(t):
                    to_arena.append((slot, t))
            elif stable[k]:
                sources.append(Source(kind=SourceKind.IN_PLACE, layout=lay, ptr=t.data_ptr()))
                kept.append(t)
            else:
                sources.append(Source(kind=SourceKind.COPIED, layout=lay, offset=off, inputs=inputs))
                copies.append((off, lay, t))
                kept.append(None)
                off += _aligned(_extent(lay))
        if self.role == "backward":
            if reads is None:
                raise Refused("no input is an output of a recorded forward graph", lasting=False)
            if dict(reads.gens).get(FORWARD) != FORWARD.gen:
                raise Refused("the forward arena was replaced since its forward recorded", lasting=False)
            if to_arena and FORWARD.in_use():
                raise Refused("the forward arena holds activations still in use", lasting=False)
            for slot, t in to_arena:  # what the forward's replay would have written
                FORWARD.view(slot.offset, slot.layout).copy_(t)
            FORWARD.writer = reads
            base = FORWARD.buf.data_ptr()
            sources = [Source(kind=s.kind, layout=s.layout, offset=s.offset, ptr=base + s.offset)
                       if s.kind is SourceKind.ARENA else s for s in sources]
        inputs.fit(off, device)
        for o, lay, t in copies:
            inputs.view(o, lay).copy_(t)
        # Outputs are told to view an input by its storage's address, so only inputs held through
        # the plain call count: a backward frees its saved activations as it goes, and an output
        # may be allocated where one was (an activation seen through the arena is not one: it is
        # copied out like any other output).
        held = [None if s.kind is SourceKind.ARENA else t for s, t in zip(sources, tensors)]
        storages = [None if t is None else (t.untyped_storage().data_ptr(), t.storage_offset()) for t in held]
        return _Prepared(sources=sources, kept=kept, storages=storages, held=held, reads=reads)

    def _record(self, prep: _Prepared, out) -> Recorded:
        """Record the graph of the call whose inputs ``prep`` classified and whose outputs were ``out``."""
        arena = FORWARD if self.role == "forward" else OUTPUTS
        slots, off = [], 0
        by_storage = {st[0]: k for k, st in enumerate(prep.storages) if st is not None and st[0]}
        for i, o in enumerate(out):
            k = by_storage.get(o.untyped_storage().data_ptr())
            if k is not None:
                slots.append(OutSlot(kind=OutKind.INPUT, layout=Layout.of(o), input=k,
                                     elem_offset=o.storage_offset() - prep.storages[k][1]))
                continue
            lay = Layout.dense(o)
            kind = OutKind.CLONED if self.role == "backward" or i < self.user_outputs else OutKind.SAVED
            slots.append(OutSlot(kind=kind, layout=lay, offset=off))
            off += _aligned(_extent(lay))
        device = out[0].device if len(out) else None
        arena.fit(off, device)
        inputs = FORWARD_INPUTS if self.role == "forward" else BACKWARD_INPUTS
        gens = ((FORWARD, FORWARD.gen), (inputs, inputs.gen)) + (((OUTPUTS, OUTPUTS.gen),) if arena is OUTPUTS else ())
        sources, compiled = tuple(prep.sources), self.compiled

        def body(given):
            row_buckets.forget_row_copy()  # a copy an earlier run made is not the graph's to read
            res = compiled(Owned([src.tensor(t) for src, t in zip(sources, given)]))
            for slot, o in zip(slots, res):
                if slot.kind is not OutKind.INPUT:
                    arena.view(slot.offset, slot.layout).copy_(o)

        # One more run outside the recording: bindings, classifications and lazy set-ups of this
        # size happen there (the recording may not synchronize), on the arenas' real values.
        row_buckets.forget_row_copy()
        try:
            # A failure here (out of memory for the recording's run, an op the capture refuses) is
            # the graph's, not the step's: that size runs without a graph.
            self.recorder.warm(lambda: compiled(Owned([src.tensor(t) for src, t in zip(sources, prep.kept)])))
            replay = self.recorder.record(body, list(prep.kept))
        except (RuntimeError, TypeError, ValueError) as e:
            raise Refused(f"recording failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}") from e
        finally:
            row_buckets.forget_row_copy()  # the recording's copies are the graph's (its pool's) alone
        STATS["recorded"] += 1
        rec = Recorded(replay=replay, sources=sources, outs=tuple(slots), gens=gens, out_arena=arena, reads=prep.reads)
        if self.role == "forward":
            for o, slot in zip(out, slots):
                if slot.kind is OutKind.SAVED:
                    _LAST_FORWARD[(o.data_ptr(), Layout.of(o))] = (rec, slot)
        return rec


def wrap(compiled, *, role: str, user_outputs: Optional[int], device):
    """``compiled`` with CUDA graphs (:class:`TrainGraphs`) where :data:`MODE` records them on
    ``device`` and a forward's user outputs are known; else ``compiled`` itself.

    >>> wrap(len, role="forward", user_outputs=None, device=torch.device("cpu")) is len
    True
    """
    recorder = recorder_for(device)
    if recorder is None or (role == "forward" and user_outputs is None):
        return compiled
    return TrainGraphs(compiled, role=role, user_outputs=user_outputs or 0, recorder=recorder)


__all__ = ["TrainGraphs", "wrap", "Arena", "Layout", "MODE", "STATS", "Refused", "recorder_for"]
