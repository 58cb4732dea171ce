"""Fewer ATen calls per run: repeated views computed once, reshape chains as one reshape.

Small models on the GPU are host-bound: every ATen call a compiled run makes costs a few
microseconds of Python and dispatch whatever its size.  A traced transformer layer makes
many calls that only re-describe memory: the same ``view(x, [B*T, D])`` once for each of
the query, key and value projections, and ``view(view(y, [B, T, D]), [B, T, H, Dh])``
before every head split.  Two rewrites of a compiled plan remove them:

* **Repeated views.**  A view-like step (view, reshape, transpose, unsqueeze, expand,
  slice, ...) with the same arguments as an earlier one is the same tensor: later readers
  read the first step's result.
* **Reshape chains.**  ``reshape(reshape(x, a), b)`` holds ``reshape(x, b)``'s values (both
  are ``x``'s elements in row-major order); where the inner result has no other reader it
  is not made.

Both are exact for values.  They can change which results alias which, so they run only on
plans with no in-place or ``out=`` step (nothing writes a tensor after it is made; kernels
write only buffers allocated for them).

Example::

    >>> import torch
    >>> from compiler.wrapper import BufSlot, ExternStep, SizeSlot
    >>> def view_as_traced(x, size): return x.reshape(size)
    >>> plan = [ExternStep(view_as_traced, (BufSlot("x"), [SizeSlot(0), 8]), {}, "a"),
    ...         ExternStep(view_as_traced, (BufSlot("x"), [SizeSlot(0), 8]), {}, "b"),
    ...         ExternStep(view_as_traced, (BufSlot("b"), [-1]), {}, "c"),
    ...         ExternStep(torch.add, (BufSlot("a"), BufSlot("c")), {}, "y")]
    >>> [(s.out, s.args[0]) for s in fold_views(plan, [BufSlot("y")])]  # b is a
    [('a', BufSlot(name='x')), ('c', BufSlot(name='a')), ('y', BufSlot(name='a'))]
    >>> plan = [ExternStep(view_as_traced, (BufSlot("x"), [4, 2]), {}, "a"),
    ...         ExternStep(view_as_traced, (BufSlot("a"), [-1]), {}, "b"),
    ...         ExternStep(torch.ops.aten.slice.Tensor, (BufSlot("b"), 0, 0, 2 ** 63 - 1), {}, "c"),
    ...         ExternStep(torch.neg, (BufSlot("c"),), {}, "y")]
    >>> [(s.out, s.args) for s in fold_views(plan, [BufSlot("y")])]  # one reshape; the full slice is b
    [('b', (BufSlot(name='x'), [-1])), ('y', (BufSlot(name='b'),))]
"""
from __future__ import annotations

import operator

import torch

from .wrapper import BufSlot, ExternStep, KernelStep, SizeSlot, step_buffers, template_buffers

aten = torch.ops.aten
#: Steps whose result is a view (or a fresh copy of one) fixed by their arguments alone.
_VIEWS = {aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.t.default,
          aten.transpose.int, aten.unsqueeze.default, aten.squeeze.dim, aten.permute.default,
          aten.expand.default, aten.slice.Tensor, aten.select.int, aten.detach.default, aten.alias.default,
          aten.split.Tensor, operator.getitem}


def _is_reshape(target) -> bool:
    # The runtime's view (a reshape where eager's view would copy): see variant.view_as_traced.
    return getattr(target, "__name__", None) == "view_as_traced"


def mutates(step) -> bool:
    """Whether a plan step writes a tensor that exists before it (in place, or ``out=``); kernels
    write only the buffers allocated for them.

    >>> mutates(ExternStep(torch.ops.aten.add_.Tensor, (BufSlot("x"), BufSlot("y")), {}, "x2"))
    True
    >>> mutates(ExternStep(torch.ops.aten.add.Tensor, (BufSlot("x"), BufSlot("y")), {}, "z"))
    False
    """
    if isinstance(step, KernelStep):
        return False
    if "out" in step.kwargs:
        return True
    schema = getattr(step.target, "_schema", None)
    return bool(schema is not None and schema.is_mutable)


def _key(a):
    """A hashable form of an argument template (lists and tuples kept apart)."""
    if isinstance(a, list):
        return ("L", tuple(_key(x) for x in a))
    if isinstance(a, tuple) and not hasattr(a, "_fields"):
        return ("T", tuple(_key(x) for x in a))
    if isinstance(a, dict):
        return ("D", tuple((k, _key(v)) for k, v in a.items()))
    if isinstance(a, (BufSlot, SizeSlot, int, float, bool, str, torch.dtype, torch.device)) or a is None:
        return (type(a).__name__, a)
    return ("O", id(a))  # anything else (a tensor, the device marker) by identity


