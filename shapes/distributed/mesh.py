"""Device meshes, DTensor plans and FSDP2: traced once per world size, at a concrete world.

DTensor's sharding propagation and FSDP2's padding need the world size as a
plain int (``torch.chunk`` of a parameter into ``W`` shards, a mesh of ``W``
devices), so a program that builds a ``DeviceMesh`` is not traced against a
symbolic ``W``.  It is traced at each world size ``w`` of the range instead,
in this process, against torch's *fake* process group of size ``w``
(``torch.testing._internal.distributed.fake_pg``: no peers, no data moved).
``dinfer`` joins the traces into one rule over ``W`` and the dims (each trace
is a class with ``W == w`` in its condition) and ``count_flops`` joins their
counts; both say so (``traced per world size W=1..4, joined``).

A program whose module is built for its world (``parallelize_module``,
``fully_shard``) is given as :class:`PerWorld` (``per_world(make_model)``):
the factory runs inside each world, before the trace.  A collective that
DTensor or FSDP2 issues is recorded as the op torch dispatches
(``_c10d_functional.all_reduce``, ``c10d._allgather_base_``, ...) and
annotated with its group's size (``node.meta["world"]``) for
:mod:`shapes.flops.comm`.

Example::

    >>> import torch, shapes
    >>> from torch.distributed.device_mesh import init_device_mesh
    >>> from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module
    >>> import torch.distributed as dist
    >>> def make():
    ...     lin = torch.nn.Linear(8, 8)
    ...     return parallelize_module(lin, init_device_mesh("cpu", (dist.get_world_size(),)), ColwiseParallel())
    >>> tp = shapes.trace(per_world(make), "x: f32[B, 8]", world="W", dims={"W": (1, 4, 2)})
    >>> tp.output_shapes, tp.world.size, tp.world.concrete
    ([(B, 4)], 2, True)
"""
from __future__ import annotations

import contextlib
import itertools
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Callable, Optional

import sympy
import torch

from ..errors import SpecError, TracerLimitation
from .ops import Collective
from .world import NeedsConcreteWorld, Patches, World  # noqa: F401  (NeedsConcreteWorld: raised by world.py)


@dataclass(frozen=True, kw_only=True)
class ConcreteWorld:
    """One world size (and rank) a per-world trace runs at: ``trace(..., world=ConcreteWorld(...))``
    inside :func:`fake_world` (the tracer's own step; users pass ``world="W"``).

    >>> ConcreteWorld(name="W", size=4, rank=0).size
    4
    """

    name: str
    size: int
    rank: int = 0
    #: a device mesh's dims: ((mesh dim, its size symbol's name, its size), ...); empty for a flat world
    mesh: tuple = ()


def world_symbols(world) -> list:
    """The size symbols a ``world`` argument names: ``"W"`` -> ``["W"]``; a mesh ``{"dp": "D", "tp": "T"}``
    (mesh dim -> the name of its size) -> ``["D", "T"]``.

    >>> world_symbols("W"), world_symbols({"dp": "D", "tp": "T"})
    (['W'], ['D', 'T'])
    """
    if world is None:
        return []
    if isinstance(world, str):
        return [world]
    if not isinstance(world, Mapping) or not world or not all(
            isinstance(k, str) and k.isidentifier() and isinstance(v, str) and v.isidentifier()
            for k, v in world.items()):
        raise SpecError(f"world must name the world size (\"W\") or map mesh dims to size names "
                        f"({{\"dp\": \"D\", \"tp\": \"T\"}}), got {world!r}")
    return list(world.values())


def world_points(world, ranges: dict) -> list:
    """Every world size (or mesh shape) of the ranges: a list of {size name: int}.

    >>> world_points({"dp": "D", "tp": "T"}, {"D": (1, 2), "T": (1, 2)})
    [{'D': 1, 'T': 1}, {'D': 1, 'T': 2}, {'D': 2, 'T': 1}, {'D': 2, 'T': 2}]
    """
    names = world_symbols(world)
    for n in names:
        lo, hi = ranges[n]
        if hi == float("inf") or hi - lo > 64:
            raise SpecError(f"{n}'s range {lo}..{hi} is too wide to trace at every size (a device mesh needs "
                            f"each one concrete): give a range of at most 64 sizes")
    grid = itertools.product(*[range(ranges[n][0], ranges[n][1] + 1) for n in names])
    return [dict(zip(names, p)) for p in grid]


