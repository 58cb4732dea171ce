"""The records the engine keeps: guards, runtime asserts, specializations.

These are plain data; :mod:`guards` renders, checks and explains them.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Optional

import sympy

from .enums import TextEnum
from .provenance import Provenance


class GuardKind(TextEnum):
    """Why a condition must hold at other sizes.

    * ``GUARD``: decided by the example size (hint); other sizes that violate
      it take another path (a recompile for a compiler).
    * ``RUNTIME_ASSERT``: reached through ``torch._check`` / ``expect_true``;
      assumed while tracing and checked when the program runs (an error, never
      a recompile).
    * ``SPECIALIZATION``: a dim fixed to a constant (0/1 policy or an
      equality with a constant); the traced program is only valid there.
    """

    GUARD = "guard"
    RUNTIME_ASSERT = "runtime_assert"
    SPECIALIZATION = "specialization"


class Decision(str, enum.Enum):
    """How the engine settled a question."""

    HINT = "hint"              # by the example size
    ZERO_ONE = "zero_one"      # 0/1 specialization policy at symbol creation
    USER_CHECK = "user_check"  # torch._check / expect_true
    INT_CONVERSION = "int_conversion"  # int() of a size forced a constant
    USER_RANGE = "user_range"  # the range the user gave for a dim
    EAGER_LIMIT = "eager_limit"  # a size limit eager enforces (storage size within int64)


@dataclass
class Guard:
    """One condition the traced program depends on.

    ``expr`` is a sympy boolean over the named dim symbols (final form,
    after the engine's simplifications); ``original`` is the condition as
    first raised, before simplification.

    ``defined_when`` is where ``expr`` speaks at all, for records whose sizes
    only exist on their path: eager's storage limit ``384*B*(B*T // B) <= ...``
    is about a tensor whose size ``B*T // B`` exists where ``B != 0``.  At
    sizes outside it the record says nothing (another path is taken there).
    ``sympy.true`` for guards and asserts, which are checked everywhere.
    """

    expr: sympy.Basic
    kind: GuardKind
    provenance: Provenance
    decided_by: Decision = Decision.HINT
    original: Optional[sympy.Basic] = None
    message: str = ""
    index: int = 0
    symbols: tuple = field(default=(), compare=False)
    defined_when: sympy.Basic = field(default=sympy.true, compare=False)

    @property
    def filename(self) -> str:
        return self.provenance.filename

    @property
    def lineno(self) -> int:
        return self.provenance.lineno

    @property
    def code(self) -> str:
        return self.provenance.code

    @property
    def op(self) -> Optional[str]:
        return self.provenance.op

    def __str__(self) -> str:
        return f"[{self.kind.value}] {self.expr}  at {self.provenance}"

    def __repr__(self) -> str:
        op = f" in {self.op}" if self.op else ""
        return f"<Guard {self.kind.value}: {self.expr} at {self.provenance.location()}{op}>"


class StepKind(str, enum.Enum):
    """What one step of the decision log claims (see :class:`LogEntry`).

    >>> StepKind("static") is StepKind.STATIC, str(StepKind.FACT)
    (True, 'fact')
    """

    AXIOM = "axiom"        # ``after`` is assumed (symbol range, op semantics)
    FACT = "fact"          # ``after`` becomes a known fact (a guard or runtime assert)
    STATIC = "static"      # ``before`` equals the constant ``after`` by the facts, no guard
    REWRITE = "rewrite"    # ``before`` was rewritten to ``after`` by ``rule``
    FALLBACK = "fallback"  # an undecidable condition took a default (``guard_or_false``): no claim
    FINAL = "final"        # validation's own step: the final guards imply the original ones

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, kw_only=True)
class LogEntry:
    """One engine decision, replayable by :mod:`validation`.

    ``kind`` (a :class:`StepKind`) says what the step claims:

    * ``AXIOM``: ``after`` is assumed (symbol range, op semantics).
    * ``FACT``: ``after`` becomes a known fact (a guard or runtime assert).
    * ``STATIC``: ``before`` was decided to equal ``after`` (a constant) with
      no guard, from the facts known at that point.
    * ``REWRITE``: ``before`` was rewritten to ``after`` by ``rule``; the
      two must be equal under the facts known at that point.
    * ``FALLBACK``: an undecidable condition took a default value without a
      guard (torch's ``guard_or_false``); not a claim of truth.

    ``n_facts`` is how many facts (axioms included) existed when the step was
    taken: the step may only rely on those.

    >>> import sympy
    >>> LogEntry(kind=StepKind.AXIOM, before=sympy.true, after=sympy.Symbol("N") >= 2, rule="range", n_facts=0).kind
    <StepKind.AXIOM: 'axiom'>
    """

    kind: StepKind
    before: sympy.Basic
    after: sympy.Basic
    rule: str
    n_facts: int

    def __post_init__(self):
        object.__setattr__(self, "kind", StepKind(self.kind))  # "static" reads as StepKind.STATIC