def _rename(a, names: dict):
    if isinstance(a, BufSlot):
        return BufSlot(names.get(a.name, a.name))
    if isinstance(a, (list, tuple)) and not hasattr(a, "_fields"):
        return type(a)(_rename(x, names) for x in a)
    if isinstance(a, dict):
        return {k: _rename(v, names) for k, v in a.items()}
    return a


_INT64_MAX = 2 ** 63 - 1


def _identity_of(s, unsqueezed: dict):
    """The buffer a view step returns unchanged (a full ``slice``; ``squeeze(unsqueeze(x, d), d)``), or None."""
    a = s.args
    if s.kwargs or not a or not isinstance(a[0], BufSlot):
        return None
    if s.target is aten.slice.Tensor and len(a) >= 4 and a[2] == 0 and a[3] == _INT64_MAX and (
            len(a) == 4 or a[4] == 1):
        return a[0].name
    if s.target is aten.squeeze.dim and len(a) == 2 and isinstance(a[1], int):
        got = unsqueezed.get(a[0].name)
        if got is not None and got[1] == a[1]:
            return got[0]
    return None


def _dedupe(plan, outputs) -> tuple:
    """Repeated and identity view steps dropped; ``(plan, renames)``: a dropped step's readers
    read the first (or the identity's input)."""
    kept = template_buffers(list(outputs), set())
    seen, names, out, unsqueezed = {}, {}, [], {}
    for s in plan:
        if isinstance(s, ExternStep):
            s = ExternStep(s.target, _rename(s.args, names), _rename(s.kwargs, names), s.out)
            if (s.target in _VIEWS or _is_reshape(s.target)) and s.out not in kept:
                same = _identity_of(s, unsqueezed)
                if same is not None:
                    names[s.out] = same
                    continue
                if s.target is aten.unsqueeze.default and len(s.args) == 2 and isinstance(s.args[0], BufSlot) \
                        and isinstance(s.args[1], int) and not s.kwargs:
                    unsqueezed[s.out] = (s.args[0].name, s.args[1])
                k = (id(s.target), _key(s.args), _key(s.kwargs))
                if k in seen:
                    names[s.out] = seen[k]
                    continue
                seen[k] = s.out
        elif names:
            s = KernelStep(s.launch, tuple(names.get(b, b) for b in s.buffers), s.allocs, s.contiguous, s.kernel)
        out.append(s)
    return out, names


def _fold_reshapes(plan, outputs) -> list:
    uses: dict = {}
    for s in plan:
        for n in step_buffers(s)[0]:
            uses[n] = uses.get(n, 0) + 1
    kept = template_buffers(list(outputs), set())
    made = {s.out: s for s in plan if isinstance(s, ExternStep) and _is_reshape(s.target) and not s.kwargs
            and len(s.args) == 2}
    dropped, out = set(), []
    for s in plan:
        if isinstance(s, ExternStep) and s.out in made and isinstance(s.args[0], BufSlot):
            inner = made.get(s.args[0].name)
            if inner is not None and uses.get(inner.out) == 1 and inner.out not in kept:
                dropped.add(inner.out)
                s = made[s.out] = ExternStep(s.target, (inner.args[0], s.args[1]), {}, s.out)
        out.append(s)
    return [s for s in out if not (isinstance(s, ExternStep) and s.out in dropped)]


def fold_views(plan, outputs) -> list:
    """``plan`` with repeated view steps made once and reshape chains made as one reshape
    (see the module docstring); unchanged where a step writes in place."""
    if any(mutates(s) for s in plan):
        return list(plan)
    plan, _ = _dedupe(plan, outputs)
    return _unused_views_dropped(_fold_reshapes(plan, outputs), outputs)


def _unused_views_dropped(plan, outputs) -> list:
    """View steps whose result nothing reads (left by the rewrites above) are not made."""
    reads = template_buffers(list(outputs), set())
    out = []
    for s in reversed(plan):
        if isinstance(s, ExternStep) and (s.target in _VIEWS or _is_reshape(s.target)) and s.out not in reads:
            continue
        reads |= step_buffers(s)[0]
        out.append(s)
    return out[::-1]


__all__ = ["fold_views", "mutates"]
