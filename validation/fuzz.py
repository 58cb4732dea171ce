"""Fuzz the engine's range analysis and static decisions against brute force and Z3.

Each *scenario* is a fresh :class:`~shapes.env.ShapeEnv` with one to three
symbols (backed sizes with ranges, data-dependent integers that may be
negative) and sometimes a few facts (runtime asserts, guards decided by the
example sizes, divisibility, a linear equality).  For each random expression
over those symbols the fuzzer checks:

* ``bound``: :func:`shapes.value_ranges.bound` with the env's ranges must
  contain the expression's value at every point that satisfies the facts;
* ``simplify``: :meth:`ShapeEnv.simplify` (the rewrite rules) must not change
  the value at such a point where the expression is defined (removing a
  division by zero is a refinement, as in :mod:`validation.translation`);
* ``static``: a decision of :meth:`ShapeEnv.static_bool` on a random
  condition must match the condition's value at every such point; a
  size-oblivious decision, at every such point where the data-dependent
  sizes are >= 2.

Brute force evaluates every expression at all points (every point of the
domain when it is small, else boundary and random points); Z3 checks a sample
of expressions exactly.  Being imprecise (a wider bound, an undecided
condition) is allowed and counted; being unsound never.  A Z3 witness is
always confirmed by evaluating at it with Python semantics, so a fault in
the Z3 translation shows up as a ``translation mismatch``, not as a false
alarm.

Example::

    >>> from validation.fuzz import run_fuzz
    >>> res = run_fuzz(200, seed=1)
    >>> res.unsound_count
    0
"""
from __future__ import annotations

import multiprocessing
import random
import time
from dataclasses import dataclass, field, fields
from typing import Optional

import sympy
import z3

from shapes.value_ranges import INF, bound

from .concrete import compile_expr, evaluate
from .fuzz_scenarios import ExprGenerator, new_scenario, scenario_points
from .translation import StepStatus, model_values, oblivious_symbols, divisors, validate_env
from .z3_translate import Z3Translator



@dataclass
class FuzzCase:
    """One unsound (or mismatching) finding, with what is needed to replay it."""

    check: str               # "bound" | "simplify" | "static" | "translation" | "validation"
    expr: sympy.Basic
    engine: object           # the engine's answer (a ValueRange, simplified expr, or bool)
    point: dict              # {symbol name: value} where it fails
    actual: object           # the value there
    ranges: dict
    facts: list
    found_by: str            # "brute force" | "z3"

    def __str__(self) -> str:
        at = ", ".join(f"{k}={v}" for k, v in self.point.items())
        return (f"[{self.check}, {self.found_by}] {self.expr}: engine says {self.engine}, "
                f"but at {at} it is {self.actual} (ranges {self.ranges}, facts {self.facts})")


@dataclass
class FuzzResult:
    """Counts of a fuzzing run; ``unsound`` lists the findings (should be empty)."""

    expressions: int = 0
    checks: int = 0
    points_evaluated: int = 0
    static_decided: int = 0
    z3_checks: int = 0
    z3_unknown: int = 0
    imprecise_bound: int = 0
    imprecise_static: int = 0
    undefined_everywhere: int = 0
    seeded: int = 0          # edge-case expressions drawn on purpose (negative divisors, floats)
    float_valued: int = 0    # expressions or conditions with float-valued parts
    validated_envs: int = 0
    validated_steps: int = 0
    translation_mismatches: list = field(default_factory=list)
    unsound: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    elapsed_s: float = 0.0
    seed: int = 0

    @property
    def unsound_count(self) -> int:
        return len(self.unsound)

    def table(self) -> str:
        """A printable summary table."""
        rows = [
            ("seed", self.seed),
            ("expressions checked", self.expressions),
            ("checks (bound + simplify + static)", self.checks),
            ("float-valued expressions", self.float_valued),
            ("seeded edge cases", self.seeded),
            ("points evaluated (brute force)", self.points_evaluated),
            ("static decisions taken", self.static_decided),
            ("Z3 checks (sample)", self.z3_checks),
            ("Z3 unknown (timeout)", self.z3_unknown),
            ("envs translation-validated", f"{self.validated_envs} ({self.validated_steps} steps)"),
            ("undefined everywhere (engine raised ZeroDivisionError)", self.undefined_everywhere),
            ("imprecise bounds (exact domain)", self.imprecise_bound),
            ("imprecise static (undecided, yet constant)", self.imprecise_static),
            ("translation mismatches", len(self.translation_mismatches)),
            ("errors", len(self.errors)),
            ("UNSOUND", self.unsound_count),
            ("time", f"{self.elapsed_s:.1f} s"),
        ]
        w = max(len(r[0]) for r in rows)
        return "\n".join(f"{k:<{w}}  {v}" for k, v in rows)


