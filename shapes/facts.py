"""The fact store: conditions known to hold, and what the engine learns from them.

Each fact (a guard, a runtime assert, an axiom such as a symbol's range) is
kept as given and also mined for three kinds of knowledge the decision
procedure (:mod:`shapes.decide`) uses: *replacements* (``N == 2*M`` lets
``N`` be written ``2*M`` everywhere; ``B*((W + H - 1)//H) == B`` lets the
compound atom ``(W + H - 1)//H`` be written ``1``), *divisibility*
(``N % 8 == 0``) and tighter *ranges* (``N <= 512``).

Example::

    >>> import sympy
    >>> from shapes.facts import FactStore
    >>> from shapes.symbols import SymbolTable
    >>> from shapes.value_ranges import ValueRange
    >>> table = SymbolTable(); N = table.add_backed("N", 8); M = table.add_backed("M", 8)
    >>> store = FactStore(table); store.ranges[N] = ValueRange(2, 1024)
    >>> store.add(sympy.Le(N, 512)); store.ranges[N]
    ValueRange(2, 512)
    >>> store.add(sympy.Eq(M, N)); store.apply_replacements(M + N)
    2*N
    >>> store.add(sympy.Eq(FloorDiv(N + 3, 4), 2)); store.apply_replacements(N * FloorDiv(N + 3, 4))
    2*N
"""
from __future__ import annotations

import math
from typing import Optional

import sympy

from .conditions import canonical_condition, normal_form
from .functions import FloorDiv, PyMod
from .symbols import SymbolTable
from .value_ranges import INF, UnsupportedExpression, ValueRange, bound


