"""A symbolic world: ``torch.distributed`` in one process, the world size a symbol.

While a program is traced with ``world="W"``, :func:`open_world` stands in for
the default process group: ``dist.get_world_size()`` returns the SymInt ``W``
(its range from ``dims``), ``dist.get_rank()`` a SymInt ``rank`` in
``0..W-1`` (created when the program asks), and the explicit collectives
(``all_reduce``, ``all_gather_into_tensor``, ``reduce_scatter_tensor``,
``all_to_all_single``, ``broadcast``, and their functional forms in
``torch.distributed._functional_collectives``) record one
:mod:`shapes.distributed.ops` op each, whose output size is a formula of
``W``.  Their size checks are gloo's, recorded as runtime asserts on the
user's line: a program valid for some world sizes only says so as a rule.

What it does not model raises :class:`~shapes.errors.TracerLimitation` naming
it, never a guessed shape: other process groups, point-to-point and list
collectives, ``ReduceOp.AVG``/``PREMUL_SUM`` (gloo has neither), uneven
all-to-all splits and any other c10d call that needs the default group.  A
``DeviceMesh`` (DTensor, FSDP2) raises :class:`~shapes.distributed.mesh.NeedsConcreteWorld`:
such a program is traced once per world size (:mod:`shapes.distributed.mesh`).

Example::

    >>> import torch, torch.distributed as dist, shapes
    >>> def step(x):
    ...     out = x.new_empty(dist.get_world_size() * x.shape[0], x.shape[1])
    ...     dist.all_gather_into_tensor(out, x)
    ...     return out
    >>> tp = shapes.trace(step, "x: f32[S, 4]", world="W", dims={"W": (1, 8)})
    >>> tp.output_shapes
    [(S*W, 4)]
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import sympy
import torch

from ..errors import TracerLimitation, program_error
from ..provenance import capture
from ..spec import Dim
from ..symbols import SizeSource, SourceKind
from ..symnode import sym_value
from .ops import Collective

#: The world size's range when ``dims`` gives none.
DEFAULT_WORLD = Dim(1, 64, 2)
#: The rank symbol's name.
RANK = "rank"

# torch's own, bound before any trace patches them: what a traced graph calls on a real rank.
_REAL_WORLD_SIZE = torch.distributed.distributed_c10d.get_world_size
_REAL_RANK = torch.distributed.distributed_c10d.get_rank


@dataclass(kw_only=True)
class World:
    """The symbols of a traced program's world: ``size`` (W) and, if the program asked, ``rank``.

    >>> w = World(name="W", size=sympy.Symbol("W", integer=True)); w.rank is None
    True
    """

    name: str
    size: Any
    rank: Any = None
    collectives: list = field(default_factory=list)
    #: traced at one world size (a device mesh needs it concrete: :mod:`shapes.distributed.mesh`)
    concrete: bool = False
    #: a device mesh's dims, for a per-world trace with one: ((dim, size name, size), ...)
    mesh: tuple = ()


def world_dim(world: Optional[str], dmap: dict) -> Optional[Dim]:
    """The :class:`Dim` of the world size: the one ``dims`` gives, else :data:`DEFAULT_WORLD`.

    >>> world_dim("W", {"W": Dim(1, 8)})
    Dim(min=1, max=8, hint=None)
    """
    if world is None:
        return None
    return dmap.get(world, DEFAULT_WORLD)


def world_hint(d: Dim) -> int:
    """The example world size: the given one, else 2 clamped into the range (1 hides too much).

    >>> world_hint(Dim(1, 8)), world_hint(Dim(3, 8)), world_hint(Dim(1, 1))
    (2, 3, 1)
    """
    return d.hint if d.hint is not None else min(max(d.min, 2), d.max)


def _expr(x):
    return x.node.expr if isinstance(x, torch.SymInt) else sympy.Integer(int(x))


class _DoneWork:
    """What ``async_op=True`` returns: the collective is recorded where it was called."""

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True


class NeedsConcreteWorld(TracerLimitation):
    """The program builds a ``DeviceMesh`` (DTensor, FSDP2): it is traced per world size
    (:mod:`shapes.distributed.mesh`), not with a symbolic one."""


class Patches:
    """setattr with restore, in reverse order.

    >>> class A: x = 1
    >>> p = Patches(); p.set(A, "x", 2); p.restore(); A.x
    1
    """

    def __init__(self):
        self.saved = []

    def set(self, obj, name, value):
        self.saved.append((obj, name, obj.__dict__.get(name, getattr(obj, name, None)), name in obj.__dict__))
        setattr(obj, name, value)

    def restore(self):
        for obj, name, old, had in reversed(self.saved):
            if had:
                setattr(obj, name, old)
            else:
                delattr(obj, name)
        self.saved.clear()


class SymbolicWorld:
    """The stand-in for the default process group during one trace (see the module doc)."""

    def __init__(self, env, builder, name: str, dim: Dim, hint: Optional[int] = None, rank_hint: int = 0):
        self.env = env
        self.rank_hint = rank_hint
        self.builder = builder
        self.dim = dim
        size = env.create_symbol(name, world_hint(dim) if hint is None else hint, range=(dim.min, dim.max),
                                 source=SizeSource(kind=SourceKind.WORLD_SIZE))
        self.world = World(name=name, size=size)
        self.W = sym_value(env, size)
        if isinstance(size, sympy.Symbol) and size not in builder.sym_sources:
            node = builder.graph.call_function(_REAL_WORLD_SIZE, ())
            node.meta["expr"] = size
            builder.sym_nodes[size] = node

    # -- the symbols --------------------------------------------------------------------
    def get_world_size(self, group=None):
        self._group(group, "get_world_size")
        return self.W

    def get_rank(self, group=None):
        self._group(group, "get_rank")
        if self.world.rank is None:
            hi = self.dim.max - 1 if self.dim.max != float("inf") else self.dim.max
            r = self.env.create_symbol(RANK, self.rank_hint, range=(0, hi), source=SizeSource(kind=SourceKind.RANK))
            self.env.add_op_axiom(sympy.Le(r, self.world.size - 1), "a rank is below the world size")
            if isinstance(r, sympy.Symbol):
                node = self.builder.graph.call_function(_REAL_RANK, ())
                node.meta["expr"] = r
                self.builder.sym_nodes[r] = node
            self.world.rank = r
        return sym_value(self.env, self.world.rank)

    # -- checks -------------------------------------------------------------------------
    def _group(self, group, what):
        import torch.distributed as dist
        if group is None or group is dist.group.WORLD:
            return
        raise TracerLimitation(f"{what} with group={type(group).__name__}: symshape models the default "
                               f"process group only (world=...), not subgroups or device meshes")

    def _check(self, cond, exc_type, msg):
        """Eager's check ``cond``: a runtime assert on the user's line, or the program's error here."""
        cond = sympy.sympify(cond)
        if cond is sympy.true:
            return
        if cond is sympy.false or not self.env.expect_true(cond, provenance=capture(), message=msg):
            raise program_error(exc_type, msg)

    def _op_kind(self, op, what):
        import torch.distributed as dist
        ok = {dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX,
              "sum", "product", "min", "max"}
        if op not in ok:
            raise TracerLimitation(f"{what} with op={op}: symshape models SUM, PRODUCT, MIN and MAX (the "
                                   f"reductions gloo has); AVG and PREMUL_SUM are not modeled")

    @staticmethod
    def _done(async_op):
        return _DoneWork() if async_op else None

    def _record(self, kind: Collective, x, *extra):
        self.world.collectives.append(kind)
        return kind.op(x.contiguous(), self.W, *extra)

    # -- c10d, in place -----------------------------------------------------------------
    def all_reduce(self, tensor, op=None, group=None, async_op=False):
        import torch.distributed as dist
        self._group(group, "all_reduce")
        self._op_kind(dist.ReduceOp.SUM if op is None else op, "all_reduce")
        tensor.copy_(self._record(Collective.ALL_REDUCE, tensor))
        return self._done(async_op)

    def all_gather_into_tensor(self, output_tensor, input_tensor, group=None, async_op=False):
        self._group(group, "all_gather_into_tensor")
        o, i = output_tensor, input_tensor
        self._dtypes(o, i, "all_gather_into_tensor")
        msg = "ProcessGroupGloo::allgather: invalid tensor size (the output must be [world * input.shape[0], *input.shape[1:]])"
        self._check(sympy.true if o.dim() == i.dim() else sympy.false, RuntimeError, msg)
        self._check(sympy.And(sympy.Eq(_expr(o.shape[0]), self.world.size * _expr(i.shape[0])),
                              *[sympy.Eq(_expr(a), _expr(b)) for a, b in zip(o.shape[1:], i.shape[1:])]),
                    RuntimeError, msg)
        o.copy_(self._record(Collective.ALL_GATHER, i))
        return self._done(async_op)

    def reduce_scatter_tensor(self, output, input, op=None, group=None, async_op=False):
        import torch.distributed as dist
        self._group(group, "reduce_scatter_tensor")
        self._op_kind(dist.ReduceOp.SUM if op is None else op, "reduce_scatter_tensor")
        self._dtypes(output, input, "reduce_scatter_tensor")
        msg = "ProcessGroupGloo: reduce_scatter_tensor: Check failed: outputShape[0] * worldSize == inputShape[0]"
        self._check(sympy.true if output.dim() == input.dim() else sympy.false, RuntimeError, msg)
        self._check(sympy.And(sympy.Eq(_expr(output.shape[0]) * self.world.size, _expr(input.shape[0])),
                              *[sympy.Eq(_expr(a), _expr(b)) for a, b in zip(output.shape[1:], input.shape[1:])]),
                    RuntimeError, msg)
        output.copy_(self._record(Collective.REDUCE_SCATTER, input))
        return self._done(async_op)

    def all_to_all_single(self, output, input, output_split_sizes=None, input_split_sizes=None, group=None,
                          async_op=False):
        self._group(group, "all_to_all_single")
        if output_split_sizes is not None or input_split_sizes is not None:
            raise TracerLimitation("all_to_all_single with split sizes: what a rank receives depends on every "
                                   "rank's splits, which symshape does not model (equal splits only)")
        self._dtypes(output, input, "all_to_all_single")
        n_in, n_out = _expr(input.numel()), _expr(output.numel())
        self._check(sympy.Eq(n_in, n_out), RuntimeError, "gloo alltoall: in->size == out->size")
        self._check(sympy.Eq(sympy.Mod(n_in, self.world.size), 0), RuntimeError,
                    "gloo alltoall: in->size % context->size == 0")
        output.copy_(self._record(Collective.ALL_TO_ALL, input).view(output.shape))
        return self._done(async_op)

    def broadcast(self, tensor, src=None, group=None, async_op=False, group_src=None):
        self._group(group, "broadcast")
        src = group_src if src is None else src
        if not isinstance(src, int):
            raise TracerLimitation(f"broadcast with a src of type {type(src).__name__}: symshape models an int src")
        self._check(sympy.Lt(src, self.world.size), ValueError, f"broadcast: invalid src rank {src}")
        tensor.copy_(self._record(Collective.BROADCAST, tensor, src))
        return self._done(async_op)

    def barrier(self, group=None, async_op=False, device_ids=None):
        self._group(group, "barrier")
        return self._done(async_op)

    def _dtypes(self, a, b, what):
        if a.dtype != b.dtype:
            raise program_error(TypeError, f"{what}: input and output dtypes differ ({b.dtype} and {a.dtype})")

    # -- functional collectives ------------------------------------------------------------
    def f_all_reduce(self, self_, reduceOp, group, tag=""):
        self._group(group, "functional all_reduce")
        self._op_kind(reduceOp.lower() if isinstance(reduceOp, str) else reduceOp, "functional all_reduce")
        return self._record(Collective.ALL_REDUCE, self_)

    def f_all_gather_tensor(self, self_, gather_dim, group, tag=""):
        self._group(group, "all_gather_tensor")
        out = self._record(Collective.ALL_GATHER, self_.movedim(gather_dim, 0))
        return out.movedim(0, gather_dim)

    def f_reduce_scatter_tensor(self, self_, reduceOp, scatter_dim, group, tag=""):
        self._group(group, "reduce_scatter_tensor")
        self._op_kind(reduceOp.lower() if isinstance(reduceOp, str) else reduceOp, "reduce_scatter_tensor")
        self._check(sympy.Eq(sympy.Mod(_expr(self_.shape[scatter_dim]), self.world.size), 0), AssertionError,
                    f"input dimension {scatter_dim} must be a multiple of group_size")
        out = self._record(Collective.REDUCE_SCATTER, self_.movedim(scatter_dim, 0))
        return out.movedim(0, scatter_dim)

    def f_all_to_all_single(self, self_, output_split_sizes, input_split_sizes, group, tag=""):
        self._group(group, "functional all_to_all_single")
        if output_split_sizes is not None or input_split_sizes is not None:
            raise TracerLimitation("functional all_to_all_single with split sizes: symshape models equal splits only")
        # funcol splits dim 0 into W equal parts, which the op checks sum to dim 0.
        self._check(sympy.Eq(sympy.Mod(_expr(self_.shape[0]), self.world.size), 0), RuntimeError,
                    "Split sizes doesn't match total dim 0 size")
        return self._record(Collective.ALL_TO_ALL, self_)

    def f_broadcast(self, self_, src, group, tag=""):
        self._group(group, "functional broadcast")
        self._check(sympy.Lt(src, self.world.size), ValueError, f"broadcast: invalid src rank {src}")
        return self._record(Collective.BROADCAST, self_, src)


