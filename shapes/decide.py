"""The decision procedure: static evaluation, guard recording, and the decision log.

Questions about size expressions are settled here, in one of three ways:
statically from the facts (:meth:`DecisionProcedure.static_bool`, no guard),
by the example sizes (:meth:`DecisionProcedure.evaluate`, a guard), or by
assumption (:meth:`DecisionProcedure.expect_true`, a runtime assert).  Every
step is appended to the log (:class:`shapes.guard.LogEntry`) so that
:mod:`validation` can replay it.  :class:`shapes.env.ShapeEnv` is the face
the rest of symshape sees.

Example::

    >>> import sympy
    >>> from shapes.env import ShapeEnv
    >>> env = ShapeEnv()
    >>> B = env.create_symbol("B", 32)
    >>> env.decisions.static_bool(B > 1), env.decisions.log[-1].kind.value
    (True, 'static')
"""
from __future__ import annotations

from fractions import Fraction
from typing import Callable, Optional

import sympy

from . import simplify as rules
from . import size_oblivious as oblivious
from .conditions import canonical_condition, decide_normal, normal_form
from .data_dependent_error import DataDependentError
from .errors import TracerLimitation
from .facts import FactStore
from .functions import FloorDiv, divisors, factor, is_number, substitute
from .guard import Decision, Guard, GuardKind, LogEntry, StepKind
from .printers import to_python
from .provenance import Provenance, capture
from .symbols import SymbolTable
from .value_ranges import INF, UnsupportedExpression, ValueRange, bound

#: ``evaluate(..., fallback=NO_FALLBACK)``: raise on a data-dependent question.
NO_FALLBACK = object()