def mesh_label(world, ranges: dict) -> str:
    """How a per-world trace names what it joined over: ``W=1..4`` or ``dp=D in 1..2, tp=T in 1..4``.

    >>> mesh_label({"dp": "D", "tp": "T"}, {"D": (1, 2), "T": (1, 4)})
    'mesh dp=D in 1..2, tp=T in 1..4'
    """
    if isinstance(world, str):
        return f"world size {world}={ranges[world][0]}..{ranges[world][1]}"
    return "mesh " + ", ".join(f"{k}={v} in {ranges[v][0]}..{ranges[v][1]}" for k, v in world.items())


class PerWorld:
    """A program built for its world: ``factory()`` runs inside each world size's fake process group,
    and what it returns (a module, a function) is traced there.

    >>> PerWorld(lambda: torch.nn.Identity()).build()
    Identity()
    """

    def __init__(self, factory: Callable):
        self.factory = factory
        self.__qualname__ = self.__name__ = getattr(factory, "__qualname__", type(factory).__name__)

    def build(self, **mesh):
        """Run the factory (inside a world: :func:`fake_world`), with a mesh's sizes by dim (``dp=2, tp=4``)."""
        return self.factory(**mesh)

    def __call__(self, *args, **kwargs):
        return self.build()(*args, **kwargs)


def per_world(factory: Callable) -> PerWorld:
    """Mark ``factory`` as building a sharded program for the current world (see :class:`PerWorld`).

    >>> per_world(lambda: None).__qualname__
    '<lambda>'
    """
    return PerWorld(factory)


@contextlib.contextmanager
def fake_world(size: int, rank: int = 0):
    """torch's fake process group of ``size`` ranks, as ``rank``, for the duration (the default group).

    Where a default group of that size exists already (a real job tracing its own program), it is kept.

    >>> with fake_world(3, 1):
    ...     import torch.distributed as dist
    ...     dist.get_world_size(), dist.get_rank()
    (3, 1)
    """
    import torch.distributed as dist
    if dist.is_initialized():
        if dist.get_world_size() != size:
            raise TracerLimitation(f"a process group of {dist.get_world_size()} ranks exists; symshape cannot "
                                   f"trace at world size {size} beside it")
        yield
        return
    from torch.testing._internal.distributed.fake_pg import FakeStore
    hook = sys.excepthook  # init_process_group wraps it to prefix "[rank0]:" (again on each init)
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=size)
    _forget_shardings()
    try:
        yield
    finally:
        _forget_shardings()
        dist.destroy_process_group()
        sys.excepthook = hook


def _forget_shardings() -> None:
    """Empty DTensor's sharding caches: keyed by layouts that compare equal across worlds, they would hand a
    mesh of the previous world (its process groups gone) to this one."""
    try:
        from torch.distributed.tensor import debug
    except ImportError:
        return
    clear = getattr(debug, "_clear_sharding_prop_cache", None)
    if clear is not None:
        clear()


def fsdp_gather_bytes(module, world):
    """The bytes a rank contributes to FSDP2's all-gathers in one forward of ``module``, as a formula of the
    world size symbol ``world``: each group's parameters padded to ``ceiling(dim0 / W)`` rows (FSDP2 shards
    dim 0 like ``torch.chunk`` and pads every shard to the largest).  None for a module FSDP2 does not
    manage or a parameter of no dims.  A candidate only: :func:`shapes.flops.comm.join_over_worlds` uses it
    where it equals the traced bytes at every world size.

    >>> fsdp_gather_bytes(torch.nn.Linear(2, 2), sympy.Symbol("W")) is None
    True
    """
    fsdp = sys.modules.get("torch.distributed.fsdp")
    if fsdp is None:
        return None
    groups = [m for m in module.modules() if isinstance(m, fsdp.FSDPModule)]
    if not groups:
        return None
    total = sympy.Integer(0)
    for g in groups:
        inner = {id(p) for c in g.modules() if c is not g and isinstance(c, fsdp.FSDPModule) for p in c.parameters()}
        for p in g.parameters():
            if id(p) in inner:
                continue
            if p.dim() == 0:
                return None
            rest = p.numel() // p.shape[0] if p.shape[0] else 0
            total += sympy.ceiling(sympy.Integer(p.shape[0]) / world) * rest * p.element_size()
    return total