_C10D = ("is_initialized", "get_world_size", "get_rank", "all_reduce", "all_gather_into_tensor",
         "reduce_scatter_tensor", "all_to_all_single", "broadcast", "barrier")
_FUNCOL = {"all_reduce": "f_all_reduce", "all_gather_tensor": "f_all_gather_tensor",
           "reduce_scatter_tensor": "f_reduce_scatter_tensor", "all_to_all_single": "f_all_to_all_single",
           "broadcast": "f_broadcast"}
#: c10d calls symshape does not model: each raises a TracerLimitation naming it.
UNMODELED = ("all_gather", "reduce_scatter", "all_to_all", "scatter", "gather", "reduce", "send", "recv",
             "isend", "irecv", "batch_isend_irecv", "all_gather_object", "broadcast_object_list",
             "gather_object", "scatter_object_list", "new_group", "new_subgroups", "init_process_group",
             "destroy_process_group", "monitored_barrier")


#: (module, name) of DTensor/FSDP2 entry points, each raising the TracerLimitation of ``DeviceMesh``.
_MESH_ENTRY_POINTS = (
    ("torch.distributed", "init_device_mesh"), ("torch.distributed.device_mesh", "init_device_mesh"),
    ("torch.distributed.tensor", "distribute_tensor"), ("torch.distributed.tensor", "distribute_module"),
    ("torch.distributed.tensor.parallel", "parallelize_module"),
    ("torch.distributed.tensor.parallel.api", "parallelize_module"),
    ("torch.distributed.fsdp", "fully_shard"),
)


