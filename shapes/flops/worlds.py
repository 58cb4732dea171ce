"""FLOP and communication counts of a program traced once per world size (a device mesh), joined over ``W``.

A program built for its world (:class:`shapes.distributed.PerWorld`: a DTensor plan,
FSDP2) is traced at every world size of the range; each size's count is exact
there.  The report returned is the example size's, with :attr:`FlopReport.comm`
and :attr:`FlopReport.total` joined into formulas over ``W``
(:func:`shapes.flops.comm.join_over_worlds`, with FSDP2's padded shards as a
candidate closed form; FLOPs as ``c/W`` or a constant where they fit every
size; else a ``Piecewise``), and ``world_method`` saying so.
World sizes where the program raises are left out of the join (and named).

Example::

    >>> import torch, torch.distributed as dist, shapes
    >>> from torch.distributed.device_mesh import init_device_mesh
    >>> from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    >>> def make():
    ...     mlp = torch.nn.Sequential(torch.nn.Linear(8, 8, bias=False), torch.nn.Linear(8, 4, bias=False))
    ...     mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    ...     return parallelize_module(mlp, mesh, {"0": ColwiseParallel(), "1": RowwiseParallel()})
    >>> r = shapes.count_flops(shapes.distributed.per_world(make), "x: f32[B, 8]", world="W", dims={"W": (1, 2)})
    >>> r.world_method, r.total, r.comm.by_kind
    ('traced per world size W=1..2, joined', 192*B/W, {'all_reduce': 32*B*(W - 1)/W})
"""
from __future__ import annotations

import copy

import sympy

from ..errors import TraceError
from .comm import join_over_worlds


def _join_flops(at: list, symbols: dict):
    """Per-rank FLOPs over the sizes: ``c/g`` (a size symbol or their product) or ``c`` where it fits every
    traced point, else a Piecewise."""
    groups = list(symbols.values()) + ([sympy.Mul(*symbols.values())] if len(symbols) > 1 else [])
    for g in [sympy.Integer(1)] + groups:
        scaled = [sympy.simplify(sympy.sympify(e) * g.subs({symbols[n]: v for n, v in p.items()})) for p, e in at]
        if all(sympy.simplify(e - scaled[0]) == 0 for e in scaled):
            return sympy.simplify(scaled[0] / g)
    return sympy.Piecewise(*[(sympy.sympify(e), sympy.And(*[sympy.Eq(symbols[n], v) for n, v in p.items()]))
                             for p, e in at])


def _candidates(program, world, symbols: dict) -> dict:
    """Closed forms to try for a kind's bytes (checked against every traced point by the join): FSDP2's
    all-gathers from its parameters' shapes, for a program built on a flat world."""
    from ..binding import fsdp_managed
    from ..distributed import fake_world
    from ..distributed.mesh import fsdp_gather_bytes
    if not isinstance(world, str):
        return {}
    with fake_world(1):
        built = program.build()  # the parameters' global shapes do not depend on the world size
        n = fsdp_gather_bytes(built, symbols[world]) if fsdp_managed(built) else None
    return {"all_gather": n} if n is not None else {}


def per_world_report(program, specs, dims, world, report_type, *, name: str, **trace_kw):
    """Trace ``program`` at each world size (or mesh shape) of the ranges in ``dims`` and join the counts
    (see the module doc)."""
    from ..distributed import RANK, mesh_label, world_dim, world_hint, world_points, world_symbols
    from ..spec import parse_dims, parse_specs
    from ..tracer import trace
    _, names = parse_specs(specs)
    syms = world_symbols(world)
    dmap = parse_dims(dims, list(names) + syms + [RANK])
    ranges = {n: (world_dim(n, dmap).min, world_dim(n, dmap).max) for n in syms}
    hint = {n: world_hint(world_dim(n, dmap)) for n in syms}
    reports, failed = [], []
    for point in world_points(world, ranges):
        at = {**{k: v for k, v in dmap.items() if k not in syms}, **{n: (*ranges[n], point[n]) for n in syms}}
        try:
            reports.append((point, report_type(trace(program, *specs, dims=at, world=world, **trace_kw), name=name)))
        except TraceError:
            failed.append(point)  # the program raises at these sizes (dinfer says where)
    if not reports:
        raise TraceError(f"{name} raises at every {mesh_label(world, ranges)}")
    first = next((r for p, r in reports if p == hint), reports[0][1])
    symbols = {n: sympy.Symbol(n, integer=True, positive=True) for n in syms}
    rep = copy.copy(first)  # the joined report; each point's own stays as traced
    rep.comm = join_over_worlds([(p, r.comm) for p, r in reports], symbols, _candidates(program, world, symbols))
    rep.total = _join_flops([(p, r.total) for p, r in reports], symbols)
    rep.per_world = {tuple(p[n] for n in syms): r for p, r in reports}
    left = "; ".join(", ".join(f"{k}={v}" for k, v in p.items()) for p in failed)
    rep.world_method = f"traced per {mesh_label(world, ranges)}, joined" + (
        f" (raises at {left}: left out)" if failed else "")
    return rep
