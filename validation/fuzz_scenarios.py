"""Scenarios for :mod:`validation.fuzz`: random envs, expressions over their symbols, and the points to check them at.

A scenario is a fresh :class:`~shapes.env.ShapeEnv` with one to three
symbols (backed sizes with ranges, data-dependent integers that may be
negative) and sometimes a few facts; :class:`ExprGenerator` draws integer,
float-valued and boolean size expressions over them, with seeded edge cases
(nested ``//`` and ``%`` with negative divisors, float ``%``, rounding of
quotients); :func:`scenario_points` picks the points that satisfy the facts
(every point of a small domain, else boundary and random points).

Example::

    >>> import random
    >>> env, syms, domains = new_scenario(random.Random(1))
    >>> points, whole_domain = scenario_points(random.Random(1), syms, domains, env.facts)
    >>> all(len(p) == len(syms) for p in points)
    True
"""
from __future__ import annotations

import itertools
import random

import sympy

from shapes.env import ShapeEnv
from shapes.errors import SymshapeError
from shapes.functions import FloorDiv, PyMod, ToFloat, TrueDiv, TruncToInt, Where
from shapes.value_ranges import INF

from .concrete import compile_expr

RELATIONS = (sympy.Eq, sympy.Ne, sympy.Lt, sympy.Le, sympy.Gt, sympy.Ge)
_FLOAT_DIVISORS = tuple(sympy.sympify(v) for v in (1, 2, 4, -1, -2, 0.5, 1.5, 2.5, -0.5, -1.5, sympy.Rational(3, 2)))
_EXHAUSTIVE_MAX = 600   # domains up to this many points are enumerated completely
_RANDOM_POINTS = 60