def _unmodeled(what):
    def raise_(*args, **kwargs):
        raise TracerLimitation(f"torch.distributed.{what} is not modeled by symshape's symbolic world "
                               f"(modeled: {', '.join(_C10D[3:])} and their functional forms)")
    return raise_


class WorldScope:
    """What :func:`open_world` returns: a context manager that stands in for the default process group
    while entered; :attr:`world` is the :class:`World` once entered (None without a world name)."""

    def __init__(self, env, builder, name, dim, hint, rank_hint):
        self.args = (env, builder, name, dim, hint, rank_hint)
        self.world: Optional[World] = None
        self._patches = Patches()

    def __enter__(self):
        env, builder, name, dim, hint, rank_hint = self.args
        if name is None:
            return None
        sw = SymbolicWorld(env, builder, name, dim, hint, rank_hint)
        applied = False
        try:
            _patch_world(self._patches, sw)
            applied = True
        finally:
            if not applied:  # a half-applied patch set must not outlive the trace
                self._patches.restore()
        self.world = sw.world
        return self.world

    def __exit__(self, *exc):
        self._patches.restore()
        return False


def open_world(env, builder, name: Optional[str], dim: Optional[Dim], hint: Optional[int] = None,
               rank_hint: int = 0) -> WorldScope:
    """Stand in for the default process group while the program runs (nothing when ``name`` is None).

    Entering it yields the :class:`World` (None without one).
    """
    return WorldScope(env, builder, name, dim, hint, rank_hint)


