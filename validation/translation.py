"""Translation validation: replay the engine's decision log with Z3.

The engine (:class:`shapes.env.ShapeEnv`) logs every decision it takes
without a guard (see :class:`shapes.guard.LogEntry`).  This module proves
each one from what the trace may assume:

* ``axiom``: assumed (symbol ranges, op semantics); becomes a fact.
* ``fact``: a guard or runtime assert.  ``before`` is the condition as first
  raised, ``after`` the simplified form the engine keeps; they must be
  equivalent under the facts known before it.  ``after`` becomes a fact.
* ``static``: ``before`` was decided to be ``after`` (true/false) with no
  guard; the facts known at that point must imply it.  A size-oblivious
  decision may additionally assume that each data-dependent size is >= 2,
  and a layout-only one (:mod:`shapes.size_oblivious`) that each size atom
  of its question is >= 2 (``env.oblivious_atoms``).

* ``rewrite``: ``before == after`` must follow from the facts known then.
* ``fallback``: a default taken for an undecidable condition; not a claim.

At the end, the conjunction of the final guards must be equivalent to the
conjunction of the guards as first raised (given the axioms).

Semantics are Python's on exact numbers: ``//`` and ``%`` floor, floats
are modeled as reals.  The engine folds a constant ``/`` to the double Python
computes (``-5/7`` becomes ``-0.714285714285714``), so a real-valued rewrite
whose result holds a float constant is checked up to a relative error of
:data:`FLOAT_RTOL` instead of exactly.  A claim must hold wherever the expressions the program
computed (a step's ``before``, the facts) are defined: their divisors are
assumed nonzero, as the program would have raised otherwise.  ``after`` gets
no such help (Z3 sees a division by zero as an arbitrary value), so a step
may not introduce a division by zero, but it may remove one: replacing
``Where(c, x // m, y)`` by ``y`` when ``c`` is known false is a refinement,
and sympy's own folding (``0 * (x // m)`` is ``0``) does the same.  With
``strict_division=True`` that is reported too: ``(n*m)//m -> n`` where ``m``
may be 0 changes a ZeroDivisionError into a value.

A step is checked by asking Z3 for facts ∧ ¬claim: ``unsat`` proves it,
``sat`` gives a counterexample in concrete sizes (confirmed by evaluating
the step with Python semantics), and a timeout is reported as *unknown*,
never as sound.  One solver is used with push/pop while facts are added
incrementally; identical claims are checked once (facts only grow, so a
claim proven earlier stays proven), and syntactically trivial steps are
skipped without a query.

Run it while tracing with ``shapes.trace(..., translation_validation=True)``
or ``SYMSHAPE_TRANSLATION_VALIDATION=1`` (the tracer finds
:class:`TranslationValidator` through the ``symshape.checkers`` entry point),
or afterwards with :func:`validate`.

Example::

    >>> import torch, shapes
    >>> from validation.translation import validate
    >>> tp = shapes.trace(lambda x: x.view(-1, 8), "x: f32[N]")
    >>> validate(tp).ok
    True
"""
from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Optional

import sympy
import z3

from shapes.enums import TextEnum
from shapes.errors import SymshapeError
from shapes.functions import FloorDiv, PyMod, TrueDiv
from shapes.guard import LogEntry, StepKind
from shapes.provenance import Provenance, capture

from .concrete import UnevaluableExpression, evaluate
from .z3_translate import UntranslatableExpression, Z3Translator

#: Per-query Z3 timeout (milliseconds); a timeout is reported as "unknown".
DEFAULT_TIMEOUT_MS = 4000
#: Relative error allowed where a real-valued rewrite's result holds a float
#: constant (the engine folded a `/` to a double): far above rounding, far
#: below any wrong rule.
FLOAT_RTOL = sympy.Rational(1, 10**9)

_CLAIM_KINDS = (StepKind.STATIC, StepKind.REWRITE, StepKind.FACT)


