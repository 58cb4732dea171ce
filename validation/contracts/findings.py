"""The verdicts of a contract check: one :class:`Finding` per expectation, an :class:`EntryResult` per entry.

A finding's status is a :class:`Verdict`: ``pass`` (proved over every size in the
ranges), ``fail`` (refuted: the smallest counterexample, the user line of the
guard, assert or error that breaks it, and a suggested fix), ``undecided`` (the
engine could not decide; never reported as a pass) or ``error`` (the entry itself
could not be checked: the program did not import, a spec is malformed).

Example::

    >>> f = Finding(expectation="max_guards", status=Verdict.PASS, message="0 guard(s)")
    >>> str(f.status), f.to_dict()["counterexample"]
    ('pass', None)
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

from shapes.enums import TextEnum

from .contract import Contract


class Verdict(TextEnum):
    """The verdict of one :class:`Finding`."""

    PASS = "pass"
    FAIL = "fail"
    UNDECIDED = "undecided"
    ERROR = "error"


PASS, FAIL, UNDECIDED, ERROR = Verdict.PASS, Verdict.FAIL, Verdict.UNDECIDED, Verdict.ERROR


@dataclass(kw_only=True)
class Finding:
    """The verdict on one expectation of one entry."""

    expectation: str
    status: Verdict
    message: str
    file: Optional[str] = None
    line: Optional[int] = None
    code: str = ""
    counterexample: Optional[dict] = None
    fix: Optional[str] = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(kw_only=True)
class EntryResult:
    """All findings of one contract entry, and the facts found (for ``--update``)."""

    contract: Contract
    findings: list = field(default_factory=list)
    facts: dict = field(default_factory=dict)
    elapsed: float = 0.0

    @property
    def ok(self) -> bool:
        return all(f.status == PASS for f in self.findings)

    def to_dict(self) -> dict:
        c = self.contract
        return {"name": c.name, "program": c.program, "contract_file": c.source, "contract_line": c.line,
                "ok": self.ok, "time_s": round(self.elapsed, 3),
                "findings": [f.to_dict() for f in self.findings], "facts": self.facts}


def incomplete(what: str, sp, n: int) -> Finding:
    """Holding in the classes found is not holding everywhere: undecided, never a pass."""
    return Finding(expectation=what, status=UNDECIDED,
                   message=f"holds in the {n} ok class(es) found, but dinfer did not classify every size "
                   f"({sp.reason})", counterexample=sp.unexplored_example,
                   fix="raise --time-budget or narrow the dims")


def location(filename, lineno) -> tuple:
    """``(short path, line)`` of a user line, each None when unknown.

    >>> location(None, 0)
    (None, None)
    """
    from guards.explain import short_path
    return (short_path(filename) if filename else None), (lineno or None)
