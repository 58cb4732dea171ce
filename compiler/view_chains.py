"""Chains of ATen views from a contiguous tensor, made as one direct view.

Each ATen view a run calls costs the host a dispatcher call (3-5 us on the H100 machine's host
against 1.5-2 us for ``_reinterpret_tensor``): GPT-2's attention splits its fused projection,
then views and transposes each of q, k and v (ten calls a layer).  Where a chain of views starts
at a tensor the trace made contiguous, the trace gives each link's sizes, strides and offset
relative to that start, in the dims; at run time a start that is contiguous (same sizes: the
variant's guards hold) gives the chain the same layout, since views compute their strides from
their input's alone.  So a chain's end is made by one direct view of its start, and its other
links are not made at all unless something else reads them.  A start that is not contiguous at
run time (an ATen kernel that returned another layout than the trace's meta kernel) runs the
chain's own calls.

Only starts whose layout the run controls or ATen fixes are taken: program inputs and
constants, buffers kernels write, and the results of matmuls, embeddings and ``contiguous``.
An attention call's result is not (its kernel picks its layout at run time), so its chains keep
their calls rather than a check that would fail every time.

Example::

    >>> import torch, compiler
    >>> f = compiler.compile(lambda x, w: (x @ w).split(4, -1)[1].transpose(0, 1) * 2,
    ...                      "x: f32[N, 8]", "w: f32[8, 8]")
    >>> "REINTERPRET(b_mm_default" in f.variants[0].source
    True
    >>> x, w = torch.randn(5, 8), torch.randn(8, 8)
    >>> torch.equal(f(x, w), (x @ w).split(4, -1)[1].transpose(0, 1) * 2)
    True
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Optional

import sympy
import torch

from .ir import contiguous_strides
from .wrapper import SIZES, BufSlot, ExternStep, KernelStep, SizeSlot, step_buffers, template_buffers

#: Steps whose result is a view of their first argument (or, for ``getitem``, of the sequence it indexes).
_VIEW_NAMES = frozenset({"view_as_traced", "view", "_unsafe_view", "transpose", "t", "permute", "unsqueeze",
                         "squeeze", "expand", "slice", "select", "alias", "split", "split_with_sizes", "unbind",
                         "chunk", "narrow", "unflatten", "getitem", "detach"})
#: ATen results that are contiguous whatever kernel made them.
_CONTIGUOUS_RESULTS = frozenset({"mm", "addmm", "bmm", "baddbmm", "linear", "matmul", "embedding", "contiguous",
                                 "clone"})


def step_name(target) -> str:
    """The op name of a plan step's target (``aten.transpose.int`` -> ``transpose``).

    >>> step_name(torch.ops.aten.transpose.int), step_name(operator.getitem)
    ('transpose', 'getitem')
    """
    return (getattr(target, "__name__", None) or str(target)).split(".")[0]


@dataclass(frozen=True, kw_only=True)
class Layout:
    """A tensor's traced layout as size slots: sizes, strides and storage offset from its chain's
    start (``None``: the start's own).

    >>> Layout(shape=(0, 1), strides=(1, 2), offset=None).offset is None
    True
    """

    shape: tuple
    strides: tuple
    offset: Optional[int]


def traced_layouts(nodes, symbols) -> dict:
    """``{node name: (shape, strides, offset)}`` (sympy) of every tensor node whose layout is known
    in ``symbols``.

    >>> import shapes
    >>> tp = shapes.trace(lambda x: x.t() * 2, "x: f32[N, 4]")
    >>> traced_layouts(tp.graph.nodes, list(tp.dim_symbols.values()))["t_default"]
    ((4, N), (1, 4), 0)
    """
    known = set(symbols)
    out = {}
    for n in nodes:
        val = n.meta.get("val")
        if not isinstance(val, torch.Tensor) or val.layout is not torch.strided:
            continue
        try:
            parts = [sympy.sympify(getattr(getattr(v, "node", None), "expr", v))
                     for v in (*val.shape, *val.stride(), val.storage_offset())]
        except (TypeError, sympy.SympifyError):
            continue
        if all(isinstance(p, sympy.Expr) and p.free_symbols <= known for p in parts):
            d = val.dim()
            out[n.name] = (tuple(parts[:d]), tuple(parts[d:2 * d]), parts[-1])
    return out


def traced_dense(shape, strides) -> bool:
    """Whether a traced tensor of ``shape`` and ``strides`` (sympy) is contiguous (any offset).

    >>> N = sympy.Symbol("N", positive=True)
    >>> traced_dense((N, 4), (4, 1)), traced_dense((4, N), (1, 4))
    (True, False)
    """
    want = contiguous_strides(shape)
    return all(d == 1 or sympy.expand(s - w) == 0 for d, s, w in zip(shape, strides, want))


def _contiguous(shape, strides, offset) -> bool:
    want = contiguous_strides(shape)
    return offset == 0 and all(d == 1 or sympy.expand(s - w) == 0 for d, s, w in zip(shape, strides, want))


def _view_input(step):
    """The buffer a view step views (its first argument), or None."""
    a = step.args[0] if step.args else None
    return a.name if isinstance(a, BufSlot) else None


class ChainCalls:
    """A chain's own calls from its start, for a start that is not contiguous at run time.

    >>> t = ExternStep(torch.ops.aten.t.default, (BufSlot("x"),), {}, "y")
    >>> ChainCalls("x", [t])(torch.ones(2, 3), ()).shape
    torch.Size([3, 2])
    """

    def __init__(self, start: str, steps: list):
        self.start = start
        self.steps = steps
        self.__name__ = "view_chain"

    def __call__(self, start, s):
        env = {self.start: start}

        def arg(a):
            if isinstance(a, BufSlot):
                return env[a.name]
            if isinstance(a, SizeSlot):
                return s[a.index]
            if isinstance(a, (list, tuple)) and not hasattr(a, "_fields"):
                return type(a)(arg(x) for x in a)
            if isinstance(a, dict):
                return {k: arg(v) for k, v in a.items()}
            return a
        for st in self.steps:
            env[st.out] = st.target(*arg(st.args), **arg(st.kwargs))
        return env[self.steps[-1].out]


@dataclass(frozen=True, kw_only=True)
class ChainEnd:
    """How the run makes a chain's end: a direct view of ``start`` at ``layout`` (slots), else ``calls``
    (``None`` for a chain of one link: its own step).

    >>> ChainEnd(start="m", layout=Layout(shape=(0,), strides=(1,), offset=None), calls=None).start
    'm'
    """

    start: str
    layout: Layout
    calls: Optional[ChainCalls]


def find_chains(plan, outputs, layouts: dict, inputs_and_consts: set, slot) -> tuple:
    """``(plan, ends, dropped)``: the chain ends of ``plan`` to make as direct views
    (``{out name: ChainEnd}``, each step's arguments now its start and the sizes tuple) and the
    indices of links nothing else reads (left out of the run).  ``layouts``: :func:`traced_layouts`;
    ``slot(expr)``: an expression's size slot (a ``KeyError`` leaves that chain's calls as they are).

    >>> aten, N = torch.ops.aten, sympy.Symbol("N", integer=True)
    >>> plan = [ExternStep(aten.mm.default, (BufSlot("a"), BufSlot("b")), {}, "m"),
    ...         ExternStep(aten.t.default, (BufSlot("m"),), {}, "mt"),
    ...         ExternStep(aten.unsqueeze.default, (BufSlot("mt"), 0), {}, "u"),
    ...         ExternStep(aten.relu.default, (BufSlot("u"),), {}, "r")]
    >>> layouts = {"m": ((N, 4), (4, 1), 0), "mt": ((4, N), (1, 4), 0), "u": ((1, 4, N), (4 * N, 1, 4), 0)}
    >>> slots = {}
    >>> new, ends, dropped = find_chains(plan, [BufSlot("r")], layouts, {"a", "b"},
    ...                                  lambda e: slots.setdefault(sympy.sympify(e), len(slots)))
    >>> sorted(ends), sorted(dropped), new[2].target.__name__     # t is not called: u is one view of m
    (['u'], [1], 'view_chain')
    """
    # Starts the run checks for contiguity; the check, not this list, is what makes a direct view right.
    starts = {}
    for name in inputs_and_consts:
        starts[name] = name
    for st in plan:
        if isinstance(st, KernelStep):
            for al in st.allocs:
                starts[al.name] = al.name
        elif step_name(st.target) in _CONTIGUOUS_RESULTS:
            starts[st.out] = st.out
    root_of, links = {}, {}
    for i, st in enumerate(plan):
        if not isinstance(st, ExternStep) or step_name(st.target) not in _VIEW_NAMES or st.kwargs and any(
                isinstance(v, BufSlot) for v in st.kwargs.values()):
            continue
        src = _view_input(st)
        if src is None:
            continue
        root = src if src in starts else root_of.get(src)
        if root is None or root not in layouts or not _contiguous(*layouts[root]):
            continue
        root_of[st.out] = root
        links[st.out] = links.get(src, []) + [i]
    readers: dict = {}
    for i, st in enumerate(plan):
        for r in step_buffers(st)[0]:
            readers.setdefault(r, set()).add(i)
    kept_out = template_buffers(list(outputs), set())
    ends = {}
    for name, chain in links.items():
        st = plan[chain[-1]]
        if name not in layouts or isinstance(st, ExternStep) and step_name(st.target) in ("split", "split_with_sizes",
                                                                                          "unbind", "chunk"):
            continue  # a sequence of views, not a tensor: its items are the ends
        outside = {r for r in readers.get(name, ()) if not (isinstance(plan[r], ExternStep) and plan[r].out in links)}
        if not outside and name not in kept_out:
            continue  # read only by longer chains
        shape, strides, offset = layouts[name]
        root = root_of[name]
        rel = sympy.expand(offset - layouts[root][2])
        try:
            layout = Layout(shape=tuple(slot(x) for x in shape), strides=tuple(slot(x) for x in strides),
                            offset=None if rel == 0 else slot(rel))
        except KeyError:  # a size the plan has no slot for (``slot`` only looks up): the calls stay
            continue
        # One link keeps its own call for a start that is not contiguous; a longer chain replays its links.
        ends[name] = ChainEnd(start=root, layout=layout,
                              calls=ChainCalls(root, [plan[j] for j in chain]) if len(chain) > 1 else None)
    if not ends:
        return plan, {}, frozenset()
    new = [ExternStep(ends[st.out].calls, (BufSlot(ends[st.out].start), SIZES), {}, st.out)
           if isinstance(st, ExternStep) and st.out in ends and ends[st.out].calls is not None else st for st in plan]
    return new, ends, frozenset(_unread(new, outputs, set(links)))


def _unread(plan, outputs, links: set) -> set:
    """Indices of view links (``links``: their outputs) that no kept step reads and no output returns."""
    kept_out = template_buffers(list(outputs), set())
    dropped: set = set()
    changed = True
    while changed:
        changed = False
        read = set(kept_out)
        for i, st in enumerate(plan):
            if i not in dropped:
                read |= step_buffers(st)[0]
        for i, st in enumerate(plan):
            if i not in dropped and isinstance(st, ExternStep) and st.out in links and st.out not in read:
                dropped.add(i)
                changed = True
    return dropped


__all__ = ["ChainCalls", "ChainEnd", "Layout", "find_chains", "step_name", "traced_layouts"]