class ExprGenerator:
    """Random size expressions and conditions over a scenario's symbols.

    Example::

        >>> import random, sympy
        >>> g = ExprGenerator(random.Random(0), sympy.symbols("a b", integer=True))
        >>> g.int_expr(3).free_symbols <= set(g.syms)
        True
    """

    def __init__(self, rng: random.Random, syms):
        self.rng = rng
        self.syms = syms

    def leaf(self):
        r = self.rng
        if r.random() < 0.75:
            return r.choice(self.syms)
        return sympy.Integer(r.randint(-6, 12))

    def divisor(self, depth):
        r = self.rng
        p = r.random()
        if p < 0.55:
            return sympy.Integer(r.choice([1, 2, 3, 4, 5, 7, 8, 16, -1, -2, -3, -8]))
        if p < 0.8:
            return r.choice(self.syms) + r.randint(0, 3)
        return self.int_expr(depth - 1)

    def int_expr(self, depth: int):
        r = self.rng
        if depth <= 0 or r.random() < 0.2:
            return self.leaf()
        d = depth - 1
        op = r.choices(["add", "sub", "cmul", "mul", "pow", "fdiv", "mod", "min", "max", "where", "abs",
                        "trunc"], weights=[14, 8, 10, 5, 2, 14, 14, 6, 6, 4, 3, 3])[0]
        if op == "add":
            return self.int_expr(d) + self.int_expr(d)
        if op == "sub":
            return self.int_expr(d) - self.int_expr(d)
        if op == "cmul":
            return r.choice([-3, -2, -1, 2, 3, 4, 8]) * self.int_expr(d)
        if op == "mul":
            return self.int_expr(d) * self.int_expr(d)
        if op == "pow":
            return self.int_expr(d) ** r.choice([2, 3])
        if op == "fdiv":
            return FloorDiv(self.int_expr(d), self.divisor(d))
        if op == "mod":
            return PyMod(self.int_expr(d), self.divisor(d))
        if op == "min":
            return sympy.Min(self.int_expr(d), self.int_expr(d))
        if op == "max":
            return sympy.Max(self.int_expr(d), self.int_expr(d))
        if op == "where":
            return Where(self.bool_expr(d), self.int_expr(d), self.int_expr(d))
        if op == "abs":
            x = self.int_expr(d)
            return sympy.Max(x, -x)  # how the engine spells abs() of an int
        return TruncToInt(TrueDiv(self.int_expr(d), self.divisor(d)))

    def real_expr(self, depth: int):
        """A float-valued size expression: true division, float constants, % and // on floats."""
        r = self.rng
        d = max(depth - 1, 0)
        p = r.random()
        if p < 0.3:
            return TrueDiv(self.int_expr(d), self.divisor(depth))
        if p < 0.45:
            return ToFloat(self.int_expr(d)) * sympy.Rational(r.randint(-3, 3), r.randint(1, 4))
        if p < 0.6:
            return PyMod(self.real_leaf(d), r.choice(_FLOAT_DIVISORS))
        if p < 0.7:
            return FloorDiv(self.real_leaf(d), r.choice(_FLOAT_DIVISORS))
        if p < 0.85:
            return r.choice([sympy.Min, sympy.Max])(self.real_leaf(d), self.float_const(), evaluate=False)
        return self.real_leaf(d) + self.float_const()

    def real_leaf(self, depth: int):
        r = self.rng
        if r.random() < 0.5:
            return TrueDiv(self.int_expr(depth), sympy.Integer(r.choice([2, 3, 4, -2, -3])))
        return ToFloat(self.int_expr(depth))

    def float_const(self):
        return sympy.Float(self.rng.choice([0.5, 1.5, 2.5, 3.5, 4.5, 5.5, -0.5, -2.5, 7.25]))

    def real_rel(self, depth: int):
        r = self.rng
        a = self.real_expr(depth)
        b = self.float_const() if r.random() < 0.5 else sympy.Integer(r.randint(-4, 8))
        return r.choice(RELATIONS)(a, b)

    def seeded(self, depth: int):
        """Edge cases drawn on purpose: nested // and % with negative divisors, float
        % and //, Min/Max with floats, float comparisons, rounding of quotients."""
        r = self.rng
        x = self.int_expr(max(depth - 1, 0)) if r.random() < 0.5 else r.choice(self.syms)
        m = sympy.Integer(r.choice([2, 3, 4, -2, -3, -4, -1, 5, -5]))
        n = sympy.Integer(r.choice([2, 3, -2, -3, 4, -4, -1]))
        k = r.choice([
            lambda: FloorDiv(FloorDiv(x, m), n),
            lambda: PyMod(FloorDiv(x, m), n),
            lambda: FloorDiv(PyMod(x, m), n),
            lambda: PyMod(PyMod(x, m), n),
            lambda: FloorDiv(m * x + r.randint(-5, 5), m),
            lambda: PyMod(n * x + r.randint(-5, 5), n),
            lambda: FloorDiv(x, n) * n + PyMod(x, n),
            lambda: sympy.floor(TrueDiv(x, m)),
            lambda: sympy.ceiling(TrueDiv(x, m)),
            lambda: TruncToInt(TrueDiv(x, m)),
            lambda: PyMod(TrueDiv(x, m), r.choice(_FLOAT_DIVISORS)),
            lambda: FloorDiv(TrueDiv(x, m), r.choice(_FLOAT_DIVISORS)),
            lambda: sympy.Min(ToFloat(x), self.float_const(), evaluate=False),
            lambda: sympy.Max(ToFloat(x), self.float_const(), evaluate=False),
        ])
        return k()

    def seeded_rel(self, depth: int):
        r = self.rng
        e = self.seeded(depth)
        c = self.float_const() if not e.is_integer and r.random() < 0.6 else sympy.Integer(r.randint(-4, 8))
        return r.choice(RELATIONS)(e, c)

    def rel(self, depth: int):
        r = self.rng
        a = self.int_expr(depth)
        b = self.int_expr(max(0, depth - 1)) if r.random() < 0.5 else sympy.Integer(r.randint(-4, 20))
        return r.choice(RELATIONS)(a, b)

    def bool_expr(self, depth: int):
        r = self.rng
        p = r.random()
        if depth <= 1 or p < 0.7:
            return self.rel(max(depth, 1))
        if p < 0.8:
            return sympy.Not(self.rel(depth - 1))
        return r.choice([sympy.And, sympy.Or])(self.rel(depth - 1), self.rel(depth - 1))


def new_scenario(rng: random.Random):
    """An env with 1-3 symbols and maybe a few facts; returns (env, symbols, domains).

    Example::

        >>> env, syms, domains = new_scenario(random.Random(3))
        >>> len(syms) == len(domains) >= 1
        True
    """
    env = ShapeEnv(specialize_zero_one=rng.random() < 0.3)
    syms, domains = [], []
    for i in range(rng.choice([1, 2, 2, 3])):
        kind = rng.random()
        if kind < 0.45:  # a backed size with a small range (exhaustive brute force)
            lo = rng.choice([0, 1, 2, 3, 5, 8])
            hi = lo + rng.randint(0, 14 if i < 2 else 6)
        elif kind < 0.62:  # a backed size, unbounded above
            lo, hi = rng.choice([0, 1, 2]), INF
        elif kind < 0.74:  # data-dependent int, possibly negative, bounded
            lo = rng.randint(-12, 0)
            hi = lo + rng.randint(0, 20)
        elif kind < 0.82:  # data-dependent int, unbounded
            lo, hi = -INF, INF
        elif kind < 0.93:  # data-dependent size (a count): size-oblivious reasoning applies
            lo, hi = 0, rng.choice([INF, rng.randint(0, 12)])
        else:  # data-dependent boolean (item() of a bool tensor)
            lo, hi = 0, 1
        if kind < 0.62:
            hint = rng.randint(lo, lo + 12 if hi == INF else hi)
            if env.specialize_zero_one and hint in (0, 1):
                hint = max(2, lo) if hi == INF or hi >= 2 else hint
            if env.specialize_zero_one and hint in (0, 1):
                env.specialize_zero_one = False
            s = env.create_symbol("abc"[i], hint, range=(lo, hi))
        else:
            ukind = "int" if kind < 0.82 else "size" if kind < 0.93 else "bool"
            s = env.create_unbacked(kind=ukind, range=(lo, hi))
        if not s.is_Symbol:
            continue
        syms.append(s)
        domains.append((env.ranges[s].lower, env.ranges[s].upper))
    if not syms:
        return new_scenario(rng)
    if rng.random() < 0.4:
        _add_facts(rng, env, syms)
    return env, syms, domains


