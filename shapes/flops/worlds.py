"""FLOP and communication counts of a program traced once per world size (a device mesh), joined over ``W``.

A program built for its world (:class:`shapes.distributed.PerWorld`: a DTensor plan,
FSDP2) is traced at every world size of the range; each size's count is exact
there.  The report returned is the example size's, with :attr:`FlopReport.comm`
and :attr:`FlopReport.total` joined into formulas over ``W``
(:func:`shapes.flops.comm.join_over_worlds`; FLOPs as ``c/W`` or a constant
where they fit every size, else a ``Piecewise``), and ``world_method`` saying so.
World sizes where the program raises are left out of the join (and named).

Example::

    >>> import torch, torch.distributed as dist, shapes
    >>> from torch.distributed.device_mesh import init_device_mesh
    >>> from torch.distributed.tensor.parallel import RowwiseParallel, parallelize_module
    >>> def make():
    ...     lin = torch.nn.Linear(8, 4, bias=False)
    ...     return parallelize_module(lin, init_device_mesh("cpu", (dist.get_world_size(),)), RowwiseParallel())
    >>> r = shapes.count_flops(shapes.distributed.per_world(make), "x: f32[B, 8]", world="W", dims={"W": (1, 4, 2)})
    >>> r.world_method, r.total, r.comm.by_kind
    ('traced per world size W=1..4, joined', 64*B/W, {'all_reduce': 32*B*(W - 1)/W})
"""
from __future__ import annotations

import copy

import sympy

from ..errors import TraceError
from .comm import join_over_worlds


def _join_flops(per_world: dict, world):
    """Per-rank FLOPs over ``world``: one formula where ``c/W`` or ``c`` fits every traced size, else Piecewise."""
    at = {w: sympy.sympify(t) for w, t in per_world.items()}
    for form in (lambda e, w: e * w, lambda e, w: e):
        scaled = {w: sympy.simplify(form(e, w)) for w, e in at.items()}
        first = next(iter(scaled.values()))
        if all(sympy.simplify(e - first) == 0 for e in scaled.values()):
            return sympy.simplify(first / world) if form(sympy.Integer(1), 2) == 2 else first
    return sympy.Piecewise(*[(e, sympy.Eq(world, w)) for w, e in sorted(at.items())])


def per_world_report(program, specs, dims, world: str, report_type, *, name: str, **trace_kw):
    """Trace ``program`` at each world size in ``dims[world]``'s range and join the counts (see the module doc)."""
    from ..spec import parse_dims, parse_specs
    from ..distributed import RANK, world_dim, world_hint
    from ..tracer import trace
    _, names = parse_specs(specs)
    dmap = parse_dims(dims, list(names) + [world, RANK])
    wd = world_dim(world, dmap)
    if wd.max == float("inf") or wd.max - wd.min > 64:
        raise ValueError(f"{world}'s range {wd.min}..{wd.max} is too wide to trace at every world size")
    hint = world_hint(wd)
    reports, failed = {}, []
    for w in range(wd.min, wd.max + 1):
        at = {**{k: v for k, v in dmap.items() if k != world}, world: (wd.min, wd.max, w)}
        try:
            reports[w] = report_type(trace(program, *specs, dims=at, world=world, **trace_kw), name=name)
        except TraceError:
            failed.append(w)  # the program raises at this world size (dinfer says where)
    if hint not in reports:
        hint = next(iter(reports), None)
        if hint is None:
            raise TraceError(f"{name} raises at every world size {wd.min}..{wd.max}")
    W = sympy.Symbol(world, integer=True, positive=True)
    rep = copy.copy(reports[hint])  # the joined report; each world size's own stays as traced
    rep.comm = join_over_worlds({w: r.comm for w, r in reports.items()}, W)
    rep.total = _join_flops({w: r.total for w, r in reports.items()}, W)
    rep.per_world = reports
    rep.world_method = f"traced per world size {world}={wd.min}..{wd.max}, joined" + (
        f" (raises at {world}={', '.join(map(str, failed))}: left out)" if failed else "")
    return rep
