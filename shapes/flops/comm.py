"""Communication bytes per rank of a sharded program, per collective kind, as closed forms.

The convention (one, stated here and measured the same way by the tests):
**the bytes a rank sends, averaged over the ranks, under the ring
algorithms** -- the volume behind nccl-tests' "bus bandwidth".  With ``W``
ranks and ``n`` the bytes of the tensor a rank passes to the collective:

============== ===================== =============================================
kind           bytes sent per rank   why
============== ===================== =============================================
all_reduce     ``2 * (W-1)/W * n``   reduce-scatter then all-gather of ``n/W`` chunks
all_gather     ``(W-1) * n``         each rank's ``n`` bytes reach ``W-1`` others
reduce_scatter ``(W-1)/W * n``       ``W-1`` chunks of ``n/W`` bytes
all_to_all     ``(W-1)/W * n``       every chunk but a rank's own
broadcast      ``(W-1)/W * n``       a ring pipeline: ``W-1`` of ``W`` ranks forward ``n``
============== ===================== =============================================

At ``W = 1`` every form is 0: nothing leaves the rank.

Example::

    >>> import torch.distributed as dist, shapes
    >>> def f(x):
    ...     dist.all_reduce(x)
    ...     return x
    >>> r = shapes.count_flops(f, "x: f32[N, 64]", world="W", dims={"W": (1, 8)})
    >>> r.comm.by_kind
    {'all_reduce': 512*N*(W - 1)/W}
    >>> r.comm.evaluate({"N": 3, "W": 4})
    {'all_reduce': Fraction(1152, 1)}
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import sympy
import torch

from ..distributed.ops import Collective


def bytes_sent(kind: Collective, nbytes, world):
    """Bytes a rank sends for one ``kind`` collective of an ``nbytes`` tensor on ``world`` ranks.

    Works on ints (exact, as a Fraction) and on sympy expressions alike.

    >>> bytes_sent(Collective.ALL_REDUCE, 48, 3)
    Fraction(64, 1)
    """
    if isinstance(nbytes, int) and isinstance(world, int):
        nbytes, world = Fraction(nbytes), Fraction(world)
    if kind is Collective.ALL_REDUCE:
        return 2 * (world - 1) * nbytes / world
    if kind is Collective.ALL_GATHER:
        return (world - 1) * nbytes
    return (world - 1) * nbytes / world


@dataclass(kw_only=True)
class CommCount:
    """Per-rank bytes sent, per collective kind (see the module doc for the convention).

    Attributes:
        by_kind: kind name (``"all_reduce"``) -> bytes per rank (sympy, over the dims and W).
        calls: kind name -> how many calls the program makes.
        total: the sum over kinds.
    """

    by_kind: dict = field(default_factory=dict)
    calls: dict = field(default_factory=dict)
    total: Any = sympy.Integer(0)

    def evaluate(self, sizes: dict) -> dict:
        """Each kind's bytes at ``sizes`` (dim name -> int, the world size and rank included),
        as exact Fractions.

        >>> CommCount(by_kind={"all_gather": sympy.Symbol("W") - 1}).evaluate({"W": 3})
        {'all_gather': Fraction(2, 1)}
        """
        out = {}
        for k, e in self.by_kind.items():
            subs = {s: sizes[s.name] for s in e.free_symbols}
            v = sympy.nsimplify(e.subs(subs)) if subs else e
            out[k] = Fraction(int(v.p), int(v.q))
        return out


def _expr(a):
    if isinstance(a, torch.fx.Node):
        return a.meta["expr"]
    return sympy.Integer(int(a))


def _nbytes(x):
    if not isinstance(x, torch.fx.Node):
        return sympy.Integer(0)
    return sympy.Mul(*x.meta["shape"]) * x.meta["dtype"].itemsize


def count_comm(traced) -> CommCount:
    """The :class:`CommCount` of a traced program's collective ops (zero kinds for a program without).

    >>> import shapes
    >>> count_comm(shapes.trace(lambda x: x + 1, "x: f32[N]")).by_kind
    {}
    """
    c = CommCount()
    total = sympy.Integer(0)
    for node in traced.graph.nodes:
        kind = Collective.of(node.target) if node.op == "call_function" else None
        if kind is None:
            continue
        x = Collective.input_of(node)
        world = sympy.Integer(node.meta["world"]) if "world" in node.meta else _expr(node.args[1])
        nbytes = sum((_nbytes(t) for t in (x if isinstance(x, (list, tuple)) else [x])), sympy.Integer(0))
        b = sympy.simplify(bytes_sent(kind, nbytes, world))
        c.by_kind[kind.value] = sympy.simplify(c.by_kind.get(kind.value, 0) + b)
        c.calls[kind.value] = c.calls.get(kind.value, 0) + 1
        total = total + b
    c.total = sympy.simplify(total)
    return c


def _factor(kind: Collective, world):
    """``bytes_sent(kind, n, world) / n``."""
    return bytes_sent(kind, sympy.Integer(1), world)


def _condition(point: dict, symbols: dict):
    return sympy.And(*[sympy.Eq(symbols[n], v) for n, v in point.items()])


def join_over_worlds(per_point: list, symbols: dict, candidates: dict = None) -> CommCount:
    """One :class:`CommCount` over the world size (or mesh sizes) from counts traced at each one.

    ``per_point`` is ``[(point, CommCount)]`` with ``point`` a dict size name -> int; ``symbols`` maps
    each size name to its sympy symbol.  Where one group size fits every point -- a size symbol or
    their product (a collective over the mesh's ``tp`` dim, or the whole world) -- with the same bytes
    contributed at each, a kind's bytes are :func:`bytes_sent` of them over that symbol: exact at every
    traced point and one rule.  ``candidates`` (kind -> a formula of the bytes contributed over the
    world size, e.g. FSDP2's padded shards: :func:`shapes.distributed.mesh.fsdp_gather_bytes`) are tried
    the same way, each kept only where it equals the traced bytes at every point.  Otherwise (collectives
    of one kind over several groups) a ``Piecewise`` over the traced points.

    >>> W, N = sympy.symbols("W N", integer=True)
    >>> cc = [({"W": w}, CommCount(by_kind={"all_reduce": sympy.simplify(bytes_sent(Collective.ALL_REDUCE, 4 * N, w))},
    ...                             calls={"all_reduce": 1})) for w in (1, 2, 4)]
    >>> join_over_worlds(cc, {"W": W}).by_kind
    {'all_reduce': 8*N*(W - 1)/W}
    """
    out = CommCount()
    kinds: list = []
    for _, c in per_point:
        kinds += [k for k in c.by_kind if k not in kinds]
    groups = list(symbols.values()) + ([sympy.Mul(*symbols.values())] if len(symbols) > 1 else [])
    for k in kinds:
        kind = Collective(k)
        at = [(p, sympy.sympify(c.by_kind.get(k, 0))) for p, c in per_point]
        out.by_kind[k] = _fit(kind, at, groups, symbols, (candidates or {}).get(k))
        out.calls[k] = max(c.calls.get(k, 0) for _, c in per_point)
    out.total = sympy.simplify(sum(out.by_kind.values(), sympy.Integer(0)))
    return out


def _fit(kind: Collective, at: list, groups: list, symbols: dict, candidate=None):
    """``bytes_sent(kind, n, g)`` for the first group size ``g`` that fits every point (or, over the whole
    world, the ``candidate`` bytes ``n``), else a Piecewise."""
    if candidate is not None and len(symbols) == 1:
        (W,) = symbols.values()
        if all(sympy.simplify(e - bytes_sent(kind, candidate.subs(W, p[W.name]), sympy.Integer(p[W.name]))) == 0
               for p, e in at):
            return sympy.simplify(bytes_sent(kind, candidate, W))
    for g in groups:
        sizes = [int(g.subs({symbols[n]: v for n, v in p.items()})) for p, _ in at]
        if any(size == 1 and e != 0 for size, (_, e) in zip(sizes, at)):
            continue
        sent = [sympy.simplify(e / _factor(kind, size)) for size, (_, e) in zip(sizes, at) if size > 1]
        if sent and all(sympy.simplify(n - sent[0]) == 0 for n in sent):
            return sympy.simplify(bytes_sent(kind, sent[0], g))
    return sympy.Piecewise(*[(e, _condition(p, symbols)) for p, e in at])


def comm_table(comm: CommCount, points=()) -> str:
    """Text table: each collective kind, its calls, per-rank bytes as a formula (and at ``points``).

    >>> print(comm_table(CommCount(by_kind={"all_gather": sympy.Symbol("W") - 1}, calls={"all_gather": 1}),
    ...                  [{"W": 4}]))
    communication (bytes each rank sends, ring algorithms; see shapes.flops.comm)
      all_gather  x1  W - 1  | W=4: 3
    """
    lines = ["communication (bytes each rank sends, ring algorithms; see shapes.flops.comm)"]
    for k, e in comm.by_kind.items():
        at = "".join(f"  | {','.join(f'{n}={v}' for n, v in pt.items())}: {comm.evaluate(pt)[k]}" for pt in points)
        lines.append(f"  {k}  x{comm.calls.get(k, 0)}  {e}{at}")
    return "\n".join(lines)
