"""The device a traced program will run on: what its tensors report while they hold no data.

The tracer computes on ``meta`` tensors, but library code branches on the
device (transformers' MoE routing takes ``.float()`` on ``cpu``/``mps`` and
``.int()`` elsewhere, and ``histc`` on int32 has no CPU kernel).  As
torch.export's fake tensors do, every tensor of a trace reports the device
the program will run on (``trace(..., device="cpu")``, the default) while the
program's own Python code looks at it; torch's kernels, running below the
recorder, still see ``meta``.

Each place the program reads a device is kept as a :class:`DeviceRead`: the
trace assumes that device there, and :meth:`TracedProgram.run` refuses inputs
on another one (:class:`~shapes.errors.DeviceMismatch`).

Example::

    >>> import torch, shapes
    >>> tp = shapes.trace(lambda x: x * 2 if x.device.type == "cpu" else x, "x: f32[N]")
    >>> tp.device, [r.what for r in tp.device_reads]
    (device(type='cpu'), ['Tensor.device'])
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Optional

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import _get_current_dispatch_mode

from .errors import GuardViolation, SpecError
from .provenance import Provenance, capture

_TensorBase = torch._C.TensorBase
# The real (C++) answers; the trace's tensors are meta below the recorder.
_REAL = {name: getattr(_TensorBase, name) for name in ("device", "is_cuda", "is_cpu", "is_meta")}
_REAL_GET_DEVICE = _TensorBase.get_device
# The devices a trace may report.  ``mps`` and others are not taken: their
# kernels differ in ways the tracer does not model.
DEVICE_TYPES = ("cpu", "cuda")


def parse_device(device) -> torch.device:
    """The device a trace reports, from what the user gave (default: the CPU).

    >>> parse_device(None), parse_device("cuda")
    (device(type='cpu'), device(type='cuda', index=0))
    >>> parse_device("meta")
    Traceback (most recent call last):
    ...
    shapes.errors.SpecError: device 'meta' is not one a program runs on; give one of cpu, cuda
    """
    if device is None:
        return torch.device("cpu")
    try:
        d = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise SpecError(f"device {device!r} is not a torch device ({e})") from e
    if d.type not in DEVICE_TYPES:
        raise SpecError(f"device {str(device)!r} is not one a program runs on; give one of {', '.join(DEVICE_TYPES)}")
    if d.type == "cuda" and d.index is None:
        d = torch.device("cuda", 0)  # what a real CUDA tensor reports
    return d


def real_device(t: torch.Tensor) -> torch.device:
    """Where ``t``'s data really lives (``meta`` for the trace's tensors), whatever it reports.

    >>> real_device(torch.empty(2, device="meta"))
    device(type='meta')
    """
    with torch._C.DisableTorchFunction():  # else torch hands the read to the patched property
        return _REAL["device"].__get__(t)


_META = torch._C.DispatchKey.Meta


def is_meta(t) -> bool:
    """Whether ``t`` is a trace's tensor (meta data), whatever device it reports.

    >>> is_meta(torch.empty(2, device="meta")), is_meta(torch.empty(2))
    (True, False)
    """
    return torch._C._dispatch_keys(t).has(_META)


@dataclass(frozen=True)
class DeviceRead:
    """One place the program read the device of a tensor of the trace.

    ``what`` is the attribute read (``Tensor.device``, ``Tensor.is_cuda``, ...),
    ``device`` the device the trace reported, ``provenance`` the program's line.

    >>> DeviceRead(what="Tensor.device", device="cpu", provenance=Provenance(filename="m.py", lineno=3)).text()
    'Tensor.device read as cpu at m.py:3'
    """

    what: str
    device: str
    provenance: Provenance

    def text(self) -> str:
        return f"{self.what} read as {self.device} at {self.provenance.location()}"


class ReportedDevice:
    """While a trace runs, the trace's meta tensors report ``device`` to the program.

    ``recorder`` is the trace's dispatch mode: only while it is the innermost
    mode is the program's own code running (inside it, torch's kernels run
    and must see ``meta``).  ``reads`` collects one :class:`DeviceRead` per
    line that read a device.
    """

    _active: list = []  # the ReportedDevice of each trace now running, innermost last

    def __init__(self, device: torch.device, recorder):
        self.device = device
        self.recorder = recorder
        self.reads: list[DeviceRead] = []
        self._seen: set = set()
        self._saved: dict = {}
        self._suspended = 0

    def reports(self, t) -> bool:
        """Whether ``t`` should report the trace's device now."""
        return (not self._suspended and is_meta(t)
                and _get_current_dispatch_mode() is self.recorder)

    def _read(self, what: str):
        f = sys._getframe(2)
        key = (f.f_code, f.f_lineno, what)
        if key not in self._seen:
            self._seen.add(key)
            self.reads.append(DeviceRead(what=what, device=str(self.device), provenance=capture(None)))

    def __enter__(self):
        rd = self
        dev = self.device

        def device(t):
            if rd.reports(t):
                rd._read("Tensor.device")
                return dev
            return real_device(t)

        def flag(name, value):
            def get(t):
                if rd.reports(t):
                    rd._read(f"Tensor.{name}")
                    return value
                with torch._C.DisableTorchFunction():
                    return _REAL[name].__get__(t)
            return get

        def get_device(t):
            if rd.reports(t):
                rd._read("Tensor.get_device")
                return -1 if dev.type == "cpu" else dev.index
            with torch._C.DisableTorchFunction():
                return _REAL_GET_DEVICE(t)

        repr_ = torch.Tensor.__repr__

        def show(t, *a, **kw):
            rd._suspended += 1  # a meta tensor prints as one: it has no data to show
            try:
                return repr_(t, *a, **kw)
            finally:
                rd._suspended -= 1

        patches = {
            "device": property(device),
            "is_cuda": property(flag("is_cuda", dev.type == "cuda")),
            "is_cpu": property(flag("is_cpu", dev.type == "cpu")),
            "is_meta": property(flag("is_meta", False)),
            "get_device": get_device,
            "__repr__": show,
        }
        self._saved = patch_tensor(patches)
        ReportedDevice._active.append(self)
        return self

    def __exit__(self, *exc):
        ReportedDevice._active.remove(self)
        restore_tensor(self._saved)


