"""Rewrite rules the engine applies to size expressions.

Each rule application is appended to the decision log as a ``rewrite``
entry, so :mod:`validation` can prove ``before == after`` under the facts
known at that moment.  Rules that depend on facts (divisibility, ranges)
must only use the facts the engine holds (through a
:class:`~shapes.reasoner.Reasoner`, never the ShapeEnv); rules that are identities hold
everywhere.

The rules live in :data:`RULES` keyed by name so tests can swap one out for
a deliberately wrong version and check that validation catches it.
"""
from __future__ import annotations

import functools
import math
from typing import Callable, Optional

import sympy

from .functions import FloorDiv, PyMod, TrueDiv, TruncToInt, Where
from .guard import StepKind
from .reasoner import Reasoner


def known_divisor(ctx: Reasoner, e) -> int:
    """A positive integer known to divide ``e`` (1 when nothing is known)."""
    if e.is_Integer:
        return abs(int(e)) or 0
    d = ctx.divisible.get(e, 1)
    if e.is_integer is not True:
        # 2 * (N / 3) is no multiple of 2; only a fact (x % k == 0) makes a real one.
        return d
    if e.is_Mul:
        prod = 1
        for a in e.args:
            k = known_divisor(ctx, a)
            if k == 0:
                return 0
            prod *= k
        return max(d, prod) if prod % d == 0 or d % prod == 0 else math.lcm(d, prod)
    if e.is_Add:
        # x + (-x) % k is the next multiple of k: padding to a multiple.
        for m in e.args:
            if isinstance(m, PyMod) and m.args[1].is_Integer and sympy.expand(e - m + m.args[0]) == 0:
                d = math.lcm(d, abs(int(m.args[1])))
        g = 0
        for a in e.args:
            g = math.gcd(g, known_divisor(ctx, a))
            if g == 1:
                break
        return math.lcm(d, g) if g else d
    return d


def divides(ctx: Reasoner, k: int, e) -> bool:
    if e.is_integer is not True and e not in ctx.divisible:
        return False  # even k = 1 divides only integers: (N/4) % 1 is not 0
    d = known_divisor(ctx, e)
    return d == 0 or d % k == 0