class StepStatus(TextEnum):
    """Why a log entry was not proven: Z3 found facts under which the claim is false
    (``UNSOUND``), Z3 gave up, e.g. a timeout (``UNKNOWN``), or an expression could not
    be translated (``ERROR``)."""

    UNSOUND = "unsound"
    UNKNOWN = "unknown"
    ERROR = "error"


@dataclass
class StepResult:
    """The outcome of checking one log entry that failed to be proven.

    ``status`` is a :class:`StepStatus` (for ``ERROR``, ``message`` names the
    expression kind that could not be translated).
    ``counterexample`` maps dim names to concrete values (ints; Fractions for
    float symbols) for an unsound step; ``confirmed`` says that evaluating
    the step there with Python semantics shows the violation, and ``note``
    says what was seen there.
    """

    index: int
    entry: LogEntry
    status: StepStatus
    claim: sympy.Basic = None
    counterexample: dict = field(default_factory=dict)
    confirmed: Optional[bool] = None
    note: str = ""
    provenance: Optional[Provenance] = None
    message: str = ""

    @property
    def rule(self) -> str:
        return self.entry.rule

    @property
    def kind(self) -> str:
        return self.entry.kind

    def describe(self) -> str:
        e = self.entry
        where = f" at {self.provenance}" if self.provenance is not None and self.provenance.lineno else ""
        head = f"step #{self.index} ({e.kind}, rule {e.rule!r}){where}"
        if e.kind is StepKind.STATIC:
            what = f"decided {e.before} to be {e.after} with {e.n_facts} fact(s)"
        elif e.kind is StepKind.REWRITE:
            what = f"rewrote {e.before}  ->  {e.after}"
        elif e.kind is StepKind.FINAL:
            what = "final guards are not equivalent to the guards as first raised"
        else:
            what = f"kept the guard {e.after} for the condition raised as {e.before}"
        lines = [f"{self.status}: {head}: {what}"]
        if self.counterexample:
            cx = ", ".join(f"{k}={v}" for k, v in self.counterexample.items())
            lines.append(f"  counterexample: {cx}" + (f" ({self.note})" if self.note else ""))
        if self.message:
            lines.append(f"  {self.message}")
        return "\n".join(lines)


@dataclass
class ValidationReport:
    """What translation validation found for one env.

    ``checked`` counts log entries whose claim was covered (by a Z3 query,
    an identical earlier claim, or a trivial syntactic check); ``failures``
    holds unsound steps and untranslatable expressions (first one first),
    ``unknown`` the steps Z3 could not decide in time (never counted as sound).
    """

    steps: int = 0
    checked: int = 0
    queries: int = 0
    cached: int = 0
    trivial: int = 0
    skipped_fallbacks: int = 0
    failures: list = field(default_factory=list)
    unknown: list = field(default_factory=list)
    elapsed_s: float = 0.0
    env: object = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        """No unsound step and no untranslatable expression (unknowns are listed separately)."""
        return not self.failures

    @property
    def first_unsound(self) -> Optional[StepResult]:
        for f in self.failures:
            if f.status is StepStatus.UNSOUND:
                return f
        return None

    def __str__(self) -> str:
        lines = [f"translation validation: {self.checked} of {self.steps} log steps checked "
                 f"({self.queries} Z3 queries, {self.cached} repeated, {self.trivial} trivial, "
                 f"{self.skipped_fallbacks} fallbacks skipped) in {self.elapsed_s:.3f}s: "
                 + ("sound" if self.ok and not self.unknown else
                    "UNSOUND" if self.first_unsound else "errors" if self.failures else "unknown steps")]
        for f in self.failures + self.unknown:
            lines.append(f.describe())
        return "\n".join(lines)

    def raise_if_failed(self) -> None:
        """Raise :class:`UnsoundStep` for the first failure, if any."""
        if self.failures:
            raise UnsoundStep(self, self.failures[0])


