"""Where a traced program set torch's random number generator: its state is not in the graph.

A graph records tensor ops.  ``torch.manual_seed(42)`` inside a program is no tensor op: it runs
once, while the program is traced, and no node replays it.  A program that seeds before it draws
(``torch.manual_seed(42); x + torch.rand_like(x)``) gives the same values at every eager call;
its graph, run again, draws from wherever the generator stands, so every call after the first
differs from eager.  While a program runs under the trace, these writes are recorded (one
:class:`RngWrite` per line, with the program's line); a compiled program whose trace has any runs
its calls as the program itself (:class:`compiler.runtime.CompiledProgram`), as for layout reads
(:mod:`shapes.layout_reads`).  The write itself still happens at trace time, as it did before.

Example::

    >>> import shapes, torch
    >>> def noisy(x):
    ...     torch.manual_seed(0)
    ...     return x + torch.rand_like(x)
    >>> [w.what for w in shapes.trace(noisy, "x: f32[N]").rng_writes]
    ['torch.manual_seed']
    >>> shapes.trace(lambda x: x + torch.rand_like(x), "x: f32[N]").rng_writes
    []
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

import torch

from .layout_reads import LayoutRead
from .provenance import capture

#: ``(module, attribute)`` of the functions that set a generator's state, patched while a trace runs.
_WRITES = ((torch, "manual_seed"), (torch, "seed"), (torch, "set_rng_state"),
           (torch.random, "manual_seed"), (torch.random, "seed"), (torch.random, "set_rng_state"),
           (torch.cuda, "manual_seed"), (torch.cuda, "manual_seed_all"), (torch.cuda, "set_rng_state"),
           (torch.cuda, "set_rng_state_all"), (torch.cuda, "seed"), (torch.cuda, "seed_all"))


@dataclass(frozen=True)
class RngWrite(LayoutRead):
    """One place the program set the generator: ``what`` (``torch.manual_seed``...) and its line
    (the record of :class:`~shapes.layout_reads.LayoutRead`, for another kind of state).

    >>> from shapes.provenance import Provenance
    >>> RngWrite(what="torch.manual_seed", provenance=Provenance(filename="m.py", lineno=3)).text()
    'torch.manual_seed at m.py:3'
    """


class RecordedRngWrites:
    """While a trace runs, records in ``writes`` each line where the program set torch's generator.

    >>> with RecordedRngWrites() as rw:
    ...     _ = torch.manual_seed(3)
    >>> [w.what for w in rw.writes]
    ['torch.manual_seed']
    """

    def __init__(self):
        self.writes: list[RngWrite] = []
        self._seen: set = set()
        self._saved: list = []
        self._depth = 0  # torch.manual_seed calls torch.cuda.manual_seed_all: one write, not two

    def _record(self, what: str) -> None:
        f = sys._getframe(2)
        key = (f.f_code, f.f_lineno, what)
        if key not in self._seen:
            self._seen.add(key)
            self.writes.append(RngWrite(what=what, provenance=capture(None)))

    def __enter__(self):
        for mod, name in _WRITES:
            real = getattr(mod, name, None)
            if real is None:
                continue
            self._saved.append((mod, name, real))
            setattr(mod, name, self._wrap(f"{mod.__name__}.{name}", real))
        return self

    def _wrap(self, what: str, real):
        rec = self

        def write(*args, **kwargs):
            if not rec._depth:
                rec._record(what)
            rec._depth += 1
            try:
                return real(*args, **kwargs)
            finally:
                rec._depth -= 1

        write.__name__ = write.__qualname__ = real.__name__
        write.__doc__ = real.__doc__
        write.__wrapped__ = real
        return write

    def __exit__(self, *exc):
        for mod, name, real in reversed(self._saved):
            setattr(mod, name, real)
        self._saved = []
        return False