def _split_by_divisor(e, k: int):
    """Split ``e`` into ``k*q + r`` with integer ``q``; returns (q, r).

    Only integer-valued terms move to ``q``: ``(2*(N/2) + 1) // 2`` is not
    ``N/2 + 1 // 2`` when ``N`` is odd.
    """
    q, r = [], []
    for t in sympy.Add.make_args(e):
        c, rest = t.as_coeff_Mul()
        if c.is_Integer and int(c) % k == 0 and rest.is_integer is True:
            q.append(sympy.Integer(int(c) // k) * rest)
        else:
            r.append(t)
    return sympy.Add(*q), sympy.Add(*r)


def _pos_int(x) -> Optional[int]:
    if x.is_Integer and int(x) > 0:
        return int(x)
    return None


# Each rule takes (ctx, expr) and returns a new expression or None.


def _split_by_constant(e, cls):
    """``(q, r, k)`` when ``e`` is ``cls(k*q + r, k)`` with a positive integer ``k`` and ``q != 0``, else None."""
    if not isinstance(e, cls):
        return None
    k = _pos_int(e.args[1])
    if k is None:
        return None
    q, r = _split_by_divisor(e.args[0], k)
    return None if q == 0 else (q, r, k)


def rule_floordiv_split(ctx, e):
    """(k*q + r) // k  ->  q + r // k   (identity for integer q)."""
    split = _split_by_constant(e, FloorDiv)
    if split is None:
        return None
    q, r, k = split
    return q + FloorDiv(r, k)


def _exact_quotient(ctx, a, d):
    """``a / d`` as a polynomial with integer coefficients, if it is one and d != 0."""
    if d.is_number:
        return None
    # x // k with k | x is exactly x/k: lets T // (T // 8) cancel to 8.
    exact = {f: f.args[0] / f.args[1] for f in (a.atoms(FloorDiv) | d.atoms(FloorDiv))
             if _pos_int(f.args[1]) and divides(ctx, int(f.args[1]), f.args[0])}
    for _ in range(3):  # nested exact quotients ((x // 4 + r) // 4): substitute consistently
        exact = {f: _subst_top(v, exact) for f, v in exact.items()}
    # Substitute only where x // k is a term or factor: inside another floordiv or
    # mod the rational x/k would break the integer arguments those rules assume.
    q = sympy.cancel(_subst_top(a, exact) / _subst_top(d, exact)) if exact else sympy.cancel(a / d)
    if not _is_int_poly(q):
        return None
    # x // k with k | x is nonzero exactly when x is: ranges alone lose that.
    nz = d.args[0] if isinstance(d, FloorDiv) and d in exact else d
    if ctx.static_bool(sympy.Ne(nz, 0), log=False) is not True:
        return None
    return q


def _subst_top(e, table):
    """``e`` with ``table`` applied to its sum/product structure, not inside functions."""
    if e in table:
        return table[e]
    if e.is_Add or e.is_Mul or e.is_Pow:
        args = [_subst_top(a, table) for a in e.args]
        return e.func(*args) if any(x is not y for x, y in zip(args, e.args)) else e
    return e


def rule_floordiv_cancel(ctx, e):
    """(q*d) // d  ->  q   for a symbolic d != 0 and polynomial q."""
    if not isinstance(e, FloorDiv):
        return None
    return _exact_quotient(ctx, *e.args)


def rule_mod_cancel(ctx, e):
    """(q*d) % d  ->  0   for a symbolic d != 0 and polynomial q."""
    if not isinstance(e, PyMod):
        return None
    if _exact_quotient(ctx, *e.args) is None:
        return None
    return sympy.Integer(0)


@functools.lru_cache(maxsize=16384)
def _gcd(a, b):
    # Convolution and pooling sizes ask for the same quotients again and again.
    return sympy.gcd_terms(sympy.gcd(a, b))


def _common_factor(ctx, a, b):
    """A factor g with a = g*a', b = g*b' and g > 0 known; None if only 1."""
    g = _gcd(a, b) if not (a.is_number and b.is_number) else None
    if g is None or g == 1 or g == -1 or g == 0:
        return None
    if g.is_number:
        g = abs(g)
        return g if g.is_Integer and g > 1 else None
    if ctx.static_bool(sympy.Gt(g, 0), log=False) is not True:
        return None
    return g


def _cancel_common(ctx, e):
    """(g, a/g, b/g) for ``e = f(a, b)`` with a common factor g > 0, else None."""
    a, b = e.args
    g = _common_factor(ctx, a, b)
    if g is None:
        return None
    na, nb = sympy.cancel(a / g), sympy.cancel(b / g)
    if not (_is_int_poly(na) and _is_int_poly(nb)):
        return None
    return g, na, nb


def rule_floordiv_gcd(ctx, e):
    """(g*a) // (g*b)  ->  a // b   for g > 0 (the quotient a/b is unchanged)."""
    if not isinstance(e, FloorDiv):
        return None
    c = _cancel_common(ctx, e)
    return None if c is None else FloorDiv(c[1], c[2])


def rule_mod_gcd(ctx, e):
    """(g*a) % (g*b)  ->  g*(a % b)   for g > 0."""
    if not isinstance(e, PyMod):
        return None
    c = _cancel_common(ctx, e)
    return None if c is None else c[0] * PyMod(c[1], c[2])


def _is_int_poly(x) -> bool:
    """A sum of integer multiples of products of atoms (symbols or function
    applications like T // 8) with natural powers: an integer for integer atoms."""
    for term in sympy.Add.make_args(x):
        c, rest = term.as_coeff_Mul()
        if not c.is_Integer:
            return False
        for f in sympy.Mul.make_args(rest):
            if f.is_Pow:
                f, ex = f.args
                if not (ex.is_Integer and ex > 0):
                    return False
            if f.is_number and not f.is_Integer:
                return False
            if not ((f.is_Integer or f.is_Symbol or isinstance(f, sympy.Function)) and f.is_integer is True):
                return False
    return True


def rule_floordiv_nest(ctx, e):
    """(x // m) // n  ->  x // (m*n)   for positive constants m, n."""
    if not isinstance(e, FloorDiv) or not isinstance(e.args[0], FloorDiv):
        return None
    n, m = _pos_int(e.args[1]), _pos_int(e.args[0].args[1])
    if n is None or m is None:
        return None
    return FloorDiv(e.args[0].args[0], m * n)


def rule_floordiv_range(ctx, e):
    """a // b  ->  0   when 0 <= a < b by ranges."""
    if not isinstance(e, FloorDiv):
        return None
    a, b = e.args
    if ctx.static_bool(sympy.Ge(a, 0), log=False) is True and ctx.static_bool(sympy.Lt(a, b), log=False) is True:
        return sympy.Integer(0)
    return None


def rule_mul_floordiv_exact(ctx, e):
    """c * y * (a // k)  ->  (c/k) * y * a   when k | a and k | c."""
    if not e.is_Mul:
        return None
    c, rest = e.as_coeff_Mul()
    if not c.is_Integer:
        return None
    factors = sympy.Mul.make_args(rest)
    for i, f in enumerate(factors):
        if not isinstance(f, FloorDiv):
            continue
        k = _pos_int(f.args[1])
        if k is None or int(c) % k != 0 or not divides(ctx, k, f.args[0]):
            continue
        others = factors[:i] + factors[i + 1:]
        return sympy.Integer(int(c) // k) * f.args[0] * sympy.Mul(*others)
    return None


def rule_eq_zero_product(ctx, e):
    """Eq(a*b, 0) -> Eq(a, 0) (likewise Ne) when b != 0 is known."""
    if not isinstance(e, (sympy.Eq, sympy.Ne)) or e.rhs != 0 or not e.lhs.is_Mul:
        return None
    keep = [f for f in e.lhs.args if not (f.is_number or ctx.static_bool(sympy.Ne(f, 0), log=False) is True)]
    if len(keep) == len(e.lhs.args):
        return None
    return type(e)(sympy.Mul(*keep), 0)


def rule_mod_split(ctx, e):
    """(k*q + r) % k  ->  r % k."""
    split = _split_by_constant(e, PyMod)
    if split is None:
        return None
    _, r, k = split
    return PyMod(r, k)


def rule_mod_inner_mod(ctx, e):
    """(c*(a % k) + r) % k  ->  (c*a + r) % k   for integer c (a % k is a mod k).

    Padding written as ``(k - a % k) % k`` becomes ``(-a) % k``, whose sum with
    ``a`` is then known to be a multiple of k.
    """
    if not isinstance(e, PyMod):
        return None
    k = e.args[1]
    if k.is_number and _pos_int(k) is None:
        return None
    changed = False
    terms = []
    for t in sympy.Add.make_args(e.args[0]):
        c, rest = t.as_coeff_Mul()
        if c.is_Integer and isinstance(rest, PyMod) and rest.args[1] == k:
            terms.append(c * rest.args[0])
            changed = True
        elif c.is_Integer and not k.is_number and rest == k:
            changed = True  # a multiple of a symbolic k: (c*k + r) % k == r % k
        else:
            terms.append(t)
    return PyMod(sympy.Add(*terms), k) if changed else None


def rule_pad_multiple(ctx, e):
    """a + (-a) % k  ->  k * ((a + k - 1) // k)   for k > 0: padding a up to a multiple of k.

    The product form lets ``padded // k`` cancel, also for a symbolic k (a
    window size that depends on the input).
    """
    if not e.is_Add:
        return None
    for m in e.args:
        if not isinstance(m, PyMod):
            continue
        x, k = m.args
        rest = e - m
        if sympy.expand(rest + x) != 0:
            continue
        if not (_pos_int(k) or ctx.static_bool(sympy.Gt(k, 0), log=False) is True):
            continue
        return k * FloorDiv(rest + k - 1, k)
    return None


def rule_mod_divisible(ctx, e):
    """a % k  ->  0   when k | a is known."""
    if not isinstance(e, PyMod):
        return None
    k = _pos_int(e.args[1])
    if k is None or not divides(ctx, k, e.args[0]):
        return None
    return sympy.Integer(0)


def rule_mod_range(ctx, e):
    """a % b  ->  a   when 0 <= a < b by ranges."""
    if not isinstance(e, PyMod):
        return None
    a, b = e.args
    if ctx.static_bool(sympy.Ge(a, 0), log=False) is True and ctx.static_bool(sympy.Lt(a, b), log=False) is True:
        return a
    return None


def rule_min_max(ctx, e):
    """Min(a, b) -> a when a <= b is known; likewise Max."""
    is_min = isinstance(e, sympy.Min)
    if not (is_min or isinstance(e, sympy.Max)):
        return None
    args = list(e.args)
    for i, a in enumerate(args):
        others = args[:i] + args[i + 1:]
        rel = sympy.Le if is_min else sympy.Ge
        if all(ctx.static_bool(rel(a, o), log=False) is True for o in others):
            return a
    return None


def rule_where(ctx, e):
    """c ? a : b  ->  a (or b) when c is known."""
    if not isinstance(e, Where):
        return None
    v = ctx.static_bool(e.args[0], log=False)
    if v is None:
        return None
    return e.args[1] if v else e.args[2]


def rule_floor_truediv(ctx, e):
    """floor(a / b) -> a // b and ceil(a / b) -> -((-a) // b) for integers a, b
    (``math.floor(N / 2)``: exact on reals, as sizes stay far below 2**53)."""
    if not isinstance(e, (sympy.floor, sympy.ceiling)) or not isinstance(e.args[0], TrueDiv):
        return None
    a, b = e.args[0].args
    if not (a.is_integer is True and b.is_integer is True):
        return None
    if isinstance(e, sympy.floor):
        return FloorDiv(a, b)
    return -FloorDiv(-a, b)


def rule_trunc_int(ctx, e):
    """int(x) -> x for an integer-valued x (int(N // 2) is N // 2)."""
    if isinstance(e, TruncToInt) and e.args[0].is_integer is True:
        return e.args[0]
    return None


def _split_div_mod(t):
    """``(coeff, f)`` for a term ``coeff * f`` with ``f`` its one ``//`` or ``%`` factor (else ``f`` None)."""
    coeff, fn = sympy.Integer(1), None
    for f in sympy.Mul.make_args(t):
        if isinstance(f, (FloorDiv, PyMod, sympy.Mod)) and fn is None:
            fn = f
        else:
            coeff = coeff * f
    return coeff, fn


def rule_div_mod_recombine(ctx, e):
    """k*b*(a // b) + k*(a % b)  ->  k*a   (Python's a == b*(a // b) + a % b, any b != 0):
    views that split a dim and merge it again index linearly.  ``k*b`` may be spread over
    several terms (``b = P + 1`` expands ``768*(P+1)*(a // b)`` into two), so the terms of
    each ``//`` factor are summed before the comparison."""
    if not e.is_Add:
        return None
    terms = list(e.args)
    split = [_split_div_mod(t) for t in terms]
    floors: dict = {}
    for n, (k, f) in enumerate(split):
        if isinstance(f, FloorDiv):
            floors.setdefault(f.args, []).append(n)
    for i, (k, m) in enumerate(split):
        if not isinstance(m, (PyMod, sympy.Mod)):
            continue
        a, b = m.args
        js = floors.get((a, b))
        if not js:
            continue
        if sympy.expand(sympy.Add(*[split[j][0] for j in js]) - k * b) == 0:
            rest = [t for n, t in enumerate(terms) if n != i and n not in js]
            return sympy.expand(sympy.Add(*rest) + k * a)
    return None


RULES: dict[str, Callable] = {
    "floordiv_split": rule_floordiv_split,
    "floordiv_cancel": rule_floordiv_cancel,
    "floordiv_gcd": rule_floordiv_gcd,
    "floordiv_nest": rule_floordiv_nest,
    "floordiv_range": rule_floordiv_range,
    "mul_floordiv_exact": rule_mul_floordiv_exact,
    "eq_zero_product": rule_eq_zero_product,
    "mod_split": rule_mod_split,
    "mod_cancel": rule_mod_cancel,
    "mod_gcd": rule_mod_gcd,
    "mod_inner_mod": rule_mod_inner_mod,
    "pad_multiple": rule_pad_multiple,
    "mod_divisible": rule_mod_divisible,
    "mod_range": rule_mod_range,
    "min_max": rule_min_max,
    "where": rule_where,
    "floor_truediv": rule_floor_truediv,
    "trunc_int": rule_trunc_int,
    "div_mod_recombine": rule_div_mod_recombine,
}

# pad_multiple fires on Adds holding a PyMod
_RULE_TYPES = (FloorDiv, PyMod, sympy.Min, sympy.Max, Where, sympy.floor, sympy.ceiling, TruncToInt)


def needs_rules(e) -> bool:
    return e.has(*_RULE_TYPES)


def rewrite(ctx: Reasoner, e):
    """Apply :data:`RULES` bottom-up until none fires; logs each step."""
    if e.is_Atom or not needs_rules(e):
        return e
    args = [rewrite(ctx, a) for a in e.args]
    if any(a is not b for a, b in zip(args, e.args)):
        e = e.func(*args)
    for _ in range(32):  # rules only shrink expressions; the bound is a safety net
        for name, rule in RULES.items():
            new = rule(ctx, e)
            if new is not None and new != e:
                ctx.log_step(StepKind.REWRITE, e, new, name)
                e = new
                break
        else:
            return e
        if e.is_Atom:
            return e
        if any(not a.is_Atom and needs_rules(a) for a in e.args):
            e = rewrite(ctx, e)
    return e
