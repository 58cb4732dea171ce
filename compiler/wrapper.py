"""A compiled variant's run as one generated straight-line Python function.

Each step of the plan (allocate, launch a kernel, call an ATen op) becomes one
line with its buffers as local variables and its sizes as indexes into the
tuple the size function returns: a call runs no interpreter over a step list
and resolves no argument templates.  A buffer's local is deleted after its last
use, so that the allocator reuses its memory for later steps (a run's peak is
the largest live set, not every intermediate; in a CUDA graph, the pool's size).

Example::

    >>> import torch
    >>> src, fn = straight_line([ExternStep(torch.add, (BufSlot("x"), SizeSlot(0)), {}, "y")],
    ...                         ["x"], [], [BufSlot("y")])
    >>> print(src.splitlines()[3])
        b_y = F0(b_x, s[0])
    >>> fn([torch.ones(2)], (3,), (), [], None)[0].tolist()
    [4.0, 4.0]
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

import torch


@dataclass(frozen=True)
class SizeSlot:
    """A size in an extern's arguments: the ``index``-th value the size function computes."""

    index: int


@dataclass(frozen=True)
class BufSlot:
    """A tensor in an extern's arguments: the run's buffer named ``name``."""

    name: str


class Owned(list):
    """Input tensors handed over to a run: it drops the list's references once it has read them,
    so an input is freed at its last use (AOTAutograd's boxed calls steal their arguments: a
    backward's saved activations then go as it consumes them, not at its end).

    >>> _, fn = straight_line([ExternStep(torch.neg, (BufSlot("x"),), {}, "y")], ["x"], [], [BufSlot("y")])
    >>> args = Owned([torch.ones(1)])
    >>> fn(args, (), (), [], None)[0].tolist(), len(args)
    ([-1.0], 0)
    """


class _Device:
    def __repr__(self):
        return "DEVICE"


#: The inputs' device in an extern's arguments (``torch.arange(..., device=...)``).
DEVICE = _Device()


class _RunCache:
    def __repr__(self):
        return "RUN_CACHE"


#: A dict made fresh by every run, in an extern's arguments: what several steps of one run
#: share (:mod:`compiler.shared_masks`), never kept from one run to the next.
RUN_CACHE = _RunCache()


class _Sizes:
    def __repr__(self):
        return "SIZES"


#: The run's sizes tuple in an extern's arguments (a view chain's own calls read their sizes from it:
#: :mod:`compiler.view_chains`).
SIZES = _Sizes()


@dataclass(frozen=True)
class Alloc:
    """A kernel output buffer to allocate: shape and strides as size-slot indices."""

    name: str
    shape: tuple
    strides: tuple
    dtype: torch.dtype
    #: Where set, ``room(alloc, shape, strides, dtype)`` makes the buffer instead of ``alloc``
    #: (storage with room for padded matmul rows: :func:`compiler.row_buckets.alloc_with_room`).
    room: Any = None


@dataclass(frozen=True)
class KernelStep:
    """Allocate ``allocs``, then launch a compiled kernel on ``buffers`` (made contiguous where flagged).

    ``launch(tensors, sizes)`` is the target's launcher; one with a ``bind(sizes)`` method
    gives a launch with the sizes already applied (see :func:`bind_launches`)."""

    launch: Any
    buffers: tuple
    allocs: tuple
    contiguous: tuple
    #: The IR kernel it launches (which sizes it reads: :mod:`compiler.piecewise`), where known.
    kernel: Any = None


@dataclass(frozen=True)
class ExternStep:
    """Call an ATen op (``target``) on resolved argument templates; store the result as ``out``."""

    target: Any
    args: Any
    kwargs: Any
    out: str


def _fast_calls() -> dict:
    """ATen overloads with a torch function that runs the same kernel through torch's
    unboxed argument parser: a few microseconds less per call than ``OpOverload.__call__``."""
    aten = torch.ops.aten
    return {aten.view.default: torch.Tensor.view, aten.t.default: torch.t, aten.transpose.int: torch.transpose,
            aten.addmm.default: torch.addmm, aten.mm.default: torch.mm, aten.bmm.default: torch.bmm,
            aten.permute.default: torch.permute, aten.expand.default: torch.Tensor.expand,
            aten.unsqueeze.default: torch.unsqueeze, aten.contiguous.default: torch.Tensor.contiguous,
            aten._unsafe_view.default: torch.Tensor.view,
            aten.scaled_dot_product_attention.default: torch.nn.functional.scaled_dot_product_attention}


