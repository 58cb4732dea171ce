"""dinfer: enumerate the input sizes a program accepts, and how it behaves on each.

The search traces the program at one point of the box of dim ranges,
records the class of that trace (the sizes that take the same path: the
conjunction of its guards, specializations, runtime asserts and the
engine's assumptions), then asks Z3 for a point of the box that lies in
none of the classes found so far, traces there, and repeats.  It stops
when Z3 proves no such point exists (the space is *complete*) or the
budget runs out (then it says which region is left).

A trace that raises gives an error class: its predicate is the path up to
the error, which for a failing ``torch._check`` includes the negated check.
A data-dependent decision gives a data-dependent class (``ok`` is None):
sizes alone do not decide what happens there.

Example::

    >>> import torch
    >>> from validation import dinfer
    >>> def f(x):
    ...     if x.shape[0] > 8:
    ...         return x[:8].view(2, 4)
    ...     return x.view(-1, 2)
    >>> space = dinfer(f, "x: f32[N]", dims={"N": (1, 32)})
    >>> space.complete, len(space.classes)
    (True, 4)
    >>> for c in space.classes:
    ...     print(c.outcome(), "|", c.describe(), "|", c.example)
    ok | N <= 8 and N % 2 == 0 | {'N': 2}
    RuntimeError | 2 <= N <= 8 and N % 2 != 0 | {'N': 3}
    ok | N >= 9 | {'N': 9}
    RuntimeError | N == 1 | {'N': 1}
    >>> space.valid_ranges
    {'N': (2, 32)}
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

import sympy
import z3

from shapes.env import DataDependentError
from shapes.errors import SpecError, SymshapeError, TraceError, TracerLimitation
from shapes.functions import FloorDiv, PyMod, TrueDiv
from shapes.spec import Dim, default_hints, parse_dims, parse_specs
from shapes.tracer import trace

from .input_space import ClassError, InputSpace, ShapeClass, Status, _holds, to_python
from .z3_translate import UntranslatableExpression, Z3Translator

#: The range searched for a dim that has none (the output says so).
DEFAULT_RANGE = (1, 4096)


@dataclass(frozen=True)
class TraceEvent:
    """Passed to dinfer's ``progress`` callback after each trace."""

    number: int            # 1-based trace count
    point: dict            # dim name -> size traced
    shape_class: ShapeClass
    elapsed: float

    def __str__(self) -> str:
        at = " ".join(f"{k}={v}" for k, v in self.point.items())
        c = self.shape_class
        return f"trace {self.number}: {at} -> class {c.index} ({c.outcome()})"


def dinfer(program: Callable, *specs, dims: Optional[Mapping] = None, max_classes: int = 64,
           time_budget: float = 60.0, specialize_zero_one: bool = True,
           progress: Optional[Callable[[TraceEvent], None]] = None,
           solver_timeout: float = 10.0) -> InputSpace:
    """Find every class of input sizes of ``program`` inside the dims' ranges.

    Args:
        program: a function or nn.Module.
        *specs: one input spec per positional input, e.g. ``"x: f32[B, 768]"``.
        dims: per named dim a ``(min, max)`` range (``max`` may be
            ``math.inf``), a ``(min, max, first)`` triple or a
            :class:`~shapes.spec.Dim` (``hint`` = where to trace first), or an
            int, which pins the dim to that one size.  A dim without an entry
            is searched over :data:`DEFAULT_RANGE` and the result says so.
        max_classes: stop after this many classes (= traces).
        time_budget: stop starting new traces after this many seconds.
        specialize_zero_one: PyTorch's 0/1 policy (sizes 0 and 1 get classes
            of their own, like ``B == 1``).
        progress: called with a :class:`TraceEvent` after each trace.
        solver_timeout: seconds allowed to each Z3 query; an undecided query
            makes the result incomplete, with the reason.

    Returns an :class:`~validation.input_space.InputSpace`.  Raises
    :class:`~shapes.errors.SpecError` for malformed specs or dims.

    Example::

        >>> space = dinfer(lambda a, b: a @ b, "a: f32[M, K]", "b: f32[J, 5]",
        ...                dims={"M": (1, 8), "K": (1, 8), "J": (1, 8)})
        >>> space.complete, space.classify(M=3, K=4, J=4).ok, space.classify(M=3, K=4, J=5).ok
        (True, True, False)
    """
    if max_classes < 1:
        raise SpecError(f"max_classes must be at least 1, got {max_classes}")
    if not time_budget > 0:
        raise SpecError(f"time_budget must be positive, got {time_budget}")
    return _Search(program, specs, dims, max_classes, time_budget, specialize_zero_one, progress,
                   solver_timeout).run()