def _add_facts(rng, env: ShapeEnv, syms) -> None:
    for _ in range(rng.randint(1, 2)):
        a = rng.choice(syms)
        b = rng.choice(syms)
        c = rng.randint(2, 10)
        k = rng.choice([2, 3, 4, 8])
        f = rng.choice([
            sympy.Le(a, b + rng.randint(0, 3)), sympy.Eq(PyMod(a, k), 0), sympy.Eq(PyMod(a, k), rng.randint(0, k - 1)),
            sympy.Ge(a, c), sympy.Lt(a + b, c + 8), sympy.Ne(a, c), sympy.Gt(a, c), sympy.Ne(a, b),
            sympy.Eq(a, 2 * b) if a != b else sympy.Ge(a, 1), sympy.Eq(a + b, c + 4),
            sympy.Ge(FloorDiv(a, k), rng.randint(0, 3)), sympy.Le(FloorDiv(a + b, k), c),
            sympy.Le(k * a, c + 20), sympy.Gt(k * a, c), sympy.Le(a * b, 10 * c),
            sympy.Ge(sympy.Min(a, b), 2), sympy.Le(sympy.Max(a, c), 12),
            # Float-valued facts: integer-only tightening must not touch them.
            sympy.Lt(sympy.Min(ToFloat(a), sympy.Float(c + 0.5), evaluate=False), sympy.Float(c - 0.5)),
            sympy.Gt(sympy.Max(ToFloat(a), sympy.Float(c - 0.5), evaluate=False), sympy.Float(c + 0.5)),
            sympy.Lt(a, sympy.Rational(2 * c + 1, 2)), sympy.Le(TrueDiv(a, k), sympy.Rational(c, 2)),
            sympy.Eq(PyMod(TrueDiv(a, 2), 1), 0), sympy.Ne(PyMod(TrueDiv(a, k), 1), 0),
        ])
        if f in (sympy.true, sympy.false):
            continue
        try:
            if rng.random() < 0.5 and not env.has_unbacked(f):
                env.evaluate(f)          # a guard, decided by the example sizes
            else:
                env.expect_true(f)       # a runtime assert
        except (SymshapeError, ValueError):  # a contradictory fact (an empty range) is just not added
            pass


def scenario_points(rng, syms, domains, facts):
    """Points satisfying the facts; the bool says whether they are the whole domain.

    Example::

        >>> import sympy
        >>> a = sympy.Symbol("a", integer=True)
        >>> scenario_points(random.Random(0), [a], [(0, 5)], [sympy.Ge(a, 3)])
        ([(3,), (4,), (5,)], True)
    """
    sizes = [hi - lo + 1 if hi != INF and lo != -INF else None for lo, hi in domains]
    total = 1
    for s in sizes:
        total = total * s if s is not None and total is not None else None
    if total is not None and total <= _EXHAUSTIVE_MAX:
        cands = list(itertools.product(*[range(int(lo), int(hi) + 1) for lo, hi in domains]))
        exhaustive = True
    else:
        cands = set()
        per = [_candidates(rng, lo, hi) for lo, hi in domains]
        for combo in itertools.product(*[p[:4] for p in per]):
            cands.add(combo)
        for _ in range(_RANDOM_POINTS):
            cands.add(tuple(rng.choice(p) for p in per))
        cands = sorted(cands)
        exhaustive = False
    fact_fns = [compile_expr(f, syms) for f in facts if f.free_symbols <= set(syms)]
    out = []
    for p in cands:
        try:
            if all(fn(*p) for fn in fact_fns):
                out.append(p)
        except ZeroDivisionError:
            pass
    return out, exhaustive


def _candidates(rng, lo, hi):
    vals = set()
    flo = lo if lo != -INF else -10**6
    fhi = hi if hi != INF else 10**6
    for v in (lo, lo + 1, hi - 1, hi, 0, 1, -1, 2, 7, 8, 9, 15, 16, 17, 63, 64, 100, 1000, 10**6, -8, -9, -100):
        if v not in (INF, -INF) and flo <= v <= fhi:
            vals.add(int(v))
    for _ in range(12):
        base = flo if flo > -100 else rng.randint(-100, 0)
        vals.add(int(min(fhi, base + rng.randint(0, 60))))
        vals.add(rng.randint(int(flo), int(fhi)))
    return sorted(vals)
