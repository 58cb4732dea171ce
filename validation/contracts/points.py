"""Points found by Z3 for the contract checks: the smallest size where two formulas differ.

Example::

    >>> import sympy
    >>> from validation import dinfer
    >>> sp = dinfer(lambda x: x.view(-1, 4), "x: f32[N]", dims={"N": (1, 64)})
    >>> z = z3box(sp)
    >>> [term] = [z.conj(c.conditions) for c in sp.ok_classes]
    >>> N = sp.symbols["N"]
    >>> differs(z, sp, term, N // 4, N / 4), differs(z, sp, term, N // 4, N // 2)
    (None, {'N': 4})
"""
from __future__ import annotations

import sympy
import z3


class Undecided(Exception):
    """Z3 could not decide a question a check asked (the finding is then ``undecided``)."""


def z3box(sp, timeout_s: float = 10.0):
    """dinfer's Z3 view of the searched box of the input space ``sp``."""
    from validation.dinfer.z3box import Z3Box
    return Z3Box(list(sp.symbols), sp.symbols, sp.dims, timeout_s)


def smallest(tr, dom, term, names_syms):
    """The point of ``term`` with the least sum of sizes (None when Z3 finds none)."""
    o = z3.Optimize()
    o.set(timeout=5000)
    o.add(*dom, term)
    vs = [tr.var(s) for s in names_syms.values()]
    if vs:
        o.minimize(z3.Sum(*vs) if len(vs) > 1 else vs[0])
        for v in vs:
            o.minimize(v)
    r = o.check()
    if r == z3.unknown:
        raise Undecided(f"Z3 could not decide ({o.reason_unknown()})")
    if r != z3.sat:
        return None
    m = o.model()
    return {n: m.eval(tr.var(s), model_completion=True).as_long() for n, s in names_syms.items()}


def by_name(expr, sp):
    """``expr`` over the space's own symbols (the engine may build equal-named symbols of its own)."""
    e = sympy.sympify(expr)
    return e.xreplace({s: sp.symbols[s.name] for s in e.free_symbols if s.name in sp.symbols})


def differs(z, sp, class_term, got, want):
    """The smallest point of the class where ``got != want``; None when Z3 proves them equal there."""
    t = z.tr.to_z3(by_name(got, sp)) != z.tr.to_z3(by_name(want, sp))
    s = z.solver()
    s.add(class_term, t)
    r = s.check()
    if r == z3.unsat:
        return None
    if r == z3.unknown:
        raise Undecided(f"Z3 could not decide whether {got} equals {want}")
    model = s.model()
    try:
        return smallest(z.tr, z.domain, z3.And(class_term, t), sp.symbols) or z.point(model)
    except Undecided:  # a point of it is known, just not the smallest
        return z.point(model)
