"""The narrow interface the rewrite rules and the size-1 policy decide through.

:mod:`shapes.simplify` (the rewrite rules) and :mod:`shapes.size_oblivious`
(which questions are layout-only) need a few things from the engine: the
facts (ranges, known divisors), a static decision that records no guard, and
the log.  They take any :class:`Reasoner`; the decision procedure
(:class:`shapes.decide.DecisionProcedure`) is the one the engine hands them,
so they never see :class:`~shapes.env.ShapeEnv` and no call goes back up
through it.

Example::

    >>> from shapes.decide import DecisionProcedure
    >>> from shapes.env import ShapeEnv
    >>> env = ShapeEnv()
    >>> isinstance(env.decisions, Reasoner)
    True
"""
from __future__ import annotations

from typing import Optional, Protocol, runtime_checkable

from .guard import StepKind


@runtime_checkable
class Reasoner(Protocol):
    """What a rewrite rule or a layout-only question may ask of the engine.

    ``ranges``: symbol (or compound atom) -> its ValueRange; ``divisible``:
    expression -> a known divisor; ``layout_exprs`` / ``layout_answers``: the
    size-1 policy's layout predicates and the answers it gave.
    """

    ranges: dict
    divisible: dict
    layout_exprs: set
    layout_answers: dict

    def static_bool(self, expr, *, log: bool = True, size_oblivious: bool = False) -> Optional[bool]:
        """The value the facts give ``expr``, else None; never a guard."""

    def decide_with_ranges(self, expr, ranges: dict) -> Optional[bool]:
        """Decide ``expr`` as if ``ranges`` were the symbols' ranges; logs nothing."""

    def simplify(self, expr):
        """``expr`` with replacements and the rewrite rules applied (logged)."""

    def hint_of(self, expr):
        """The value of ``expr`` at the example sizes, or None."""

    def log_step(self, kind: StepKind, before, after, rule: str) -> None:
        """Append one decision to the log."""

    def current_op(self) -> Optional[str]:
        """The ATen op being traced, None outside one."""
