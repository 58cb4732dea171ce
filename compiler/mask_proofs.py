"""Sizes-only attention masks whose class is proved for every size: no classification, no sync.

:mod:`compiler.sized_masks` classifies a mask made from sizes alone by running the steps
that make it and reading the values (one synchronization per new set of sizes).  A
decoder's cache length never repeats, so a decode step would pay that at every token; it
runs with the mask instead (the memory-efficient kernel, plus ATen's conversion of the
boolean mask at every layer).

Many such masks need no run: their entries are a closed form of their indices and the
sizes.  Transformers' decode mask is ``kv_idx <= q_idx`` with ``kv_idx = arange(S + 1)``
and ``q_idx = arange(1) + S``: entry ``(0, j)`` is ``j <= S`` for ``j`` in ``[0, S]``,
true at every ``S``.  This module evaluates the traced graph's nodes that make a mask
*symbolically*, one element at symbolic indices (``arange``, broadcasting arithmetic,
comparisons, ``&``/``|``/``~``, views that add or drop size-1 dims, ``slice``,
``expand``), and proves the class from that element for every size the trace's facts
allow:

* ``NONE``: the element is true everywhere: each comparison is linear in the indices,
  so its extreme over the index box is at a corner, and the engine decides that corner
  (``ShapeEnv.static_bool``: facts only, no guard);
* ``CAUSAL``: the element is exactly ``j <= i`` (``i``, ``j`` the last two indices), and the
  mask's last two sizes are the query and key lengths.

An op without a rule leaves the mask unproved (``None``): it is classified at run time as
before.  Nothing is guessed: a class is returned only when proved.

Example::

    >>> import torch, compiler
    >>> import torch.nn.functional as F
    >>> def step(q, k, v):  # one query over S keys, with transformers' decode mask
    ...     S = k.shape[-2]
    ...     mask = torch.arange(S)[None, :] <= torch.arange(1)[:, None] + (S - 1)
    ...     return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[None, None])
    >>> f = compiler.compile(step, "q: f32[1, 2, 1, 8]", "k: f32[1, 2, S, 8]", "v: f32[1, 2, S, 8]")
    >>> f.variants[0].proven
    (<MaskClass.NONE: 2>,)
"""
from __future__ import annotations

import operator
from typing import Optional

import sympy
import torch

from .sized_masks import MaskClass


class Unproved(Exception):
    """The mask's element has no closed form here (an op without a rule): not proved."""


_CMP = {"le": sympy.Le, "lt": sympy.Lt, "ge": sympy.Ge, "gt": sympy.Gt, "eq": sympy.Eq, "ne": sympy.Ne}
_ARITH = {"add": operator.add, "sub": operator.sub, "mul": operator.mul}
_SAME = {"detach", "alias", "clone", "lift_fresh_copy", "contiguous"}
_PY = {operator.add: operator.add, operator.sub: operator.sub, operator.mul: operator.mul}


def _name(target) -> str:
    packet = getattr(target, "overloadpacket", None)
    return getattr(packet, "__name__", None) or getattr(target, "__name__", "") or str(target)


def _shape(node) -> tuple:
    shape = node.meta.get("shape") if isinstance(node, torch.fx.Node) else None
    if shape is None:
        raise Unproved(f"{node}: no shape")
    return tuple(sympy.sympify(d) for d in shape)


def _scalar(a):
    """A size or number argument as an expression."""
    if isinstance(a, torch.fx.Node):
        if "expr" in a.meta:
            return sympy.sympify(a.meta["expr"])
        if a.op == "call_function" and a.target in _PY:
            x, y = (_scalar(v) for v in a.args)
            return _PY[a.target](x, y)
        raise Unproved(f"{a}: not a size")
    if isinstance(a, bool):
        return sympy.true if a else sympy.false
    if isinstance(a, (int, float)):
        return sympy.sympify(a)
    raise Unproved(f"{a!r}: not a number")


def _broadcast(node, idx, out: tuple):
    """``idx`` (indices into a tensor of shape ``out``) as indices of ``node`` broadcast into it:
    its dims of size 1 read index 0, the others must be the output's own size."""
    shape = _shape(node)
    lead = len(idx) - len(shape)
    if lead < 0:
        raise Unproved("broadcast to fewer dims")
    got = []
    for d, o, i in zip(shape, out[lead:], idx[lead:]):
        if d == 1:
            got.append(sympy.Integer(0))
        elif sympy.simplify(d - o) == 0:
            got.append(i)
        else:
            raise Unproved("a dim that may broadcast at some sizes")
    return tuple(got)


