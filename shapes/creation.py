"""Tensors a program creates from Python data while it is traced.

``torch.tensor([t], device=x.device)``, ``x.new_tensor(...)`` and list
indices (``x[:, [1]]``) build a tensor from Python values.  On the ``meta``
device torch keeps no data, and it does so below the dispatcher, so the
recorder would only see a tensor with lost values.  The tracer intercepts
these calls one level up (a ``TorchFunctionMode``):

* constant data becomes a real CPU tensor, a graph constant (``get_attr``);
  integer constants also carry their value range, so a lookup through them
  is checked like eager checks it;
* data holding symbolic sizes (``torch.tensor([x.shape[0]])``) becomes graph
  ops, ``scalar_tensor`` per value and ``stack``, so it stays symbolic.

Example::

    >>> import torch, shapes
    >>> tp = shapes.trace(lambda x: x[:, [1]] + torch.tensor([x.shape[0]], device=x.device),
    ...                   "x: f32[B, 4]")
    >>> tp.output_shapes
    [(B, 1)]
"""
from __future__ import annotations

import sympy
import torch
from torch.overrides import TorchFunctionMode

from .devices import is_trace_device, real_device
from .errors import program_error
from .index_bounds import IndexRange

_SYM = (torch.SymInt, torch.SymFloat, torch.SymBool)
_TensorBase = torch._C.TensorBase


def _leaves(data, out):
    if isinstance(data, (list, tuple)):
        for d in data:
            _leaves(d, out)
    else:
        out.append(data)
    return out


def _is_data(data) -> bool:
    """Python data torch turns into a tensor itself (nested lists of numbers)."""
    if isinstance(data, (list, tuple)):
        return all(_is_data(d) for d in data)
    return isinstance(data, (bool, int, float, complex) + _SYM)


def _infer_dtype(leaves):
    if leaves and all(isinstance(v, (bool, torch.SymBool)) for v in leaves):
        return torch.bool
    if any(isinstance(v, complex) for v in leaves):
        return torch.complex64 if torch.get_default_dtype() == torch.float32 else torch.complex128
    if any(isinstance(v, (float, torch.SymFloat)) for v in leaves):
        return torch.get_default_dtype()
    return torch.int64


def _is_meta(device) -> bool:
    """Whether ``device`` is where the trace's tensors live (meta, or the device they report)."""
    return is_trace_device(device)


def _in_trace(t) -> bool:
    """Whether ``t`` is one of the trace's tensors (meta, whatever device it reports)."""
    return isinstance(t, torch.Tensor) and real_device(t).type == "meta"


