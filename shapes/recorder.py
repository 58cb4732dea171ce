"""The dispatch mode that runs a program's ATen ops on meta tensors and records each one.

Each op is checked as eager would check it (:mod:`shapes.eager_checks`,
index bounds, storage limits), run on meta tensors with symbolic sizes, and
handed to the tracer's graph builder.  The op being run is on an
:class:`OpStack`: decisions the engine takes inside it name it in their
provenance.

Example::

    >>> ops = OpStack(); ops.push("aten.view.default"); ops.current()
    'aten.view.default'
"""
from __future__ import annotations

import sys
from typing import Optional

import sympy

import torch
from torch.utils import _pytree as pytree
from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException
from torch.utils._python_dispatch import TorchDispatchMode

from . import data_dependent, eager_checks, index_bounds, limits
from .env import DataDependentError, ShapeEnv
from .errors import RaisedForProgram, SymshapeError, TracerLimitation, UnsupportedOpError, program_error
from .printers import to_python
from .provenance import capture


_ITEM = (torch.ops.aten.item.default, torch.ops.aten._local_scalar_dense.default)


class OpStack:
    """The ATen ops running now, innermost last (an op's meta kernel may run others).

    >>> ops = OpStack(); ops.current() is None
    True
    """

    def __init__(self):
        self.names: list[str] = []

    def push(self, op: str) -> None:
        self.names.append(op)

    def pop(self) -> None:
        self.names.pop()

    def current(self) -> Optional[str]:
        return self.names[-1] if self.names else None


def meta_device_kwargs(kwargs):
    dev = kwargs.get("device")
    if dev is not None and torch.device(dev).type != "meta":
        kwargs = dict(kwargs)
        kwargs["device"] = torch.device("meta")
    return kwargs