def _meta_of(spec):
    m = spec.tensor_meta
    return torch.empty_strided(m.shape, m.stride, dtype=m.dtype, device="meta")


def _tensor_meta(self, op_schema):
    """DTensor's global output metadata, computed on meta tensors outside the trace's modes.

    torch computes it under a FakeTensorMode of its own, which cannot hold symshape's sizes; the meta
    kernels can, and nothing they do is recorded (the global shapes are no op of any rank)."""
    from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta
    from torch.utils._python_dispatch import _disable_current_modes
    from torch.utils._pytree import tree_map_only

    if op_schema.op == torch.ops.aten.equal.default:
        return None  # data-dependent: torch does not propagate it either

    def is_spec(x):
        return isinstance(x, DTensorSpec)
    with _disable_current_modes():
        args = tree_map_only(DTensorSpec, _meta_of, op_schema.args_schema, is_leaf=is_spec)
        kwargs = tree_map_only(DTensorSpec, _meta_of, op_schema.kwargs_schema, is_leaf=is_spec)
        out = op_schema.op(*args, **kwargs)

    def tm(o):
        return TensorMeta(shape=o.shape, stride=o.stride(), dtype=o.dtype) if isinstance(o, torch.Tensor) else None
    if isinstance(out, torch.Tensor):
        return tm(out)
    if isinstance(out, (tuple, list)):
        metas = [tm(o) for o in out]
        return tuple(metas) if isinstance(out, tuple) else metas
    return None


def _patch_dtensor(p) -> None:
    """DTensor's tracing paths (``_are_we_tracing``: no caches keyed on sizes, collectives waited at once)
    and its metadata propagation on meta tensors (:func:`_tensor_meta`)."""
    import torch.distributed._functional_collectives as funcol
    import torch.distributed.fsdp  # noqa: F401  (the modules that bind _are_we_tracing, imported before the patch)
    import torch.distributed.tensor.parallel  # noqa: F401
    from torch.distributed.tensor._sharding_prop import ShardingPropagator

    real = funcol._are_we_tracing
    for name, mod in list(sys.modules.items()):
        # Each DTensor module binds the function by name at import.
        if name.startswith("torch.distributed") and getattr(mod, "_are_we_tracing", None) is real:
            p.set(mod, "_are_we_tracing", lambda: True)
    # The name differs across torch versions (the cached entry point calls the uncached one in 2.13).
    names = [n for n in ("_propagate_tensor_meta_non_cached", "_propagate_tensor_meta") if hasattr(ShardingPropagator, n)]
    if not names:
        raise TracerLimitation("this torch's DTensor has no tensor-metadata propagation symshape knows how to "
                               "run on meta tensors (ShardingPropagator._propagate_tensor_meta*)")
    for n in names:
        p.set(ShardingPropagator, n, _tensor_meta)


def _group_size(node) -> Optional[int]:
    """The size of the group a recorded collective node runs on (while the process group lives)."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d
    for a in node.args:
        if isinstance(a, torch.ScriptObject):
            return int(dist.ProcessGroup.unbox(a).size())
    name = Collective.group_name_of(node)
    if name is not None:
        return int(c10d._resolve_process_group(name).size())
    return None


class ConcreteWorldScope:
    """The world of one per-world trace (entered inside :func:`fake_world`): DTensor patched for tracing;
    on exit, each recorded collective node gets ``meta["world"]``, its group's size."""

    def __init__(self, builder, at: ConcreteWorld):
        self.builder = builder
        self.world = World(name=at.name, size=sympy.Integer(at.size), rank=sympy.Integer(at.rank), concrete=True,
                           mesh=at.mesh)
        self._patches = Patches()

    def __enter__(self):
        applied = False
        try:
            _patch_dtensor(self._patches)
            applied = True
        finally:
            if not applied:  # a half-applied patch set must not outlive the trace
                self._patches.restore()
        return self.world

    def __exit__(self, *exc):
        self._patches.restore()
        for node in self.builder.graph.nodes:
            if node.op == "call_function" and Collective.of(node.target) is not None:
                node.meta["world"] = _group_size(node)
                self.world.collectives.append(Collective.of(node.target))
        return False