class UnsoundStep(SymshapeError, AssertionError):
    """The engine took a step that does not follow from what it may assume.

    ``step`` is the :class:`StepResult` (index into ``env.log``, rule,
    before/after, counterexample as ``{dim: value}``, user line if known);
    ``report`` the whole :class:`ValidationReport`.
    """

    def __init__(self, report: ValidationReport, step: StepResult):
        self.report = report
        self.step = step
        super().__init__("translation validation failed:\n" + step.describe())

    @property
    def counterexample(self) -> dict:
        return self.step.counterexample

    @property
    def env(self):
        """The ShapeEnv whose log holds the step (its ``facts`` are what the step could use)."""
        return self.report.env


class _Checker:
    """One Z3 solver holding facts[0:k], checking claims with push/pop."""

    def __init__(self, env, timeout_ms: int, strict_division: bool = False):
        self.env = env
        self.timeout_ms = timeout_ms
        self.strict_division = strict_division
        self.tr = Z3Translator()
        self.solver = z3.Solver()
        self.solver.set("timeout", timeout_ms)
        self.n_asserted = 0
        self.assumed: list = []      # z3 facts asserted so far (for the fallback solver)
        self.fact_syms: set = set()  # sympy symbols mentioned by asserted facts
        self.fact_set: set = set()   # asserted facts (and their conjuncts), for trivial checks

    def advance(self, k: int) -> None:
        """Assert facts up to (not including) index ``k``."""
        facts = self.env.facts
        while self.n_asserted < min(k, len(facts)):
            f = facts[self.n_asserted]
            zf = self.tr.to_z3(f)
            if not self.strict_division:
                # A fact is a condition the program computed: its divisions were defined.
                zf = z3.And(zf, *[self.tr.to_z3(sympy.Ne(d, 0)) for d in divisors(f)])
            self.solver.add(zf)
            self.assumed.append(zf)
            self.fact_syms |= f.free_symbols
            self.fact_set.add(f)
            self.fact_set.update(sympy.And.make_args(f))
            self.n_asserted += 1

    def check(self, claim_z3, extra=()):
        """Z3's answer for facts ∧ extra ∧ ¬claim: (z3.unsat|sat|unknown, model or None)."""
        s = self.solver
        s.push()
        try:
            for x in extra:
                s.add(x)
            s.add(z3.Not(claim_z3))
            r = s.check()
            model = s.model() if r == z3.sat else None
        finally:
            s.pop()
        if r == z3.unknown:
            # The incremental core is weak on nonlinear integer arithmetic; a
            # fresh solver runs the full tactic pipeline (nlsat and friends).
            fresh = z3.Solver()
            fresh.set("timeout", self.timeout_ms)
            fresh.add(*self.assumed, *extra, z3.Not(claim_z3))
            r = fresh.check()
            model = fresh.model() if r == z3.sat else None
        return r, model