class CreationMode(TorchFunctionMode):
    """Turns tensors made from Python data into graph constants or graph ops."""

    def __init__(self, builder):
        super().__init__()
        self.builder = builder
        self._handlers = {
            torch.tensor: self._tensor,
            torch.as_tensor: self._as_tensor,
            torch.asarray: self._as_tensor,
            _TensorBase.new_tensor: self._new_tensor,
            _TensorBase.__getitem__: self._getitem,
            _TensorBase.__setitem__: self._setitem,
        }

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        h = self._handlers.get(func)
        if h is not None:
            out = h(func, args, kwargs)
            if out is not NotImplemented:
                return out
        # An exception raised right here is torch's C++ raising for the program, not this
        # frame's (shapes.failures.engine_frame_of reads it so: see torch_call_frame).
        return func(*args, **kwargs)

    # -- building -------------------------------------------------------------------------
    def from_data(self, data, dtype=None, device=None):
        """A tensor holding ``data`` (nested lists of numbers and symbolic sizes)."""
        leaves = _leaves(data, [])
        dtype = dtype or _infer_dtype(leaves)
        if any(isinstance(v, _SYM) for v in leaves):
            # Symbolic values: ops of the graph (they are recorded by the dispatch mode).
            out = self._stack(data, dtype)
            if dtype in (torch.int64, torch.int32) and len(leaves) == 1 and isinstance(leaves[0], torch.SymInt):
                e = leaves[0].node.expr
                self.builder.value_bounds[id(out)] = IndexRange(e, e)
            return out
        # Made on the CPU, the tensor becomes a graph constant at its first op (the
        # recorder adopts real tensors); its meta twin is what the program sees.
        real = torch.tensor(data, dtype=dtype, device="cpu")
        if not _is_meta(device):
            return real
        m = self.builder.adopt(real)
        if leaves and not (dtype.is_floating_point or dtype.is_complex or dtype is torch.bool):
            vals = [int(v) for v in leaves]
            self.builder.value_bounds[id(m)] = IndexRange(sympy.Integer(min(vals)), sympy.Integer(max(vals)))
        return m

    def _stack(self, data, dtype):
        if isinstance(data, (list, tuple)):
            if not data:
                return torch.empty((0,), dtype=dtype, device="meta")
            return torch.stack([self._stack(d, dtype) for d in data])
        return torch.scalar_tensor(data, dtype=dtype, device="meta")

    # -- handlers: NotImplemented means "let torch do it" ----------------------------------
    def _tensor(self, func, args, kwargs):
        data = args[0] if args else kwargs.get("data")
        if not _is_data(data) or kwargs.get("requires_grad") or not (
                _is_meta(kwargs.get("device")) or any(isinstance(v, _SYM) for v in _leaves(data, []))):
            return NotImplemented
        return self.from_data(data, kwargs.get("dtype"), "meta")

    def _as_tensor(self, func, args, kwargs):
        data = args[0] if args else kwargs.get("data", kwargs.get("obj"))
        if isinstance(data, torch.Tensor) or not _is_data(data):
            return NotImplemented
        return self._tensor(func, (data,), {k: v for k, v in kwargs.items() if k in ("dtype", "device")})

    def _new_tensor(self, func, args, kwargs):
        self_t, data = args[0], (args[1] if len(args) > 1 else kwargs.get("data"))
        if isinstance(data, torch.Tensor) or not _is_data(data) or kwargs.get("requires_grad"):
            return NotImplemented
        device = kwargs.get("device")
        dtype = kwargs.get("dtype") or self_t.dtype
        if not (_is_meta(device) if device is not None else _in_trace(self_t)):
            return NotImplemented
        return self.from_data(data, dtype, "meta")

    def _index(self, idx, x):
        """Lists in an index of ``x`` become index tensors the graph knows (torch makes them on ``x``'s device)."""
        if not _in_trace(x):
            return idx
        device = "meta"

        def conv(i):
            if isinstance(i, list) and i and _is_data(i) and not all(isinstance(v, bool) for v in _leaves(i, [])):
                return self.from_data(i, torch.int64, device)
            return i

        if isinstance(idx, tuple):
            return tuple(conv(i) for i in idx)
        # A top-level list of numbers is an index tensor; a list holding lists is read as a tuple.
        if isinstance(idx, list) and all(isinstance(v, (int, torch.SymInt)) and not isinstance(v, bool) for v in idx):
            return conv(idx)
        return idx

    def _getitem(self, func, args, kwargs):
        x, idx = args[0], args[1]
        new = self._index(idx, x)
        if new is idx:
            return NotImplemented
        return func(x, new)

    def _setitem(self, func, args, kwargs):
        x, idx, value = args[0], args[1], args[2]
        new = self._index(idx, x)
        if isinstance(value, (list, tuple)) and _is_data(value) and _in_trace(x):
            value = self.from_data(value, x.dtype, "meta")
        elif new is idx:
            return NotImplemented
        return func(x, new, value)


def pass_through(func, args, kwargs):
    """``func(*args, **kwargs)``: how a ``TorchFunctionMode`` given to :func:`shapes.trace`
    (``function_modes``) calls torch for the calls it leaves alone, so that an exception torch's
    C++ raises there is the program's, as from :class:`CreationMode` (:func:`torch_call_frame`).

    >>> pass_through(torch.add, (torch.ones(2), 1), {}).tolist()
    [2.0, 2.0]
    """
    return func(*args, **kwargs)


def torch_call_frame(frame) -> bool:
    """Whether ``frame`` (a ``traceback.FrameSummary``) is :class:`CreationMode` or
    :func:`pass_through` calling torch: an exception whose innermost frame it is was raised by
    torch's C++ for the program."""
    return frame.filename == __file__ and frame.name in ("__torch_function__", "pass_through")
