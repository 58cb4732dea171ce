"""Where a traced program read a tensor's memory layout: a trace assumes contiguous inputs.

A spec gives an input's sizes, not its strides: the trace's inputs are contiguous.  A program
that only computes with its inputs gives the same values for any layout, so its trace serves
strided inputs too.  One that reads a layout (``x.is_contiguous()``, ``x.stride()``,
``x.storage_offset()``) may branch on it or compute sizes from it::

    y = x.reshape(-1) if x.is_contiguous() else x     # another shape for a transposed x

so its trace holds only for the layout it saw.  While a program runs under the trace, these
reads are recorded (one :class:`LayoutRead` per line, with the program's line); a trace with
reads refuses inputs that are not contiguous (:meth:`shapes.program.TracedProgram.check_layout`,
a :class:`LayoutMismatch`), and a compiled program runs such a call as the program itself
(:class:`compiler.runtime.CompiledProgram`).

Reads made by torch's own kernels while they run (under the trace's dispatch mode) are not
the program's and are not recorded, as for devices (:mod:`shapes.devices`).

Example::

    >>> import shapes
    >>> tp = shapes.trace(lambda x: (x.reshape(-1) if x.is_contiguous() else x) * 2, "x: f32[N, 8]")
    >>> [r.what for r in tp.layout_reads]
    ['Tensor.is_contiguous']
    >>> shapes.trace(lambda x: x.t().reshape(-1) * 2, "x: f32[N, 8]").layout_reads
    []
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from .devices import is_meta, patch_tensor, restore_tensor
from .errors import GuardViolation
from .provenance import Provenance, capture

#: The Tensor methods that read a layout, patched while a trace runs.
_READS = ("is_contiguous", "stride", "storage_offset")

#: ATen ops whose values follow their argument's storage, not its logical elements: on an input,
#: a layout read (a strided input's as_strided reads other elements than a contiguous one's).
_STORAGE_OPS = {torch.ops.aten.as_strided.default, torch.ops.aten.as_strided_.default,
                torch.ops.aten.as_strided_copy.default, torch.ops.aten.as_strided_scatter.default}

#: Source folders whose reads are not the program's: torch's and symshape's own packages.
_NOT_THE_PROGRAM = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (torch,)) + tuple(
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), p) + os.sep
    for p in ("shapes", "compiler", "guards", "validation"))


@dataclass(frozen=True)
class LayoutRead:
    """One place the program read a tensor's layout: ``what`` (``Tensor.stride``...) and its line.

    >>> LayoutRead(what="Tensor.stride", provenance=Provenance(filename="m.py", lineno=3)).text()
    'Tensor.stride at m.py:3'
    """

    what: str
    provenance: Provenance

    def text(self) -> str:
        return f"{self.what} at {self.provenance.location()}"


class LayoutMismatch(GuardViolation):
    """An input laid out otherwise than a trace's (strided, or at an offset) where the program read a
    layout (the trace holds for its own inputs' layout only).

    >>> isinstance(LayoutMismatch("x is not contiguous"), GuardViolation)
    True
    """


class ReportedLayout:
    """While a trace runs, records the program's own layout reads in ``reads`` (see the module
    docstring); ``recorder`` is the trace's dispatch mode, innermost while the program's code runs.

    >>> with ReportedLayout(recorder=None) as rl:   # no trace running: nothing is the program's read
    ...     _ = torch.ones(2, 3).t().is_contiguous()
    >>> rl.reads
    []
    """

    def __init__(self, recorder):
        self.recorder = recorder
        self.reads: list[LayoutRead] = []
        self._seen: set = set()
        self._saved: dict = {}

    def _read(self, what: str) -> None:
        f = sys._getframe(2)
        key = (f.f_code, f.f_lineno, what)
        if key not in self._seen:
            self._seen.add(key)
            self.reads.append(LayoutRead(what=what, provenance=capture(None)))

    def watch_inputs(self, tensors) -> "ReportedLayout":
        """Also record the ops whose values depend on their argument's storage layout
        (``as_strided`` and its forms: strides into the storage, not into the tensor) where that
        argument is one of ``tensors`` or a view of one (the program's inputs)."""
        self._inputs = {t.untyped_storage()._cdata for t in tensors if isinstance(t, torch.Tensor)}
        return self

    def _op(self, func, args) -> None:
        if func in _STORAGE_OPS and args and isinstance(args[0], torch.Tensor) and \
                args[0].untyped_storage()._cdata in self._inputs:
            key = (func, args[0].untyped_storage()._cdata)
            if key not in self._seen:
                self._seen.add(key)
                self.reads.append(LayoutRead(what=str(func), provenance=capture(str(func))))

    def __enter__(self):
        rl = self
        if getattr(self, "_inputs", None) and self.recorder is not None:
            self.recorder.on_op = self._op

        def patched(name, real):
            def read(t, *args, **kwargs):
                # A trace tensor (meta) read by the program's own code: not a constant's fixed layout,
                # nor torch's or symshape's own code (matmul's decomposition reads strides to pick
                # its ops: any of them gives the same values).
                if _get_current_dispatch_mode() is rl.recorder and is_meta(t) and \
                        not sys._getframe(1).f_code.co_filename.startswith(_NOT_THE_PROGRAM):
                    rl._read(f"Tensor.{name}")
                with torch._C.DisableTorchFunction():  # the real read; a mode would hand it back here
                    return real(t, *args, **kwargs)
            read.__name__ = read.__qualname__ = name
            read.__doc__ = real.__doc__
            return read

        self._saved = patch_tensor({name: patched(name, torch.Tensor.__dict__.get(name)
                                                  or getattr(torch._C.TensorBase, name)) for name in _READS})
        return self

    def __exit__(self, *exc):
        restore_tensor(self._saved)
        if self.recorder is not None and self.recorder.on_op == self._op:
            self.recorder.on_op = None


def _laid_out_as_traced(t: torch.Tensor) -> bool:
    """Whether ``t`` has the layout a trace gives an input: offset 0 and the contiguous strides,
    size-1 dims included (``is_contiguous`` ignores those, ``stride()`` does not)."""
    if t.storage_offset() != 0:
        return False
    want = 1
    for n, st in zip(reversed(t.shape), reversed(t.stride())):
        if st != want:
            return False
        want *= n
    return True


def strided_input(tensors, specs):
    """The spec name of the first tensor of ``tensors`` laid out otherwise than a trace's inputs
    (contiguous strides at storage offset 0), or None.

    >>> from shapes.spec import parse_spec
    >>> [strided_input([t], [parse_spec("x: f32[A, B]")]) for t in
    ...  (torch.ones(2, 3).t(), torch.ones(4, 3)[1:], torch.ones(3, 2).as_strided((1, 2), (7, 1)), torch.ones(3, 2))]
    ['x', 'x', 'x', None]
    """
    for t, s in zip(tensors, specs):
        if isinstance(t, torch.Tensor) and not _laid_out_as_traced(t):
            return s.name
    return None


__all__ = ["LayoutMismatch", "LayoutRead", "ReportedLayout", "strided_input"]
