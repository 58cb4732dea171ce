"""The ShapeEnv: one face over a trace's symbols, facts, and every decision about them.

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

The parts behind it live in their own modules: the symbol table
(:mod:`shapes.symbols`), the fact store (:mod:`shapes.facts`) and the
decision procedure with its log (:mod:`shapes.decide`).  The op a decision
was taken in comes from the tracer (``env.ops``, see :mod:`shapes.recorder`).
"""
from __future__ import annotations

from typing import Optional

import sympy

from . import simplify as rules
from .decide import NO_FALLBACK, DecisionProcedure
from .data_dependent_error import DataDependentError
from .facts import FactStore, integer_valued
from .guard import Decision, Guard, GuardKind, StepKind
from .provenance import Provenance
from .symbols import UNBACKED_PREFIX, DataSource, SizeSource, SymbolTable, UnbackedKind
from .value_ranges import INF, ValueRange

__all__ = ["ShapeEnv", "DataDependentError", "UNBACKED_PREFIX", "integer_valued"]


class ShapeEnv:
    """Symbols, their ranges and hints, the facts known about them, and the log.

    Args:
        specialize_zero_one: create no symbol for a dim whose example size is
            0 or 1 (it becomes a constant, with a specialization recorded),
            and give other size symbols a lower bound of 2.  This is PyTorch's
            policy; turn it off to keep 0 and 1 inside the dynamic range.

    ``table`` (:class:`~shapes.symbols.SymbolTable`), ``facts``
    (:class:`~shapes.facts.FactStore`) and ``decisions``
    (:class:`~shapes.decide.DecisionProcedure`) are the parts; the attributes
    below read through to them.  ``ops``: while a trace runs, the tracer's
    stack of ATen ops (anything with ``current()``), for provenance.
    """

    def __init__(self, *, specialize_zero_one: bool = True):
        self.table = SymbolTable()
        self.facts_store = FactStore(self.table)
        self.observers: list = []  # callables(entry, env) told of each log step
        self.decisions = DecisionProcedure(self.table, self.facts_store, specialize_zero_one=specialize_zero_one,
                                           current_op=self.current_op, on_step=self._tell_observers)
        self.ops = None
        # Index lookups whose index values the sizes determine but the engine cannot bound:
        # (provenance, message).  Nothing states where eager's index check passes there.
        self.unchecked_indices: list = []

    # ------------------------------------------------------------------ the parts' data

    symbols = property(lambda self: self.table.symbols, doc="name -> symbol, in creation order")
    hints = property(lambda self: self.table.hints, doc="backed symbol -> example size")
    sources = property(lambda self: self.table.sources, doc="symbol -> where the user's inputs give it")
    unbacked = property(lambda self: self.table.unbacked, doc="data-dependent symbol -> its DataSource")
    unbacked_float = property(lambda self: self.table.unbacked_float, doc="data-dependent real symbols")
    facts = property(lambda self: self.facts_store.facts, doc="every known fact, axioms included, in order")
    replacements = property(lambda self: self.facts_store.replacements, doc="symbol -> the expression it equals")
    replacement_reasons = property(lambda self: self.facts_store.replacement_reasons,
                                   doc="replaced symbol -> index of the record that replaced it (-1: an axiom)")
    divisible = property(lambda self: self.facts_store.divisible, doc="expression -> a known divisor")
    records = property(lambda self: self.decisions.records, doc="guards, specializations, runtime asserts")
    constraints = property(lambda self: self.decisions.constraints, doc="input-range assumptions")
    limits = property(lambda self: self.decisions.limits, doc="size limits eager enforces")
    log = property(lambda self: self.decisions.log, doc="every decision, replayable by validation")
    layout_exprs = property(lambda self: self.decisions.layout_exprs)
    oblivious_atoms = property(lambda self: self.decisions.oblivious_atoms)
    layout_answers = property(lambda self: self.decisions.layout_answers)
    last_data_dependent = property(lambda self: self.decisions.last_data_dependent,
                                   doc="the last DataDependentError raised (torch's C++ may re-raise its text)")

    @property
    def specialize_zero_one(self) -> bool:
        """PyTorch's 0/1 policy (see the class docstring); the decision procedure applies it."""
        return self.decisions.specialize_zero_one

    @specialize_zero_one.setter
    def specialize_zero_one(self, value: bool) -> None:
        self.decisions.specialize_zero_one = value

    @property
    def ranges(self) -> dict:
        """symbol (or compound atom such as ``H // 2``) -> its :class:`ValueRange`."""
        return self.facts_store.ranges

    declared_ranges = property(lambda self: self.facts_store.declared_ranges,
                               doc="input dims' ranges as declared (spec, dims=, 0/1 policy), before guards narrow")

    # ------------------------------------------------------------------ symbols

    def create_symbol(
        self,
        name: str,
        hint: int,
        *,
        range: Optional[tuple] = None,
        source: Optional[SizeSource] = None,
    ) -> sympy.Expr:
        """A backed size symbol named ``name`` with example value ``hint``.

        Returns a constant instead when the 0/1 policy specializes it.
        Creating the same name twice returns the same symbol (after checking
        the hints agree), so dims that share a name are one symbol.
        """
        old = self.table.existing(name, hint, source)
        if old is not None:
            return self.simplify(old)
        lo, hi = (range if range is not None else (0, INF))
        sym = self.table.add_backed(name, hint, range=(lo, hi), source=source)
        self.ranges[sym] = self.declared_ranges[sym] = ValueRange(lo, hi)
        self.decisions.add_axiom(_within(sym, lo, hi), "range")
        if self.specialize_zero_one:
            if hint in (0, 1):
                # The spec, not whoever called trace(), is where this comes from.
                prov = Provenance(filename="<input spec>", code=str(source) if source else name)
                self.decisions.record(sympy.Eq(sym, hint), GuardKind.SPECIALIZATION, prov, Decision.ZERO_ONE,
                                      message=f"example size {hint}: sizes 0 and 1 are specialized")
                return sympy.Integer(hint)
            # Sizes other than 0/1 are assumed >= 2: the policy behind the guard above.
            if lo < 2 <= hi:
                self.ranges[sym] = self.declared_ranges[sym] = ValueRange(2, hi)
                self.decisions.add_axiom(sympy.Ge(sym, 2), "zero_one_policy")
        r = self.ranges[sym]
        bounds = sympy.And(sympy.Ge(sym, r.lower) if r.lower > 0 else sympy.true,
                           sympy.Le(sym, r.upper) if r.upper < INF else sympy.true)
        if bounds is not sympy.true:
            policy = r.lower == 2 and self.specialize_zero_one
            why = (f"the trace assumes {name} >= 2: sizes 0 and 1 are specialized (a size 0 or 1 "
                   f"traces separately)" if policy else
                   f"the range of {name} ({r.lower} to {r.upper if r.upper < INF else 'any size'}; "
                   f"give dims={{{name!r}: (0, ...)}} to include size 0)" if r.lower == 1 else
                   f"the range given for {name}")
            self.constraints.append(Guard(expr=bounds, kind=GuardKind.GUARD, provenance=Provenance(
                filename="<input spec>", code=str(source) if source else name),
                decided_by=Decision.ZERO_ONE if policy else Decision.USER_RANGE, original=bounds,
                message=why, index=-1, symbols=(sym,)))
        return sym

    def create_unbacked(self, *, kind: Optional[UnbackedKind] = None, source: Optional[DataSource] = None,
                        range: Optional[tuple] = None) -> sympy.Symbol:
        """A data-dependent symbol ``u<N>`` (no hint) of the :class:`~shapes.symbols.UnbackedKind` ``kind``:
        a size (a count of elements: at least 0), any integer (the default), a bool (0 or 1) or a float.
        ``source`` says what produced it (its kind is the symbol's); without one only the kind is known.

        >>> env = ShapeEnv(); u = env.create_unbacked(kind="size"); env.ranges[u], env.describe_symbol(u)
        (ValueRange(0, inf), 'size')
        """
        if source is None:
            source = DataSource(kind=UnbackedKind(kind or UnbackedKind.INT))
        elif kind is not None and UnbackedKind(kind) is not source.kind:
            raise ValueError(f"a {UnbackedKind(kind).value} symbol cannot come from a {source.kind.value} source")
        kind = source.kind
        sym = self.table.add_unbacked(source)
        default = {UnbackedKind.SIZE: (0, INF), UnbackedKind.BOOL: (0, 1)}.get(kind, (-INF, INF))
        lo, hi = range if range is not None else default
        self.ranges[sym] = ValueRange(lo, hi)
        self.decisions.add_axiom(_within(sym, lo, hi), "range")
        return sym

    def describe_symbol(self, s) -> str:
        """Where ``s`` comes from, in the user's terms (``x.shape[0]``, the op that produced it)."""
        return self.table.describe(s)

    def is_unbacked(self, s) -> bool:
        return self.table.is_unbacked(s)

    def has_unbacked(self, e) -> bool:
        return self.table.has_unbacked(e)

    def add_op_axiom(self, expr, what: str) -> None:
        """Assume ``expr``: a fact that holds by an op's semantics (e.g. a
        nonzero count is at most numel)."""
        self.decisions.add_axiom(expr, what)

    def current_op(self) -> Optional[str]:
        """The ATen op the tracer is running (``aten.view.default``), None outside one."""
        return self.ops.current() if self.ops is not None else None

    # ------------------------------------------------------------------ decisions

    def _tell_observers(self, entry) -> None:
        for obs in self.observers:
            obs(entry, self)

    def log_step(self, kind: StepKind, before, after, rule: str) -> None:
        """Append one decision to the log (see :class:`~shapes.guard.LogEntry`)."""
        self.decisions.log_step(kind, before, after, rule)

    def simplify(self, expr):
        """Apply replacements and the rewrite rules; every step is logged."""
        return self.decisions.simplify(expr)

    def rewrite(self, expr):
        """``expr`` rewritten by the engine's rules alone (no replacements); every step is logged."""
        return rules.rewrite(self.decisions, expr)

    def note_layout(self, expr) -> None:
        """Remember ``expr`` as a layout predicate built for torch's C++ contiguity flags
        (see :mod:`shapes.size_oblivious`)."""
        self.decisions.layout_exprs.add(expr)

    def data_dependent_error(self, expr, provenance: Provenance) -> DataDependentError:
        """The error for a decision on ``expr`` that needs data (kept as :attr:`last_data_dependent`)."""
        return self.decisions.data_dependent(expr, provenance)

    def departure_since(self, log_index: int):
        """The first layout-only answer logged at or after ``log_index`` that differs from its
        value at the example sizes (a log entry), or None."""
        return self.decisions.departure_since(log_index)

    def static_bool(self, expr, *, log: bool = True, size_oblivious: bool = False) -> Optional[bool]:
        """The value of a boolean expression if the known facts decide it, else None.

        Never records a guard.  With ``log=True`` a decision is logged for
        validation.
        """
        return self.decisions.static_bool(expr, log=log, size_oblivious=size_oblivious)

    def ranges_for(self, size_oblivious: bool) -> dict:
        """The ranges to bound with (size-oblivious: data-dependent sizes taken as >= 2)."""
        return self.facts_store.ranges_for(size_oblivious)

    def hint_of(self, expr):
        """The value of ``expr`` at the example sizes, or None if it depends on data."""
        return self.decisions.hint_of(expr)

    def evaluate(self, expr, *, fallback=NO_FALLBACK, size_oblivious: bool = False,
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
        return self.decisions.evaluate(expr, fallback=fallback, size_oblivious=size_oblivious,
                                       provenance=provenance, decided_by=decided_by, cpp_site=cpp_site)

    def expect_true(self, expr, *, provenance: Optional[Provenance] = None, message: str = "") -> bool:
        """``torch._check(expr)``: assert at run time, assume from now on.

        Returns False only when ``expr`` is false at the example sizes (or
        statically): the program raises there, and the trace records the
        path condition that led to it.
        """
        return self.decisions.expect_true(expr, provenance=provenance, message=message)

    def check_limit(self, expr, *, provenance: Provenance, message: str) -> bool:
        """A size limit eager enforces at this op (see :mod:`shapes.limits`).

        Proven by ranges: nothing is kept.  False at the example sizes: the
        negation becomes a guard (the path to the error) and False is
        returned, so the tracer raises like eager.  Otherwise it joins
        :attr:`limits` unless an earlier limit implies it.
        """
        return self.decisions.check_limit(expr, provenance=provenance, message=message)

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
        return self.table.input_symbols

    def replacement_of(self, s):
        return self.replacements.get(s, s)

    def initial_axioms(self) -> list:
        """Facts that are not guards or asserts: ranges and op semantics."""
        return [e.after for e in self.log if e.kind is StepKind.AXIOM]


def _within(sym, lo, hi):
    """``lo <= sym <= hi`` with infinite ends left out (``true`` for an unbounded symbol)."""
    return sympy.And(sympy.Ge(sym, lo) if lo > -INF else sympy.true,
                     sympy.Le(sym, hi) if hi < INF else sympy.true)