class DecisionProcedure:
    """Decides conditions over one trace's symbols and records why.

    ``records`` are guards, specializations and runtime asserts the program
    raised; ``constraints`` the input-range assumptions (checked when the
    traced program runs, but not raised by it); ``limits`` the size limits
    eager enforces.

    It needs no ShapeEnv: ``specialize_zero_one`` is the 0/1 policy,
    ``current_op`` names the ATen op being traced (for provenance) and
    ``on_step`` is told of each log entry.  It is the
    :class:`~shapes.reasoner.Reasoner` the rewrite rules and the size-1
    policy decide through.

    >>> from shapes.symbols import SymbolTable
    >>> table = SymbolTable(); facts = FactStore(table)
    >>> d = DecisionProcedure(table, facts)
    >>> N = table.add_backed("N", 8); facts.ranges[N] = ValueRange(2, 64)
    >>> d.static_bool(N > 1), d.static_bool(N > 2)
    (True, None)
    """

    def __init__(self, table: SymbolTable, facts: FactStore, *, specialize_zero_one: bool = True,
                 current_op: Callable[[], Optional[str]] = lambda: None,
                 on_step: Optional[Callable[[LogEntry], None]] = None):
        self.table = table
        self.facts = facts
        self.specialize_zero_one = specialize_zero_one
        self.current_op = current_op
        self.on_step = on_step
        self.records: list[Guard] = []
        self.constraints: list[Guard] = []
        # One limit per allocation would drown the program's own asserts: kept apart.
        self.limits: list[Guard] = []
        self.limit_seen: set = set()
        self.log: list[LogEntry] = []
        self.simplify_cache: dict = {}
        self.static_cache: dict = {}
        # s -> decide_generic(s): asked again and again by torch's contiguity and
        # broadcasting helpers; valid until the facts change (cleared with the others).
        self.generic_cache: dict = {}
        # expr -> hint_of(expr): the replacements it applies change only with the facts.
        self.hint_cache: dict = {}
        # The size-1 policy (see shapes.size_oblivious): layout predicates handed to
        # torch's C++ side, and the size atoms each size-oblivious log step assumed >= 2.
        self.layout_exprs: set = set()
        self.oblivious_atoms: dict[int, tuple] = {}
        self.layout_answers: dict = {}
        # Log indices of layout-only answers that differ from the question's value at the
        # example sizes: an error raised after one may be symshape's, not eager's.
        self.hint_departures: list[int] = []
        self.last_data_dependent: Optional[DataDependentError] = None

    # ------------------------------------------------------------------ the log and facts

    def log_step(self, kind: StepKind, before, after, rule: str) -> None:
        """Append one decision to the log and tell the observers."""
        entry = LogEntry(kind=kind, before=before, after=after, rule=rule, n_facts=len(self.facts.facts))
        self.log.append(entry)
        if self.on_step is not None:
            self.on_step(entry)

    def add_axiom(self, expr, what: str) -> None:
        """Assume ``expr`` (a range, an op's semantics): logged, never a guard."""
        if expr is sympy.true:
            return
        self.log_step(StepKind.AXIOM, sympy.true, expr, what)
        self._add_fact(expr)

    def record(self, expr, kind: GuardKind, prov: Provenance, decided_by: Decision,
               message: str = "", original=None) -> Guard:
        """Keep ``expr`` as a guard, specialization or runtime assert, and know it from now on."""
        expr = canonical_condition(expr)
        for old in self.records:
            if old.expr == expr and old.kind is kind:
                return old  # the same condition twice is one guard (the first line raised it)
        g = Guard(expr=expr, kind=kind, provenance=prov, decided_by=decided_by,
                  original=original if original is not None else expr, message=message,
                  index=len(self.records), symbols=tuple(sorted(expr.free_symbols, key=str)))
        self.records.append(g)
        self.log_step(StepKind.FACT, g.original, expr, kind.value)
        self._add_fact(expr, record_index=g.index)
        return g

    def _add_fact(self, expr, record_index: Optional[int] = None) -> None:
        self.facts.add(expr, record_index)
        self.simplify_cache.clear()
        self.static_cache.clear()
        self.generic_cache.clear()
        self.hint_cache.clear()

    # ------------------------------------------------------------------ simplification

    def simplify(self, expr):
        """Apply replacements and the rewrite rules; every step is logged."""
        if expr is sympy.true or expr is sympy.false or is_number(expr):
            return expr
        cached = self.simplify_cache.get(expr)
        if cached is not None:
            return cached
        e = self.facts.apply_replacements(expr)
        if e is not expr and e != expr:
            self.log_step(StepKind.REWRITE, expr, e, "replacement")
        e2 = rules.rewrite(self, e)
        for _ in range(4):
            # The rules may bring an atom into the form whose value a fact fixed.
            e3 = self.facts.apply_replacements(e2) if self.facts.atom_replacements else e2
            if e3 is e2 or e3 == e2:
                break
            self.log_step(StepKind.REWRITE, e2, e3, "replacement")
            e2 = rules.rewrite(self, e3)
        self.simplify_cache[expr] = e2
        return e2

    # ------------------------------------------------------------------ static reasoning

    def static_bool(self, expr, *, log: bool = True, size_oblivious: bool = False) -> Optional[bool]:
        """The value of a boolean expression if the known facts decide it, else None (never a guard)."""
        if expr is sympy.true:
            return True
        if expr is sympy.false:
            return False
        key = (expr, size_oblivious)
        if key in self.static_cache:
            v = self.static_cache[key]
        else:
            v = self.decide(expr, size_oblivious)
            self.static_cache[key] = v
        if v is not None and log:
            self.log_step(StepKind.STATIC, expr, sympy.true if v else sympy.false,
                          "size_oblivious" if size_oblivious else "static")
        return v

    def decide_with_ranges(self, expr, ranges: dict) -> Optional[bool]:
        """Decide ``expr`` as if ``ranges`` were the symbols' ranges, logging nothing.

        Used to answer a question at a hypothetical point (the size-1 policy's
        generic sizes); the caller logs the answer it keeps.
        """
        saved = (self.facts.ranges, self.simplify_cache, self.static_cache, self.log, self.on_step)
        self.facts.ranges, self.simplify_cache, self.static_cache, self.log, self.on_step = ranges, {}, {}, [], None
        try:
            return self.decide(expr, False)
        finally:
            self.facts.ranges, self.simplify_cache, self.static_cache, self.log, self.on_step = saved

    @property
    def ranges(self) -> dict:
        """symbol (or compound atom) -> its ValueRange (the fact store's)."""
        return self.facts.ranges

    @property
    def divisible(self) -> dict:
        """expression -> a known divisor (the fact store's)."""
        return self.facts.divisible

    def decide(self, e, size_oblivious: bool) -> Optional[bool]:
        """True/False when the facts decide ``e``, else None; neither logged nor cached."""
        e = self.simplify(e)
        if e is sympy.true:
            return True
        if e is sympy.false:
            return False
        ranges = self.facts.ranges_for(size_oblivious)
        try:
            r = bound(e, ranges)
        except UnsupportedExpression:  # range analysis has no rule for it
            # A known fact decides itself, even where range analysis has no rule.
            return self.facts.known(e) if isinstance(e, sympy.Rel) else None
        v = r.known_bool()
        if v is not None:
            return v
        if isinstance(e, sympy.Rel) and e.lhs.is_integer and e.rhs.is_integer:
            # Interval arithmetic forgets that B and B*T share B; the factored
            # difference B*(T - 1) keeps it.
            diff = factor(e.lhs - e.rhs)
            if diff != e.lhs - e.rhs:
                try:
                    v = bound(type(e)(diff, 0), ranges).known_bool()
                except UnsupportedExpression:
                    v = None
                if v is not None:
                    return v
        if isinstance(e, sympy.Rel) and e.has(FloorDiv) and e.lhs.is_integer and e.rhs.is_integer:
            v = _decide_floor_relaxed(e, ranges)
            if v is not None:
                return v
        if isinstance(e, sympy.Rel) and e.has(FloorDiv):
            # x // k with k | x known is exactly x/k: bound the exact form.
            exact = {f: f.args[0] / f.args[1] for f in e.atoms(FloorDiv)
                     if f.args[1].is_Integer and f.args[1] > 0
                     and rules.divides(self, int(f.args[1]), f.args[0])}
            if exact:
                ex = e.xreplace(exact)
                if isinstance(ex, sympy.Rel):
                    try:
                        v = bound(type(ex)(factor(ex.lhs - ex.rhs), 0), ranges).known_bool()
                    except UnsupportedExpression:
                        v = None
                    if v is not None:
                        return v
                elif ex in (sympy.true, sympy.false):
                    return bool(ex)
        if isinstance(e, sympy.Not):
            inner = self.decide(e.args[0], size_oblivious)
            return None if inner is None else not inner
        if isinstance(e, (sympy.And, sympy.Or)):
            vals = [self.decide(a, size_oblivious) for a in e.args]
            if isinstance(e, sympy.And):
                if any(x is False for x in vals):
                    return False
                if all(x is True for x in vals):
                    return True
            else:
                if any(x is True for x in vals):
                    return True
                if all(x is False for x in vals):
                    return False
            return None
        if isinstance(e, sympy.Rel):
            known = self.facts.known(e)
            if known is not None:
                return known
            return self._decide_by_facts(e, ranges)
        return None

    def _decide_by_facts(self, e, ranges) -> Optional[bool]:
        """Combine one known relation ``g REL 0`` with range analysis of the rest.

        For a question ``d REL 0`` and a fact about ``g``: ``d = s*g + rest``
        for ``s`` in {1, -1}; the range of ``d`` is then bounded by the fact's
        range for ``g`` plus the range of ``rest``.
        """
        q = normal_form(e)
        if q is None:
            return None
        d, qop = q
        fs = d.free_symbols
        best = None
        for g, fop in self.facts.normal_forms():
            if fop == "!=" or not (g.free_symbols & fs):
                continue  # a disequality bounds nothing
            grange = ValueRange(0, 0) if fop == "==" else ValueRange(-INF, 0)
            for sign in (1, -1):
                rest = sympy.expand(d - sign * g)
                if len(rest.free_symbols) >= len(fs) and rest.free_symbols >= fs:
                    continue
                try:
                    rr = bound(rest, ranges)
                except UnsupportedExpression:
                    continue
                gr = grange if sign == 1 else ValueRange(-grange.upper, -grange.lower)
                dr = ValueRange(gr.lower + rr.lower, gr.upper + rr.upper)
                best = dr if best is None else best.intersect(dr) if _overlap(best, dr) else best
        if best is None:
            return None
        return decide_normal(best, qop)

    # ------------------------------------------------------------------ hints

    def hint_of(self, expr):
        """The value of ``expr`` at the example sizes, or None if it depends on data."""
        if expr.is_number:
            return as_python(expr)
        try:
            return self.hint_cache[expr]
        except KeyError:
            pass
        e = self.facts.apply_replacements(expr)
        if self.table.has_unbacked(e):
            v = None
        else:
            v = substitute(e, self.table.hint_subs)
            v = bool(v) if v is sympy.true or v is sympy.false else as_python(v) if v.is_number else None
        self.hint_cache[expr] = v
        return v

    # ------------------------------------------------------------------ decisions

    def evaluate(self, expr, *, fallback=NO_FALLBACK, size_oblivious: bool = False,
                 provenance: Optional[Provenance] = None, decided_by: Decision = Decision.HINT,
                 cpp_site: Optional[str] = None):
        """Decide ``expr`` as a Python value: see :meth:`shapes.env.ShapeEnv.evaluate`."""
        expr = sympy.sympify(expr)
        is_bool = expr.is_Boolean or isinstance(expr, sympy.Rel)
        s = self.simplify(expr)
        has_unbacked = self.table.has_unbacked
        if is_bool:
            v = self.static_bool(s)
            if v is None and size_oblivious and has_unbacked(s):
                v = self.static_bool(s, size_oblivious=True)
            if v is None and not self.specialize_zero_one and not has_unbacked(s):
                v = self._layout_only(expr, s, size_oblivious, cpp_site)
            if v is not None:
                return v
        elif s.is_number:
            return as_python(s)
        if has_unbacked(s):
            if fallback is not NO_FALLBACK:
                self.log_step(StepKind.FALLBACK, s, sympy.sympify(fallback), "guard_or")
                return fallback
            raise self.data_dependent(s, provenance or capture(self.current_op()))
        hint = self.hint_of(s)
        if hint is None:
            raise TracerLimitation(f"cannot evaluate {to_python(s)}: it has no example value")
        prov = provenance or capture(self.current_op())
        if is_bool:
            cond = s if hint else sympy.Not(s)
            kind = GuardKind.GUARD
            if isinstance(cond, sympy.Eq) and ((cond.lhs.is_number and cond.rhs.is_Symbol)
                                               or (cond.rhs.is_number and cond.lhs.is_Symbol)):
                kind = GuardKind.SPECIALIZATION
            self.record(cond, kind, prov, decided_by, original=expr if hint else sympy.Not(expr))
            return bool(hint)
        self.record(sympy.Eq(s, hint), GuardKind.SPECIALIZATION, prov,
                    decided_by if decided_by is not Decision.HINT else Decision.INT_CONVERSION,
                    message=f"the size {to_python(s)} was converted to the int {hint}", original=sympy.Eq(expr, hint))
        return hint

    def data_dependent(self, expr, prov: Provenance) -> DataDependentError:
        """The error for a decision on ``expr`` that needs data, kept as :attr:`last_data_dependent`."""
        unbacked = sorted((x for x in expr.free_symbols if x in self.table.unbacked), key=str)
        err = DataDependentError(expr, prov, unbacked, sources=self.table.unbacked)
        # torch's C++ may catch it on the way out and raise its text as a RuntimeError
        # ("unflatten got an unexpected error: ..."); the tracer finds it here again.
        self.last_data_dependent = err
        return err

    def _layout_only(self, expr, s, size_oblivious: bool, cpp_site=None) -> Optional[bool]:
        """A layout-only question answered as at the generic point, with no guard
        (see :mod:`shapes.size_oblivious`); None for a semantic question."""
        site = oblivious.site_of(self, expr, size_oblivious, cpp_site)
        if site is None:
            return None
        got = self.generic_answer(s)
        if got is None:
            return None
        v, atoms = got
        hint = self.hint_of(s)
        if site in oblivious.VIEW_SITES and v != hint:
            return None  # a view eager finds at this degenerate example point: follow eager (a guard)
        if v != hint:
            self.hint_departures.append(len(self.log))
        self.oblivious_atoms[len(self.log)] = atoms
        self.layout_answers[expr] = v
        self.log_step(StepKind.STATIC, s, sympy.true if v else sympy.false, "size_oblivious")
        return v

    def generic_answer(self, s) -> Optional[tuple]:
        """:func:`shapes.size_oblivious.decide_generic` of ``s``, remembered until a fact is added.

        torch's contiguity and broadcasting helpers ask the same questions over
        and over; the answer depends on ``s`` and the facts only.

        >>> from shapes.symbols import SymbolTable
        >>> table = SymbolTable(); facts = FactStore(table)
        >>> d = DecisionProcedure(table, facts)
        >>> N = table.add_backed("N", 8); facts.ranges[N] = ValueRange(1, 64)
        >>> d.generic_answer(sympy.Ne(N, 1))        # True wherever N >= 2
        (True, (N,))
        >>> d.add_axiom(sympy.Le(N, 1), "range")    # N is 1: no generic point left
        >>> d.generic_answer(sympy.Ne(N, 1)) is None
        True
        """
        if s not in self.generic_cache:
            self.generic_cache[s] = oblivious.decide_generic(self, s)
        return self.generic_cache[s]

    def departure_since(self, log_index: int):
        """The first layout-only answer logged at or after ``log_index`` that differs from
        its value at the example sizes (a log entry), or None."""
        for i in self.hint_departures:
            if i >= log_index:
                return self.log[i]
        return None

    def expect_true(self, expr, *, provenance: Optional[Provenance] = None, message: str = "") -> bool:
        """``torch._check(expr)``: see :meth:`shapes.env.ShapeEnv.expect_true`."""
        expr = sympy.sympify(expr)
        if isinstance(expr, sympy.And):
            # One record per conjunct: each has its own meaning and fix.
            return all(self.expect_true(a, provenance=provenance, message=message) for a in expr.args)
        s = self.simplify(expr)
        v = self.static_bool(s)
        if v is not None:
            return v
        if not self.table.has_unbacked(s):
            hint = self.hint_of(s)
            if hint is False:
                prov = provenance or capture(self.current_op())
                self.record(sympy.Not(s), GuardKind.GUARD, prov, Decision.HINT, original=sympy.Not(expr),
                            message="this check fails at the example sizes")
                return False
        prov = provenance or capture(self.current_op())
        self.record(s, GuardKind.RUNTIME_ASSERT, prov, Decision.USER_CHECK, original=expr, message=message)
        return True

    def check_limit(self, expr, *, provenance: Provenance, message: str) -> bool:
        """A size limit eager enforces: see :meth:`shapes.env.ShapeEnv.check_limit`."""
        s = self.simplify(sympy.sympify(expr))
        if s is sympy.true or s in self.limit_seen:
            return True
        # Bounds of the product alone: static_bool's factoring is slow on these
        # large products and gains nothing for a single monotone term.
        v = None
        if isinstance(s, sympy.Le) and s.rhs.is_number:
            try:
                r = bound(s.lhs, self.facts.ranges)
                v = True if r.upper <= s.rhs else False if r.lower > s.rhs else None
            except UnsupportedExpression:
                v = None
        elif s is sympy.false:
            v = False
        if v is not None:
            self.log_step(StepKind.STATIC, s, sympy.true if v else sympy.false, "static")
        if v is True:
            self.limit_seen.add(s)
            return True
        if v is None and not self.table.has_unbacked(s):
            v = None if self.hint_of(s) is not False else False
        if v is False:
            self.record(sympy.Not(s), GuardKind.GUARD, provenance, Decision.EAGER_LIMIT,
                        original=sympy.Not(expr), message=message)
            return False
        self.limit_seen.add(s)
        if isinstance(s, sympy.Le) and s.rhs.is_number:
            for i, old in enumerate(self.limits):
                o = old.expr
                if not (isinstance(o, sympy.Le) and o.rhs == s.rhs):
                    continue
                # The largest allocation bounds the smaller ones (B*T*768 <= B*T*3072).
                # Sizes are never negative, so s <= o where 0 <= s / o <= 1.
                if _ratio_at_most_one(s.lhs, o.lhs, self.facts.ranges):
                    return True
                if _ratio_at_most_one(o.lhs, s.lhs, self.facts.ranges):
                    self.limits[i] = self._limit_guard(s, expr, provenance, message)
                    return True
        self.limits.append(self._limit_guard(s, expr, provenance, message))
        return True

    def _limit_guard(self, s, expr, provenance, message) -> Guard:
        # The limit's sizes exist where their divisors are not 0 (B*T // B needs
        # B != 0); elsewhere this path is not taken and the limit says nothing.
        nonzero = [sympy.Ne(d, 0) for d in divisors(s)]
        defined = sympy.And(*[c for c in nonzero if self.static_bool(c, log=False) is not True])
        return Guard(expr=s, kind=GuardKind.RUNTIME_ASSERT, provenance=provenance, decided_by=Decision.EAGER_LIMIT,
                     original=expr, message=message, index=-2, symbols=tuple(sorted(s.free_symbols, key=str)),
                     defined_when=defined)