class TranslationValidator:
    """Checks an env's decisions with Z3; plugged into the tracer as a checker.

    Constructed with the env before tracing (it subscribes to
    ``env.observers`` to note the user line of each distinct step and the
    assumptions of size-oblivious decisions as they happen); ``finish``
    replays the log, stores the report on the traced program as
    ``validation_report`` and raises :class:`UnsoundStep` on a failure
    (``raise_on_failure``).  Unknown steps give a warning.
    ``SYMSHAPE_TRANSLATION_VALIDATION=strict`` turns on ``strict_division``.
    """

    def __init__(self, env, *, timeout_ms: int = DEFAULT_TIMEOUT_MS, raise_on_failure: bool = True,
                 strict_division: Optional[bool] = None):
        self.env = env
        self.timeout_ms = timeout_ms
        if strict_division is None:  # SYMSHAPE_TRANSLATION_VALIDATION=strict
            strict_division = os.environ.get("SYMSHAPE_TRANSLATION_VALIDATION", "").lower() == "strict"
        self.strict_division = strict_division
        self.raise_on_failure = raise_on_failure
        self.provenance: dict[int, Provenance] = {}
        self.oblivious: dict[int, tuple] = {}
        self._seen: set = set()
        self.report: Optional[ValidationReport] = None
        env.observers.append(self._observe)

    def _observe(self, entry: LogEntry, env) -> None:
        if entry.kind not in (StepKind.STATIC, StepKind.REWRITE):
            return  # fact entries carry their provenance in env.records
        index = len(env.log) - 1
        if entry.rule == "size_oblivious":
            self.oblivious[index] = _oblivious_assumptions(env, index)
        key = (entry.kind, entry.rule, entry.before, entry.after)
        if key not in self._seen:
            # Only the first occurrence can be the first unsound step: capture once.
            self._seen.add(key)
            self.provenance[index] = capture(env.current_op())

    def validate(self) -> ValidationReport:
        """Replay the env's log now and return the report."""
        self.report = validate_env(self.env, timeout_ms=self.timeout_ms, provenance=self.provenance,
                                   oblivious=self.oblivious, strict_division=self.strict_division)
        return self.report

    def finish(self, traced_program) -> ValidationReport:
        """Called by the tracer with the traced program; raises on an unsound step."""
        report = self.validate()
        traced_program.validation_report = report
        if self.env.observers and self._observe in self.env.observers:
            self.env.observers.remove(self._observe)
        if report.unknown:
            warnings.warn(f"translation validation could not decide {len(report.unknown)} step(s) "
                          f"in time; first: {report.unknown[0].describe()}", stacklevel=2)
        if self.raise_on_failure:
            report.raise_if_failed()
        return report


def _oblivious_assumptions(env, index: int) -> tuple:
    """What the size-oblivious step ``index`` assumed to be >= 2: the size atoms of a
    layout-only question (``env.oblivious_atoms``), else the unbacked sizes."""
    atoms = getattr(env, "oblivious_atoms", {}).get(index)
    return tuple(atoms) if atoms else oblivious_symbols(env)


def oblivious_symbols(env) -> tuple:
    """Unbacked sizes a size-oblivious decision may assume to be >= 2 (as the engine does)."""
    out = []
    for s in env.unbacked:
        r = env.ranges.get(s)
        if s not in env.unbacked_float and r is not None and r.lower >= 0 and r.upper >= 2:
            out.append(s)
    return tuple(out)


def validate(traced_program, **kw) -> ValidationReport:
    """Validate the decision log of a :class:`~shapes.program.TracedProgram`."""
    return validate_env(traced_program.env, **kw)


def validate_env(env, *, timeout_ms: int = DEFAULT_TIMEOUT_MS, provenance: Optional[dict] = None,
                 oblivious: Optional[dict] = None, stop_at_first: bool = True,
                 strict_division: bool = False) -> ValidationReport:
    """Prove every decision in ``env.log`` from the facts known when it was taken.

    ``provenance`` / ``oblivious`` come from a :class:`TranslationValidator`
    that watched the trace (user lines; the unbacked sizes assumed >= 2 by
    each size-oblivious decision); without them, size-oblivious steps use
    the env's final ranges.  Stops at the first unsound step unless
    ``stop_at_first`` is False.  ``strict_division``: also report steps that
    remove a division by zero (see the module docstring).
    """
    t0 = time.perf_counter()
    provenance = provenance or {}
    oblivious = oblivious or {}
    report = ValidationReport(steps=len(env.log), env=env)
    chk = _Checker(env, timeout_ms, strict_division)
    proven: set = set()
    fact_no = 0
    for i, e in enumerate(env.log):
        if e.kind is StepKind.AXIOM:
            continue
        if e.kind is StepKind.FALLBACK:
            report.skipped_fallbacks += 1
            continue
        if e.kind not in _CLAIM_KINDS:
            report.failures.append(StepResult(i, e, StepStatus.ERROR, message=f"unknown log entry kind {e.kind!r}"))
            break
        prov = provenance.get(i)
        if e.kind is StepKind.FACT:
            rec = env.records[fact_no] if fact_no < len(env.records) else None
            prov = rec.provenance if rec is not None else None
            fact_no += 1
        chk.advance(e.n_facts)
        obl = ()
        if e.rule == "size_oblivious":
            obl = oblivious.get(i) or _oblivious_assumptions(env, i)
        key = (e.kind, e.before, e.after, obl)
        if key in proven:
            report.cached += 1
            report.checked += 1
            continue
        if _trivial(e, chk, obl):
            proven.add(key)
            report.trivial += 1
            report.checked += 1
            continue
        res = _check_step(i, e, chk, obl, prov)
        report.queries += 1
        if res is None:
            proven.add(key)
            report.checked += 1
        elif res.status is StepStatus.UNKNOWN:
            report.unknown.append(res)
        else:
            report.failures.append(res)
            if stop_at_first:
                break
    if not report.failures:
        res = _check_final(env, chk)
        if res is not None:
            (report.unknown if res.status is StepStatus.UNKNOWN else report.failures).append(res)
    report.elapsed_s = time.perf_counter() - t0
    return report