_MISSING = object()


def patch_tensor(patches: dict) -> dict:
    """Set ``torch.Tensor``'s attributes to ``patches`` (name -> value); returns what
    :func:`restore_tensor` puts back (a trace's reads of devices and layouts).

    >>> saved = patch_tensor({"is_symshape_example": True})
    >>> torch.ones(1).is_symshape_example
    True
    >>> restore_tensor(saved); hasattr(torch.ones(1), "is_symshape_example")
    False
    """
    saved = {}
    for name, new in patches.items():
        saved[name] = torch.Tensor.__dict__.get(name, _MISSING)
        setattr(torch.Tensor, name, new)
    return saved


def restore_tensor(saved: dict) -> None:
    """Undo :func:`patch_tensor` (an attribute ``torch.Tensor`` did not have is deleted again)."""
    for name, old in saved.items():
        if old is _MISSING:
            delattr(torch.Tensor, name)
        else:
            setattr(torch.Tensor, name, old)
    saved.clear()


def active() -> Optional[ReportedDevice]:
    """The innermost trace's :class:`ReportedDevice` (None outside a trace)."""
    return ReportedDevice._active[-1] if ReportedDevice._active else None


def is_trace_device(device) -> bool:
    """Whether ``device`` names where the trace's tensors live: ``meta``, or the device they report.

    >>> is_trace_device("meta"), is_trace_device("cpu"), is_trace_device(None)
    (True, False, False)
    """
    if device is None:
        return False
    d = torch.device(device)
    if d.type == "meta":
        return True
    rd = active()
    return rd is not None and d.type == rd.device.type


class DeviceMismatch(GuardViolation):
    """Inputs on another device than the one a trace assumed (the program read it).

    >>> isinstance(DeviceMismatch("x is on cuda:0"), GuardViolation)
    True
    """


class DeviceArgs(TorchFunctionMode):
    """Sends tensors the program makes or moves to the trace's device to ``meta`` instead.

    Needed for a device this build of torch cannot initialize (a ``cuda`` trace
    on a CPU-only torch): torch's Python bindings start the device before the
    recorder could map the op to ``meta``.  The recorded graph still says where
    the program puts each tensor (:meth:`TracedProgram.run` uses the inputs' device).
    """

    def __init__(self, device: torch.device):
        super().__init__()
        self.type = device.type

    def _meta(self, d):
        if isinstance(d, (str, torch.device)) and not isinstance(d, bool):
            try:
                if torch.device(d).type == self.type:
                    return torch.device("meta")
            except RuntimeError:
                return d
        return d

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if "device" in kwargs:
            kwargs = {**kwargs, "device": self._meta(kwargs["device"])}
        if func is _TensorBase.cuda and self.type == "cuda":
            return _TensorBase.to(args[0], "meta", **{k: v for k, v in kwargs.items() if k == "non_blocking"})
        if func is _TensorBase.to or func is torch.Tensor.to:
            args = tuple(self._meta(a) for a in args)
        return func(*args, **kwargs)
