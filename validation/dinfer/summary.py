"""The summary of an input space: one short formula per outcome.

Classes are what the search finds; a person wants regions: *valid iff
H >= 8 and W >= 8*, then which error the rest raises.  For each outcome
(ok, each distinct error by type and user line, data-dependent decisions,
what symshape cannot trace) the union of its classes is rewritten as the
shortest of three forms, each proved equal to the union with Z3 inside the
box (inside the classified sizes when the search was incomplete):

* a conjunction of atoms the union implies (per-dim bounds, divisibility,
  equalities, any condition a class was built from);
* the negation of such a conjunction for the other outcomes (``H <= 7 or W <= 7``);
* the classes themselves, each widened by dropping conditions while it stays
  inside the union, then deduplicated.

Where no form is proved in time the region is the list of its classes.

Example::

    >>> from validation import dinfer
    >>> def f(x):
    ...     return x.view(-1, 4)
    >>> space = dinfer(f, "x: f32[B, N]", dims={"B": (1, 4), "N": (1, 16)})
    >>> space.summary.valid_iff
    '(B*N) % 4 == 0'
    >>> print(space.summary.regions[1].formula())
    (B*N) % 4 != 0
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import sympy
import z3

from guards.for_people import people_dnf
from guards.render import clean_message, render_dnf, to_python
from shapes.conditions import canonical_condition
from shapes.enums import TextEnum
from shapes.functions import FloorDiv, PyMod

from ..input_space import ClassError, Status
from ..z3_translate import UntranslatableExpression
from .z3box import bound_of

#: The whole box and no size, in words.
EVERY = "every size in the ranges"
NONE = "no size in the ranges"

#: Most candidate atoms tried per region (the simplest first).
MAX_ATOMS = 96
#: A form this short is taken without trying the longer-to-compute ones.
SHORT = 3


class RegionKind(TextEnum):
    """The outcome a :class:`Region` has: the program runs, raises, needs tensor data to
    decide, or symshape could not trace it."""

    OK = "ok"
    ERROR = "error"
    DATA_DEPENDENT = "data-dependent"
    UNSUPPORTED = "unsupported"


@dataclass
class Region:
    """The sizes on which the program has one outcome.

    Attributes:
        kind: a :class:`RegionKind`.
        dnf: the region as a disjunction of conjunctions of sympy conditions
            (``[()]`` is every size).
        short: True when a short form was found (else ``dnf`` lists the classes).
        proved: True when Z3 proved ``dnf`` equal to the union of ``classes``.
        classes: indices of the classes merged here.
        error: for errors, the exception and user line (from ``example``'s class).
        example: the smallest example size of the region.
        run_time: for ok regions of data-dependent programs, the conditions on
            data the program also needs, in the user's names.
        message: for data-dependent and unsupported regions, what happened.
    """

    kind: RegionKind
    dnf: list
    short: bool = False
    proved: bool = False
    classes: list = field(default_factory=list)
    error: Optional[ClassError] = None
    example: dict = field(default_factory=dict)
    run_time: str = ""
    message: str = ""

    def formula(self) -> str:
        """The region as a Python boolean expression over the dim names."""
        return render_dnf(self.dnf)

    def text(self) -> str:
        """The region as a person reads it: solved per dim, ``every size in the ranges``
        for the whole box (never ``True``)."""
        return people_dnf(self.dnf, always=EVERY, never=NONE)

    def sentence(self) -> str:
        """``valid iff H >= 8``, ``RuntimeError for every size in the ranges``, ..."""
        label = {RegionKind.OK: "valid", RegionKind.UNSUPPORTED: "unsupported by symshape"}.get(
            self.kind, self.error.type if self.kind is RegionKind.ERROR and self.error else self.kind.value)
        text = self.text()
        return f"{label} for {text}" if text in (EVERY, NONE) else f"{label} iff {text}"

    @property
    def conjuncts(self) -> int:
        return sum(len(d) for d in self.dnf)

    def title(self) -> str:
        if self.kind is RegionKind.OK:
            return "valid"
        if self.kind is RegionKind.ERROR:
            return f"{self.error.type} at {self.error.filename}:{self.error.lineno}"
        return self.kind

    def to_dict(self) -> dict:
        return {"kind": self.kind.value, "formula": self.formula(), "text": self.sentence(),
                "short": self.short, "proved": self.proved,
                "classes": list(self.classes), "example": dict(self.example),
                "error": self.error.to_dict() if self.error else None,
                "run_time": self.run_time or None, "message": self.message or None}


@dataclass
class Row:
    """One row a person reads: an outcome and, for sizes that run, one output formula.

    Classes with the same outcome and the same output (equal on each class, so
    ``[1, 10]`` where ``B == 1`` is a case of ``[B, 10]``) are one row; the
    classes stay in :attr:`InputSpace.classes` (``dinfer --detail``, ``--json``).
    """

    region: Region
    outputs: tuple = ()
    names: dict = field(default_factory=dict)

    def outcome(self) -> str:
        r = self.region
        if r.kind is RegionKind.OK:
            return "ok"
        if r.kind is RegionKind.ERROR:
            return r.error.type if r.error else "error"
        return r.kind.value

    @property
    def ok(self) -> Optional[bool]:
        """True where the sizes run, False where they raise, None where unknown."""
        return {RegionKind.OK: True, RegionKind.ERROR: False}.get(self.region.kind)

    def output_text(self) -> str:
        return ", ".join("[" + ", ".join(to_python(e, self.names) for e in o) + "]" for o in self.outputs)

    def to_dict(self) -> dict:
        r = self.region
        return {"outcome": self.outcome(), "text": r.text(), "classes": list(r.classes),
                "example": dict(r.example), "output": self.output_text() or None,
                "error": r.error.to_dict() if r.error else None,
                "message": clean_message(r.message) if r.message else None}


@dataclass
class Summary:
    """Regions by outcome, the valid one first (see :func:`summarize`)."""

    regions: list
    complete: bool
    names: list
    rows: list = field(default_factory=list)

    @property
    def valid(self) -> Optional[Region]:
        return next((r for r in self.regions if r.kind is RegionKind.OK), None)

    @property
    def valid_iff(self) -> str:
        """The sizes the program runs on, as Python (``"False"`` when none was found)."""
        v = self.valid
        return v.formula() if v is not None else "False"

    def valid_text(self) -> str:
        """The valid sizes in words: ``valid iff 28 <= H <= 31``, ``every size in the ranges
        runs``, ``no size in the ranges runs``."""
        v = self.valid
        if v is None:
            return "no size in the ranges runs" if self.complete else "no size found that runs"
        text = v.text()
        return "every size in the ranges runs" if text == EVERY else f"valid iff {text}"

    def lines(self, width: int = 100) -> list:
        """The summary as text lines: ``valid iff``, run-time conditions, then the other regions."""
        out = []
        scope = "" if self.complete else "   (among the sizes classified so far)"
        v = self.valid
        unknown = [r for r in self.regions if r.kind in (RegionKind.UNSUPPORTED, RegionKind.DATA_DEPENDENT)]
        if unknown and not scope:
            scope = "   (where the outcome is known: " + " and ".join(
                sorted({"symshape could not trace some sizes" if r.kind is RegionKind.UNSUPPORTED else
                        "some sizes branch on data" for r in unknown})) + ", see below)"
        out.append(f"{self.valid_text()}{scope}")
        if v is not None and v.run_time:
            out.append(f"  and, at run time, {v.run_time}")
        for r in self.regions:
            if r.kind is RegionKind.OK:
                continue
            ex = ", ".join(f"{k}={x}" for k, x in r.example.items())
            if r.kind is RegionKind.ERROR:
                out.append(r.sentence() + (f"   (e.g. {ex})" if ex else ""))
                out.append(_clip(f"  {clean_message(r.error.message)}", width))
                out.append(_clip(f"  at {r.error.location()}", width))
            else:
                out.append(r.sentence() + (f"   (e.g. {ex})" if ex else ""))
                if r.message:
                    out.append(_clip(f"  {clean_message(r.message)}", width))
        unproved = [r for r in self.regions if r.short and not r.proved]
        if any(not r.short for r in self.regions):
            out.append("  (no short form proved for some regions: they list their classes)")
        elif unproved:
            out.append("  (some short forms were not proved equal to their classes in time)")
        return out

    def to_dict(self) -> dict:
        return {"valid_iff": self.valid_iff, "valid_text": self.valid_text(), "complete": self.complete,
                "regions": [r.to_dict() for r in self.regions], "rows": [r.to_dict() for r in self.rows]}


def _clip(s: str, width: int) -> str:
    return s if len(s) <= width else s[: width - 3] + "..."


def _key(c):
    if c.status is Status.OK or (c.status is Status.DATA_DEPENDENT and c.decision is None):
        return (RegionKind.OK,)
    if c.status is Status.ERROR:
        e = c.error
        return (RegionKind.ERROR, e.type if e else "error", e.filename if e else "", e.lineno if e else 0)
    if c.status is Status.DATA_DEPENDENT:
        d = c.decision
        return (RegionKind.DATA_DEPENDENT, d.filename, d.lineno)
    return (RegionKind.UNSUPPORTED,)


def _normalize(c):
    """An atom in the form it prints best: inclusive bounds, constants on the right."""
    b = bound_of(c)
    if b is not None:
        s, lo, hi = b
        if lo == hi:
            return sympy.Eq(s, lo)
        return sympy.Ge(s, lo) if hi == math.inf else sympy.Le(s, hi)
    if isinstance(c, sympy.Not):
        c = c.args[0].negated if isinstance(c.args[0], sympy.Rel) else c
    try:
        return canonical_condition(c)
    except (TypeError, ValueError):
        return c


def _negate(c):
    if isinstance(c, sympy.And):
        return sympy.Or(*[_negate(a) for a in c.args], evaluate=False)
    if isinstance(c, sympy.Or):
        return sympy.And(*[_negate(a) for a in c.args], evaluate=False)
    n = sympy.Not(c)
    return _normalize(n) if isinstance(n, (sympy.Rel, sympy.Not)) else n


def _size(c) -> int:
    return sympy.count_ops(c) + len(c.free_symbols)


class _Summarizer:
    def __init__(self, space, z, terms):
        self.space, self.z, self.terms = space, z, terms
        self.names = list(space.dims)
        if space.complete:
            self.universe = []
        else:
            self.universe = [z3.Or(*terms)] if terms else [z3.BoolVal(False)]
        self._tcache = {}
        self._held = {}
        self._extents = {}

    def term(self, c):
        t = self._tcache.get(c)
        if t is None:
            t = self._tcache[c] = self.z.term(c)
        return t

    def implies(self, given, goal) -> bool:
        """Proved inside the universe: ``given`` (Z3 terms) implies ``goal`` (a Z3 term)."""
        if self.z.out_of_time():
            return False
        return self.z.implied(goal, [*self.universe, *given], cap_ms=1500)

    def pool(self, region_term):
        atoms = {}
        for c in self.space.classes:
            if c.imprecise:
                continue
            for a in c.conditions:
                for x in (_normalize(a), _negate(a)):
                    if isinstance(x, sympy.Rel) or isinstance(x, (sympy.Or, sympy.And)):
                        atoms.setdefault(x, None)
        # Divisibility of one dim by the constants the conditions divide by: what
        # ``B*C*T == 4*B*T*(C // 4)`` means, said simply (C % 4 == 0).
        divisors = set()
        for c in self.space.classes:
            for a in c.conditions:
                for f in a.atoms(FloorDiv, PyMod):
                    if f.args[1].is_Integer and 1 < int(f.args[1]) <= 1024:
                        divisors.add(int(f.args[1]))
        divisors |= {a * b for a in divisors for b in divisors if a * b <= 8}
        for n in self.names:
            lo, hi = self.space.dims[n]
            if lo == hi:
                continue
            x = self.space.symbols[n]
            for k in sorted(divisors):
                e = sympy.Eq(PyMod(x, k), 0)
                atoms.setdefault(e, None)
                atoms.setdefault(_negate(e), None)
                if k <= 8:  # residues: N % 4 >= 2 is "N // 2 is odd"
                    for r in range(1, k):
                        atoms.setdefault(sympy.Ge(PyMod(x, k), r), None)
                        atoms.setdefault(sympy.Le(PyMod(x, k), r - 1), None)
        for n in self.names:
            if self.z.out_of_time():
                break
            ends = self.extent(region_term, n)
            if ends is None:
                continue
            lo, hi = ends
            blo, bhi = self.space.dims[n]
            s = self.space.symbols[n]
            if lo is not None and lo > blo:
                atoms.setdefault(sympy.Ge(s, lo), None)
            if hi is not None and hi < bhi:
                atoms.setdefault(sympy.Le(s, hi), None)
        out = []
        for a in sorted(atoms, key=lambda a: (_size(a), str(a))):
            try:
                self.term(a)
            except (UntranslatableExpression, z3.Z3Exception):
                continue
            out.append(a)
        return out[:MAX_ATOMS]

    def extent(self, region_term, n, cap_ms: int = 1000):
        key = (region_term.hash(), n)
        if key not in self._extents:
            self._extents[key] = self.z.extent(z3.And(*self.universe, region_term), n, cap_ms=cap_ms)
        return self._extents[key]

    def box_form(self, region_term):
        """The region as bounds per dim (``28 <= H <= 31 and W >= 28``) when it is a box
        (proved with Z3), else None."""
        conds = []
        for n in self.names:
            if self.z.out_of_time():
                return None
            # A box reads best of all forms: worth a longer wait on a busy machine.
            ends = self.extent(region_term, n, cap_ms=4000)
            if ends is None or None in ends:
                return None
            lo, hi = ends
            blo, bhi = self.space.dims[n]
            s = self.space.symbols[n]
            if lo == hi and blo != bhi:
                conds.append(sympy.Eq(s, lo))
                continue
            if lo > blo:
                conds.append(sympy.Ge(s, lo))
            if hi < bhi:
                conds.append(sympy.Le(s, hi))
        if self.z.out_of_time() or not self.z.implied(region_term, [*self.universe, self.z.conj(conds)], cap_ms=4000):
            return None
        return tuple(conds)

    def held(self, region_term, atoms):
        """The atoms the region implies: one incremental solver, a push/pop per atom."""
        key = region_term.hash()
        if key in self._held:
            return self._held[key]
        s = self.z.solver(1500)
        s.add(*self.universe, region_term)
        out = []
        for a in atoms:
            if self.z.out_of_time():
                break
            s.push()
            s.set(timeout=self.z.ms(1500))
            s.add(z3.Not(self.term(a)))
            if s.check() == z3.unsat:
                out.append(a)
            s.pop()
        self._held[key] = out
        return out

    def conj_form(self, region_term, atoms):
        """A conjunction of ``atoms`` equal to the region, shortest found, or None."""
        held = self.held(region_term, atoms)
        if not self.implies([self.z.conj(held)], region_term):
            return None
        i = len(held) - 1
        while i >= 0:
            rest = held[:i] + held[i + 1:]
            if self.implies([self.z.conj(rest)], region_term):
                held = rest
            i -= 1
        return self._ordered(held)

    def widen(self, region_term, member_classes):
        """The classes, each with the conditions dropped that the region does not need."""
        dnf = []
        for c in member_classes:
            conds = list(c.conditions)
            i = len(conds) - 1
            while i >= 0:
                rest = conds[:i] + conds[i + 1:]
                if self.implies([self.z.conj(rest)], region_term):
                    conds = rest
                i -= 1
            conds = [_normalize(x) for x in conds]
            dnf.append(self._ordered(conds))
        # Drop disjuncts a kept one covers (of two equal ones the first stays), then
        # those a later kept one covers.
        out = []
        for d in sorted(set(dnf), key=lambda d: (len(d), str(d))):
            if not any(self.implies([self.z.conj(d)], self.z.conj(e)) for e in out):
                out.append(d)
        i = 0
        while i < len(out):
            if any(j != i and self.implies([self.z.conj(out[i])], self.z.conj(e)) for j, e in enumerate(out)):
                del out[i]
            else:
                i += 1
        return out

    def _ordered(self, conds):
        order = {n: i for i, n in enumerate(self.names)}

        def key(c):
            syms = sorted((order.get(s.name, 99) for s in c.free_symbols))
            b = bound_of(c)
            # Lower bound, then upper: the two print as one chained comparison.
            kind = (0 if b[1] != -math.inf else 1) if b is not None else 2
            return (syms[0] if syms else 99, len(syms), kind, str(c))
        return tuple(sorted((self._edge(c) for c in conds), key=key))

    def _edge(self, c):
        """``B <= 1`` where 1 is the smallest size searched reads ``B == 1``; small sets of
        sizes of one dim read ``N in (1, 2, 4)``."""
        if isinstance(c, sympy.Rel) and isinstance(c.lhs, PyMod) and c.rhs.is_Integer:
            # N % 3 <= 0 is N % 3 == 0; N % 3 >= 1 is N % 3 != 0
            k, r = c.lhs.args[1], int(c.rhs)
            lo_r = {sympy.Ge: r, sympy.Gt: r + 1}.get(type(c))
            hi_r = {sympy.Le: r, sympy.Lt: r - 1}.get(type(c))
            if hi_r == 0 or (k.is_Integer and lo_r == int(k) - 1):
                return sympy.Eq(c.lhs, 0 if hi_r == 0 else int(k) - 1)
            if lo_r == 1:
                return sympy.Ne(c.lhs, 0)
            if k == 2 and r == 1 and isinstance(c, (sympy.Eq, sympy.Ne)):  # N % 2 != 1 is N % 2 == 0
                return (sympy.Ne if isinstance(c, sympy.Eq) else sympy.Eq)(c.lhs, 0)
        b = bound_of(c)
        if b is not None and b[0].name in self.space.dims:
            s, lo, hi = b
            blo, bhi = self.space.dims[s.name]
            if hi == blo:
                return sympy.Eq(s, blo)
            if lo == bhi:
                return sympy.Eq(s, bhi)
            return c
        simple = isinstance(c, sympy.Rel) and c.rhs.is_Integer and (
            c.lhs.is_Symbol or (isinstance(c.lhs, PyMod) and c.lhs.args[0].is_Symbol))
        if len(c.free_symbols) == 1 and not simple and not self.z.out_of_time():
            (s,) = c.free_symbols
            if s.name in self.space.dims:
                for target, neg in ((c, False), (sympy.Not(c), True)):
                    vals = self._few_values(target, s)
                    if vals:
                        if neg:
                            return sympy.And(*[sympy.Ne(s, v) for v in vals], evaluate=False)
                        return sympy.Or(*[sympy.Eq(s, v) for v in vals], evaluate=False)
        return c

    def _few_values(self, cond, s, most: int = 4):
        """The sizes of ``s`` where ``cond`` holds, if there are 2..``most`` of them (else None)."""
        try:
            t = self.z.term(cond) if not isinstance(cond, sympy.Not) else z3.Not(self.z.term(cond.args[0]))
        except (UntranslatableExpression, z3.Z3Exception):
            return None
        v = self.z.vars[s.name]
        solver = self.z.solver(500)
        solver.add(t)
        vals = []
        while len(vals) <= most:
            if solver.check() != z3.sat:
                break
            x = solver.model().eval(v, model_completion=True).as_long()
            vals.append(x)
            solver.add(v != x)
        else:
            return None
        if solver.check() != z3.unsat or not 2 <= len(vals) <= most:
            return None
        return sorted(vals)

    def run_time(self, members) -> str:
        """The run-time (data) conditions of ok classes in the user's names: once when
        every class needs the same (Z3 proves it on each class), else per class."""
        with_data = [c for c in members if c.data_conditions]
        if not with_data:
            return ""
        rep = with_data[0]
        text = " and ".join(to_python(d, rep.names) for d in rep.data_conditions)
        per_class = {}
        for c in with_data[1:]:
            same = False
            try:
                if not self.z.out_of_time() and set(c.data_conditions) == set(rep.data_conditions):
                    same = True
                elif not self.z.out_of_time():
                    given = [self.term(x) for x in (*c.conditions, *c.data_axioms)]
                    a, b = self.z.conj(rep.data_conditions), self.z.conj(c.data_conditions)
                    same = self.z.implied(a == b, given, cap_ms=1500)
            except (UntranslatableExpression, z3.Z3Exception):
                same = False
            if not same:
                t = " and ".join(to_python(d, c.names) for d in c.data_conditions)
                per_class.setdefault(t, c)
        if not per_class:
            return text
        parts = [f"{text} (where {rep.describe()})"]
        parts += [f"{t} (where {c.describe()})" for t, c in per_class.items()]
        return "; ".join(parts)

    def region(self, kind, members):
        terms = [self.terms[c.index - 1] for c in members]
        region_term = z3.Or(*terms)
        ex_class = min(members, key=lambda c: (sum(c.example.values()), [c.example[n] for n in self.names]))
        r = Region(kind=kind, dnf=[tuple(c.conditions) for c in members], classes=[c.index for c in members],
                   error=ex_class.error, example=dict(ex_class.example), message=ex_class.message)
        if kind is RegionKind.DATA_DEPENDENT and ex_class.decision is not None:
            r.message = f"{ex_class.decision.message} (at {ex_class.decision.location()})"
        if kind is RegionKind.OK:
            r.run_time = self.run_time(members)
            r.message = ""
        if any(c.imprecise for c in members):
            return r
        try:
            box = self.box_form(region_term)
            if box is not None:
                r.dnf, r.short, r.proved = [self._ordered(box)], True, True
                return r
            candidates = []
            atoms = self.pool(region_term)
            conj = self.conj_form(region_term, atoms)
            if conj is not None:
                candidates.append([conj])
            others = [t for t in self.terms if not any(t is x for x in terms)]
            short = conj is not None and len(conj) <= SHORT
            if not short and not self.z.out_of_time() and (others or self.space.complete):
                rest_term = z3.Not(region_term)
                comp = self.conj_form(rest_term, atoms)
                if comp is not None and comp:
                    candidates.append([(_negate(a),) for a in comp])
            short = short or any(sum(len(d) for d in c) <= SHORT for c in candidates)
            if not short and not self.z.out_of_time():
                candidates.append(self.widen(region_term, members))
        except (UntranslatableExpression, z3.Z3Exception):
            return r
        candidates = [c for c in candidates if c]
        if not candidates or self.z.out_of_time():
            return r
        best = min(candidates, key=lambda d: (sum(len(x) for x in d), len(d)))
        best = [self._ordered(d) for d in best]
        r.dnf, r.short = best, True
        formula = z3.Or(*[self.z.conj(d) for d in best])
        r.proved = (self.implies([formula], region_term) and self.implies([region_term], formula))
        if not r.proved:
            r.dnf, r.short = [tuple(c.conditions) for c in members], False
        return r


def _same_output(s, rep, c) -> bool:
    """``c``'s outputs equal ``rep``'s on every size of ``c`` (Z3 proves it where they differ
    as formulas)."""
    a, b = tuple(map(tuple, rep.output_shapes)), tuple(map(tuple, c.output_shapes))
    if len(a) != len(b) or any(len(x) != len(y) for x, y in zip(a, b)):
        return False
    pairs = [(x, y) for sa, sb in zip(a, b) for x, y in zip(sa, sb) if x != y]
    if not pairs:
        return True
    if s.z.out_of_time() or c.imprecise:
        return False
    try:
        goal = s.z.conj([sympy.Eq(x, y) for x, y in pairs])
        return s.implies([s.terms[c.index - 1]], goal)
    except (UntranslatableExpression, z3.Z3Exception, TypeError):
        return False


def _rows(s, region, members) -> list:
    """``region`` split by output formula: one :class:`Row` per distinct output."""
    groups = []
    for c in sorted(members, key=lambda c: (-len(set().union(*[e.free_symbols for o in c.output_shapes for e in o]
                                                          or [set()])), c.index)):
        for g in groups:
            if region.kind is not RegionKind.OK or _same_output(s, g[0], c):
                g.append(c)
                break
        else:
            groups.append([c])
    if len(groups) == 1:
        rep = groups[0][0]
        return [Row(region=region, outputs=tuple(rep.output_shapes), names=dict(rep.names))]
    out = []
    for g in groups:
        sub = s.region(region.kind, sorted(g, key=lambda c: c.index))
        out.append(Row(region=sub, outputs=tuple(g[0].output_shapes), names=dict(g[0].names)))
    return out


def summarize(space, z, terms) -> Summary:
    """Merge ``space``'s classes into one region per outcome (``terms``: the classes' Z3 terms)."""
    groups = {}
    for c in space.classes:
        groups.setdefault(_key(c), []).append(c)
    s = _Summarizer(space, z, terms)
    regions, rows = [], []
    for key in sorted(groups, key=lambda k: (k[0] is not RegionKind.OK, k[0] is RegionKind.UNSUPPORTED, min(
            c.index for c in groups[k]))):
        regions.append(s.region(key[0], groups[key]))
        rows.extend(_rows(s, regions[-1], groups[key]))
    return Summary(regions=regions, complete=space.complete, names=list(space.dims), rows=rows)

