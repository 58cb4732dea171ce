"""Z3 over the box of dim ranges: terms, implication, intervals, simplification.

Every rewrite of a condition here is proved equivalent with Z3 inside the
box before it is used, so simplifying never changes which sizes a
condition accepts.

Example::

    >>> import sympy
    >>> from shapes.functions import FloorDiv
    >>> from validation.dinfer.z3box import Z3Box
    >>> H = sympy.Symbol("H", integer=True)
    >>> box = Z3Box(["H"], {"H": H}, {"H": (1, 64)}, timeout_s=2)
    >>> box.simplify([sympy.Ge(FloorDiv(H - 1, 2), 2), sympy.Ge(H, 2)])
    (H >= 5,)
"""
from __future__ import annotations

import math
import time
from typing import Optional

import sympy
import z3

from shapes.functions import FloorDiv, PyMod, TrueDiv

from ..z3_translate import Z3Translator


def denominators(e):
    """Non-constant divisors in ``e``: a point where one is zero is outside the condition."""
    out = []
    for a in e.atoms(FloorDiv, PyMod, TrueDiv):
        d = a.args[1]
        if not d.is_number:
            out.append(d)
    return out


def bound_of(c):
    """``(symbol, lo, hi)`` if ``c`` bounds a single symbol by an integer constant, else None."""
    if not isinstance(c, (sympy.Ge, sympy.Gt, sympy.Le, sympy.Lt, sympy.Eq)):
        return None
    lhs, rhs = c.lhs, c.rhs
    flip = False
    if lhs.is_Integer and rhs.is_Symbol:
        lhs, rhs, flip = rhs, lhs, True
    if not (lhs.is_Symbol and rhs.is_Integer):
        return None
    k = int(rhs)
    t = type(c)
    if flip:  # k OP s  ==  s OP' k
        t = {sympy.Ge: sympy.Le, sympy.Gt: sympy.Lt, sympy.Le: sympy.Ge, sympy.Lt: sympy.Gt,
             sympy.Eq: sympy.Eq}[t]
    if t is sympy.Eq:
        return lhs, k, k
    if t is sympy.Ge:
        return lhs, k, math.inf
    if t is sympy.Gt:
        return lhs, k + 1, math.inf
    if t is sympy.Le:
        return lhs, -math.inf, k
    return lhs, -math.inf, k - 1