def _patch_world(p: Patches, sw: SymbolicWorld) -> None:
    """Point torch.distributed's modeled calls at ``sw`` and its unmodeled ones at a TracerLimitation."""
    import importlib

    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor._dispatch import OpDispatcher

    for mod in (dist, c10d):
        for fn in _C10D:
            p.set(mod, fn, (lambda *a, **k: True) if fn == "is_initialized" else getattr(sw, fn))
        for fn in UNMODELED:
            if hasattr(mod, fn):
                p.set(mod, fn, _unmodeled(fn))
    for fn, ours in _FUNCOL.items():
        p.set(funcol, fn, getattr(sw, ours))
    # Anything else that needs the default group (a function imported by name before the trace).
    p.set(c10d, "_get_default_group", _unmodeled("_get_default_group (a c10d call that needs the default group)"))

    def no_mesh(*a, **k):
        raise NeedsConcreteWorld("DeviceMesh (DTensor, parallelize_module, FSDP2 fully_shard) needs a concrete "
                                 "world size: such a program is traced once per world size; give it as "
                                 "shapes.distributed.per_world(factory), the factory building it for its world")
    p.set(DeviceMesh, "__init__", no_mesh)
    p.set(OpDispatcher, "dispatch", no_mesh)
    # Entry points that reach into the world before a DeviceMesh exists, wherever the program looks them up.
    # Every module is imported before any is patched: one imported later would bind the patched name for good.
    mods = []
    for mod_name, fn in _MESH_ENTRY_POINTS:
        try:
            mods.append((importlib.import_module(mod_name), fn))
        except ImportError:
            continue
    for mod, fn in mods:
        if hasattr(mod, fn):
            p.set(mod, fn, no_mesh)