# ---------------------------------------------------------------------------- checking


class _Z3Side:
    """Exact checks of one scenario's claims with Z3 (facts asserted once)."""

    def __init__(self, env, timeout_ms):
        self.tr = Z3Translator()
        self.s = z3.Solver()
        self.s.set("timeout", timeout_ms)
        self.s.add(*[self.tr.to_z3(f) for f in env.facts])

    def witness(self, violation, defined_of, extra=()):
        """A model of facts ∧ extra ∧ defined ∧ violation, "unknown", or None (none exists)."""
        s = self.s
        s.push()
        try:
            s.add(*extra)
            for d in divisors(defined_of):
                s.add(self.tr.to_z3(sympy.Ne(d, 0)))
            s.add(violation)
            r = s.check()
            return s.model() if r == z3.sat else "unknown" if r == z3.unknown else None
        finally:
            s.pop()


_UNDEFINED = object()


def _is_real(e) -> bool:
    """Real-valued: the engine folds constant ``/`` to a double, so compare with a tolerance."""
    return not e.is_integer


def _safe(fn, p):
    try:
        return fn(*p)
    except ZeroDivisionError:
        return None


class _Fuzzer:
    def __init__(self, seed, z3_every, z3_timeout_ms, validate_every, max_depth):
        self.rng = random.Random(seed)
        self.res = FuzzResult(seed=seed)
        self.z3_every = z3_every
        self.z3_timeout_ms = z3_timeout_ms
        self.validate_every = validate_every
        self.max_depth = max_depth

    def scenario(self, n_exprs: int, index: int):
        rng = self.rng
        env, syms, domains = new_scenario(rng)
        pts, exhaustive = scenario_points(rng, syms, domains, env.facts)
        if not pts:
            return 0
        gen = ExprGenerator(rng, syms)
        z3side = None
        done = 0
        while done < n_exprs:
            kind = rng.random()
            depth = rng.randint(1, self.max_depth)
            try:
                if kind < 0.15:
                    e, c = gen.real_expr(depth), gen.real_rel(depth) if rng.random() < 0.6 else gen.bool_expr(depth)
                elif kind < 0.35:
                    e, c = gen.seeded(depth), gen.seeded_rel(depth)
                else:
                    e, c = gen.int_expr(depth), gen.bool_expr(depth)
            except ZeroDivisionError:
                continue  # a structurally zero divisor: draw again
            self.res.seeded += 0.15 <= kind < 0.35
            self.res.float_valued += not e.is_integer or any(not side.is_integer for rel in c.atoms(sympy.Rel)
                                                             for side in rel.args)
            done += 1
            use_z3 = self.res.expressions % self.z3_every == 0
            if use_z3 and z3side is None:
                z3side = _Z3Side(env, self.z3_timeout_ms)
            self.check(env, syms, pts, exhaustive, e, c, z3side if use_z3 else None)
        if self.validate_every and index % self.validate_every == 0:
            rep = validate_env(env, timeout_ms=self.z3_timeout_ms)
            self.res.validated_envs += 1
            self.res.validated_steps += rep.checked
            for f in rep.failures:
                if f.status is StepStatus.UNSOUND and f.confirmed:
                    self.res.unsound.append(FuzzCase("validation", f.claim, f.entry, f.counterexample, False,
                                                     dict(env.ranges), list(env.facts), "z3"))
                elif f.status is StepStatus.UNSOUND:
                    self.res.translation_mismatches.append(f.describe())
                else:
                    self.res.errors.append(f.describe())
            self.res.z3_unknown += len(rep.unknown)
        return done

    def _case(self, check, env, syms, e, engine, p, actual, by):
        point = {str(s): v for s, v in zip(syms, p)} if not isinstance(p, dict) else p
        self.res.unsound.append(FuzzCase(check, e, engine, point, actual,
                                         {str(k): v for k, v in env.ranges.items()}, list(env.facts), by))

    def check(self, env, syms, pts, exhaustive, e, c, z3side):
        res = self.res
        res.expressions += 1
        try:
            r = bound(e, env.ranges)
            fe, fc = compile_expr(e, syms), compile_expr(c, syms)
            simp = self._engine(env.simplify, e, fe, pts)
            v = self._engine(env.static_bool, c, fc, pts)
            fs = compile_expr(simp, syms) if simp is not None else None
        except Exception as err:  # noqa: BLE001 - recorded: the engine must handle every kind it builds
            res.errors.append(f"{type(err).__name__}: {err} (expr {e}, cond {c})")
            return
        if v is _UNDEFINED:
            v = None
        res.checks += 3
        res.static_decided += v is not None
        real = _is_real(e)
        vals, cvals = [], []
        for p in pts:
            x = _safe(fe, p)
            res.points_evaluated += 1
            y = _safe(fs, p) if fs is not None else x
            if x is not None:
                vals.append(x)
                if not (r.lower <= x <= r.upper):
                    self._case("bound", env, syms, e, r, p, x, "brute force")
                    return
                if y is None or not (abs(y - x) <= 1e-12 * max(1, abs(x)) if real else y == x):
                    self._case("simplify", env, syms, e, simp, p, y, "brute force")
                    return
            cv = _safe(fc, p)
            if cv is not None:
                cvals.append(cv)
                if v is not None and bool(cv) != v:
                    self._case("static", env, syms, c, v, p, cv, "brute force")
                    return
        if exhaustive:
            if vals and (r.lower < min(vals) or r.upper > max(vals)):
                res.imprecise_bound += 1
            if v is None and cvals and len(set(map(bool, cvals))) == 1:
                res.imprecise_static += 1
        if z3side is not None and fs is not None:
            # Reals are exact in Z3; only a double the engine folded makes a rewrite inexact.
            rounding = real and (e.has(sympy.Float) or simp.has(sympy.Float))
            self.z3_check(env, syms, z3side, e, r, e if rounding else simp, c, v)
        if env.unbacked and self.rng.random() < 0.3:
            self.check_oblivious(env, syms, pts, c, fc, z3side)

    def check_oblivious(self, env, syms, pts, c, fc, z3side):
        """A size-oblivious decision must hold wherever the data-dependent sizes are >= 2."""
        res = self.res
        try:
            v = env.static_bool(c, size_oblivious=True)
        except ZeroDivisionError:
            return
        res.checks += 1
        if v is None:
            return
        res.static_decided += 1
        big = oblivious_symbols(env)
        idx = [i for i, s in enumerate(syms) if s in big]
        for p in pts:
            if any(p[i] < 2 for i in idx):
                continue
            cv = _safe(fc, p)
            if cv is not None and bool(cv) != v:
                self._case("static (size-oblivious)", env, syms, c, v, p, cv, "brute force")
                return
        if z3side is not None:
            res.z3_checks += 1
            zc = z3side.tr.to_z3(c)
            extra = [z3side.tr.to_z3(sympy.Ge(s, 2)) for s in big]
            m = z3side.witness(z3.Not(zc) if v else zc, c, extra)
            if m == "unknown":
                res.z3_unknown += 1
            elif m is not None:
                pt = model_values(m, z3side.tr, syms)
                named = {str(k): val for k, val in pt.items()}
                try:
                    bad = bool(evaluate(c, pt)) != v and all(evaluate(f, pt) for f in env.facts)
                except ZeroDivisionError:
                    bad = False
                if bad:
                    self._case("static (size-oblivious)", env, syms, c, v, named, not v, "z3")
                else:
                    res.translation_mismatches.append(f"size-oblivious {c} at {named}: witness not confirmed")

    def _engine(self, fn, expr, compiled, pts):
        """``fn(expr)``; a ZeroDivisionError is accepted only where ``expr`` is undefined everywhere."""
        try:
            return fn(expr)
        except ZeroDivisionError as err:
            for p in pts:
                if _safe(compiled, p) is not None:
                    raise RuntimeError(f"the engine raised ZeroDivisionError ({err}) on {expr}, "
                                       f"which is defined at {p}") from err
            self.res.undefined_everywhere += 1
            return _UNDEFINED if fn.__name__ == "static_bool" else None

    def z3_check(self, env, syms, z3side, e, r, simp, c, v):
        res = self.res
        tr = z3side.tr
        ze, zs, zc = tr.to_z3(e), tr.to_z3(simp), tr.to_z3(c)
        claims = []
        viol = []
        if r.lower != -INF:
            viol.append(ze < tr.to_z3(sympy.Rational(r.lower) if not isinstance(r.lower, int) else sympy.Integer(r.lower)))
        if r.upper != INF:
            viol.append(ze > tr.to_z3(sympy.Rational(r.upper) if not isinstance(r.upper, int) else sympy.Integer(r.upper)))
        if viol:
            claims.append(("bound", e, r, z3.Or(*viol), e))
        if simp != e:
            claims.append(("simplify", e, simp, ze != zs, e))
        if v is not None:
            claims.append(("static", c, v, zc if not v else z3.Not(zc), c))
        for check, expr, engine, violation, defined_of in claims:
            res.z3_checks += 1
            m = z3side.witness(violation, defined_of)
            if m is None:
                continue
            if m == "unknown":
                res.z3_unknown += 1
                continue
            pt = model_values(m, tr, syms)
            self.confirm(check, env, syms, expr, engine, pt, simp)
        if v is None and self.rng.random() < 0.5:
            # Could the engine have decided it?  Count as imprecise if Z3 proves it constant.
            for val in (True, False):
                res.z3_checks += 1
                if z3side.witness(z3.Not(zc) if val else zc, c) is None:
                    res.imprecise_static += 1
                    break

    def confirm(self, check, env, syms, expr, engine, pt, simp):
        """A Z3 witness: unsound if Python semantics agree; else a translation mismatch."""
        named = {str(k): v for k, v in pt.items()}
        try:
            if not all(evaluate(f, pt) for f in env.facts):
                raise ValueError("facts do not hold at the witness")
            x = evaluate(expr, pt)
            if check == "bound":
                bad = not (engine.lower <= x <= engine.upper)
            elif check == "simplify":
                try:
                    bad = evaluate(simp, pt) != x
                except ZeroDivisionError:
                    bad = True
            else:
                bad = bool(x) != engine
        except (ZeroDivisionError, ValueError) as err:
            self.res.translation_mismatches.append(f"{check} {expr} at {named}: {err}")
            return
        if bad:
            self._case(check, env, syms, expr, engine, named, x, "z3")
        else:
            self.res.translation_mismatches.append(f"{check} {expr} at {named}: Z3 witness not confirmed")


