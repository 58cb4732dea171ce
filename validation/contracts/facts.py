"""What the contract checks know about a program: one trace, dinfer's classes, a FLOP report per path.

The program is traced once at the example sizes (:attr:`ProgramFacts.traced`);
dinfer's classes are found only when an expectation needs them
(:attr:`ProgramFacts.space`).  A FLOP report belongs to a path, not to a class:
:meth:`ProgramFacts.report_of_class` reuses a report whose trace's guards hold at
the class's point, and traces only for a path no report covers yet.

Example::

    >>> import torch
    >>> from validation.contracts.contract import Contract
    >>> c = Contract(name="v", program="", inputs=["x: f32[N]"], dims={"N": (1, 64)},
    ...              expectations={"flops": "4*N"})
    >>> f = ProgramFacts(c, lambda x: x.view(-1, 4) @ torch.ones(4, 2), time_budget=20)
    >>> [str(f.report_of_class(k).total) for k in f.space.ok_classes], f.traces
    (['16*((N//4))'], 1)
"""
from __future__ import annotations

import math

from .contract import Contract


class ProgramFacts:
    """The program traced once at a generic point, and dinfer's classes when needed (lazily)."""

    def __init__(self, contract: Contract, program, time_budget: float):
        self.c = contract
        self.program = program
        self.time_budget = time_budget
        self._space = None
        self._tp = None
        self._trace_error = None
        #: ``[(traced program, its FLOP report)]``: one per path reported so far
        self._reports: list = []
        #: how many traces this object made (the example trace included)
        self.traces = 0

    @property
    def space(self):
        if self._space is None:
            from validation.dinfer import dinfer
            self._space = dinfer(self.program, *self.c.inputs, dims=self.c.dims, time_budget=self.time_budget,
                                 world=self.c.world)
        return self._space

    def _trace(self, dims):
        from shapes import trace
        self.traces += 1
        return trace(self.program, *self.c.inputs, dims=dims, world=self.c.world)

    @property
    def traced(self):
        """A trace at the default example sizes, or else at the smallest ok class's point."""
        if self._tp is None and self._trace_error is None:
            from shapes import TraceError
            from shapes.spec import Dim
            try:
                self._tp = self._trace(self.c.dims)
            except TraceError as e:
                self._trace_error = e
                for cl in sorted(self.space.ok_classes, key=lambda k: -min(k.traced_at.values(), default=0)):
                    dims = {n: (Dim(v, v, v) if isinstance(v, int) else Dim(v[0], v[1], cl.traced_at[n]))
                            for n, v in self.c.dims.items()}
                    try:
                        self._tp = self._trace(dims)
                        self._trace_error = None
                        break
                    except TraceError:
                        continue
        if self._tp is None:
            raise self._trace_error
        return self._tp

    def report_of(self, tp):
        """The FLOP report of the trace ``tp`` (counted once)."""
        from shapes.flops import count_flops
        for t, r in self._reports:
            if t is tp:
                return r
        r = count_flops(tp)
        self._reports.append((tp, r))
        return r

    def report_of_class(self, c):
        """The FLOP report of the class ``c``'s path: that of a trace already made over the
        searched box whose guards hold at the class's point, else of a trace at that point."""
        from shapes.spec import Dim
        sp = self.space
        if self._tp is not None and self._tp not in [t for t, _ in self._reports]:
            self.report_of(self._tp)
        for tp, r in self._reports:
            if _covers(tp, sp.dims, c.traced_at):
                return r
        dims = {n: Dim(lo, hi, c.traced_at[n]) for n, (lo, hi) in sp.dims.items()}
        return self.report_of(self._trace(dims))


def _covers(tp, box: dict, point: dict) -> bool:
    """Whether tracing at ``point`` over ``box`` takes ``tp``'s path: ``tp`` was traced over the
    same ranges, decided only about these dims, and every record it made holds at the point."""
    if set(tp.dims) != set(box):
        return False
    if tp.world is not None and tp.world.concrete:
        return False  # traced at one world size (a device mesh): its counts hold at that size only
    for n, (lo, hi) in box.items():
        d = tp.dims[n]
        if (d.min, d.max if d.max is not None else math.inf) != (lo, hi):
            return False
    dims = set(tp.dim_symbols.values()) if tp.dim_symbols else {tp.env.symbols[n] for n in box}
    records = tp.env.constraints + tp.env.records + list(tp.env.limits)
    if any(not g.expr.free_symbols <= dims for g in records):
        return False  # a decision about a data-dependent value or the rank: trace to be sure
    return not tp.failing_guards(point)