FAST_CALLS = _fast_calls()


def bind_launches(plan, sizes, bound=True) -> tuple:
    """One ``launch(buffers)`` per kernel step of ``plan``, bound to ``sizes`` (the kernels' size
    arguments): the wrapper's ``launches``; ``bound=False``: the generic launch with the sizes
    passed at each call, even where a launch has its own ``bind``.

    >>> seen = []
    >>> step = KernelStep(lambda ts, sz: seen.append((ts, sz)), ("x",), (), (False,))
    >>> bind_launches([step], (5,))[0](["X"]); seen
    [(['X'], (5,))]
    """
    out = []
    for step in plan:
        if isinstance(step, KernelStep):
            bind = getattr(step.launch, "bind", None) if bound else None
            out.append(bind(sizes) if bind is not None else
                       (lambda tensors, _launch=step.launch: _launch(tensors, sizes)))
    return tuple(out)


def unbound_launches(steps, sizes_of) -> Optional[tuple]:
    """One ``launch(buffers)`` per kernel step of ``steps``, each planning its launch at the call
    (the kernel's ``launch_at``) at the sizes ``sizes_of()`` returns then; nothing is kept per
    size.  For calls that meet a new size at nearly every call (a training loop, a decode), where
    bound launches (:func:`bind_launches`) would each serve one call and, kept, make Python's full
    garbage collections frequent.  None where a step's launch has no ``launch_at`` (C++ kernels).

    >>> seen = []
    >>> class L:
    ...     def launch_at(self, tensors, sizes): seen.append((tensors, sizes))
    >>> cell = [(5,)]
    >>> launches = unbound_launches([KernelStep(L(), ("x",), (), (False,))], lambda: cell[0])
    >>> launches[0](["X"]); cell[0] = (6,); launches[0](["X"]); seen
    [(['X'], (5,)), (['X'], (6,))]
    """
    return launches_from(launch_ats(steps), sizes_of)


def launch_ats(steps) -> Optional[tuple]:
    """The kernel steps' ``launch_at`` methods, in plan order; None where one has none."""
    ats = tuple(getattr(step.launch, "launch_at", None) for step in steps if isinstance(step, KernelStep))
    return None if any(at is None for at in ats) else ats


def launches_from(ats, sizes_of) -> Optional[tuple]:
    """:func:`unbound_launches` from the steps' :func:`launch_ats` (computed once by a caller that
    makes launches at every call)."""
    if ats is None:
        return None
    return tuple([lambda tensors, _at=at: _at(tensors, sizes_of()) for at in ats])


def linear_calls(plan, outputs) -> list:
    """``plan`` with ``addmm(b, x, t(w))`` and ``mm(x, t(w))`` as one ``F.linear(x, w[, b])`` call.

    ATen's ``linear`` on a 2-D input runs exactly ``addmm(b, x, w.t())`` (or ``mm``), so the
    kernel and the result are eager's; the wrapper makes one call instead of two.  Only where
    the transposed weight has no other use.

    >>> aten = torch.ops.aten
    >>> plan = [ExternStep(aten.t.default, (BufSlot("w"),), {}, "wt"),
    ...         ExternStep(aten.addmm.default, (BufSlot("b"), BufSlot("x"), BufSlot("wt")), {}, "y")]
    >>> [(s.target.__name__, s.args) for s in linear_calls(plan, [BufSlot("y")])]
    [('linear', (BufSlot(name='x'), BufSlot(name='w'), BufSlot(name='b')))]
    """
    aten = torch.ops.aten
    uses: dict = {}
    for step in plan:
        for n in step_buffers(step)[0]:
            uses[n] = uses.get(n, 0) + 1
    for n in template_buffers(list(outputs), set()):
        uses[n] = uses.get(n, 0) + 2
    transposed = {s.out: s.args[0] for s in plan if isinstance(s, ExternStep) and s.target is aten.t.default
                  and len(s.args) == 1 and not s.kwargs and isinstance(s.args[0], BufSlot)}
    fused, out = set(), []
    for s in plan:
        if isinstance(s, ExternStep) and not s.kwargs and s.target in (aten.addmm.default, aten.mm.default):
            w = s.args[-1]
            n = 3 if s.target is aten.addmm.default else 2
            if len(s.args) == n and isinstance(w, BufSlot) and w.name in transposed and uses.get(w.name) == 1:
                fused.add(w.name)
                args = (s.args[1], transposed[w.name], s.args[0]) if n == 3 else (s.args[0], transposed[w.name])
                out.append(ExternStep(torch.nn.functional.linear, args, {}, s.out))
                continue
        out.append(s)
    return [s for s in out if not (isinstance(s, ExternStep) and s.target is aten.t.default and s.out in fused)]