class Recorder(TorchDispatchMode):
    """Runs each ATen op on meta tensors under the engine's checks and records it in the graph.

    ``builder`` is the tracer's graph builder (:mod:`shapes.tracer`); ``progress``
    is called with the number of ops recorded so far.  While an op runs, its
    name is on :attr:`ops`, which the env reads for provenance.
    """

    def __init__(self, builder, env: ShapeEnv, progress=None):
        super().__init__()
        self.builder = builder
        self.env = env
        self.progress = progress
        self.count = 0
        self.ops = OpStack()
        env.ops = self.ops
        # Composite ops the dispatcher hands to this mode whole (eager_checks.dispatch).
        self.keeps_whole = eager_checks.KEEP_WHOLE
        #: Called with each op and its arguments before it runs, where set: the trace's layout
        #: reads (shapes.layout_reads) watch the ops whose values depend on a layout.
        self.on_op = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        b = self.builder
        if any(_is_dtensor(t) for t in types):
            return NotImplemented  # DTensor's own dispatch runs first, then each rank's op on its shard comes here
        args = pytree.tree_map(b.adopt, args)
        kwargs = pytree.tree_map(b.adopt, kwargs)
        r = eager_checks.intercept(self, func, args, kwargs)
        if r is not NotImplemented:
            return r
        if func in _ITEM:
            known = self._known_item(args[0])
            if known is not None:
                return known
        if self.on_op is not None:
            self.on_op(func, args)
        op = str(func)
        prov = capture(op)
        self.ops.push(op)
        log_start = len(self.env.log)
        try:
            for chk in index_bounds.lookup_checks(func, args, b.bounds_of, self._nonempty, b.determines):
                self._index_check(chk, prov)
            for cond, msg in eager_checks.checks(func, args, kwargs):
                if not self.env.expect_true(cond, message=msg):
                    raise program_error(RuntimeError, msg)
            out, bindings = self._kernel(func, args, kwargs)
            out = eager_checks.eager_output(func, args, kwargs, out)
        except (SymshapeError, DataDependentError):
            raise
        except (NotImplementedError, DynamicOutputShapeException, DataDependentOutputException) as e:
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            # torch's types for "the output shape depends on data"; a bare NotImplementedError from a
            # meta kernel has no type of its own, only its message.
            typed = isinstance(e, (DynamicOutputShapeException, DataDependentOutputException))
            if typed or "data-dependent" in msg or "meta" in msg.lower():
                raise UnsupportedOpError(
                    f"{op} at {prov.line()} cannot run on meta tensors "
                    f"with symbolic sizes ({msg}); its output shape may depend on data. Please report it."
                ) from e
            raise
        except Exception as e:  # torch's kernels raised: re-raised, typed if a layout-only answer caused it
            departed = self.env.departure_since(log_start)
            if departed is not None and not isinstance(e, RaisedForProgram):
                raise self._departure_limitation(e, op, prov, departed) from e
            raise
        finally:
            self.ops.pop()
        self._check_limits(func, out, prov)
        b.record(func, args, kwargs, out, bindings, prov)
        if self.progress is not None:
            self.count += 1
            self.progress(self.count)
        written = index_bounds.written_tensors(func, args, kwargs)
        if written:
            # An in-place write changes the values of the tensor and of every view of it.
            if any(not t.dtype.is_floating_point for t in written):
                b.value_bounds.clear()
            else:
                b.value_bounds = {k: v for k, v in b.value_bounds.items() if v.bits is None}
            # Any view of an input may be written: no input of that kind of dtype is free data any more.
            kinds = {t.dtype.is_floating_point for t in written}
            b.free_values = {k: f for k, f in b.free_values.items() if f not in kinds}
        if isinstance(out, torch.Tensor):
            vb = index_bounds.output_bounds(func, args, kwargs, b.bounds_of, self._nonempty, out.dtype,
                                            lambda t: id(t) in b.free_values)
            if vb is not None:
                b.value_bounds[id(out)] = vb
            if args and isinstance(args[0], torch.Tensor) and id(args[0]) in b.free_values \
                    and index_bounds.keeps_free(func) and not written:
                b.free_values[id(out)] = out.dtype.is_floating_point
        tensors = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        if index_bounds.determines_values(func, tensors, all(b.determines(t) for t in tensors)):
            b.determined.update(id(t) for _, t in limits.tensor_outputs(out))
        else:
            # An in-place write of values the sizes do not determine makes its target data.
            b.determined.difference_update(id(t) for _, t in limits.tensor_outputs(out))
        return out

    def _known_item(self, t) -> Optional[int]:
        """``t.item()`` where the sizes and constants fix it (``torch.IntTensor([n])[0]`` used
        as a slice bound): the int, as eager reads it, and no data-dependent value."""
        if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype is torch.bool:
            return None
        if any(isinstance(d, torch.SymInt) for d in t.shape) or t.numel() != 1:
            return None  # (eager's item() raises for other sizes: the op's own check decides)
        r = self.builder.bounds_of(t)
        if r is None or r.bits is not None or not self.builder.determines(t):
            return None
        if r.lo.is_Integer and r.lo == r.hi:
            return int(r.lo)
        return None

    def _kernel(self, func, args, kwargs):
        """``(out, unbacked bindings)``: the data-dependent handler of ``func``, else its meta kernel."""
        handler = data_dependent.HANDLERS.get(func)
        res = handler(self.env, func, args, kwargs) if handler else None
        if res is None:
            return eager_checks.run_meta(func, args, meta_device_kwargs(kwargs)), {}
        out, bindings = res
        if func in _ITEM:
            self._bound_item(args[0], bindings)
        return out, bindings

    def _bound_item(self, t, bindings) -> None:
        """``t.item()`` read from data lies within ``t``'s known value range: assumed, as
        an op's semantics (``lengths.max().item() <= T`` for lengths counted over T)."""
        r = self.builder.bounds_of(t)
        if r is None or r.bits is not None or t.dtype.is_floating_point or t.dtype.is_complex \
                or t.dtype is torch.bool:
            return
        for u in bindings:
            self.env.add_op_axiom(sympy.And(sympy.Ge(u, r.lo), sympy.Le(u, r.hi)),
                                  "a value read from a tensor lies in the tensor's value range")

    def _index_check(self, chk, prov):
        """Record one :class:`~shapes.index_bounds.IndexCheck`, or stop where eager's outcome is unknown."""
        if chk.kind is index_bounds.CheckKind.ASSERT:
            if not self.env.expect_true(chk.condition, message=chk.message):
                raise program_error(chk.exception, chk.message)
            return
        if chk.kind is index_bounds.CheckKind.UNKNOWN:
            # Values the sizes determine but the engine cannot follow (T5's log buckets):
            # no condition to state.  Not silent: the trace keeps a note, and dinfer
            # reports the sizes it covers as symshape's limitation, never as ok.
            self.env.unchecked_indices.append((prov, chk.message))
            return
        if chk.kind is index_bounds.CheckKind.GUARD and self.env.evaluate(chk.condition, provenance=prov):
            return
        raise TracerLimitation(f"at {prov.location()} {chk.message}; a limitation of "
                               f"symshape, not an error of the program; an index tensor built by arange, + - * by "
                               f"a constant, clamp, cat and views is followed exactly")

    def _nonempty(self, t) -> bool:
        n = sympy.Integer(1)
        for s in t.shape:
            n = n * limits.expr_of(s)
        return self.env.static_bool(sympy.Ge(n, 1), log=False) is True

    @staticmethod
    def _departure_limitation(e, op, prov, entry) -> TracerLimitation:
        """``e`` raised by ``op`` after a layout-only question was answered as at sizes >= 2
        against its value at the example sizes: eager may not raise there, so it is not
        reported as the program's error."""
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return TracerLimitation(
            f"{op} at {prov.line()} raised {type(e).__name__} "
            f"({first[:300]}) after symshape answered the layout question `{to_python(entry.before)}` as it is "
            f"at sizes >= 2, not as at the example sizes; eager may not raise here. This is a limitation of "
            f"symshape, not known to be an error of the program: trace at example sizes where no dim is 1, "
            f"or report it.")

    def _check_limits(self, func, out, prov):
        """Eager's storage-size overflow check for each tensor this op allocates."""
        env = self.env
        for i, t in limits.tensor_outputs(out):
            sizes = [limits.expr_of(s) for s in t.shape]
            if all(s.is_number for s in sizes) or not limits.allocates(func, i):
                continue
            maybe_zero = lambda s: env.static_bool(sympy.Ge(s, 1), log=False) is not True  # noqa: E731
            for cond, what in limits.storage_conditions(sizes, t.element_size(), maybe_zero):
                msg = (f"{func}: the {what} of a {t.dtype} tensor of sizes [{', '.join(to_python(s) for s in sizes)}] must fit in "
                       f"{'uint64' if what == 'size product' else 'int64'} (eager raises "
                       f"'{limits.OVERFLOW_MESSAGE}...' otherwise)")
                if not env.check_limit(cond, provenance=prov, message=msg):
                    at = [env.hint_of(s) for s in sizes]
                    raise program_error(RuntimeError, f"{limits.OVERFLOW_MESSAGE}{at}")


class ModuleScope:
    """Tracks the nn.Module hierarchy so nodes know which module emitted them."""

    def __init__(self, root, builder):
        self.names = {}
        if isinstance(root, torch.nn.Module):
            for name, m in root.named_modules():
                self.names[id(m)] = name
        self.builder = builder
        self.handles = []

    def __enter__(self):
        from torch.nn.modules import module as mod

        def pre(m, args):
            name = self.names.get(id(m))
            if name is not None:
                self.builder.module_stack.append((name, type(m).__name__))

        def post(m, args, out):
            if self.names.get(id(m)) is not None and self.builder.module_stack:
                self.builder.module_stack.pop()

        self.handles = [mod.register_module_forward_pre_hook(pre), mod.register_module_forward_hook(post)]
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        self.builder.module_stack.clear()


def _is_dtensor(t) -> bool:
    dtensor = sys.modules.get("torch.distributed.tensor")
    return dtensor is not None and issubclass(t, dtensor.DTensor)


def meta_like(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