def _claim(e: LogEntry):
    """The proposition a log entry asserts (a sympy boolean)."""
    if e.kind is StepKind.STATIC:
        return e.before if e.after is sympy.true else sympy.Not(e.before)
    if e.kind is StepKind.REWRITE:
        if _is_bool(e.before):
            return sympy.Equivalent(e.before, e.after)
        if not e.after.is_integer and (e.after.has(sympy.Float) or e.before.has(sympy.Float)):
            # The engine folds a constant `/` to the double Python computes; Z3's
            # reals are exact, so such a step is checked up to float rounding.
            return sympy.Le(sympy.Abs(e.before - e.after), FLOAT_RTOL * sympy.Max(1, sympy.Abs(e.after)))
        return sympy.Eq(e.before, e.after, evaluate=False)
    return sympy.Equivalent(e.before, e.after)


def _is_bool(x) -> bool:
    return x.is_Boolean or isinstance(x, sympy.Rel)


def _trivial(e: LogEntry, chk: _Checker, obl) -> bool:
    """Steps sympy settles syntactically, without a Z3 query."""
    if e.kind is StepKind.FACT and e.before == e.after:
        return True
    if e.kind is StepKind.STATIC and not obl:
        if e.after is sympy.true and e.before in chk.fact_set:
            return True
    if e.kind is StepKind.REWRITE and not _is_bool(e.before) and not e.before.has(FloorDiv, PyMod, TrueDiv):
        # Pure polynomial identities (no division that may be undefined).
        try:
            return sympy.expand(e.before - e.after) == 0
        except TypeError:  # not arithmetic (sympy refuses the difference): ask Z3
            return False
    return False


def _check_step(i: int, e: LogEntry, chk: _Checker, obl, prov) -> Optional[StepResult]:
    """None if proven, else a StepResult (unsound / unknown / error)."""
    claim = _claim(e)
    try:
        cz = chk.tr.to_z3(claim)
        extra = [chk.tr.to_z3(sympy.Ge(s, 2)) for s in obl]
        if not chk.strict_division:
            # Claimed only where the program's own expression is defined.
            extra += [chk.tr.to_z3(sympy.Ne(d, 0)) for d in divisors(e.before)]
    except UntranslatableExpression as err:
        return StepResult(i, e, StepStatus.ERROR, claim=claim, provenance=prov, message=str(err))
    r, model = chk.check(cz, extra)
    if r == z3.unsat:
        return None
    if r == z3.unknown:
        return StepResult(i, e, StepStatus.UNKNOWN, claim=claim, provenance=prov,
                          message=f"Z3 could not decide the step ({chk.solver.reason_unknown() or 'timeout'}); "
                                  f"it is NOT known to be sound")
    syms = _relevant_symbols(claim, chk, obl)
    cx = model_values(model, chk.tr, syms)
    assumptions = list(chk.env.facts[:chk.n_asserted]) + [sympy.Ge(s, 2) for s in obl]
    if not chk.strict_division:
        assumptions += [sympy.Ne(d, 0) for d in divisors(e.before)]
        assumptions += [sympy.Ne(d, 0) for f in chk.env.facts[:chk.n_asserted] for d in divisors(f)]
    confirmed, note = _confirm(claim, assumptions, cx, syms)
    return StepResult(i, e, StepStatus.UNSOUND, claim=claim, counterexample={str(s): v for s, v in cx.items()},
                      confirmed=confirmed, note=note, provenance=prov)