try:
    # ``torch.empty_strided`` on the CPU without the dispatcher or argument parsing: the
    # allocator Inductor's CPU wrappers call (a private binding, hence the fallback).
    from torch._C._dynamo.guards import _empty_strided_cpu as _EMPTY_CPU
except ImportError:  # pragma: no cover - a build without it: the public call, same result
    def _EMPTY_CPU(shape, strides, dtype):
        return torch.empty_strided(shape, strides, dtype=dtype, device="cpu")

try:
    # The same for the current CUDA device (2.4 us against 5.1 us for torch.empty_strided on the H100
    # machine's host), and a view with given sizes and strides without the dispatcher (2.0 us against
    # 4.2 us for reshape): the bindings Inductor's generated wrappers call.
    from torch._C._dynamo.guards import _empty_strided_cuda as _EMPTY_CUDA
    from torch._C._dynamo.guards import _reinterpret_tensor as _REINTERPRET
except ImportError:  # pragma: no cover - a build without them: the dispatcher's calls
    _EMPTY_CUDA = None

    def _REINTERPRET(x, size, stride, offset):
        return x.as_strided(size, stride, x.storage_offset() + offset)

#: ``reinterpret(x, size, stride, offset)``: a view of ``x``'s storage without the dispatcher,
#: starting ``offset`` elements past ``x``'s own start (torch's binding adds ``x``'s storage
#: offset: an absolute offset given it doubled the start of a view of an unbind's second part).
reinterpret = _REINTERPRET

_cuda_device = getattr(torch._C, "_cuda_getDevice", None)


def allocator(dev):
    """``alloc(shape, strides, dtype)`` making uninitialized tensors on ``dev``: without the
    dispatcher on the CPU and on the current CUDA device, else ``torch.empty_strided``.

    >>> allocator(torch.device("cpu"))((2, 3), (3, 1), torch.float16).dtype
    torch.float16
    """
    if dev.type == "cpu":
        return _EMPTY_CPU
    if dev.type == "cuda" and _EMPTY_CUDA is not None and _cuda_device is not None and dev.index == _cuda_device():
        return _EMPTY_CUDA
    return lambda shape, strides, dtype: torch.empty_strided(shape, strides, dtype=dtype, device=dev)


def _var(name: str) -> str:
    return "b_" + re.sub(r"\W", "_", name)


class _Writer:
    def __init__(self):
        self.ns: dict = {"empty_strided": torch.empty_strided, "OWNED": Owned, "ALLOCATOR": allocator,
                         "REINTERPRET": _REINTERPRET, "GRAD_ON": torch.is_grad_enabled}
        self.lines: list[str] = []
        self.count = 0
        self.run_cache = False

    def obj(self, value, prefix="K") -> str:
        """A name in the function's globals bound to ``value``."""
        name = f"{prefix}{self.count}"
        self.count += 1
        self.ns[name] = value
        return name

    def code(self, a) -> str:
        """Python code for an argument template."""
        if isinstance(a, BufSlot):
            return _var(a.name)
        if isinstance(a, SizeSlot):
            return f"s[{a.index}]"
        if a is DEVICE:
            return "dev"
        if a is RUN_CACHE:
            self.run_cache = True
            return "rc"
        if a is SIZES:
            return "s"
        if isinstance(a, list):
            return "[" + ", ".join(self.code(x) for x in a) + "]"
        if isinstance(a, tuple) and not hasattr(a, "_fields"):
            return "(" + "".join(self.code(x) + ", " for x in a) + ")"
        if isinstance(a, dict):
            return "{" + ", ".join(f"{k!r}: {self.code(v)}" for k, v in a.items()) + "}"
        if a is None or isinstance(a, (bool, int, str)):
            return repr(a)
        if isinstance(a, float) and a == a and a not in (float("inf"), float("-inf")):
            return repr(a)
        return self.obj(a)