def chunk_seed(seed: int, chunk: int) -> int:
    """The seed of chunk ``chunk`` of a run split over jobs (chunk 0 keeps ``seed``).

    >>> chunk_seed(7, 0), chunk_seed(0, 1) != chunk_seed(1, 0)
    (7, True)
    """
    return seed if chunk == 0 else (seed + 1) * 1_000_003 + chunk


def merge_results(results, seed: int) -> FuzzResult:
    """One :class:`FuzzResult` of several (chunks of one run): counts summed, findings
    concatenated, time the longest chunk's (they ran side by side).

    >>> a, b = FuzzResult(expressions=3, seed=0), FuzzResult(expressions=4, seed=1, elapsed_s=2.0)
    >>> m = merge_results([a, b], seed=0)
    >>> m.expressions, m.elapsed_s, m.seed
    (7, 2.0, 0)
    """
    out = FuzzResult(seed=seed)
    for r in results:
        for f in fields(FuzzResult):
            if f.name in ("seed", "elapsed_s"):
                continue
            setattr(out, f.name, getattr(out, f.name) + getattr(r, f.name))
        out.elapsed_s = max(out.elapsed_s, r.elapsed_s)
    return out


def run_fuzz(n_exprs: int, *, seed: int = 0, z3_every: int = 10, z3_timeout_ms: int = 500,
             validate_every: int = 5, max_depth: int = 3, per_scenario: int = 25,
             time_limit_s: Optional[float] = None) -> FuzzResult:
    """Check ``n_exprs`` random expressions; returns a :class:`FuzzResult`.

    ``z3_every``: every n-th expression is also checked exactly with Z3;
    ``validate_every``: every n-th scenario's whole decision log is replayed
    by :func:`validation.translation.validate_env`.  ``time_limit_s`` stops
    early (the result says how many were checked).
    """
    t0 = time.perf_counter()
    fz = _Fuzzer(seed, z3_every, z3_timeout_ms, validate_every, max_depth)
    i = 0
    while fz.res.expressions < n_exprs:
        fz.scenario(min(per_scenario, n_exprs - fz.res.expressions), i)
        i += 1
        if time_limit_s is not None and time.perf_counter() - t0 > time_limit_s:
            break
    fz.res.elapsed_s = time.perf_counter() - t0
    return fz.res


