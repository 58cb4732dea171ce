"""The search: trace at a point, record its class, ask Z3 for a point outside every class.

See :mod:`validation.dinfer` for the method and an example.
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

import sympy
import z3

from shapes.env import DataDependentError
from shapes.errors import SpecError, SymshapeError, TraceError, TracerLimitation
from shapes.spec import Dim, default_hints, parse_dims, parse_specs
from shapes.paths import join_size_one, path_of
from shapes.tracer import trace

from ..input_space import ClassError, InputSpace, ShapeClass, Status, holds, to_python
from ..z3_translate import UntranslatableExpression
from shapes.distributed import RANK, PerWorld, mesh_label, world_dim, world_hint, world_symbols
from .assume import assume_data_branches, dim_and_data_names
from .ranks import every_rank, for_all_ranks
from .limits import TraceTimeout, engine_limitation, time_limit
from .suggest import suggest_spec
from .summary import summarize
from .z3box import Z3Box

#: The range searched for a dim that has none (the output says so).
DEFAULT_RANGE = (1, 4096)
#: Share of the time budget the traces may use; the rest is for examples and the summary.
SEARCH_SHARE = 0.8


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
           time_budget: float = 60.0, specialize_zero_one: bool = False,
           progress: Optional[Callable[[TraceEvent], None]] = None,
           solver_timeout: float = 10.0, trace_timeout: float = 30.0,
           assume_data: bool = True, device=None, world: Optional[str] = None) -> InputSpace:
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
        time_budget: the whole call's time in seconds: a trace still running
            at ``SEARCH_SHARE`` of it is interrupted, and the summary gets the rest.
        specialize_zero_one: PyTorch's 0/1 policy (sizes 0 and 1 get classes
            of their own, like ``B == 1``); off by default, so a class
            covers size 1 wherever the program behaves the same there.
        progress: called with a :class:`TraceEvent` after each trace.
        solver_timeout: seconds allowed to each Z3 query; an undecided query
            makes the result incomplete, with the reason.
        trace_timeout: seconds allowed to one trace; a trace that runs longer
            (a program that loops forever) stops the search, with the reason
            in :attr:`InputSpace.reason` and ``timed_out`` set.
        assume_data: take the typical branch of data-dependent decisions and
            report them as run-time conditions (see :mod:`validation.dinfer.assume`);
            False reports each such decision as a data-dependent class.
        device: the device the program will run on (see :func:`shapes.trace`).
        world: the name of a symbolic world size (see :mod:`shapes.distributed`),
            searched over its range in ``dims`` with the other dims; a condition on
            the rank must hold on every rank (:mod:`validation.dinfer.ranks`).

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
    if not trace_timeout > 0:
        raise SpecError(f"trace_timeout must be positive, got {trace_timeout}")
    return _Search(program, specs, dims, max_classes, time_budget, specialize_zero_one, progress,
                   solver_timeout, trace_timeout, assume_data, device=device, world=world).run()


# --------------------------------------------------------------------------- ranges


def _resolve_dims(specs, dims, world=None):
    """Names in order, their ``(lo, hi)`` boxes, the first point, and which got the default range."""
    parsed, names = parse_specs(specs)
    for w in world_symbols(world):
        if w in names:
            continue
        names = list(names) + [w]
        dims = dict(dims or {})
        wd = world_dim(w, {k: v for k, v in dims.items() if isinstance(v, Dim)}) if w not in dims else None
        if wd is not None:
            dims[w] = (wd.min, wd.max, world_hint(wd))
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


# --------------------------------------------------------------------------- the search


def _first_line(e: BaseException) -> str:
    return _first_line_of(str(e), e)


def _limitation_line(e: BaseException) -> str:
    # A TracerLimitation's own text says "symshape: ", which the class message already says.
    return _first_line_of(e.detail if isinstance(e, TracerLimitation) else str(e), e)


def _first_line_of(text: str, e: BaseException) -> str:
    s = text.strip()
    return s.splitlines()[0] if s else type(e).__name__


@dataclass
class _Outcome:
    status: Status
    env: object = None
    error: Optional[ClassError] = None
    message: str = ""
    output_shapes: tuple = ()
    decision: Optional[ClassError] = None
    limitation: Optional[BaseException] = None
    timed_out: bool = False
    # Envs of the other paths joined to an ok trace (:func:`shapes.paths.join_size_one`).
    joined: tuple = ()


def sizes_that_run(program: Callable, *specs, dims: Optional[Mapping] = None, time_budget: float = 20.0,
                   trace_timeout: float = 30.0) -> Optional[dict]:
    """Sizes at which ``program`` runs, found by dinfer's search (stopped at the first class
    that runs), as close to the default example sizes as that class allows; None when no
    size in the ranges runs (or none was found in ``time_budget`` seconds).

    For commands that need one trace and whose example sizes fail (a Linear after a
    convolution fixes the image size).

    Example::

        >>> import torch
        >>> sizes_that_run(lambda x: x.view(7, -1).sum(0), "x: f32[N]", dims={"N": (1, 64)})
        {'N': 7}
    """
    search = _Search(program, specs, dims, 64, time_budget, False, None, 10.0, trace_timeout, True)
    search.stop_at_ok = True
    sp = search.run()
    ok = next((c for c in sp.classes if c.status is Status.OK), None)
    if ok is None:
        return None
    point = dict(ok.traced_at)
    for n, v in search.first.items():  # the default example size of each dim, where the class allows it
        trial = dict(point, **{n: v})
        if ok.contains({search.symbols[k]: x for k, x in trial.items()}):
            point = trial
    return point


class _Search:
    stop_at_ok = False  # sizes_that_run: stop at the first class that runs, no summary

    def __init__(self, program, specs, dims, max_classes, time_budget, szo, progress, solver_timeout,
                 trace_timeout, assume_data, device=None, world=None):
        self.program = program
        self.device = device
        self.world = world
        self.parsed, self.names, self.box, self.first, self.defaulted = _resolve_dims(specs, dims, world)
        self.specs = tuple(self.parsed)
        self.symbols = {n: sympy.Symbol(n, integer=True) for n in self.names}
        self.max_classes = max_classes
        self.time_budget = time_budget
        self.szo = szo
        self.progress = progress
        self.trace_timeout = trace_timeout
        self.assume_data = assume_data
        self.t0 = time.monotonic()
        self.search_deadline = self.t0 + SEARCH_SHARE * time_budget
        self.deadline = self.t0 + time_budget
        self.z = Z3Box(self.names, self.symbols, self.box, solver_timeout, deadline=self.deadline)
        self.class_terms: list = []
        self.traced: set = set()
        name = getattr(program, "__qualname__", None) or type(program).__name__
        self.space = InputSpace(specs=self.specs, dims=dict(self.box), symbols=dict(self.symbols),
                                defaulted=self.defaulted, program_name=name)
        # A program built per world (a device mesh) is traced at each world size, every rank, and joined.
        self.per_world = world is not None and isinstance(program, PerWorld)
        if world is not None:
            self.space.world_method = (f"traced per {mesh_label(world, self.box)}, joined" if self.per_world
                                       else f"symbolic world size {world}")

    # -- one trace -------------------------------------------------------------------
    def _trace(self, point, rank: int = 0) -> _Outcome:
        tdims = {n: Dim(self.box[n][0], self.box[n][1], point[n]) for n in self.names}
        if rank:
            tdims[RANK] = Dim(0, math.prod(self.box[w][1] for w in world_symbols(self.world)) - 1, rank)
        left = self.search_deadline - time.monotonic()
        limit = min(self.trace_timeout, max(left, 0.001))
        assume = assume_data_branches() if self.assume_data else contextlib.nullcontext()
        try:
            with time_limit(limit), assume:
                tp = trace(self.program, *self.parsed, dims=tdims, specialize_zero_one=self.szo,
                           device=self.device, world=self.world)
                if not tp.unchecked_indices and not any(tp.env.unbacked):
                    # Sizes 1 a guard splits off run on their own path: one class covers both.
                    tp = join_size_one(tp)
        except TraceTimeout:
            return _Outcome(Status.UNSUPPORTED, None, timed_out=True,
                            message=("budget" if limit < self.trace_timeout else "trace"))
        except SpecError:
            raise
        except TraceError as e:
            exc = e.exc if e.exc is not None else e
            prov = e.provenance
            if engine_limitation(exc):
                return _Outcome(Status.UNSUPPORTED, e.env,
                                message=f"unsupported by symshape: {_limitation_line(exc)}", limitation=exc)
            err = ClassError(type=type(exc).__name__, message=_first_line(exc),
                             filename=getattr(prov, "filename", "<unknown>"), lineno=getattr(prov, "lineno", 0),
                             code=getattr(prov, "code", ""), op=getattr(prov, "op", None))
            return _Outcome(Status.ERROR, e.env, error=err)
        except DataDependentError as e:
            p, env = e.provenance, getattr(e, "env", None)
            names = dim_and_data_names(env, self.symbols.values()) if env is not None else None
            what = f"branches on data: {to_python(e.expr, names)}" + (_origins(env, [e.expr]) if env is not None else "")
            return _Outcome(Status.DATA_DEPENDENT, env, message=_first_line(e),
                            decision=ClassError(type=type(e).__name__, message=what, filename=p.filename,
                                                lineno=p.lineno, code=p.code, op=p.op))
        except TracerLimitation as e:
            return _Outcome(Status.UNSUPPORTED, getattr(e, "env", None),
                            message=f"unsupported by symshape: {_limitation_line(e)}", limitation=e)
        # Any other SymshapeError (translation validation found an unsound engine step) is never
        # a class, and any other exception is a symshape bug: both propagate.
        if tp.unchecked_indices:
            prov, msg = tp.unchecked_indices[0]
            # Whether eager's index check passes is unknown here: never call these sizes ok.
            return _Outcome(Status.UNSUPPORTED, tp.env, message=f"unsupported by symshape: at {prov.location()} {msg}")
        return _Outcome(Status.OK, tp.env, output_shapes=tuple(tuple(s) for s in tp.output_shapes),
                        joined=tuple(p.env for p in path_of(tp)[1:]))

    def _rank_free(self, env, conds, point, status, traced_rank: int = 0):
        """``conds`` free of the rank, and the first rank that parts ways at ``point`` (or None).

        An error on the traced rank is the job's error: its path is taken with that rank (which
        must exist).  Any other outcome is the job's only if every rank takes the path: each
        condition on the rank is required of every rank below W (:func:`for_all_ranks`); where
        that fails at ``point`` the conditions are None and the first rank it fails for is returned.
        """
        rank = env.symbols.get(RANK) if self.world is not None else None
        if rank is None or not any(rank in c.free_symbols for c in conds):
            return conds, None
        W = self.symbols[self.world]
        if status is Status.ERROR:
            return [c.subs(rank, traced_rank) for c in conds] + [sympy.Ge(W, traced_rank + 1)], None
        wmax = self.box[self.world][1]
        out = [for_all_ranks(c, rank, W, wmax) for c in conds]
        subs = {self.symbols[n]: sympy.Integer(v) for n, v in point.items()}
        if all(holds(c, subs) for c in out):
            return out, None
        for r in range(1, point[self.world]):
            if not all(holds(c.subs(rank, r), subs) for c in conds):
                return None, r
        return None, None

    def _conditions(self, env):
        """Path conditions over input dims (axioms first, then records) and those over data."""
        dimsyms = set(self.symbols.values())
        conds, data = [], []
        self._data_axioms = []
        if env is None:
            return None, ()
        if self.world is not None and RANK in env.symbols:
            dimsyms.add(env.symbols[RANK])  # a condition on the rank is one on sizes, for every rank
        for a in env.initial_axioms():
            for c in sympy.And.make_args(a):
                # Axioms on data-dependent symbols (op semantics) say nothing about sizes.
                if c.free_symbols <= dimsyms:
                    conds.append(c)
                else:
                    self._data_axioms.append(c)
        # Eager's size limits (storage size within int64) bound an ok class too.
        for r in list(env.records) + list(getattr(env, "limits", ())):
            if r.expr.free_symbols <= dimsyms:
                conds.append(r.expr)
            else:
                data.append(r.expr)
        return conds, tuple(data)

    def _for_the_job(self, point, conds, data, oc):
        """The path conditions of the whole job (every rank), from the trace as rank 0; where another
        rank parts ways at ``point``, trace as that rank: its error is the job's error."""
        try:
            out, other = self._rank_free(oc.env, conds, point, oc.status)
            if out is None and other is not None:
                oc2 = self._trace(point, rank=other)
                if oc2.status is Status.ERROR:
                    conds2, data2 = self._conditions(oc2.env)
                    if conds2 is not None:
                        out, _ = self._rank_free(oc2.env, conds2, point, oc2.status, traced_rank=other)
                        return out, data2, oc2
        except ValueError as e:
            return None, data, _Outcome(Status.UNSUPPORTED, oc.env, message=f"unsupported by symshape: {e}")
        if out is None and oc.status is not Status.UNSUPPORTED:
            oc = _Outcome(Status.UNSUPPORTED, oc.env, message="unsupported by symshape: the ranks take different "
                          "paths at these sizes, and no rank's trace says what the job does")
        return out, data, oc

    # -- classes ----------------------------------------------------------------------------
    def _make_class(self, point, oc: _Outcome) -> ShapeClass:
        idx = len(self.space.classes) + 1
        conds, data = self._conditions(oc.env)
        conds = self._joined_conditions(conds, data, oc)
        records = tuple(oc.env.records) if oc.env is not None else ()
        subs = {self.symbols[n]: sympy.Integer(v) for n, v in point.items()}
        imprecise = ""
        if conds is not None and self.per_world:
            conds, oc = every_rank(self, point, conds, oc, Status)
        elif conds is not None:
            conds, data, oc = self._for_the_job(point, conds, data, oc)
        if conds is None:
            imprecise = "the engine gave no path condition for this trace; the class is this one point"
        else:
            try:
                bad = [c for c in conds if not holds(c, subs)]
            except (ValueError, TypeError) as e:
                bad, imprecise = [], f"a path condition cannot be evaluated ({e}); the class is this one point"
            if bad:
                imprecise = (f"engine bug: the path condition {bad[0]} is false at the traced point "
                             f"{point}; the class is this one point")
        if not imprecise:
            try:
                conds = self.z.simplify(conds)
                term = self.z.conj(conds)
            except (UntranslatableExpression, z3.Z3Exception) as e:
                imprecise = f"no Z3 translation for a path condition ({e}); the class is this one point"
        if imprecise:
            self.space.warnings.append(f"class {idx}: {imprecise}")
            conds = tuple(sympy.Eq(self.symbols[n], v) for n, v in point.items())
            term = self.z.conj(conds)
        status, message = oc.status, oc.message
        names = dim_and_data_names(oc.env, self.symbols.values()) if oc.env is not None else {}
        if status is Status.OK and data:
            # It ran on meta tensors by assuming checks on data-dependent sizes; real data may
            # fail them, so whether it runs is not decided by sizes.
            status = Status.DATA_DEPENDENT
            message = ("runs only if, at run time, " + " and ".join(to_python(d, names) for d in data)
                       + _origins(oc.env, data, names))
        c = ShapeClass(index=idx, conditions=conds, status=status, traced_at=dict(point),
                       example=dict(point), error=oc.error, message=message,
                       output_shapes=oc.output_shapes, records=records, data_conditions=data, decision=oc.decision,
                       imprecise=imprecise, names=names, data_axioms=tuple(self._data_axioms))
        self._check_overlap(c, term)
        self.space.classes.append(c)
        self.class_terms.append(term)
        return c

    def _joined_conditions(self, conds, data, oc):
        """The class of an ok trace with joined paths: the sizes any of its paths takes."""
        if not oc.joined or conds is None or data:
            return conds
        axioms = self._data_axioms
        alts = [conds]
        for env in oc.joined:
            other, other_data = self._conditions(env)
            if other is not None and not other_data and not self._meets_a_class(other):
                alts.append(other)  # a path no class found so far covers (classes stay disjoint)
        self._data_axioms = axioms
        if len(alts) == 1:
            return conds
        try:
            alts = [list(self.z.simplify(a)) for a in alts]
        except (UntranslatableExpression, z3.Z3Exception):
            pass
        # Conditions every path shares stay conjuncts; the rest is one `or`, dropped when the
        # paths together cover every size the shared conditions allow (B == 1 or B >= 2).
        common = [c for c in alts[0] if all(c in a for a in alts[1:])]
        rest = [sympy.And(*[c for c in a if c not in common]) for a in alts]
        either = sympy.Or(*rest)
        try:
            s = self.z.solver(2000)
            s.add(self.z.conj(common), z3.Not(self.z.term(either)))
            if s.check() == z3.unsat:
                return common
        except (UntranslatableExpression, z3.Z3Exception):
            pass
        return common + [either]

    def _meets_a_class(self, conds) -> bool:
        """Whether some sizes satisfy ``conds`` and an existing class (or Z3 cannot say)."""
        if not self.class_terms:
            return False
        try:
            s = self.z.solver(2000)
            s.add(self.z.conj(conds), z3.Or(*self.class_terms))
            return s.check() != z3.unsat
        except (UntranslatableExpression, z3.Z3Exception):
            return True

    def _check_overlap(self, c, term):
        if not self.class_terms:
            return
        s = self.z.solver(2000)
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
            s.set(timeout=self.z.ms(1000))
            s.add(*prefs)
            if s.check() == z3.sat:
                return self.z.point(s.model()), None
            s.pop()
        if ge2:
            # As many dims >= 2 as the region allows (T == 1 left: trace it at B >= 2), so that
            # a trace at size 1 covers the other dims' sizes 1 too.
            o = z3.Optimize()
            o.set(timeout=min(self.z.timeout_ms, 1000))
            o.add(*self.z.domain, *[z3.Not(t) for t in self.class_terms])
            for p in ge2:
                o.add_soft(p)
            if o.check() == z3.sat:
                return self.z.point(o.model()), None
        return base, None

    def _post_timeout_ms(self) -> int:
        """Per-query timeout for the work after the search (0: no time left for it)."""
        left = self.deadline - time.monotonic()
        return max(0, min(self.z.timeout_ms, 3000, int(left * 1000)))

    def _valid_extent(self):
        """Each dim's smallest and largest size over the ok classes (None where Z3 gave no answer)."""
        ok_terms = [t for c, t in zip(self.space.classes, self.class_terms) if _runs(c)]
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
        t0 = self.t0
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
            if oc.timed_out:
                at = ", ".join(f"{k}={v}" for k, v in point.items()) or "the given sizes"
                if oc.message == "trace":
                    sp.timed_out = True
                    sp.reason = (f"the trace at {at} did not finish within {self.trace_timeout:g} s (the "
                                 f"program may loop forever); stopped")
                else:
                    sp.reason = (f"stopped at the time budget ({self.time_budget:g} s) during the trace "
                                 f"at {at}; some sizes are not classified yet")
                sp.unexplored_example = point
                break
            sp.traces += 1
            c = self._make_class(point, oc)
            if self.progress is not None:
                self.progress(TraceEvent(sp.traces, dict(point), c, time.monotonic() - t0))
            if self.stop_at_ok and c.status is Status.OK:
                return sp
            if time.monotonic() >= self.search_deadline:
                nxt, unknown = None, "out of time"
            else:
                nxt, unknown = self._next_point()
            if unknown == "out of time" or (unknown and time.monotonic() >= self.search_deadline):
                sp.reason = (f"stopped at the time budget ({self.time_budget:g} s); some sizes are not "
                             f"classified yet")
                break
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
            point = nxt
        # Minimal examples, valid ranges and the summary share what is left of the budget.
        self._finish_examples()
        self._valid_extent()
        sp.summary = summarize(sp, self.z, self.class_terms)
        sp.suggestion = suggest_spec(sp)
        sp.elapsed = time.monotonic() - t0
        return sp


def _origins(env, conds, names=None) -> str:
    names = names or dim_and_data_names(env, ())
    syms = sorted({u for c in conds for u in c.free_symbols if env.is_unbacked(u)}, key=str)
    return "".join(f"; {names.get(u, u)} = {env.describe_symbol(u)}" for u in syms)


def _runs(c) -> bool:
    """The class runs (given, for data-dependent programs, its run-time conditions on data)."""
    return c.status is Status.OK or (c.status is Status.DATA_DEPENDENT and c.decision is None)
