"""The ShapeEnv: symbols, facts, and every decision about them.

A :class:`ShapeEnv` owns the symbols of one trace.  Backed symbols carry a
hint (the example size they were created from); unbacked symbols (sizes and
scalars that depend on data) carry none.  Questions about expressions over
these symbols arrive through :meth:`ShapeEnv.evaluate` (a guard when it must
be decided by the hint), :meth:`ShapeEnv.expect_true` (a runtime assert,
never a guard) and :meth:`ShapeEnv.static_bool` (no guard at all).

Example::

    >>> from shapes.env import ShapeEnv
    >>> env = ShapeEnv()
    >>> B = env.create_symbol("B", 32)
    >>> env.evaluate(B > 16)        # decided by the hint: records a guard
    True
    >>> env.evaluate(B > 8)         # follows from the guard: no new guard
    True
    >>> [str(g.expr) for g in env.guards]
    ['B > 16']
"""
from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Optional

import sympy

from . import simplify as _simplify
from .conditions import canonical_condition, decide_normal, normal_form
from .errors import DataDependentError
from .functions import FloorDiv, PyMod, divisors, substitute
from .guard import Decision, Guard, GuardKind, LogEntry
from .provenance import Provenance, capture
from .python_syntax import to_python
from .value_ranges import INF, ValueRange, bound

_NO_FALLBACK = object()
UNBACKED_PREFIX = "u"
_UNBACKED_NAME = re.compile(r"^u\d+$")