def _run_chunk(job) -> FuzzResult:
    n, seed, kw = job
    return run_fuzz(n, seed=seed, **kw)


def run_fuzz_jobs(n_exprs: int, jobs: int, *, seed: int = 0, **kw) -> tuple[FuzzResult, list]:
    """:func:`run_fuzz` split over ``jobs`` processes; returns the merged result and the chunk seeds.

    Chunk ``k`` checks its share of ``n_exprs`` with :func:`chunk_seed` ``(seed, k)``;
    ``jobs=1`` is exactly ``run_fuzz(n_exprs, seed=seed)``.  Keyword arguments go to
    :func:`run_fuzz` (``z3_every``, ``time_limit_s`` ...; a time limit holds per chunk).

    >>> res, seeds = run_fuzz_jobs(6, 1, z3_every=1000, validate_every=0)
    >>> res.expressions, seeds
    (6, [0])
    """
    jobs = max(1, min(jobs, n_exprs))
    sizes = [n_exprs // jobs + (k < n_exprs % jobs) for k in range(jobs)]
    work = [(n, chunk_seed(seed, k), kw) for k, n in enumerate(sizes)]
    if jobs == 1:
        return _run_chunk(work[0]), [seed]
    # spawn: fresh interpreters, nothing forked from a parent that has torch's and Z3's threads
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        results = pool.map(_run_chunk, work, chunksize=1)
    return merge_results(results, seed=seed), [w[1] for w in work]