def template_slots(a, kind: type, into: set) -> set:
    """The slots of class ``kind`` (:class:`BufSlot` or :class:`SizeSlot`) in an argument
    template, walked through lists, tuples and dict values (added to ``into``).

    >>> sorted(s.index for s in template_slots([SizeSlot(1), {"k": (BufSlot("y"), SizeSlot(0))}], SizeSlot, set()))
    [0, 1]
    """
    if isinstance(a, kind):
        into.add(a)
    elif isinstance(a, (list, tuple)) and not hasattr(a, "_fields"):
        for x in a:
            template_slots(x, kind, into)
    elif isinstance(a, dict):
        for x in a.values():
            template_slots(x, kind, into)
    return into


def template_buffers(a, into: set) -> set:
    """The buffer names an argument template reads (added to ``into``).

    >>> sorted(template_buffers([BufSlot("x"), {"k": (BufSlot("y"), SizeSlot(0))}], set()))
    ['x', 'y']
    """
    into.update(slot.name for slot in template_slots(a, BufSlot, set()))
    return into


def step_buffers(step) -> tuple:
    """``(reads, writes)``: the buffer names a plan step reads (made before it) and makes.

    >>> step_buffers(KernelStep(None, ("x", "y"), (Alloc("y", (), (), torch.float32),), (False, False)))
    ({'x'}, {'y'})
    >>> reads, writes = step_buffers(ExternStep(torch.add, (BufSlot("x"), SizeSlot(0)), {"alpha": BufSlot("a")}, "z"))
    >>> sorted(reads), writes
    (['a', 'x'], {'z'})
    """
    if isinstance(step, KernelStep):
        writes = {al.name for al in step.allocs}
        return set(step.buffers) - writes, writes
    return template_buffers([step.args, step.kwargs], set()), {step.out}


def _last_uses(plan, outputs) -> dict:
    """Step index -> the buffers no later step reads and the run does not return."""
    last: dict = {}
    for n, step in enumerate(plan):
        reads, writes = step_buffers(step)
        for name in reads | writes:
            last[name] = n
    kept = template_buffers(list(outputs), set())
    out: dict = {}
    for name, n in last.items():
        if name not in kept:
            out.setdefault(n, []).append(name)
    return out