def _is_truth(x) -> bool:
    # A sympy Symbol is a Boolean too: a truth value is a Boolean that is not an expression.
    return isinstance(x, sympy.logic.boolalg.Boolean) and not isinstance(x, sympy.Expr)


def _number(x):
    """``x`` where arithmetic or an order comparison reads it: an integer, never a truth value."""
    if _is_truth(x):
        raise Unproved("arithmetic on a boolean tensor")
    return x


def _operands(node, idx):
    out = _shape(node)
    return [element(a, _broadcast(a, idx, out)) if isinstance(a, torch.fx.Node) and "shape" in a.meta
            else _scalar(a) for a in node.args[:2]]


def element(node, idx: tuple):
    """The value of ``node``'s element at indices ``idx`` (sympy expressions), from the graph.

    >>> g = torch.fx.Graph()
    >>> a = g.call_function(torch.ops.aten.arange.default, (4,))
    >>> b = g.call_function(torch.ops.aten.add.Tensor, (a, 2))
    >>> for n in (a, b): n.meta.update(shape=(4,), dtype=torch.int64)
    >>> i = sympy.Symbol("i")
    >>> element(b, (i,))
    i + 2
    """
    if not isinstance(node, torch.fx.Node):
        return _scalar(node)
    if node.op != "call_function":
        raise Unproved(f"{node}: an input")
    dtype = node.meta.get("dtype")
    if dtype is None or dtype.is_floating_point or dtype.is_complex:
        # Exact integer arithmetic only: a float's rounding is not the closed form's.
        raise Unproved(f"{node}: not an integer or boolean tensor")
    name, args, kw = _name(node.target), node.args, node.kwargs
    if name == "arange":
        if set(kw) - {"dtype", "device", "layout", "pin_memory"} or len(args) > 3 or not args or any(
                isinstance(a, float) for a in args):
            raise Unproved("arange with these arguments")
        start = _scalar(args[0]) if len(args) > 1 else sympy.Integer(0)
        step = _scalar(args[2]) if len(args) > 2 else sympy.Integer(1)
        return start + step * idx[0]
    if name in _SAME or (name == "_to_copy" and set(kw) <= {"dtype", "device", "layout"}):
        src = args[0].meta.get("dtype") if isinstance(args[0], torch.fx.Node) else None
        if src is None or (src is torch.bool) != (dtype is torch.bool):
            raise Unproved("a cast between truth values and integers")
        return element(args[0], idx)
    if name in _ARITH:
        if set(kw) - {"alpha"} or len(args) != 2 or kw.get("alpha", 1) != 1:
            raise Unproved(f"{name} with alpha")
        x, y = (_number(v) for v in _operands(node, idx))
        return _ARITH[name](x, y)
    if name in _CMP:
        x, y = (_number(v) for v in _operands(node, idx))
        return _CMP[name](x, y)
    if name in ("bitwise_and", "logical_and", "bitwise_or", "logical_or"):
        x, y = _operands(node, idx)
        if not (_is_truth(x) and _is_truth(y)):
            raise Unproved(f"{name} of integers")
        return sympy.And(x, y) if name.endswith("and") else sympy.Or(x, y)
    if name in ("bitwise_not", "logical_not"):
        x = element(args[0], idx)
        if not _is_truth(x):
            raise Unproved(f"{name} of integers")
        return sympy.Not(x)
    return element(args[0], _view_index(name, node, idx))


def _view_index(name, node, idx) -> tuple:
    """The input's indices of a view-like ``node`` at output indices ``idx``."""
    args = node.args
    src = _shape(args[0])
    if name == "unsqueeze":
        d = args[1] % len(idx)
        return idx[:d] + idx[d + 1:]
    if name == "squeeze" and len(args) == 2 and isinstance(args[1], int):
        d = args[1] % max(len(src), 1)
        return idx[:d] + (sympy.Integer(0),) + idx[d:] if src and src[d] == 1 else idx
    if name == "select" and isinstance(args[1], int):
        d, at = args[1] % len(src), _scalar(args[2])
        if not (at.is_number and at >= 0):
            raise Unproved("select at a negative or symbolic index")
        return idx[:d] + (at,) + idx[d:]
    if name == "slice":
        d = (args[1] if len(args) > 1 else 0) % len(src)
        start = _scalar(args[2]) if len(args) > 2 and args[2] is not None else sympy.Integer(0)
        step = _scalar(args[4]) if len(args) > 4 else sympy.Integer(1)
        if not (start.is_number and start >= 0):
            raise Unproved("slice from a negative or symbolic start")
        return idx[:d] + (start + step * idx[d],) + idx[d + 1:]
    if name == "expand":
        return _broadcast(args[0], idx, _shape(node))
    if name in ("view", "_unsafe_view", "reshape", "view_as_traced"):
        # Only views that add or drop size-1 dims: the other dims keep their indices.
        out = _shape(node)
        keep_out = [k for k, d in enumerate(out) if d != 1]
        keep_src = [k for k, d in enumerate(src) if d != 1]
        if len(keep_out) != len(keep_src) or any(sympy.simplify(out[a] - src[b]) != 0
                                                 for a, b in zip(keep_out, keep_src)):
            raise Unproved("a view that moves elements")
        got = [sympy.Integer(0)] * len(src)
        for a, b in zip(keep_out, keep_src):
            got[b] = idx[a]
        return tuple(got)
    raise Unproved(f"no rule for {name}")