def _decide_floor_relaxed(e, ranges) -> Optional[bool]:
    """Decide with each ``a // k`` (k > 0) written as ``a/k - t``, ``t`` in ``[0, (k-1)/k]``:
    interval arithmetic then sees that ``N // 2 <= N`` (``-N/2 - t <= 0``)."""
    subs, extra = {}, {}
    for f in e.atoms(FloorDiv):
        k = f.args[1]
        if k.is_Integer and k > 0 and f.args[0].is_integer:
            t = sympy.Dummy("t")
            subs[f] = f.args[0] / k - t
            extra[t] = ValueRange(0, Fraction(int(k) - 1, int(k)))
    if not subs:
        return None
    diff = sympy.expand((e.lhs - e.rhs).xreplace(subs))
    if diff.has(FloorDiv):
        return None  # nested: the inner one is not relaxed
    try:
        return bound(type(e)(diff, 0, evaluate=False), {**ranges, **extra}).known_bool()
    except UnsupportedExpression:
        return None


def _ratio_at_most_one(a, b, ranges) -> bool:
    """``0 <= a / b <= 1`` by ranges (``b`` never 0 there)."""
    try:
        r = bound(a / b, ranges)  # a product of sizes over another: equal factors cancel as built
    except (UnsupportedExpression, ZeroDivisionError):
        return False
    return r.lower >= 0 and r.upper <= 1


def as_python(v):
    """A sympy number or truth value as the Python value a program sees.

    >>> as_python(sympy.Integer(3)), as_python(sympy.Rational(1, 2)), as_python(sympy.true)
    (3, 0.5, True)
    """
    if v is sympy.true:
        return True
    if v is sympy.false:
        return False
    if v.is_Integer:
        return int(v)
    if v.is_number:
        return float(v)
    raise TypeError(f"not a number: {v}")


def _overlap(a: ValueRange, b: ValueRange) -> bool:
    return max(a.lower, b.lower) <= min(a.upper, b.upper)