def straight_line(plan, inputs, consts, outputs, skip=frozenset(), cpu_allocs=False, views=None,
                  untracked_outputs=False, dense_as_traced=frozenset()):
    """``(source, fn)``: ``fn(tensors, s, launches, const_tensors, dev)`` runs ``plan``
    (:class:`KernelStep` / :class:`ExternStep`) and returns the output leaves;
    ``s`` holds the size function's values, ``launches`` one ``launch(buffers)`` per
    kernel step in plan order, bound to the call's sizes (:func:`bind_launches`).
    Steps whose index is in ``skip`` are left out (``launches`` still counts them).
    ``cpu_allocs``: kernels' buffers are host memory (C++ kernels), allocated without
    the dispatcher (about half of ``torch.empty_strided``'s host time); otherwise they come
    from :func:`allocator` for the call's device.
    ``views``: per output name of a step viewing its first argument, the size slots of its shape
    and strides (and of its offset from the argument's, where given): an argument that is
    contiguous and not tracked by autograd is viewed with them directly (what the step returns
    for it, without the dispatcher); any other runs the step (:mod:`compiler.view_chains`).  A
    parameter (autograd tracks it) is viewed so only while grad mode is off, and only where the
    view is not returned, unless ``untracked_outputs`` (a training graph: AOTAutograd saves its
    outputs for the backward, where no autograd reads their flags).
    ``dense_as_traced``: names of the values whose traced tensor was contiguous.  Where such a
    value is an input or a view of one, an ATen op that is not a view takes it dense: the trace
    ran on contiguous inputs, so a ``.contiguous()`` eager's composite op takes before its inner
    op (``pdist``, ``group_norm``, ``embedding_bag``) left no node, and the inner op, handed the
    caller's strided tensor, would read its memory as dense."""
    w = _Writer()
    views = views or {}
    returned = set() if untracked_outputs else _returned_or_viewed(plan, outputs)
    from_inputs = set(inputs)  # inputs and the views of them: laid out as the caller's tensors are
    if cpu_allocs:
        w.ns["empty_strided"] = _EMPTY_CPU
    body = w.lines
    if not cpu_allocs and any(isinstance(st, KernelStep) and st.allocs for st in plan):
        body.append("    alloc = ALLOCATOR(dev)")
    if inputs:
        body.append(f"    {''.join(_var(n) + ', ' for n in inputs)}= tensors")
        body.append("    if tensors.__class__ is OWNED: tensors.clear()")
    if consts:
        body.append(f"    {''.join(_var(n) + ', ' for n in consts)}= const_tensors")
    kept = [n for n in range(len(plan)) if n not in skip]
    dead = {kept[i]: names for i, names in _last_uses([plan[n] for n in kept], outputs).items()}
    nk = 0
    for n, step in enumerate(plan):
        if n in skip:
            nk += isinstance(step, KernelStep)
            continue
        if isinstance(step, KernelStep):
            for al in step.allocs:
                shape = "(" + "".join(f"s[{i}], " for i in al.shape) + ")"
                strides = "(" + "".join(f"s[{i}], " for i in al.strides) + ")"
                dtype = w.obj(al.dtype, 'D')
                make = 'empty_strided' if cpu_allocs else 'alloc'
                if al.room is not None:
                    body.append(f"    {_var(al.name)} = {w.obj(al.room, 'R')}({make}, {shape}, {strides}, {dtype})")
                else:
                    body.append(f"    {_var(al.name)} = {make}({shape}, {strides}, {dtype})")
            args = []
            for name, contig in zip(step.buffers, step.contiguous):
                v = _var(name)
                # Buffers made outside kernels (inputs, ATen results) may be strided views:
                # kernels index them densely, so only those are checked (no copy when dense).
                args.append(f"({v} if {v}.is_contiguous() else {v}.contiguous())" if contig else v)
            body.append(f"    launches[{nk}]([{', '.join(args)}])")
            nk += 1
        else:
            call = _extern_args(w, step, from_inputs, dense_as_traced, views)
            target = FAST_CALLS.get(step.target, step.target)
            made = f"{w.obj(target, 'F')}({', '.join(call)})"
            view = views.get(step.out)
            if view is not None and step.args and isinstance(step.args[0], BufSlot) and not step.kwargs:
                made = _direct_view(w.code(step.args[0]), view, made, step.out in returned)
            body.append(f"    {_var(step.out)} = {made}")
        if n in dead:
            body.append(f"    del {', '.join(_var(name) for name in sorted(dead[n]))}")
    body.append(f"    return [{', '.join(w.code(o) for o in outputs)}]")
    if w.run_cache:
        body.insert(0, "    rc = {}")
    src = "def run(tensors, s, launches, const_tensors, dev):\n" + "\n".join(body) + "\n"
    exec(compile(src, "<symshape wrapper>", "exec"), w.ns)  # noqa: S102 - our own generated code
    return src, w.ns["run"]


def _extern_args(w, step, from_inputs: set, dense_as_traced, views) -> list:
    """The argument code of an ATen step (its dense copies included, :func:`_dense_args`); a
    view of an input joins ``from_inputs``: it is laid out as the input is."""
    dense = _dense_args(step, from_inputs, dense_as_traced, views)
    if dense is None:
        from_inputs.add(step.out)
    return [_dense_code(w, a, dense) for a in step.args] + \
        [f"{k}={_dense_code(w, v, dense)}" for k, v in step.kwargs.items()]


def _dense_args(step, from_inputs: set, dense_as_traced, views) -> Optional[set]:
    """The argument names ``step`` takes dense (see :func:`straight_line`'s ``dense_as_traced``);
    None for a view of a value laid out as the caller's (the view keeps eager's semantics: its
    layout, its aliasing, its error) or an in-place op on one: the step's result is then laid out
    as the caller's too."""
    target = step.target
    first = step.args[0] if step.args else None
    if isinstance(first, BufSlot) and first.name in from_inputs and (
            step.out in views or getattr(target, "is_view", False)):
        return None
    if isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable:
        # Writes to an argument: eager writes to the caller's tensor, and so does this; what it
        # returns (``mul_``'s self) is that tensor, laid out as the caller's.
        return None if isinstance(first, BufSlot) and first.name in from_inputs else set()
    args = [b for a in (*step.args, *step.kwargs.values()) for b in (a if isinstance(a, (list, tuple)) else (a,))]
    return {a.name for a in args if isinstance(a, BufSlot) and a.name in from_inputs and a.name in dense_as_traced}


