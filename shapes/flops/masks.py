"""Recognizing triangular attention masks in a traced graph (for :mod:`shapes.flops.useful`).

A boolean mask's kept entries are a :class:`Band` ``lo <= j - i <= hi`` over
its last two dims (``i`` rows, ``j`` columns), derived from how the graph
built it: ``ones``/``tril``/``triu``, comparisons of ``arange`` placed along
rows and columns, ``~`` and ``&``.  :class:`MaskAnalysis` follows a softmax
back to its score matmul and forward to its value matmul, and counts the kept
entries of a ``T x S`` score grid in closed form where the ranges prove it.

Example::

    >>> from shapes.flops.masks import Band, _not
    >>> print(Band(hi=0).describe(), "|", _not(Band(hi=0)).describe())
    j <= i (lower triangular) | j >= i + 1 (upper triangular)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import sympy
import torch
import torch.fx

from ..errors import SymshapeError
from ..printers import to_python

aten = torch.ops.aten

#: Softmax ops an attention normalizes its scores with.
SOFTMAX = {aten._softmax, aten._safe_softmax, aten.softmax}
_MATMUL = {aten.bmm, aten.mm, aten.baddbmm, aten.addmm}
# Ops that pass values through unchanged in their last two dims (checked on shapes).
_PASS = {aten.view, aten._unsafe_view, aten.reshape, aten.expand, aten.clone, aten._to_copy, aten.contiguous,
         aten.alias, aten.unsqueeze, aten.detach, aten.lift_fresh, aten.lift_fresh_copy, aten.squeeze,
         aten.slice, aten.to}
_SCALE = {aten.mul, aten.div}
_FILL_THRESHOLD = -1e4


@dataclass(frozen=True)
class Band:
    """Kept entries ``lo <= j - i <= hi`` of the last two dims (``i`` rows, ``j``
    columns); ``None`` bounds are unbounded, ``empty`` keeps nothing."""

    lo: Any = None
    hi: Any = None
    empty: bool = False

    def describe(self) -> str:
        if self.empty:
            return "nothing"
        if self.lo is None and self.hi is None:
            return "everything"
        parts = []
        if self.hi is not None:
            parts.append(f"j <= i{_off(self.hi)}")
        if self.lo is not None:
            parts.append(f"j >= i{_off(self.lo)}")
        kind = "lower triangular" if self.lo is None else "upper triangular" if self.hi is None else "a band"
        return " and ".join(parts) + f" ({kind})"


def _off(k) -> str:
    k = sympy.sympify(k)
    if k == 0:
        return ""
    return f" + {to_python(k)}" if not (k.is_number and k < 0) else f" - {to_python(-k)}"


ALL = Band()


def _and(a: Band, b: Band, env) -> Optional[Band]:
    if a.empty or b.empty:
        return Band(empty=True)

    def pick(x, y, larger):
        if x is None:
            return y, True
        if y is None:
            return x, True
        d = sympy.expand(x - y)
        ge = env.static_bool(sympy.Ge(d, 0), log=False) if not d.is_number else bool(d >= 0)
        if ge is None:
            return None, False
        return ((x if ge else y) if larger else (y if ge else x)), True

    lo, ok1 = pick(a.lo, b.lo, True)
    hi, ok2 = pick(a.hi, b.hi, False)
    if not (ok1 and ok2):
        return None
    return Band(lo, hi)


def _not(a: Band) -> Optional[Band]:
    if a.empty:
        return ALL
    if a.lo is None and a.hi is None:
        return Band(empty=True)
    if a.lo is None:
        return Band(lo=a.hi + 1)
    if a.hi is None:
        return Band(hi=a.lo - 1)
    return None


class MaskAnalysis:
    """Mask and attention recognition over one report's graph."""

    def __init__(self, report):
        self.report = report
        self.env = report.traced.env
        self.memo_pred: dict = {}
        self.memo_idx: dict = {}
        self.memo_bias: dict = {}
        repl = self.env.replacements
        self.fix = (lambda e: sympy.sympify(e).xreplace(repl)) if repl else sympy.sympify

    # -- helpers -------------------------------------------------------------------------
    def shape(self, n):
        v = n.meta.get("val") if isinstance(n, torch.fx.Node) else None
        if isinstance(v, torch.Tensor):
            return tuple(self.fix(s.node.expr if isinstance(s, torch.SymInt) else s) for s in v.shape)
        return None

    def last2_same(self, a, b) -> bool:
        sa, sb = self.shape(a), self.shape(b)
        return sa is not None and sb is not None and len(sa) >= 2 and len(sb) >= 2 and sa[-2:] == sb[-2:]

    def scalar(self, a) -> Optional[float]:
        """The value of a Python number or a 0-dim constant tensor node."""
        if isinstance(a, (int, float)) and not isinstance(a, bool):
            return float(a)
        if isinstance(a, torch.fx.Node) and a.op == "call_function":
            p = getattr(a.target, "_overloadpacket", None)
            if p in (aten.scalar_tensor, aten.full) and a.args:
                v = a.args[0] if p is aten.scalar_tensor else a.args[1]
                if isinstance(v, (int, float)):
                    return float(v)
            if p in _PASS and a.args:
                return self.scalar(a.args[0])
        return None

    def proved(self, cond) -> bool:
        cond = sympy.sympify(cond)
        if cond in (sympy.true, sympy.false):
            return cond is sympy.true
        try:
            return self.env.static_bool(cond, log=False) is True
        except SymshapeError:  # a form the engine has no rule for is not a proof
            return False

    # -- index values: arange along the row or column axis ----------------------------------
    def idx(self, n):
        if not isinstance(n, torch.fx.Node):
            return None
        if n in self.memo_idx:
            return self.memo_idx[n]
        self.memo_idx[n] = None
        r = self._idx(n)
        self.memo_idx[n] = r
        return r

    def _idx(self, n):
        if n.op != "call_function":
            return None
        p = getattr(n.target, "_overloadpacket", None)
        shape = self.shape(n)
        if shape is None:
            return None
        if p is aten.arange:
            args = [self.fix(a.meta["expr"]) if isinstance(a, torch.fx.Node) and "expr" in a.meta else a
                    for a in n.args]
            step = args[2] if len(args) > 2 else n.kwargs.get("step", 1)
            if step != 1:
                return None
            start = args[0] if len(args) >= 2 else 0
            return ("v", sympy.sympify(start))
        if p in (aten.add, aten.sub) and len(n.args) == 2:
            a, b = n.args
            sign = 1 if p is aten.add else -1
            if isinstance(b, (int, sympy.Basic)) or (isinstance(b, torch.fx.Node) and "expr" in b.meta):
                base = self.idx(a)
                c = self.fix(b.meta["expr"]) if isinstance(b, torch.fx.Node) else sympy.sympify(b)
                return (base[0], base[1] + sign * c) if base else None
            return None
        if p in _PASS and n.args:
            base = self.idx(n.args[0])
            if base is None:
                return None
            if p is aten.slice:
                # A slice starting at `start` shifts the values (x[start + p]); steps other than 1 scale them.
                args = list(n.args) + [None] * (5 - len(n.args))
                start, step = args[2], args[4] if args[4] is not None else n.kwargs.get("step", 1)
                start = n.kwargs.get("start", start)
                if step != 1:
                    return None
                if start not in (None, 0):
                    if isinstance(start, torch.fx.Node) and "expr" in start.meta:
                        start = self.fix(start.meta["expr"])
                    if not isinstance(start, (int, sympy.Basic)) or not self.proved(sympy.Ge(start, 0)):
                        return None
                    base = (base[0], base[1] + start)
            # Still one index along a single dim: whether it indexes rows or columns is
            # read off the shape where it is compared (views may move that dim first).
            nonone = [i for i, s in enumerate(shape) if s != 1]
            return base if len(nonone) == 1 else None
        return None

    def role(self, n, v):
        """``("i", k)`` (row index + k) or ``("j", k)`` (column index + k) for index value ``v`` of node ``n``."""
        shape = self.shape(n)
        if v is None or shape is None:
            return None
        nonone = [i for i, s in enumerate(shape) if s != 1]
        if len(shape) == 1 or nonone == [len(shape) - 1]:
            return ("j", v[1])
        if len(shape) >= 2 and nonone == [len(shape) - 2]:
            return ("i", v[1])
        return None

    # -- boolean masks -----------------------------------------------------------------------
    def pred(self, n):
        """The entries a boolean tensor node is True at, as a Band (None: unknown)."""
        if not isinstance(n, torch.fx.Node):
            if n is True:
                return ALL
            if n is False:
                return Band(empty=True)
            return None
        if n in self.memo_pred:
            return self.memo_pred[n]
        self.memo_pred[n] = None
        r = self._pred(n)
        self.memo_pred[n] = r
        return r

    def _pred(self, n):
        if n.op != "call_function":
            return None
        p = getattr(n.target, "_overloadpacket", None)
        a = n.args
        if p in (aten.ones, aten.ones_like, aten.new_ones):
            return ALL
        if p in (aten.full, aten.new_full, aten.full_like) and len(a) >= 2:
            v = a[1]
            return ALL if v in (True, 1) else Band(empty=True) if v in (False, 0) else None
        if p in (aten.zeros, aten.zeros_like, aten.new_zeros):
            return Band(empty=True)
        if p in (aten.tril, aten.triu):
            base = self.pred(a[0])
            k = sympy.sympify(a[1] if len(a) > 1 else n.kwargs.get("diagonal", 0))
            if base is None:
                return None
            return _and(base, Band(hi=k) if p is aten.tril else Band(lo=k), self.env)
        if p in (aten.bitwise_not, aten.logical_not):
            base = self.pred(a[0])
            return _not(base) if base is not None else None
        if p in (aten.bitwise_and, aten.logical_and, aten.mul) and len(a) == 2:
            x, y = self.pred(a[0]), self.pred(a[1])
            return _and(x, y, self.env) if x is not None and y is not None else None
        if p in (aten.ge, aten.gt) and len(a) == 2 and not isinstance(a[1], torch.fx.Node):
            # index >= c where the index starts at k >= c (arange(k, ...)): true everywhere
            # (transformers' bidirectional mask under export: q_idx >= 0).
            v = self.idx(a[0])
            c = self.scalar(a[1])
            if v is not None and c is not None and v[1].is_number:
                start = float(v[1])
                if start > c or (p is aten.ge and start == c):
                    return ALL
        if p in (aten.le, aten.lt, aten.ge, aten.gt) and len(a) == 2:
            # A 1-D index broadcasts along the last dim: it is the column index.
            x, y = self.role(a[0], self.idx(a[0])), self.role(a[1], self.idx(a[1]))
            if x is None or y is None:
                return None
            if {x[0], y[0]} != {"i", "j"}:
                return None
            # Normalize to "j - i  op  k".
            if x[0] == "j":
                k, op = y[1] - x[1], p
            else:
                k, op = x[1] - y[1], {aten.le: aten.ge, aten.lt: aten.gt, aten.ge: aten.le, aten.gt: aten.lt}[p]
            return {aten.le: Band(hi=k), aten.lt: Band(hi=k - 1), aten.ge: Band(lo=k), aten.gt: Band(lo=k + 1)}[op]
        if p in _PASS and a and isinstance(a[0], torch.fx.Node):
            base = self.pred(a[0])
            # Everything (or nothing) stays so when broadcast; a band only where the last two dims stay.
            if base is not None and (base.empty or (base.lo is None and base.hi is None)):
                return base
            return base if self.last2_same(n, a[0]) else None
        return None

    # -- additive biases: 0 where kept, -inf (or very negative) where masked -----------------
    def bias(self, n):
        if not isinstance(n, torch.fx.Node):
            return None
        if n in self.memo_bias:
            return self.memo_bias[n]
        self.memo_bias[n] = None
        r = self._bias(n)
        self.memo_bias[n] = r
        return r

    def _masking(self, v) -> bool:
        s = self.scalar(v)
        return s is not None and (s == -math.inf or s <= _FILL_THRESHOLD)

    def _is_fill(self, n) -> bool:
        """A tensor filled with a masking value (``torch.full((T, T), finfo.min)``)."""
        if not isinstance(n, torch.fx.Node) or n.op != "call_function":
            return False
        p = getattr(n.target, "_overloadpacket", None)
        if p in (aten.full, aten.new_full, aten.full_like) and len(n.args) >= 2:
            return self._masking(n.args[1])
        if p in _PASS and n.args and self.last2_same(n, n.args[0]):
            return self._is_fill(n.args[0])
        return False

    def _bias(self, n):
        if n.op != "call_function":
            return None
        p = getattr(n.target, "_overloadpacket", None)
        a = n.args
        if p is aten.where and len(a) == 3:
            cond = self.pred(a[0])
            if cond is None:
                return None
            if self.scalar(a[1]) == 0 and self._masking(a[2]):
                return (cond, a[0])
            if self._masking(a[1]) and self.scalar(a[2]) == 0:
                neg = _not(cond)
                return (neg, a[0]) if neg is not None else None
            return None
        if p in (aten.masked_fill, aten.masked_fill_) and len(a) == 3 and self._is_fill(a[0]) \
                and self.scalar(a[2]) == 0:
            # full(T, S, min).masked_fill(keep, 0): kept where the condition holds
            cond = self.pred(a[1])
            return (cond, a[1]) if cond is not None else None
        if p in (aten.triu, aten.tril) and self._is_fill(a[0]):
            # triu(full(T, T, min), k): masked where j >= i + k, kept where j <= i + k - 1
            k = sympy.sympify(a[1] if len(a) > 1 else n.kwargs.get("diagonal", 0))
            return (Band(hi=k - 1) if p is aten.triu else Band(lo=k + 1), n)
        if p is aten.masked_fill and len(a) == 3:
            cond = self.pred(a[1])
            base = self.scalar(a[0]) if not isinstance(a[0], torch.fx.Node) else None
            zero = base == 0 or (isinstance(a[0], torch.fx.Node) and getattr(a[0].target, "_overloadpacket", None)
                                 in (aten.zeros, aten.zeros_like, aten.new_zeros))
            if cond is not None and zero and self._masking(a[2]):
                neg = _not(cond)
                return (neg, a[1]) if neg is not None else None
            return None
        if p in _PASS and a and isinstance(a[0], torch.fx.Node) and self.last2_same(n, a[0]):
            return self.bias(a[0])
        return None

    # -- from a softmax back to the score matmul ----------------------------------------------
    def scores(self, softmax):
        """(score matmul node, Band kept, mask node, masked?) for a softmax, or None."""
        band, origin, masked = ALL, None, False
        x = softmax.args[0]
        for _ in range(64):
            if not isinstance(x, torch.fx.Node) or x.op != "call_function":
                return None
            p = getattr(x.target, "_overloadpacket", None)
            a = x.args
            if p in _MATMUL:
                return x, band, origin, masked
            if p is aten.add and len(a) == 2 and all(isinstance(t, torch.fx.Node) for t in a):
                for mine, other in ((a[0], a[1]), (a[1], a[0])):
                    b = self.bias(other)
                    if b is not None:
                        band = _and(band, b[0], self.env) if band is not None else None
                        origin, masked, x = b[1], True, mine
                        break
                else:
                    if self._looks_masking_add(a):
                        return ("unrecognized", x, self._data_reason(x))
                    return None
                continue
            if p is aten.masked_fill and len(a) == 3 and self._masking(a[2]):
                cond = self.pred(a[1])
                masked = True
                neg = _not(cond) if cond is not None else None
                if neg is None:
                    m = a[1]
                    if cond is None and isinstance(m, torch.fx.Node) and getattr(
                            m.target, "_overloadpacket", None) in (aten.bitwise_not, aten.logical_not):
                        cond = self.pred(m.args[0])
                        if cond is not None:
                            return ("unrecognized", x, f"its mask keeps {cond.describe()}, and band masks are not "
                                                       f"counted yet")
                    elif cond is not None:
                        return ("unrecognized", x, f"its mask keeps {_not_text(cond)}, and band masks are not "
                                                   f"counted yet")
                    return ("unrecognized", x, self._data_reason(a[1]))
                band = _and(band, neg, self.env) if band is not None else None
                origin, x = a[1], a[0]
                continue
            if p is aten.where and len(a) == 3 and self._masking(a[2]):
                cond = self.pred(a[0])
                masked = True
                if cond is None:
                    return ("unrecognized", x, self._data_reason(a[0]))
                band = _and(band, cond, self.env) if band is not None else None
                origin, x = a[0], a[1]
                continue
            if p in _SCALE and len(a) == 2 and not isinstance(a[1], torch.fx.Node):
                x = a[0]
                continue
            if p in _PASS and a and isinstance(a[0], torch.fx.Node) and self.last2_same(x, a[0]):
                x = a[0]
                continue
            return None
        return None

    def _data_reason(self, mask) -> Optional[str]:
        """Why a mask is not recognized: the program inputs it is built from, if any."""
        seen, todo, inputs = set(), [mask], []
        while todo:
            n = todo.pop()
            # Only tensor values: a size read from an input (x.shape[1]) is not data.
            if not isinstance(n, torch.fx.Node) or n in seen or not isinstance(n.meta.get("val"), torch.Tensor):
                continue
            seen.add(n)
            if n.op == "placeholder":
                inputs.append(n.name)
            todo += [a for a in n.all_input_nodes]
        if not inputs:
            return None
        names = ", ".join(f"`{i}`" for i in sorted(inputs))
        return (f"its mask is built from the input {names}, i.e. from data (e.g. the sequence ids or lengths of "
                f"packed sequences, whose block-diagonal mask keeps sum(len*len) entries), which a count over "
                f"sizes cannot see")

    def _looks_masking_add(self, args) -> bool:
        # An additive term that is not a recognized bias but is built with a masking fill.
        return any(isinstance(t, torch.fx.Node) and getattr(t.target, "_overloadpacket", None)
                   in (aten.where, aten.masked_fill) for t in args)

    def value_matmul(self, softmax):
        frontier = [softmax]
        for _ in range(64):
            nxt = []
            for n in frontier:
                for u in n.users:
                    if u.op != "call_function":
                        continue
                    p = getattr(u.target, "_overloadpacket", None)
                    if p in _MATMUL:
                        first = u.args[1] if p in (aten.baddbmm, aten.addmm) else u.args[0]
                        if first is n:
                            return u
                    elif p in _PASS or p in (aten.native_dropout, aten.dropout) or (
                            p is aten.mul) or str(u.target) == "<built-in function getitem>":
                        nxt.append(u)
            if not nxt:
                return None
            frontier = nxt
        return None

    # -- counting kept entries ---------------------------------------------------------------
    def kept(self, band: Band, T, S):
        """Kept entries of a T x S grid, a closed form, or (None, why)."""
        if band.empty:
            return sympy.Integer(0), None
        if band.lo is None and band.hi is None:
            return T * S, None
        if band.lo is None:  # j <= i + k: row i keeps i + k + 1 entries
            k = band.hi
            if self.proved(sympy.Ge(k, 0)) and self.proved(sympy.Le(T + k, S)):
                return sympy.expand(T * (T + 1) / 2 + T * k), None
            return None, f"cannot prove 0 <= {k} and {T + k} <= {S} on the traced ranges"
        if band.hi is None:  # j >= i + k: row i keeps S - i - k entries
            k = band.lo
            if self.proved(sympy.Ge(k, 0)) and self.proved(sympy.Le(T - 1 + k, S)):
                return sympy.expand(T * S - T * k - T * (T - 1) / 2), None
            return None, f"cannot prove 0 <= {k} and {T - 1 + k} <= {S} on the traced ranges"
        return None, "band masks (both a lower and an upper diagonal) are not counted yet"


def _not_text(b: Band) -> str:
    return f"everything but {b.describe()}"


def mask_source(node):
    """The op that made a mask triangular (``tril``, ``triu``, a comparison), for the report."""
    seen, todo = set(), [node]
    while todo:
        n = todo.pop(0)
        if not isinstance(n, torch.fx.Node) or n in seen:
            continue
        seen.add(n)
        if getattr(n.target, "_overloadpacket", None) in (aten.tril, aten.triu, aten.le, aten.lt, aten.ge, aten.gt):
            return n
        todo += [a for a in n.args if isinstance(a, torch.fx.Node)]
    return node