# --------------------------------------------------------------------------- ranges


def _resolve_dims(specs, dims):
    """Names in order, their ``(lo, hi)`` boxes, the first point, and which got the default range."""
    parsed, names = parse_specs(specs)
    given = dict(dims or {})
    pinned = {k: v for k, v in given.items() if isinstance(v, int) and not isinstance(v, bool)}
    # An int pins the dim (a one-point range); everything else is checked by the engine's parser.
    dmap = parse_dims({k: (Dim(v, v, v) if k in pinned else v) for k, v in given.items()}, names)
    box, first_hints, defaulted = {}, {}, []
    for n in names:
        if n in dmap:
            d = dmap[n]
            box[n] = (d.min, d.max)
        else:
            box[n] = DEFAULT_RANGE
            defaulted.append(n)
            dmap[n] = Dim(*DEFAULT_RANGE)
    first_hints = default_hints(names, dmap)
    return parsed, names, box, first_hints, tuple(defaulted)


# --------------------------------------------------------------------------- Z3 side


def _denominators(e):
    """Non-constant divisors in ``e``: a point where one is zero is outside the condition."""
    out = []
    for a in e.atoms(FloorDiv, PyMod, TrueDiv):
        d = a.args[1]
        if not d.is_number:
            out.append(d)
    return out


class _Z3Box:
    """Z3 terms for conditions over the dims, with the box as the domain."""

    def __init__(self, names, symbols, box, timeout_s: float):
        self.tr = Z3Translator()
        self.names = names
        self.vars = {n: self.tr.var(symbols[n]) for n in names}
        self.box = box
        self.timeout_ms = max(1, int(timeout_s * 1000))
        dom = []
        for n in names:
            lo, hi = box[n]
            v = self.vars[n]
            dom.append(v >= lo)
            if hi != math.inf:
                dom.append(v <= hi)
        self.domain = dom

    def term(self, cond):
        """``cond`` as Z3, false where one of its divisors is zero (like evaluating it in Python)."""
        t = self.tr.to_z3(cond)
        dens = _denominators(cond)
        if dens:
            t = z3.And(*[self.tr.to_z3(d) != 0 for d in dens], t)
        return t

    def conj(self, conds):
        return z3.And(*[self.term(c) for c in conds]) if conds else z3.BoolVal(True)

    def solver(self, timeout_ms: Optional[int] = None):
        s = z3.Solver()
        s.set(timeout=timeout_ms or self.timeout_ms)
        s.add(*self.domain)
        return s

    def point(self, model) -> dict:
        return {n: model.eval(self.vars[n], model_completion=True).as_long() for n in self.names}

    def implied(self, cond, given) -> bool:
        """Proved: inside the box, ``given`` implies ``cond``.  Unknown counts as no."""
        s = self.solver(min(self.timeout_ms, 2000))
        s.add(*given, z3.Not(self.term(cond)))
        return s.check() == z3.unsat

    def minimize(self, pred_term, timeout_ms: int) -> Optional[dict]:
        """The smallest point of ``pred_term``: least sum of sizes, then lexicographic."""
        o = z3.Optimize()
        o.set(timeout=timeout_ms)
        o.add(*self.domain, pred_term)
        vs = [self.vars[n] for n in self.names]
        if vs:
            o.minimize(z3.Sum(*vs) if len(vs) > 1 else vs[0])
            for v in vs:  # lexicographic priority is Z3's default for several objectives
                o.minimize(v)
        if o.check() != z3.sat:
            return None
        return self.point(o.model())


# --------------------------------------------------------------------------- the search


def _first_line(e: BaseException) -> str:
    s = str(e).strip()
    return s.splitlines()[0] if s else type(e).__name__


def _engine_limitation(exc: BaseException) -> bool:
    """An exception symshape itself raised inside the program call (not the program's error)."""
    return isinstance(exc, (SymshapeError, DataDependentError))


@dataclass
class _Outcome:
    status: Status
    env: object = None
    error: Optional[ClassError] = None
    message: str = ""
    output_shapes: tuple = ()
    decision: Optional[ClassError] = None


