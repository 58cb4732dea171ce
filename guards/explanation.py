"""The data of a guard explanation: its dims, its records, the summary (what the reports render).

:func:`guards.explain.explain` builds it; the reports (:mod:`guards.report_text`,
:mod:`guards.report_json`, :mod:`guards.report_html`) import it from here and
render it, and :class:`guards.explain.Explanation` adds the rendering methods.

Example::

    >>> d = DimInfo(name="B", sources=["x.shape[0]"], example=4, status=DimStatus.DYNAMIC, range=(1, 64))
    >>> str(d.status)
    'dynamic'
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from shapes.enums import TextEnum
from shapes.guard import GuardKind

from .explain_at import AtResult
from .suggestions import INPUT_SPEC, TORCH_OP, TORCH_PYTHON, USER_CODE

# Origins of a record: who asked the question that produced it.
ORIGINS = (USER_CODE, TORCH_OP, TORCH_PYTHON, INPUT_SPEC)

# What violating a record costs.
COST_RECOMPILE = "recompile"
COST_RUNTIME_ERROR = "runtime_error"
COST_SPECIALIZED = "specialized"

SNIPPET_CONTEXT = 3


class DimStatus(TextEnum):
    """What the trace did to an input dim: left it dynamic (a free symbol), specialized
    it (fixed to a constant) or unified it (replaced by an expression over other dims)."""

    DYNAMIC = "dynamic"
    SPECIALIZED = "specialized"
    UNIFIED = "unified"


@dataclass
class DimInfo:
    """One named input dim and what the trace did to it.

    ``status`` is a :class:`DimStatus`: dynamic (``range`` is the sizes this
    trace covers), specialized (fixed to ``value``) or unified (replaced by
    ``unified_with``, an expression over other dims, usually just another
    dim's name).  ``record`` is the index of the record that caused a
    specialization or unification.
    """

    name: str
    sources: list
    example: int
    status: DimStatus
    range: tuple
    value: Optional[int] = None
    unified_with: Optional[str] = None
    record: Optional[int] = None
    reason: str = ""


@dataclass
class Entry:
    """One guard, specialization or runtime assert, explained.

    ``expr`` is the condition in dim names (``B > 16``), ``user_expr`` in the
    user's terms (``x.shape[0] > 16``); both are tidied for reading (constants
    moved to the right: ``T - 1 < 128`` reads ``T <= 128``) and ``raw`` keeps
    the engine's own form.  ``origin`` is one of :data:`ORIGINS`; ``cost`` is
    ``"recompile"``, ``"runtime_error"`` or ``"specialized"``.
    """

    index: int
    kind: GuardKind
    expr: str
    user_expr: str
    raw: str
    original: str
    negation: str
    dims: list
    data_dependent: list
    file: str
    line: int
    code: str
    function: str
    snippet_start: int
    snippet: list
    op: Optional[str]
    origin: str
    origin_text: str
    decided_by: str
    decision_text: str
    cost: str
    cost_text: str
    suggestion: Optional[str]
    message: str
    stack: list
    fails_at_point: Optional[bool] = None

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}"



@dataclass
class ExplanationModel:
    """The data of an explanation (see :class:`guards.explain.Explanation`, which adds the renderers)."""

    program: str
    inputs: list
    example_sizes: dict
    dims: list
    data_dependent: list
    counts: dict
    static_decisions: int
    entries: list
    at: Optional[AtResult] = None
    specialize_zero_one: bool = True
    valid_iff: Optional[str] = None
    covers: Optional[str] = None
    #: The device the program was traced for, and where it read it (:mod:`shapes.devices`).
    device: str = "cpu"
    device_reads: list = field(default_factory=list)
    #: The program's joined paths (:class:`shapes.paths.TracedPaths`), each as its guards
    #: in Python, and which one this report explains (0: the trace at the example sizes).
    paths: list = field(default_factory=list)
    path_index: int = 0

    def summary_line(self) -> Optional[str]:
        """``valid iff ...`` for the sizes this trace covers (None until set, e.g. by
        :func:`validation.dinfer.summary.trace_summary` in the CLI)."""
        if self.valid_iff is None:
            return None
        if self.covers in (None, "True"):
            return "every size in the dim ranges runs" if self.valid_iff == "True" else f"valid iff {self.valid_iff}"
        where = f"the sizes this trace covers ({self.covers}; others recompile)"
        if self.valid_iff == "True":
            return f"every size runs on {where}"
        if self.valid_iff == "False":
            return f"no size runs on {where}"
        return f"valid iff {self.valid_iff}   (on {where})"

    def entry(self, index: int) -> Entry:
        return self.entries[index]

    def dim(self, name: str) -> DimInfo:
        for d in self.dims:
            if d.name == name:
                return d
        raise KeyError(name)