class ShapeEnv:
    """Symbols, their ranges and hints, the facts known about them, and the log.

    Args:
        specialize_zero_one: create no symbol for a dim whose example size is
            0 or 1 (it becomes a constant, with a specialization recorded),
            and give other size symbols a lower bound of 2.  This is PyTorch's
            policy; turn it off to keep 0 and 1 inside the dynamic range.
    """

    def __init__(self, *, specialize_zero_one: bool = True):
        self.specialize_zero_one = specialize_zero_one
        self.symbols: dict[str, sympy.Symbol] = {}
        self.hints: dict[sympy.Symbol, int] = {}
        self._hint_subs: dict[sympy.Symbol, sympy.Integer] = {}
        self.ranges: dict[sympy.Symbol, ValueRange] = {}
        self.sources: dict[sympy.Symbol, list[str]] = {}
        self.unbacked: dict[sympy.Symbol, str] = {}  # symbol -> what produced it
        # Input dims' ranges as declared (spec, dims=, 0/1 policy), before guards narrow `ranges`.
        self.declared_ranges: dict[sympy.Symbol, ValueRange] = {}
        self.unbacked_float: set[sympy.Symbol] = set()
        self.replacements: dict[sympy.Symbol, sympy.Expr] = {}
        self.replacement_reasons: dict[sympy.Symbol, int] = {}  # -> index into records
        self.divisible: dict[sympy.Expr, int] = {}
        self.facts: list[sympy.Basic] = []
        self.records: list[Guard] = []
        # Input-range assumptions (0/1 policy, user ranges): checked when the
        # traced program runs, but not guards raised by the program itself.
        self.constraints: list[Guard] = []
        # Size limits eager enforces (storage size within int64): checked when the
        # traced program runs and searched by dinfer, but kept apart from the
        # program's own asserts (one per allocation would drown them).
        self.limits: list[Guard] = []
        # Index lookups whose index values the sizes determine but the engine cannot bound:
        # (provenance, message).  Nothing states where eager's index check passes there.
        self.unchecked_indices: list = []
        self._limit_seen: set = set()
        self.log: list[LogEntry] = []
        self.op_stack: list[str] = []
        self.observers: list = []  # callables(entry) notified of every log entry
        self._fact_forms: list = []
        self._fact_set: set = set()
        self._simplify_cache: dict = {}
        self._static_cache: dict = {}
        self._unbacked_count = 0
        # The size-1 policy (see shapes.size_oblivious): layout predicates handed to
        # torch's C++ side, and the size atoms each size-oblivious log step assumed >= 2.
        self.layout_exprs: set = set()
        self.oblivious_atoms: dict[int, tuple] = {}
        self.layout_answers: dict = {}

    # ------------------------------------------------------------------ symbols

    def create_symbol(
        self,
        name: str,
        hint: int,
        *,
        range: Optional[tuple] = None,
        source: Optional[str] = None,
    ) -> sympy.Expr:
        """A backed size symbol named ``name`` with example value ``hint``.

        Returns a constant instead when the 0/1 policy specializes it.
        Creating the same name twice returns the same symbol (after checking
        the hints agree), so dims that share a name are one symbol.
        """
        if not isinstance(hint, int) or isinstance(hint, bool):
            raise TypeError(f"hint for {name} must be an int, got {hint!r}")
        if _UNBACKED_NAME.match(name):
            raise ValueError(f"dim name {name!r} is reserved for data-dependent sizes; pick another name")
        if name in self.symbols:
            sym = self.symbols[name]
            if self.hints[sym] != hint:
                raise ValueError(f"dim {name} is used with two sizes: {self.hints[sym]} and {hint}")
            if source:
                self.sources[sym].append(source)
            return self.simplify(sym)
        lo, hi = (range if range is not None else (0, INF))
        if not (lo <= hint <= hi):
            raise ValueError(f"example size {hint} of dim {name} lies outside its range [{lo}, {hi}]")
        sym = sympy.Symbol(name, integer=True)
        self.symbols[name] = sym
        self.hints[sym] = hint
        self._hint_subs[sym] = sympy.Integer(hint)
        self.sources[sym] = [source] if source else []
        vr = ValueRange(lo, hi)
        self.ranges[sym] = vr
        self.declared_ranges[sym] = vr
        self._add_axiom(sympy.And(sympy.Ge(sym, lo) if lo > -INF else sympy.true,
                                  sympy.Le(sym, hi) if hi < INF else sympy.true), "range")
        if self.specialize_zero_one:
            if hint in (0, 1):
                # The spec, not whoever called trace(), is where this comes from.
                prov = Provenance(filename="<input spec>", code=source or name)
                self._record(sympy.Eq(sym, hint), GuardKind.SPECIALIZATION, prov, Decision.ZERO_ONE,
                             message=f"example size {hint}: sizes 0 and 1 are specialized")
                return sympy.Integer(hint)
            # Sizes other than 0/1 are assumed >= 2: the policy behind the guard above.
            if lo < 2 <= hi:
                self.ranges[sym] = self.declared_ranges[sym] = ValueRange(2, hi)
                self._add_axiom(sympy.Ge(sym, 2), "zero_one_policy")
        r = self.ranges[sym]
        bounds = sympy.And(sympy.Ge(sym, r.lower) if r.lower > 0 else sympy.true,
                           sympy.Le(sym, r.upper) if r.upper < INF else sympy.true)
        if bounds is not sympy.true:
            why = (f"the trace assumes {name} >= 2: sizes 0 and 1 are specialized (a size 0 or 1 "
                   f"traces separately)" if r.lower == 2 and self.specialize_zero_one else
                   f"the range of {name} ({r.lower} to {r.upper if r.upper < INF else 'any size'}; "
                   f"give dims={{{name!r}: (0, ...)}} to include size 0)" if r.lower == 1 else
                   f"the range given for {name}")
            self.constraints.append(Guard(expr=bounds, kind=GuardKind.GUARD, provenance=Provenance(
                filename="<input spec>", code=source or name), decided_by=Decision.ZERO_ONE
                if r.lower == 2 and self.specialize_zero_one else Decision.USER_RANGE, original=bounds,
                message=why, index=-1, symbols=(sym,)))
        return sym

    def create_unbacked(self, *, kind: str = "int", what: str = "", range: Optional[tuple] = None) -> sympy.Symbol:
        """A data-dependent symbol ``u<N>`` (no hint).

        ``kind`` is ``"size"`` (a count of elements: at least 0), ``"int"``
        (any integer), ``"bool"`` (0 or 1) or ``"float"``.
        """
        name = f"{UNBACKED_PREFIX}{self._unbacked_count}"
        self._unbacked_count += 1
        if kind == "float":
            sym = sympy.Symbol(name, real=True)
            self.unbacked_float.add(sym)
        else:
            sym = sympy.Symbol(name, integer=True)
        self.symbols[name] = sym
        default = {"size": (0, INF), "bool": (0, 1)}.get(kind, (-INF, INF))
        lo, hi = range if range is not None else default
        self.ranges[sym] = ValueRange(lo, hi)
        self.unbacked[sym] = what or kind
        if lo > -INF or hi < INF:
            self._add_axiom(sympy.And(sympy.Ge(sym, lo) if lo > -INF else sympy.true,
                                      sympy.Le(sym, hi) if hi < INF else sympy.true), "range")
        return sym

    def describe_symbol(self, s) -> str:
        if s in self.unbacked:
            return self.unbacked[s]
        src = self.sources.get(s)
        return src[0] if src else str(s)

    def is_unbacked(self, s) -> bool:
        return s in self.unbacked

    def has_unbacked(self, e) -> bool:
        return any(s in self.unbacked for s in e.free_symbols)

    def add_op_axiom(self, expr, what: str) -> None:
        """Assume ``expr``: a fact that holds by an op's semantics (e.g. a
        nonzero count is at most numel)."""
        self._add_axiom(expr, what)

    # ------------------------------------------------------------------ facts

    def _current_op(self) -> Optional[str]:
        return self.op_stack[-1] if self.op_stack else None

    def log_step(self, kind: str, before, after, rule: str) -> None:
        entry = LogEntry(kind, before, after, rule, len(self.facts))
        self.log.append(entry)
        for obs in self.observers:
            obs(entry, self)

    def _add_axiom(self, expr, what: str) -> None:
        if expr is sympy.true:
            return
        self.log_step("axiom", sympy.true, expr, what)
        self._add_fact(expr)

    def _record(self, expr, kind: GuardKind, prov: Provenance, decided_by: Decision,
                message: str = "", original=None) -> Guard:
        expr = canonical_condition(expr)
        for old in self.records:
            if old.expr == expr and old.kind is kind:
                return old  # the same condition twice is one guard (the first line raised it)
        g = Guard(expr=expr, kind=kind, provenance=prov, decided_by=decided_by,
                  original=original if original is not None else expr, message=message,
                  index=len(self.records), symbols=tuple(sorted(expr.free_symbols, key=str)))
        self.records.append(g)
        self.log_step("fact", g.original, expr, kind.value)
        self._add_fact(expr, record_index=g.index)
        return g

    def _add_fact(self, expr, record_index: Optional[int] = None) -> None:
        self.facts.append(expr)
        self._simplify_cache.clear()
        self._static_cache.clear()
        for f in sympy.And.make_args(expr):
            self._learn(f, record_index)
        self._fact_forms = None  # recomputed lazily against the new replacements

    def _learn(self, f, record_index) -> None:
        """Derive replacements, divisibility and range refinements from a fact."""
        f = self._apply_replacements(f)
        if f is sympy.true or not isinstance(f, sympy.Rel):
            return
        self._fact_set.add(f)
        if isinstance(f, sympy.Eq):
            lhs, rhs = f.lhs, f.rhs
            m = lhs if isinstance(lhs, PyMod) and rhs == 0 else rhs if isinstance(rhs, PyMod) and lhs == 0 else None
            if m is not None and m.args[1].is_Integer:
                k, target = abs(int(m.args[1])), m.args[0]
                self.divisible[target] = math.lcm(self.divisible.get(target, 1), k)
                r = self.ranges.get(target)
                if r is not None and k > 1:
                    # A multiple of k inside [lo, hi]: round the bounds inward.
                    lo = r.lower if r.lower in (-INF, INF) else -((-r.lower) // k) * k
                    hi = r.upper if r.upper in (-INF, INF) else (r.upper // k) * k
                    if lo <= hi:
                        self.ranges[target] = ValueRange(lo, hi)
                return
            self._maybe_replace(lhs, rhs, record_index)
            return
        self._refine_range(f)

    def _maybe_replace(self, lhs, rhs, record_index) -> None:
        cands = []
        for a, b in ((lhs, rhs), (rhs, lhs)):
            # An integer symbol only stands for integer-valued expressions: N == M / 2
            # would make the integer rules' operands reals.
            if a.is_Symbol and a not in b.free_symbols and a not in self.unbacked_float and b.is_integer:
                cands.append((a, b))
        if not cands:
            # Linear in one symbol with unit coefficient: s + rest == 0.
            diff = sympy.expand(lhs - rhs)
            for s in sorted(diff.free_symbols, key=str):
                c = diff.coeff(s)
                if c not in (1, -1) or s in self.unbacked_float:
                    continue
                t = sympy.expand(-(diff - c * s) / c)
                if s not in t.free_symbols and t.is_integer:
                    cands.append((s, t))
            if not cands:
                return

        def order(pair):
            s, target = pair
            # Replace unbacked before backed, later symbols before earlier ones,
            # so that the user's first-named dim survives.
            return (s not in self.unbacked, -self._creation_index(s))

        s, target = min(cands, key=order)
        if target.is_Symbol and target in self.unbacked and s not in self.unbacked:
            return  # never express a backed input dim through a data-dependent one
        self.replacements[s] = target
        self.replacement_reasons[s] = record_index if record_index is not None else -1
        # Keep ranges sound: the target now stands for s, so it is bounded by both.
        if target.is_Symbol:
            rs, rt = self.ranges.get(s), self.ranges.get(target)
            if rs is not None and rt is not None:
                lo, hi = max(rs.lower, rt.lower), min(rs.upper, rt.upper)
                if lo <= hi:
                    self.ranges[target] = ValueRange(lo, hi)
        for k, v in list(self.replacements.items()):
            self.replacements[k] = v.xreplace({s: target})

    def _creation_index(self, s) -> int:
        for i, n in enumerate(self.symbols):
            if n == s.name:
                return i
        return -1

    def _refine_range(self, f) -> None:
        """From ``s <= e`` / ``s >= e`` (unit coefficient) tighten the range of s."""
        if isinstance(f, (sympy.Lt, sympy.Le)):
            d, strict = sympy.expand(f.lhs - f.rhs), isinstance(f, sympy.Lt)
        elif isinstance(f, (sympy.Gt, sympy.Ge)):
            d, strict = sympy.expand(f.rhs - f.lhs), isinstance(f, sympy.Gt)
        else:
            return
        # d < 0 (strict) or d <= 0.  Tighten the range of each unit-coefficient
        # term: a symbol, or a compound atom like H//2 (kept in ranges by key).
        for t in sympy.Add.make_args(d):
            c, atom = t.as_coeff_Mul()
            if c not in (1, -1) or atom.is_number:
                continue
            if not (atom.is_Symbol or isinstance(atom, (FloorDiv, PyMod, sympy.Min, sympy.Max))):
                continue
            if atom in self.unbacked_float:
                continue
            rest = d - c * atom
            if rest.has(atom):
                continue
            try:
                r = bound(rest, self.ranges)
                old = self.ranges.get(atom) or bound(atom, self.ranges)
            except TypeError:
                continue
            # Rounding to the next integer is valid only for an integer-valued atom:
            # Min(N, 5.5) < 4.5 says nothing about Min(N, 5.5) <= 3.
            integer = integer_valued(atom)
            if c == 1:  # atom + rest <= 0  ->  atom <= -rest
                hi = -r.lower
                if integer and hi not in (INF, -INF):
                    hi = math.ceil(hi) - 1 if strict else math.floor(hi)
                new = ValueRange(old.lower, min(old.upper, hi)) if min(old.upper, hi) >= old.lower else old
            else:  # -atom + rest <= 0  ->  atom >= rest
                lo = r.lower
                if integer and lo not in (INF, -INF):
                    lo = math.floor(lo) + 1 if strict else math.ceil(lo)
                new = ValueRange(max(old.lower, lo), old.upper) if max(old.lower, lo) <= old.upper else old
            self.ranges[atom] = new

    def _apply_replacements(self, e):
        if not self.replacements or e.is_number:
            return e
        if not (e.free_symbols & self.replacements.keys()):
            return e
        return e.xreplace(self.replacements)

    # ------------------------------------------------------------------ simplification

    def simplify(self, expr):
        """Apply replacements and the rewrite rules; every step is logged."""
        if expr.is_number or expr is sympy.true or expr is sympy.false:
            return expr
        cached = self._simplify_cache.get(expr)
        if cached is not None:
            return cached
        e = self._apply_replacements(expr)
        if e is not expr and e != expr:
            self.log_step("rewrite", expr, e, "replacement")
        e2 = _simplify.rewrite(self, e)
        self._simplify_cache[expr] = e2
        return e2

    # ------------------------------------------------------------------ static reasoning

    def static_bool(self, expr, *, log: bool = True, size_oblivious: bool = False) -> Optional[bool]:
        """The value of a boolean expression if the known facts decide it, else None.

        Never records a guard.  With ``log=True`` a decision is logged for
        validation.
        """
        if expr is sympy.true:
            return True
        if expr is sympy.false:
            return False
        key = (expr, size_oblivious)
        if key in self._static_cache:
            v = self._static_cache[key]
        else:
            v = self._decide(expr, size_oblivious)
            self._static_cache[key] = v
        if v is not None and log:
            self.log_step("static", expr, sympy.true if v else sympy.false,
                          "size_oblivious" if size_oblivious else "static")
        return v

    def _ranges_for(self, size_oblivious: bool):
        if not size_oblivious:
            return self.ranges
        r = dict(self.ranges)
        for s, what in self.unbacked.items():
            # Only sizes that can be >= 2: a boolean item() in [0, 1] made [2, 2]
            # would decide Eq(b, 1) False with no guard (found by translation validation).
            if s in r and r[s].lower >= 0 and r[s].upper >= 2:
                r[s] = ValueRange(max(2, r[s].lower), r[s].upper)
        return r

    def _decide(self, e, size_oblivious: bool) -> Optional[bool]:
        e = self.simplify(e)
        if e is sympy.true:
            return True
        if e is sympy.false:
            return False
        ranges = self._ranges_for(size_oblivious)
        try:
            r = bound(e, ranges)
        except TypeError:
            # A known fact decides itself, even where range analysis has no rule.
            return self._known_fact(e) if isinstance(e, sympy.Rel) else None
        v = r.known_bool()
        if v is not None:
            return v
        if isinstance(e, sympy.Rel) and e.lhs.is_integer and e.rhs.is_integer:
            # Interval arithmetic forgets that B and B*T share B; the factored
            # difference B*(T - 1) keeps it.
            diff = sympy.factor(e.lhs - e.rhs)
            if diff != e.lhs - e.rhs:
                try:
                    v = bound(type(e)(diff, 0), ranges).known_bool()
                except TypeError:
                    v = None
                if v is not None:
                    return v
        if isinstance(e, sympy.Rel) and e.has(FloorDiv) and e.lhs.is_integer and e.rhs.is_integer:
            v = self._decide_floor_relaxed(e, ranges)
            if v is not None:
                return v
        if isinstance(e, sympy.Rel) and e.has(FloorDiv):
            # x // k with k | x known is exactly x/k: bound the exact form.
            exact = {f: f.args[0] / f.args[1] for f in e.atoms(FloorDiv)
                     if f.args[1].is_Integer and f.args[1] > 0
                     and _simplify.divides(self, int(f.args[1]), f.args[0])}
            if exact:
                ex = e.xreplace(exact)
                if isinstance(ex, sympy.Rel):
                    try:
                        v = bound(type(ex)(sympy.factor(ex.lhs - ex.rhs), 0), ranges).known_bool()
                    except TypeError:
                        v = None
                    if v is not None:
                        return v
                elif ex in (sympy.true, sympy.false):
                    return bool(ex)
        if isinstance(e, sympy.Not):
            inner = self._decide(e.args[0], size_oblivious)
            return None if inner is None else not inner
        if isinstance(e, (sympy.And, sympy.Or)):
            vals = [self._decide(a, size_oblivious) for a in e.args]
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
            known = self._known_fact(e)
            if known is not None:
                return known
            return self._decide_by_facts(e, ranges)
        return None

    def _decide_floor_relaxed(self, e, ranges) -> Optional[bool]:
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
        except TypeError:
            return None

    def _known_fact(self, e) -> Optional[bool]:
        """True/False when ``e`` or its negation is a known fact (either way round)."""
        neg = sympy.Not(e)
        for c, val in ((e, True), (neg, False)):
            if not isinstance(c, sympy.Rel):
                continue
            for form in (c, c.reversed, canonical_condition(c)):
                if form in self._fact_set:
                    return val
        return None

    def _normalized_facts(self):
        if self._fact_forms is None:
            forms = []
            for f in self.facts:
                for a in sympy.And.make_args(self._apply_replacements(f)):
                    nf = normal_form(a)
                    if nf is not None:
                        forms.append(nf)
            self._fact_forms = forms
        return self._fact_forms

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
        for g, fop in self._normalized_facts():
            if fop == "!=" or not (g.free_symbols & fs):
                continue  # a disequality bounds nothing
            grange = ValueRange(0, 0) if fop == "==" else ValueRange(-INF, 0)
            for sign in (1, -1):
                rest = sympy.expand(d - sign * g)
                if len(rest.free_symbols) >= len(fs) and rest.free_symbols >= fs:
                    continue
                try:
                    rr = bound(rest, ranges)
                except TypeError:
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
            return _py(expr)
        e = self._apply_replacements(expr)
        if self.has_unbacked(e):
            return None
        v = substitute(e, self._hint_subs)
        if v is sympy.true or v is sympy.false:
            return bool(v)
        if not v.is_number:
            return None
        return _py(v)

    # ------------------------------------------------------------------ decisions

    def evaluate(self, expr, *, fallback=_NO_FALLBACK, size_oblivious: bool = False,
                 provenance: Optional[Provenance] = None, decided_by: Decision = Decision.HINT,
                 cpp_site: Optional[str] = None):
        """Decide ``expr`` (a boolean or integer expression) as a Python value.

        Decided statically when the facts allow (no guard).  Otherwise, for
        backed symbols, by the example sizes, recording a guard (or a
        specialization for an integer).  For data-dependent expressions,
        returns ``fallback`` when given, else raises
        :class:`DataDependentError`.  Without the 0/1 specialization, a
        layout-only question (``cpp_site``: the C++ file that asked, if any)
        is answered with no guard: see :mod:`shapes.size_oblivious`.
        """
        expr = sympy.sympify(expr)
        is_bool = expr.is_Boolean or isinstance(expr, sympy.Rel)
        s = self.simplify(expr)
        if is_bool:
            v = self.static_bool(s)
            if v is None and size_oblivious and self.has_unbacked(s):
                v = self.static_bool(s, size_oblivious=True)
            if v is None and not self.specialize_zero_one and not self.has_unbacked(s):
                v = self._layout_only(expr, s, size_oblivious, cpp_site)
            if v is not None:
                return v
        elif s.is_number:
            return _py(s)
        if self.has_unbacked(s):
            if fallback is not _NO_FALLBACK:
                self.log_step("fallback", s, sympy.sympify(fallback), "guard_or")
                return fallback
            prov = provenance or capture(self._current_op())
            raise DataDependentError(s, prov, sorted((x for x in s.free_symbols if x in self.unbacked), key=str), self)
        hint = self.hint_of(s)
        if hint is None:
            from .errors import TracerLimitation
            raise TracerLimitation(f"symshape: cannot evaluate {to_python(s)}: it has no example value")
        prov = provenance or capture(self._current_op())
        if is_bool:
            cond = s if hint else _negate(s)
            kind = GuardKind.GUARD
            if isinstance(cond, sympy.Eq) and ((cond.lhs.is_number and cond.rhs.is_Symbol)
                                               or (cond.rhs.is_number and cond.lhs.is_Symbol)):
                kind = GuardKind.SPECIALIZATION
            self._record(cond, kind, prov, decided_by, original=expr if hint else _negate(expr))
            return bool(hint)
        self._record(sympy.Eq(s, hint), GuardKind.SPECIALIZATION, prov,
                     decided_by if decided_by is not Decision.HINT else Decision.INT_CONVERSION,
                     message=f"the size {to_python(s)} was converted to the int {hint}", original=sympy.Eq(expr, hint))
        return hint

    def _layout_only(self, expr, s, size_oblivious: bool, cpp_site=None) -> Optional[bool]:
        """A layout-only question answered as at the generic point, with no guard
        (see :mod:`shapes.size_oblivious`); None for a semantic question."""
        from . import size_oblivious as so
        site = so.site_of(self, expr, size_oblivious, cpp_site)
        if site is None:
            return None
        got = so.decide_generic(self, s)
        if got is None:
            return None
        v, atoms = got
        if site in so.VIEW_SITES and v != self.hint_of(s):
            return None  # a view eager finds at this degenerate example point: follow eager (a guard)
        self.oblivious_atoms[len(self.log)] = atoms
        self.layout_answers[expr] = v
        self.log_step("static", s, sympy.true if v else sympy.false, "size_oblivious")
        return v

    def expect_true(self, expr, *, provenance: Optional[Provenance] = None, message: str = "") -> bool:
        """``torch._check(expr)``: assert at run time, assume from now on.

        Returns False only when ``expr`` is false at the example sizes (or
        statically): the program raises there, and the trace records the
        path condition that led to it.
        """
        expr = sympy.sympify(expr)
        if isinstance(expr, sympy.And):
            # One record per conjunct: each has its own meaning and fix.
            return all(self.expect_true(a, provenance=provenance, message=message) for a in expr.args)
        s = self.simplify(expr)
        v = self.static_bool(s)
        if v is not None:
            return v
        if not self.has_unbacked(s):
            hint = self.hint_of(s)
            if hint is False:
                prov = provenance or capture(self._current_op())
                self._record(_negate(s), GuardKind.GUARD, prov, Decision.HINT, original=_negate(expr),
                             message="this check fails at the example sizes")
                return False
        prov = provenance or capture(self._current_op())
        self._record(s, GuardKind.RUNTIME_ASSERT, prov, Decision.USER_CHECK, original=expr, message=message)
        return True

    def check_limit(self, expr, *, provenance: Provenance, message: str) -> bool:
        """A size limit eager enforces at this op (see :mod:`shapes.limits`).

        Proven by ranges: nothing is kept.  False at the example sizes: the
        negation becomes a guard (the path to the error) and False is
        returned, so the tracer raises like eager.  Otherwise it joins
        :attr:`limits` unless an earlier limit implies it.
        """
        s = self.simplify(sympy.sympify(expr))
        if s is sympy.true or s in self._limit_seen:
            return True
        # Bounds of the product alone: static_bool's factoring is slow on these
        # large products and gains nothing for a single monotone term.
        v = None
        if isinstance(s, sympy.Le) and s.rhs.is_number:
            try:
                r = bound(s.lhs, self.ranges)
                v = True if r.upper <= s.rhs else False if r.lower > s.rhs else None
            except TypeError:
                v = None
        elif s is sympy.false:
            v = False
        if v is not None:
            self.log_step("static", s, sympy.true if v else sympy.false, "static")
        if v is True:
            self._limit_seen.add(s)
            return True
        if v is None and not self.has_unbacked(s):
            v = None if self.hint_of(s) is not False else False
        if v is False:
            self._record(_negate(s), GuardKind.GUARD, provenance, Decision.EAGER_LIMIT,
                         original=_negate(expr), message=message)
            return False
        self._limit_seen.add(s)
        if isinstance(s, sympy.Le) and s.rhs.is_number:
            for i, old in enumerate(self.limits):
                o = old.expr
                if not (isinstance(o, sympy.Le) and o.rhs == s.rhs):
                    continue
                # The largest allocation bounds the smaller ones (B*T*768 <= B*T*3072).
                # Sizes are never negative, so s <= o where 0 <= s / o <= 1.
                if _ratio_at_most_one(s.lhs, o.lhs, self.ranges):
                    return True
                if _ratio_at_most_one(o.lhs, s.lhs, self.ranges):
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

    # ------------------------------------------------------------------ views

    @property
    def guards(self) -> list[Guard]:
        """Conditions decided by example sizes (recompile elsewhere) and specializations."""
        return [g for g in self.records if g.kind is not GuardKind.RUNTIME_ASSERT]

    @property
    def runtime_asserts(self) -> list[Guard]:
        return [g for g in self.records if g.kind is GuardKind.RUNTIME_ASSERT]

    @property
    def input_symbols(self) -> list[sympy.Symbol]:
        return [s for s in self.hints]

    def replacement_of(self, s):
        return self.replacements.get(s, s)

    def initial_axioms(self) -> list:
        """Facts that are not guards or asserts: ranges and op semantics."""
        return [e.after for e in self.log if e.kind == "axiom"]


def _ratio_at_most_one(a, b, ranges) -> bool:
    """``0 <= a / b <= 1`` by ranges (``b`` never 0 there)."""
    try:
        r = bound(a / b, ranges)  # a product of sizes over another: equal factors cancel as built
    except (TypeError, ZeroDivisionError):
        return False
    return r.lower >= 0 and r.upper <= 1


def integer_valued(e) -> bool:
    """Known to take integer values only (``N // 2`` is, ``N / 2`` and ``Min(N, 5.5)`` are not);
    rules that round to integers must check this."""
    return e.is_integer is True


def _negate(e):
    n = sympy.Not(e)
    return n


def _py(v):
    if v is sympy.true:
        return True
    if v is sympy.false:
        return False
    if v.is_Integer:
        return int(v)
    if v.is_Rational and not v.is_Integer:
        return float(v)
    if v.is_Float:
        return float(v)
    if v.is_number:
        return float(v)
    raise TypeError(f"not a number: {v}")


def _overlap(a: ValueRange, b: ValueRange) -> bool:
    return max(a.lower, b.lower) <= min(a.upper, b.upper)