class _Search:
    def __init__(self, program, specs, dims, max_classes, time_budget, szo, progress, solver_timeout):
        self.program = program
        self.parsed, self.names, self.box, self.first, self.defaulted = _resolve_dims(specs, dims)
        self.specs = tuple(self.parsed)
        self.symbols = {n: sympy.Symbol(n, integer=True) for n in self.names}
        self.max_classes = max_classes
        self.time_budget = time_budget
        self.szo = szo
        self.progress = progress
        self.z = _Z3Box(self.names, self.symbols, self.box, solver_timeout)
        self.class_terms: list = []
        self.traced: set = set()
        name = getattr(program, "__qualname__", None) or type(program).__name__
        self.space = InputSpace(specs=self.specs, dims=dict(self.box), symbols=dict(self.symbols),
                                defaulted=self.defaulted, program_name=name)

    # -- one trace -------------------------------------------------------------------
    def _trace(self, point) -> _Outcome:
        tdims = {n: Dim(self.box[n][0], self.box[n][1], point[n]) for n in self.names}
        try:
            tp = trace(self.program, *self.parsed, dims=tdims, specialize_zero_one=self.szo)
        except SpecError:
            raise
        except TraceError as e:
            exc = e.exc if e.exc is not None else e
            prov = e.provenance
            if _engine_limitation(exc):
                return _Outcome(Status.UNSUPPORTED, e.env, message=f"symshape could not trace this: {_first_line(exc)}")
            err = ClassError(type(exc).__name__, _first_line(exc),
                             getattr(prov, "filename", "<unknown>"), getattr(prov, "lineno", 0),
                             getattr(prov, "code", ""), getattr(prov, "op", None))
            return _Outcome(Status.ERROR, e.env, error=err)
        except DataDependentError as e:
            p, env = e.provenance, getattr(e, "env", None)
            what = f"branches on data: {to_python(e.expr)}" + (_origins(env, [e.expr]) if env is not None else "")
            return _Outcome(Status.DATA_DEPENDENT, env, message=_first_line(e),
                            decision=ClassError(type(e).__name__, what, p.filename, p.lineno, p.code, p.op))
        except TracerLimitation as e:
            return _Outcome(Status.UNSUPPORTED, getattr(e, "env", None), message=_first_line(e))
        except SymshapeError:
            raise  # e.g. translation validation found an unsound engine step: never a class
        except Exception as e:  # symshape failed outside the program call: say so, never guess
            return _Outcome(Status.UNSUPPORTED, getattr(e, "env", None),
                            message=f"symshape failed: {type(e).__name__}: {_first_line(e)}")
        return _Outcome(Status.OK, tp.env, output_shapes=tuple(tuple(s) for s in tp.output_shapes))

    def _conditions(self, env):
        """Path conditions over input dims (axioms first, then records) and those over data."""
        dimsyms = set(self.symbols.values())
        conds, data = [], []
        if env is None:
            return None, ()
        for a in env.initial_axioms():
            for c in sympy.And.make_args(a):
                # Axioms on data-dependent symbols (op semantics) say nothing about sizes.
                if c.free_symbols <= dimsyms:
                    conds.append(c)
        for r in env.records:
            if r.expr.free_symbols <= dimsyms:
                conds.append(r.expr)
            else:
                data.append(r.expr)
        return conds, tuple(data)

    # -- simplifying a path condition -------------------------------------------------------
    def _merge_bounds(self, conds):
        """Bounds on one dim (``N >= 2``, ``N < 9``, ``N == 4``) merged into one interval,
        dropping the box's own bounds."""
        lo, hi, first = {}, {}, {}
        rest = []
        for i, c in enumerate(conds):
            b = _bound_of(c)
            if b is None:
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

    def _as_interval(self, c):
        """A condition on one dim that holds exactly on an interval of the box, as its
        bounds (``(T + (-T) % 4) // 4 >= 2`` is ``T >= 5``); else ``[c]``.  Z3 proves
        the equivalence, so the replacement never changes which sizes are in a class."""
        syms = c.free_symbols
        if len(syms) != 1 or _bound_of(c) is not None:
            return [c]
        (sym,) = syms
        v, t = self.z.vars.get(sym.name), self.z.term(c)
        if v is None:
            return [c]
        ends = []
        for direction in ("min", "max"):
            o = z3.Optimize()
            o.set(timeout=min(self.z.timeout_ms, 2000))
            o.add(*self.z.domain, t)
            h = o.minimize(v) if direction == "min" else o.maximize(v)
            if o.check() != z3.sat:
                return [c]
            val = o.lower(h) if direction == "min" else o.upper(h)
            if not z3.is_int_value(val):
                ends.append(None)  # unbounded on that side
            else:
                ends.append(val.as_long())
        lo, hi = ends
        interval = []
        if lo is not None:
            interval.append(sympy.Ge(sym, lo))
        if hi is not None:
            interval.append(sympy.Le(sym, hi))
        if not interval:
            return [c]
        s = self.z.solver(min(self.z.timeout_ms, 2000))
        s.add(t != z3.And(*[self.z.term(x) for x in interval]))
        return interval if s.check() == z3.unsat else [c]

    def _simplify(self, conds):
        out, seen = [], set()
        for c0 in conds:
            for c in self._as_interval(c0) if c0 is not sympy.true else [c0]:
                if c is sympy.true or c in seen:
                    continue
                seen.add(c)
                out.append(c)
        out = self._merge_bounds(out)
        # Drop each condition the others imply inside the box (last first: later guards
        # are usually the specific ones, earlier ones often follow from them).
        i = len(out) - 1
        while i >= 0 and len(out) > 1:
            others = [self.z.term(c) for j, c in enumerate(out) if j != i]
            if self.z.implied(out[i], others):
                del out[i]
            i -= 1
        if len(out) == 1 and self.z.implied(out[0], []):
            out = []
        return tuple(out)

    # -- classes ----------------------------------------------------------------------------
    def _make_class(self, point, oc: _Outcome) -> ShapeClass:
        idx = len(self.space.classes) + 1
        conds, data = self._conditions(oc.env)
        records = tuple(oc.env.records) if oc.env is not None else ()
        subs = {self.symbols[n]: sympy.Integer(v) for n, v in point.items()}
        imprecise = ""
        if conds is None:
            imprecise = "the engine gave no path condition for this trace; the class is this one point"
        else:
            try:
                bad = [c for c in conds if not _holds(c, subs)]
            except (ValueError, TypeError) as e:
                bad, imprecise = [], f"a path condition cannot be evaluated ({e}); the class is this one point"
            if bad:
                imprecise = (f"engine bug: the path condition {bad[0]} is false at the traced point "
                             f"{point}; the class is this one point")
        if not imprecise:
            try:
                conds = self._simplify(conds)
                term = self.z.conj(conds)
            except (UntranslatableExpression, z3.Z3Exception) as e:
                imprecise = f"no Z3 translation for a path condition ({e}); the class is this one point"
        if imprecise:
            self.space.warnings.append(f"class {idx}: {imprecise}")
            conds = tuple(sympy.Eq(self.symbols[n], v) for n, v in point.items())
            term = self.z.conj(conds)
        status, message = oc.status, oc.message
        if status is Status.OK and data:
            # It ran on meta tensors by assuming checks on data-dependent sizes; real data may
            # fail them, so whether it runs is not decided by sizes.
            status = Status.DATA_DEPENDENT
            message = "runs only if, at run time, " + " and ".join(to_python(d) for d in data) + _origins(oc.env, data)
        c = ShapeClass(index=idx, conditions=conds, status=status, traced_at=dict(point),
                       example=dict(point), error=oc.error, message=message,
                       output_shapes=oc.output_shapes, records=records, data_conditions=data, decision=oc.decision,
                       imprecise=imprecise)
        self._check_overlap(c, term)
        self.space.classes.append(c)
        self.class_terms.append(term)
        return c

    def _check_overlap(self, c, term):
        if not self.class_terms:
            return
        s = self.z.solver(min(self.z.timeout_ms, 2000))
        s.add(term, z3.Or(*self.class_terms))
        if s.check() != z3.sat:
            return  # disjoint (or undecided: not reported as an overlap)
        p = self.z.point(s.model())
        subs = {self.symbols[n]: v for n, v in p.items()}
        for other in self.space.classes:
            if other.contains(subs):
                self.space.overlaps.append((other.index, c.index, p))
                return

    # -- next point ---------------------------------------------------------------------------
    def _next_point(self):
        """(point, None) outside all classes; (None, None) when none is left; (None, reason) if unknown."""
        s = self.z.solver()
        for t in self.class_terms:
            s.add(z3.Not(t))
        r = s.check()
        if r == z3.unsat:
            return None, None
        if r == z3.unknown:
            return None, f"Z3 could not decide whether sizes remain outside the classes ({s.reason_unknown()})"
        base = self.z.point(s.model())
        # Prefer a generic point (sizes >= 2, pairwise distinct): its trace covers a broad
        # class, leaving coincidences like M == N and the 0/1 sizes to later traces.
        free = [n for n in self.names if self.box[n][0] != self.box[n][1]]
        ge2 = [self.z.vars[n] >= 2 for n in free if self.box[n][1] >= 2]
        distinct = [self.z.vars[a] != self.z.vars[b] for i, a in enumerate(free) for b in free[i + 1:]]
        for prefs in ([*ge2, *distinct], ge2):
            if not prefs:
                continue
            s.push()
            s.set(timeout=min(self.z.timeout_ms, 1000))
            s.add(*prefs)
            if s.check() == z3.sat:
                return self.z.point(s.model()), None
            s.pop()
        return base, None

    def _post_timeout_ms(self) -> int:
        """Per-query timeout for the work after the search (0: no time left for it)."""
        left = self.post_deadline - time.monotonic()
        return max(0, min(self.z.timeout_ms, 3000, int(left * 1000)))

    def _valid_extent(self):
        """Each dim's smallest and largest size over the ok classes (None where Z3 gave no answer)."""
        ok_terms = [t for c, t in zip(self.space.classes, self.class_terms) if c.status is Status.OK]
        if not ok_terms:
            return
        union = z3.Or(*ok_terms)
        for n in self.names:
            ends = []
            for maximize in (False, True):
                ms = self._post_timeout_ms()
                if not ms:
                    ends = None
                    break
                o = z3.Optimize()
                o.set(timeout=ms)
                o.add(*self.z.domain, union)
                h = o.maximize(self.z.vars[n]) if maximize else o.minimize(self.z.vars[n])
                if o.check() != z3.sat:
                    ends = None
                    break
                v = (o.upper(h) if maximize else o.lower(h))
                # An objective without an upper end comes back as an infinity term, not a number.
                ends.append(v.as_long() if z3.is_int_value(v) else math.inf)
            self.space.valid_ranges[n] = tuple(ends) if ends else None

    def _finish_examples(self):
        for c, t in zip(self.space.classes, self.class_terms):
            ms = self._post_timeout_ms()
            if c.imprecise or not ms:
                continue  # the example stays the traced point, marked not minimal
            p = self.z.minimize(t, ms)
            if p is not None:
                c.example, c.example_minimal = p, True

    def run(self) -> InputSpace:
        sp = self.space
        t0 = time.monotonic()
        point = dict(self.first)
        while True:
            key = tuple(point[n] for n in self.names)
            if key in self.traced:
                sp.reason = (f"the traced point {point} lies outside its own class (engine imprecision); "
                             f"stopped")
                sp.unexplored_example = point
                break
            self.traced.add(key)
            oc = self._trace(point)
            sp.traces += 1
            c = self._make_class(point, oc)
            if self.progress is not None:
                self.progress(TraceEvent(sp.traces, dict(point), c, time.monotonic() - t0))
            nxt, unknown = self._next_point()
            if unknown:
                sp.reason = unknown + "; the classes found may not cover every size"
                break
            if nxt is None:
                sp.complete = True
                sp.reason = ("Z3 proved that every size in the ranges falls in one of these classes")
                break
            if len(sp.classes) >= self.max_classes:
                sp.reason = f"stopped at max_classes={self.max_classes}; some sizes are not classified yet"
                sp.unexplored_example = nxt
                break
            if time.monotonic() - t0 > self.time_budget:
                sp.reason = (f"stopped at the time budget ({self.time_budget:g} s); some sizes are not "
                             f"classified yet")
                sp.unexplored_example = nxt
                break
            point = nxt
        # Minimal examples and valid ranges get their own allowance after the search.
        self.post_deadline = time.monotonic() + max(5.0, 0.5 * self.time_budget)
        self._finish_examples()
        self._valid_extent()
        sp.elapsed = time.monotonic() - t0
        return sp


def _origins(env, conds) -> str:
    syms = sorted({u for c in conds for u in c.free_symbols if env.is_unbacked(u)}, key=str)
    return "".join(f"; {u} = {env.describe_symbol(u)}" for u in syms)


def _bound_of(c):
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
