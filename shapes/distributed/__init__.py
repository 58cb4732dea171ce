"""Sharded programs: ``torch.distributed`` traced in one process, the world size a symbol.

``shapes.trace(program, *specs, world="W", dims={"W": (1, 8)})`` runs the
program against a symbolic world (:mod:`.world`): ``dist.get_world_size()``
is the SymInt ``W``, the collectives are graph ops whose shapes are formulas
of ``W`` (:mod:`.ops`), and their size checks are runtime asserts.  The
bytes each collective sends per rank are counted by :mod:`shapes.flops.comm`.

Example::

    >>> import torch.distributed as dist, shapes
    >>> def f(x):
    ...     dist.all_reduce(x)
    ...     return x.view(dist.get_world_size(), -1)
    >>> tp = shapes.trace(f, "x: f32[N]", world="W", dims={"W": (1, 8)})
    >>> tp.output_shapes, [str(g.expr) for g in tp.runtime_asserts]
    ([(W, (N//W))], ['Eq((N % W), 0)'])
"""
from .ops import Collective  # noqa: F401
from .mesh import (ConcreteWorld, ConcreteWorldScope, PerWorld, fake_world, mesh_label, per_world,  # noqa: F401
                   world_points, world_symbols)
from .world import NeedsConcreteWorld  # noqa: F401
from .world import DEFAULT_WORLD, RANK, World, open_world, world_dim, world_hint  # noqa: F401
