"""One program, several traced paths: where a guard splits on size 1, the other path joined.

Decoders take another path at ``B == 1`` or ``T == 1`` (transformers' masking
and SDPA dispatch ask ``batch_size != 1``, ``q_length > 1``).  One trace at
sizes >= 2 records the guard ``T != 1`` and refuses ``T = 1``, where the
program runs.  :func:`join_size_one` traces each such path at its own example
(the dim at 1, the others as before), and :class:`TracedPaths` holds them
all: :meth:`TracedPaths.run` takes the path whose guards accept the inputs,
and :meth:`TracedPaths.failing_guards` is empty wherever one path accepts.
A path where the program raises is not joined: those sizes stay refused.

Only guards that hold at 2 and fail at 1 split a path off: a threshold
(``B > 16``) is not a size-1 path, and sizes on its other side recompile.

Example::

    >>> import torch, shapes
    >>> def f(x):
    ...     return x.sum(0) if x.shape[0] != 1 else x[0] * 2
    >>> tp = shapes.trace_paths(f, "x: f32[B, 4]")
    >>> len(tp.paths), [shapes.printers.to_python(c) for c in tp.conditions()]
    (2, ['B >= 2', 'B == 1'])
    >>> tp.run(torch.ones(1, 4)).tolist(), tp.run(torch.ones(3, 4)).tolist()
    ([2.0, 2.0, 2.0, 2.0], [3.0, 3.0, 3.0, 3.0])
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import sympy

from .env import DataDependentError
from .errors import SymshapeError
from .flops.pieces import traced_path_condition
from .guard import GuardKind
from .spec import Dim
from .tracer import trace

#: At most this many dims get every combination of size-1 corners traced.
_CORNER_DIMS = 4


@dataclass
class TracedPaths:
    """A program's traced paths, each with its guards; the first is the trace at the example sizes.

    Attribute reads it does not define go to the first path (its graph, env,
    specs, outputs), so it stands wherever a :class:`~shapes.program.TracedProgram` is read.
    """

    paths: list

    def __getattr__(self, name):
        if name == "paths":
            raise AttributeError(name)
        return getattr(self.paths[0], name)

    def conditions(self) -> list:
        """Each path's guards as one condition (``B != 1``, ``B == 1``), in path order."""
        return [traced_path_condition(p) for p in self.paths]

    def path_for(self, sizes: dict):
        """The first path whose constraints, guards and asserts hold at ``sizes`` (dim name -> int), or None."""
        for p in self.paths:
            if not p.failing_guards(sizes):
                return p
        return None

    def failing_guards(self, sizes: dict, *, constraints: bool = True) -> list:
        """Empty where one path accepts ``sizes``; else what fails on the first path."""
        first = None
        for p in self.paths:
            bad = p.failing_guards(sizes, constraints=constraints)
            if not bad:
                return []
            first = bad if first is None else first
        return first

    def run(self, *tensors):
        """Run the path whose guards accept the inputs (GuardViolation as the first path's when none does)."""
        first = self.paths[0]
        sizes = {str(s): v for s, v in first.bind_sizes(tensors).items()}
        p = self.path_for(sizes)
        return (p or first).run(*tensors)


def _splits_on_one(tp, name: str, point: dict) -> bool:
    """Whether setting ``name`` to 1 fails only guards of the program (not a range, an assert or a limit)
    that hold at 2: a split between 1 and larger sizes, not a threshold such as ``B > 16``."""
    bad = tp.failing_guards({**point, name: 1})
    if not bad or not all(g.kind is GuardKind.GUARD and g.index >= 0 for g in bad):
        return False
    at_two = {id(g) for g in tp.failing_guards({**point, name: 2})}
    return not any(id(g) in at_two for g in bad)


def join_size_one(tp) -> TracedPaths:
    """``tp`` with the paths its program takes where a guard splits on size 1, each traced there."""
    hints = {n: v for n, v in tp.hints.items()}
    names = [n for n in hints if hints[n] != 1 and tp.dims.get(n, Dim()).min <= 1 <= tp.dims.get(n, Dim()).max
             and _splits_on_one(tp, n, hints)]
    combos = []
    for k in range(1, min(len(names), _CORNER_DIMS) + 1):
        combos += list(itertools.combinations(names, k))
    joined = TracedPaths([tp])
    options = dict(getattr(tp, "trace_options", {}))
    for combo in combos:
        point = {**hints, **{n: 1 for n in combo}}
        if joined.path_for(point) is not None:
            continue
        dims = {n: Dim(d.min, d.max, point[n]) for n, d in ((n, tp.dims.get(n, Dim())) for n in hints)}
        try:
            other = trace(tp.program, *tp.specs, dims=dims, specialize_zero_one=tp.env.specialize_zero_one,
                          **options)
        except (SymshapeError, DataDependentError):
            continue  # the program raises there (or symshape cannot say): not joined, those sizes refused
        if other.failing_guards(point) or other.unchecked_indices:
            continue  # never join a path that does not hold at its own example, or one not fully checked
        joined.paths.append(other)
    return joined


def trace_paths(program, *specs, **options) -> TracedPaths:
    """:func:`shapes.trace`, then :func:`join_size_one`: one program covering its size-1 paths.

    >>> import shapes
    >>> len(shapes.trace_paths(lambda x: x * 2, "x: f32[N]").paths)
    1
    """
    return join_size_one(trace(program, *specs, **options))


def path_of(traced) -> list:
    """The paths of ``traced`` (a TracedPaths or one TracedProgram), as a list."""
    return list(traced.paths) if isinstance(traced, TracedPaths) else [traced]