def _max_over_box(expr, box: dict):
    """The largest value of ``expr`` (linear in each index of ``box``, coefficients numbers)
    over the box ``{index: upper bound}`` (each index from 0 to its bound)."""
    expr = sympy.expand(expr)
    for i, hi in box.items():
        c = expr.coeff(i, 1)
        if not c.is_number or sympy.expand(expr - c * i).has(i):
            raise Unproved("not linear in an index")
        expr = sympy.expand(expr.subs(i, hi if c > 0 else 0))
    return expr


def _rel_parts(rel):
    """``rel`` as ``(d, strict)`` meaning ``d <= 0`` (``d < 0`` if strict)."""
    if isinstance(rel, (sympy.Le, sympy.Lt)):
        return rel.lhs - rel.rhs, isinstance(rel, sympy.Lt)
    if isinstance(rel, (sympy.Ge, sympy.Gt)):
        return rel.rhs - rel.lhs, isinstance(rel, sympy.Gt)
    raise Unproved(f"{type(rel).__name__}: not an inequality")


def _always(e, box, env) -> bool:
    if e is sympy.true:
        return True
    if isinstance(e, sympy.And):
        return all(_always(a, box, env) for a in e.args)
    d, strict = _rel_parts(e)
    top = _max_over_box(d, box)
    cond = sympy.Lt(top, 0) if strict else sympy.Le(top, 0)
    if cond is sympy.true or cond is sympy.false:
        return cond is sympy.true
    return env.static_bool(cond, log=False) is True


def _is_causal(e, i, j) -> bool:
    """Whether ``e`` is exactly ``j <= i`` (``d < 0`` is ``d + 1 <= 0`` where ``d`` is an integer)."""
    d, strict = _rel_parts(e)
    if strict:
        if d.is_integer is not True:
            return False
        d = d + 1
    return sympy.expand(d - (j - i)) == 0


def prove(tp, mask: str, q_len, k_len) -> Optional[MaskClass]:
    """The class of mask buffer ``mask`` of traced program ``tp`` at every size its facts
    allow, or None where it is not proved (the query and key lengths ``q_len``, ``k_len``
    are expressions of its sizes)."""
    node = next((n for n in tp.graph.nodes if n.name == mask), None)
    if node is None or node.meta.get("dtype") is not torch.bool:
        return None
    try:
        shape = _shape(node)
        idx = tuple(sympy.Symbol(f"_i{k}", integer=True, nonnegative=True) for k in range(len(shape)))
        e = sympy.simplify(element(node, idx))
        box = {i: d - 1 for i, d in zip(idx, shape)}
        if _always(e, box, tp.env):
            return MaskClass.NONE
        if len(shape) >= 2 and sympy.simplify(shape[-2] - q_len) == 0 and sympy.simplify(shape[-1] - k_len) == 0 \
                and not (e.free_symbols & set(idx[:-2])) and isinstance(e, sympy.core.relational.Relational) \
                and _is_causal(e, idx[-2], idx[-1]):
            return MaskClass.CAUSAL
    except Unproved:
        return None
    return None


def proven_classes(tp, masks: list, size_exprs: list) -> tuple:
    """Per :class:`~compiler.sized_masks.SizedMask` of a plan: its proved class, or None."""
    return tuple(prove(tp, m.mask, sympy.sympify(size_exprs[m.q_len]), sympy.sympify(size_exprs[m.k_len]))
                 for m in masks)


__all__ = ["prove", "proven_classes", "element", "Unproved"]