def _dense_code(w, a, dense: Optional[set]) -> str:
    if not dense:
        return w.code(a)
    if isinstance(a, BufSlot) and a.name in dense:
        v = _var(a.name)
        return f"({v} if {v}.is_contiguous() else {v}.contiguous())"
    if isinstance(a, (list, tuple)) and any(isinstance(b, BufSlot) and b.name in dense for b in a):
        inner = ", ".join(_dense_code(w, b, dense) for b in a)
        return f"[{inner}]" if isinstance(a, list) else f"({inner},)"
    return w.code(a)


def _direct_view(x: str, view: tuple, made: str, returned: bool) -> str:
    """The expression making a view step's result: a direct view of ``x`` at ``view``'s size slots
    where ``x`` is contiguous, else ``made`` (the step's own call).

    Not for a tensor autograd tracks (a parameter) while grad mode is on: reshape's view of it
    carries requires_grad.  Under no_grad (AOTAutograd runs a training step's forward and backward
    so) nothing records: BERT's backward took 14 chains of ``t(t(weight))`` through their own calls
    at every step, 13 us each on the CPU.  A view the program returns (``returned``) keeps the rule:
    under no_grad ATen's view of a parameter still says requires_grad, and the caller gets what
    eager gives.

    >>> _direct_view("b_x", ((0,), (1,)), "F0(b_x)", True)
    '(REINTERPRET(b_x, (s[0], ), (s[1], ), 0) if b_x.is_contiguous() and not b_x.requires_grad else F0(b_x))'
    """
    size = "(" + "".join(f"s[{i}], " for i in view[0]) + ")"
    stride = "(" + "".join(f"s[{i}], " for i in view[1]) + ")"
    # Relative to x's own offset, as the binding takes it (:data:`reinterpret`).
    offset = f"s[{view[2]}]" if len(view) > 2 else "0"
    tracked = f"not {x}.requires_grad" if returned else f"(not {x}.requires_grad or not GRAD_ON())"
    return f"(REINTERPRET({x}, {size}, {stride}, {offset}) if {x}.is_contiguous() and {tracked} else {made})"




def _returned_or_viewed(plan, outputs) -> set:
    """Names of ``plan``'s values that the program returns or that a returned value may view.

    >>> t = ExternStep(torch.ops.aten.t.default, (BufSlot("w"),), {}, "wt")
    >>> sorted(_returned_or_viewed([t], [BufSlot("wt")]))
    ['w', 'wt']
    """
    names = set(template_buffers(list(outputs), set()))
    for step in reversed(plan):
        if not isinstance(step, ExternStep) or step.out not in names:
            continue
        if (getattr(step.target, "__name__", None) or str(step.target)).split(".")[0] in _ALIASING:
            names.update(a.name for a in step.args if isinstance(a, BufSlot))
    return names


#: ATen ops a plan calls that make a view or read metadata: no kernel launch.
_VIEWS = frozenset({"view_as_traced", "view", "_unsafe_view", "t", "transpose", "permute", "unsqueeze", "squeeze",
                    "expand", "slice", "select", "detach", "alias", "as_strided", "sym_size", "split", "unbind"})
#: Plan steps whose result may share its first argument's storage: the views, and the steps that
#: may return a view or the argument itself.
_ALIASING = (_VIEWS - {"sym_size"}) | {"reshape", "getitem", "contiguous", "narrow", "diagonal", "unfold", "view_chain",
                                       "view_as", "movedim"}


def plan_launches(plan) -> int:
    """Steps of ``plan`` that launch device work: every kernel and every ATen call but views, and
    the three launches that convert a shared boolean mask at run time (:mod:`compiler.shared_masks`)
    where no kernel stored its additive form.  An upper bound per call (``contiguous`` of a tensor already contiguous launches nothing; a
    library call such as SDPA may launch more than one kernel), the same for plans compared.

    >>> plan_launches([ExternStep(torch.ops.aten.t.default, (BufSlot("w"),), {}, "wt"),
    ...                ExternStep(torch.ops.aten.mm.default, (BufSlot("x"), BufSlot("wt")), {}, "y")])
    1
    """
    n, converted = 0, set()
    for s in plan:
        if isinstance(s, KernelStep):
            n += 1
            continue
        name = (getattr(s.target, "__name__", None) or str(s.target)).split(".")[0]
        n += name not in _VIEWS
        if name == "sdpa_shared_mask" and "additive" not in s.kwargs and s.args[4] not in converted:
            # The boolean mask's additive form made at run time: logical_not, where and a scalar fill.
            converted.add(s.args[4])
            n += 3
    return n