class Z3Box:
    """Z3 terms for conditions over the dims, with the box as the domain.

    ``deadline`` (a ``time.monotonic()`` value) caps every query's timeout,
    so no query runs past the caller's time budget.
    """

    def __init__(self, names, symbols, box, timeout_s: float, deadline: Optional[float] = None):
        self.tr = Z3Translator()
        self.names = list(names)
        self.symbols = dict(symbols)
        self.vars = {n: self.tr.var(symbols[n]) for n in names}
        self.box = dict(box)
        self.timeout_ms = max(1, int(timeout_s * 1000))
        self.deadline = deadline
        dom = []
        for n in names:
            lo, hi = box[n]
            v = self.vars[n]
            dom.append(v >= lo)
            if hi != math.inf:
                dom.append(v <= hi)
        self.domain = dom

    def ms(self, cap: Optional[int] = None) -> int:
        """A query timeout: at most ``cap`` ms, and never past the deadline (1 ms minimum)."""
        t = self.timeout_ms if cap is None else min(self.timeout_ms, cap)
        if self.deadline is not None:
            t = min(t, int((self.deadline - time.monotonic()) * 1000))
        return max(1, t)

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def term(self, cond, value: bool = True):
        """``cond`` as Z3: defined and true (``value=False``: defined and false).

        A condition is undefined where a divisor is zero, except that an
        operand of ``and``/``or`` that is defined decides it alone, as eager's
        checks evaluate (``(n > 0 && m % n == 0) || m == n``), and as
        :func:`validation.input_space.holds` does on a point.
        """
        if isinstance(cond, (sympy.And, sympy.Or)):
            parts = [self.term(a, value) for a in cond.args]
            return z3.And(*parts) if isinstance(cond, sympy.And) == value else z3.Or(*parts)
        if isinstance(cond, sympy.Not):
            return self.term(cond.args[0], not value)
        t = self.tr.to_z3(cond)
        if not value:
            t = z3.Not(t)
        dens = denominators(cond)
        if dens:
            t = z3.And(*[self.tr.to_z3(d) != 0 for d in dens], t)
        return t

    def conj(self, conds):
        return z3.And(*[self.term(c) for c in conds]) if conds else z3.BoolVal(True)

    def solver(self, timeout_ms: Optional[int] = None):
        s = z3.Solver()
        s.set(timeout=self.ms(timeout_ms))
        s.add(*self.domain)
        return s

    def point(self, model) -> dict:
        return {n: model.eval(self.vars[n], model_completion=True).as_long() for n in self.names}

    def implied(self, cond, given, cap_ms: int = 2000) -> bool:
        """Proved: inside the box, ``given`` (Z3 terms) implies ``cond`` (sympy or Z3).
        Unknown counts as no."""
        s = self.solver(cap_ms)
        t = cond if isinstance(cond, z3.ExprRef) else self.term(cond)
        s.add(*given, z3.Not(t))
        return s.check() == z3.unsat

    def equivalent(self, a, b, cap_ms: int = 3000) -> bool:
        """Proved: Z3 terms ``a`` and ``b`` agree on every point of the box."""
        s = self.solver(cap_ms)
        s.add(a != b)
        return s.check() == z3.unsat

    def extent(self, term, name, cap_ms: int = 2000):
        """``(lo, hi)`` of dim ``name`` over ``term`` (``None`` for no end); None if empty/unknown."""
        v = self.vars[name]
        ends = []
        for maximize in (False, True):
            o = z3.Optimize()
            o.set(timeout=self.ms(cap_ms))
            o.add(*self.domain, term)
            h = o.maximize(v) if maximize else o.minimize(v)
            if o.check() != z3.sat:
                return None
            val = o.upper(h) if maximize else o.lower(h)
            ends.append(val.as_long() if z3.is_int_value(val) else None)
        return tuple(ends)

    def minimize(self, pred_term, timeout_ms: int) -> Optional[dict]:
        """The smallest point of ``pred_term``: least sum of sizes, then lexicographic."""
        o = z3.Optimize()
        o.set(timeout=self.ms(timeout_ms))
        o.add(*self.domain, pred_term)
        vs = [self.vars[n] for n in self.names]
        if vs:
            o.minimize(z3.Sum(*vs) if len(vs) > 1 else vs[0])
            for v in vs:  # lexicographic priority is Z3's default for several objectives
                o.minimize(v)
        if o.check() != z3.sat:
            return None
        return self.point(o.model())

    # -- simplifying a conjunction ---------------------------------------------------------
    def merge_bounds(self, conds):
        """Bounds on one dim (``N >= 2``, ``N < 9``, ``N == 4``) merged into one interval,
        dropping the box's own bounds."""
        lo, hi, first = {}, {}, {}
        rest = []
        for i, c in enumerate(conds):
            b = bound_of(c)
            if b is None or b[0].name not in self.box:
                rest.append((i, c))
                continue
            s, l, h = b
            lo[s] = max(lo.get(s, -math.inf), l)
            hi[s] = min(hi.get(s, math.inf), h)
            first.setdefault(s, i)
        merged = []
        for s, i in first.items():
            blo, bhi = self.box[s.name]
            l, h = max(lo[s], blo), min(hi[s], bhi)
            if l == h:
                merged.append((i, sympy.Eq(s, int(l))))
                continue
            if l > blo:
                merged.append((i, sympy.Ge(s, int(l))))
            if h < bhi:
                merged.append((i + 0.5, sympy.Le(s, int(h))))
        return [c for _, c in sorted(rest + merged, key=lambda t: t[0])]

    def as_interval(self, c):
        """A condition on one dim that holds exactly on an interval of the box, as its
        bounds (``(T + (-T) % 4) // 4 >= 2`` is ``T >= 5``); else ``[c]``.  Z3 proves
        the equivalence, so the replacement never changes which sizes are in a class."""
        syms = c.free_symbols
        if len(syms) != 1 or bound_of(c) is not None:
            return [c]
        (sym,) = syms
        if sym.name not in self.vars:
            return [c]
        t = self.term(c)
        ends = self.extent(t, sym.name)
        if ends is None:
            return [c]
        lo, hi = ends
        blo, bhi = self.box[sym.name]
        interval = []
        if lo is not None and lo > blo:
            interval.append(sympy.Ge(sym, lo))
        if hi is not None and (bhi == math.inf or hi < bhi):
            interval.append(sympy.Le(sym, hi))
        if lo is not None and lo == hi:
            interval = [sympy.Eq(sym, lo)]
        if not interval:
            interval = [sympy.true]
        if self.equivalent(t, self.conj([x for x in interval if x is not sympy.true])):
            return interval
        return [c]

    def simplify(self, conds):
        """A shorter conjunction equivalent to ``conds`` inside the box (each step proved)."""
        out, seen = [], set()
        for c0 in conds:
            for c in self.as_interval(c0) if c0 is not sympy.true else [c0]:
                if c is sympy.true or c in seen:
                    continue
                seen.add(c)
                out.append(c)
        out = self.merge_bounds(out)
        # Drop each condition the others imply inside the box (last first: later guards
        # are usually the specific ones, earlier ones often follow from them).
        i = len(out) - 1
        while i >= 0 and len(out) > 1:
            others = [self.term(c) for j, c in enumerate(out) if j != i]
            if self.implied(out[i], others):
                del out[i]
            i -= 1
        if len(out) == 1 and self.implied(out[0], []):
            out = []
        return tuple(out)