def divisors(e) -> list:
    """The symbolic divisors of every //, % and / in ``e``."""
    out = []
    for x in sympy.preorder_traversal(e):
        if isinstance(x, (FloorDiv, PyMod, TrueDiv, sympy.Mod)) and not x.args[1].is_number:
            out.append(x.args[1])
    return out


def _relevant_symbols(claim, chk: _Checker, obl) -> list:
    # Every symbol of the facts too: the counterexample is a complete assignment
    # that can be replayed (the facts must hold there).
    syms = set(claim.free_symbols) | {s for a in obl for s in a.free_symbols} | chk.fact_syms
    return sorted(syms, key=str)


def model_values(model, tr: Z3Translator, syms) -> dict:
    out = {}
    for s in syms:
        v = model.eval(tr.var(s), model_completion=True)
        if z3.is_int_value(v):
            out[s] = v.as_long()
        elif z3.is_rational_value(v):
            out[s] = Fraction(v.numerator_as_long(), v.denominator_as_long())
        elif z3.is_true(v) or z3.is_false(v):
            out[s] = z3.is_true(v)
        elif z3.is_algebraic_value(v):
            out[s] = Fraction(v.approx(20).as_fraction())
        else:
            out[s] = str(v)
    return out


def _confirm(claim, assumptions, cx: dict, syms) -> tuple:
    """Evaluate the claim and the facts at the counterexample with Python semantics."""
    try:
        for f in assumptions:
            try:
                if not evaluate(f, cx):
                    return False, f"the fact {f} does not hold there (translation mismatch)"
            except ZeroDivisionError:
                return False, f"the fact {f} divides by zero there"
        try:
            v = evaluate(claim, cx)
        except ZeroDivisionError:
            return True, "the step divides by zero there: the original raises, the result does not"
        if v:
            return False, "the claim holds there with Python semantics (translation mismatch)"
        return True, "facts hold and the step is false there"
    except (UnevaluableExpression, KeyError, TypeError) as err:
        return None, f"could not evaluate concretely: {err}"


def _check_final(env, chk: _Checker) -> Optional[StepResult]:
    """axioms ∧ guards as first raised  <=>  axioms ∧ guards as kept."""
    if not env.records:
        return None
    axioms = [e.after for e in env.log if e.kind is StepKind.AXIOM]
    orig = sympy.And(*axioms, *[g.original for g in env.records])
    final = sympy.And(*axioms, *[g.expr for g in env.records])
    entry = LogEntry(kind=StepKind.FINAL, before=orig, after=final, rule="final_guards", n_facts=0)
    try:
        claim = chk.tr.to_z3(orig) == chk.tr.to_z3(final)
    except UntranslatableExpression as err:
        return StepResult(len(env.log), entry, StepStatus.ERROR, message=str(err))
    s = z3.Solver()
    s.set("timeout", chk.timeout_ms)
    s.add(z3.Not(claim))
    r = s.check()
    if r == z3.unsat:
        return None
    if r == z3.unknown:
        return StepResult(len(env.log), entry, StepStatus.UNKNOWN, message="Z3 could not decide the final guard check")
    syms = sorted(orig.free_symbols | final.free_symbols, key=str)
    cx = model_values(s.model(), chk.tr, syms)
    return StepResult(len(env.log), entry, StepStatus.UNSOUND, claim=sympy.Equivalent(orig, final),
                      counterexample={str(k): v for k, v in cx.items()})