class FactStore:
    """Known facts and what was learned from them: ranges, replacements, divisibility.

    ``replacement_reasons`` maps a replaced symbol to the index of the record
    (guard or assert) whose equality replaced it, -1 for an axiom.
    ``atom_replacements`` does the same for compound atoms (``N // 4``,
    ``N % M``, ``Min(N, M)``) whose value a fact fixed, with reasons in
    ``atom_replacement_reasons``: a later question that holds the atom is asked
    about its value, so one guard that fixed it settles them all.  Keys are kept
    with every replacement applied and no value holds a key, so one pass of
    :meth:`apply_replacements` is complete.
    """

    def __init__(self, table: SymbolTable):
        self.table = table
        self.ranges: dict[sympy.Symbol, ValueRange] = {}
        # Input dims' ranges as declared (spec, dims=, 0/1 policy), before guards narrow `ranges`.
        self.declared_ranges: dict[sympy.Symbol, ValueRange] = {}
        self.replacements: dict[sympy.Symbol, sympy.Expr] = {}
        self.replacement_reasons: dict[sympy.Symbol, int] = {}
        self.atom_replacements: dict[sympy.Expr, sympy.Expr] = {}
        self.atom_replacement_reasons: dict[sympy.Expr, int] = {}
        self.divisible: dict[sympy.Expr, int] = {}
        self.facts: list[sympy.Basic] = []
        self._forms: Optional[list] = []
        self._relations: set = set()

    def add(self, expr, record_index: Optional[int] = None) -> None:
        """Know ``expr`` from now on (``record_index``: the guard or assert that says so)."""
        self.facts.append(expr)
        for f in sympy.And.make_args(expr):
            self._learn(f, record_index)
        self._forms = None  # recomputed lazily against the new replacements

    def _learn(self, f, record_index) -> None:
        """Derive replacements, divisibility and range refinements from a fact."""
        f = self.apply_replacements(f)
        if f is sympy.true or not isinstance(f, sympy.Rel):
            return
        self._relations.add(f)
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
            if not self._maybe_replace(lhs, rhs, record_index):
                self._maybe_replace_atom(lhs, rhs, record_index)
            return
        self._refine_range(f)

    def _maybe_replace(self, lhs, rhs, record_index) -> bool:
        """Replace a symbol that ``lhs == rhs`` fixes; True when one was replaced."""
        floats, unbacked = self.table.unbacked_float, self.table.unbacked
        if not (lhs.free_symbols or rhs.free_symbols):
            return False
        cands = []
        for a, b in ((lhs, rhs), (rhs, lhs)):
            # An integer symbol only stands for integer-valued expressions: N == M / 2
            # would make the integer rules' operands reals.
            if a.is_Symbol and a not in b.free_symbols and a not in floats and b.is_integer:
                cands.append((a, b))
        if not cands:
            # Linear in one symbol with unit coefficient: s + rest == 0.
            diff = sympy.expand(self._without_nonzero_factors(lhs - rhs))
            for s in sorted(diff.free_symbols, key=str):
                c = diff.coeff(s)
                if c not in (1, -1) or s in floats:
                    continue
                t = sympy.expand(-(diff - c * s) / c)
                if s not in t.free_symbols and t.is_integer:
                    cands.append((s, t))
            if not cands:
                return False

        def order(pair):
            s, target = pair
            # Replace unbacked before backed, later symbols before earlier ones,
            # so that the user's first-named dim survives.
            return (s not in unbacked, -self.table.creation_index(s))

        s, target = min(cands, key=order)
        if target.is_Symbol and target in unbacked and s not in unbacked:
            return False  # never express a backed input dim through a data-dependent one
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
        self._rewrite_atom_table({s: target})
        return True

    def _without_nonzero_factors(self, diff):
        """``diff`` (meaning ``diff == 0``) without the factors its ranges say are never 0:
        ``B*F - B == 0`` with ``B >= 2`` says ``F - 1 == 0``."""
        if diff.is_number:
            return diff
        c, factored = sympy.factor_terms(diff).as_coeff_Mul()
        if not factored.is_Mul:
            return diff
        keep = []
        for f in factored.args:
            try:
                r = bound(f, self.ranges)
            except UnsupportedExpression:
                r = None
            if r is None or r.lower <= 0 <= r.upper:
                keep.append(f)
        if len(keep) == len(factored.args):
            return diff
        return sympy.Mul(*keep)

    def _maybe_replace_atom(self, lhs, rhs, record_index) -> None:
        """Replace a compound atom (``(W + H - 1)//H``, ``N % M``) that ``lhs == rhs`` fixes.

        The equation is read as ``c*atom + rest == 0`` with ``c`` in {1, -1},
        after dropping factors known nonzero.  Only a replacement no larger
        than the atom is kept, so that expressions shrink; among several, the
        largest atom goes, and of equal ones the one over later-created symbols.
        """
        diff = self._without_nonzero_factors(lhs - rhs)
        if diff.is_number:
            return
        diff = sympy.expand(diff, deep=False)
        best = None
        for term in sympy.Add.make_args(diff):
            c, atom = term.as_coeff_Mul()
            if c not in (1, -1) or not _is_compound_atom(atom) or atom.is_integer is not True:
                continue
            target = -(diff - c * atom) / c
            if target.has(atom) or target.is_integer is not True:
                continue
            if self.table.has_unbacked(target) and not self.table.has_unbacked(atom):
                continue  # a size with an example value stays one (its questions take guards, not errors)
            grows = sympy.count_ops(target) - sympy.count_ops(atom)
            if grows > 0:
                continue
            late = -max((self.table.creation_index(s) for s in atom.free_symbols), default=0)
            key = (grows, late, sympy.default_sort_key(atom))
            if best is None or key < best[0]:
                best = (key, atom, target)
        if best is None:
            return
        _, atom, target = best
        if target.is_Symbol or _is_compound_atom(target):
            # What the ranges knew of the atom (H//4 > 7 bounds (H//4 + 1)//2) now bounds
            # the target, which stands for it from here on.
            try:
                ra, rt = bound(atom, self.ranges), bound(target, self.ranges)
            except UnsupportedExpression:
                ra = rt = None
            if ra is not None and max(ra.lower, rt.lower) <= min(ra.upper, rt.upper):
                self.ranges[target] = ValueRange(max(ra.lower, rt.lower), min(ra.upper, rt.upper))
        self.atom_replacements[atom] = target
        self.atom_replacement_reasons[atom] = record_index if record_index is not None else -1
        for k, v in list(self.replacements.items()):
            self.replacements[k] = v.xreplace({atom: target})
        self._rewrite_atom_table({atom: target}, skip=atom)

    def _rewrite_atom_table(self, subs: dict, skip=None) -> None:
        """Keep the atom table closed under a new replacement ``subs``: keys and values
        written with it, and a key that stops being a compound atom dropped."""
        for k, v in list(self.atom_replacements.items()):
            if k is skip:
                continue
            nk, nv = k.xreplace(subs), v.xreplace(subs)
            if nk is not k:
                reason = self.atom_replacement_reasons.pop(k)
                del self.atom_replacements[k]
                if not _is_compound_atom(nk) or nk == nv or nv.has(nk):
                    continue
                self.atom_replacement_reasons[nk] = reason
            self.atom_replacements[nk] = nv

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
            if atom in self.table.unbacked_float:
                continue
            rest = d - c * atom
            if rest.has(atom):
                continue
            try:
                r = bound(rest, self.ranges)
                old = self.ranges.get(atom) or bound(atom, self.ranges)
            except UnsupportedExpression:
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

    def apply_replacements(self, e):
        """``e`` with every replaced symbol and compound atom written as what replaced it."""
        if e.is_number:
            return e
        if self.replacements and (e.free_symbols & self.replacements.keys()):
            e = e.xreplace(self.replacements)
        if self.atom_replacements and not e.is_Atom:
            e = e.xreplace(self.atom_replacements)
        return e

    def known(self, e) -> Optional[bool]:
        """True/False when ``e`` or its negation is a known fact (either way round), else None."""
        neg = sympy.Not(e)
        for c, val in ((e, True), (neg, False)):
            if not isinstance(c, sympy.Rel):
                continue
            for form in (c, c.reversed, canonical_condition(c)):
                if form in self._relations:
                    return val
        return None

    def normal_forms(self) -> list:
        """Every fact's conjuncts as ``(g, op)`` meaning ``g op 0`` (see :func:`shapes.conditions.normal_form`)."""
        if self._forms is None:
            forms = []
            for f in self.facts:
                for a in sympy.And.make_args(self.apply_replacements(f)):
                    nf = normal_form(a)
                    if nf is not None:
                        forms.append(nf)
            self._forms = forms
        return self._forms

    def ranges_for(self, size_oblivious: bool) -> dict:
        """The ranges to bound with: size-oblivious questions take data-dependent sizes as >= 2."""
        if not size_oblivious:
            return self.ranges
        r = dict(self.ranges)
        for s in self.table.unbacked:
            # Only sizes that can be >= 2: a boolean item() in [0, 1] made [2, 2]
            # would decide Eq(b, 1) False with no guard (found by translation validation).
            if s in r and r[s].lower >= 0 and r[s].upper >= 2:
                r[s] = ValueRange(max(2, r[s].lower), r[s].upper)
        return r


def _is_compound_atom(e) -> bool:
    """A function application the fact store may replace as a whole (``N // 4``, ``Min(N, M)``)."""
    return isinstance(e, (sympy.Function, sympy.Min, sympy.Max)) and not e.is_number


def integer_valued(e) -> bool:
    """Known to take integer values only (``N // 2`` is, ``N / 2`` and ``Min(N, 5.5)`` are not);
    rules that round to integers must check this.

    >>> N = sympy.Symbol("N", integer=True)
    >>> integer_valued(FloorDiv(N, 2)), integer_valued(N / 2)
    (True, False)
    """
    return e.is_integer is True
