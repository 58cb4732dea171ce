"""What :func:`validation.dinfer` returns: a program's input sizes, split into classes.

A :class:`ShapeClass` is a set of input sizes on which the program behaves
one way: it takes the same path (the same decisions about sizes) and
either runs (``ok``), raises the same error, or reaches the same
data-dependent decision.  The set is given by a predicate over the named
dims; an :class:`InputSpace` holds the classes found, whether they were
proved to cover the whole box of dim ranges, and answers
:meth:`InputSpace.classify` for a concrete point.

Example::

    >>> import torch
    >>> from validation import dinfer
    >>> space = dinfer(lambda x: x.view(-1, 4), "x: f32[N]", dims={"N": (1, 64)})
    >>> space.complete
    True
    >>> space.classify({"N": 12}).ok, space.classify({"N": 6}).ok
    (True, False)
    >>> print(space.classify({"N": 6}).describe())
    N % 4 != 0
"""
from __future__ import annotations

import enum
import json
import math
from dataclasses import dataclass, field
from typing import Mapping, Optional

import sympy

from shapes.functions import substitute
from guards.render import clean_message, render_conjunction, short_path, to_python  # noqa: F401  (to_python re-exported)


class Status(str, enum.Enum):
    """How the program behaves on a class of sizes."""

    OK = "ok"                          # runs
    ERROR = "error"                    # raises (the same error on the whole class)
    DATA_DEPENDENT = "data_dependent"  # a decision needs tensor data: not decided by sizes
    UNSUPPORTED = "unsupported"        # symshape could not trace it: unknown


@dataclass(frozen=True, kw_only=True)
class ClassError:
    """The exception a failing class raises and the user line that raised it."""

    type: str
    message: str
    filename: str = "<unknown>"
    lineno: int = 0
    code: str = ""
    op: Optional[str] = None

    def location(self) -> str:
        where = f"{short_path(self.filename)}:{self.lineno}"  # relative to the working directory
        return f"{where} `{self.code}`" if self.code else where

    def __str__(self) -> str:
        return f"{self.type}: {self.message} (at {self.location()})"

    def to_dict(self) -> dict:
        return {"type": self.type, "message": self.message, "file": self.filename, "line": self.lineno,
                "code": self.code, "op": self.op}


def holds(cond, subs) -> bool:
    """``cond`` at a concrete point; a division by zero no operand decides past
    (``and``/``or`` as eager evaluates them) means the point is outside (the Z3 side
    of dinfer, :meth:`~validation.dinfer.z3box.Z3Box.term`, gives such conditions the same meaning)."""
    try:
        v = substitute(cond, subs)
    except ZeroDivisionError:
        return False
    if v is sympy.true:
        return True
    if v is sympy.false:
        return False
    raise ValueError(f"the condition {cond} does not evaluate to a boolean at {subs} (got {v})")


@dataclass
class ShapeClass:
    """One behaviour of the program and the sizes that lead to it.

    Attributes:
        index: 1-based, in discovery order.
        conditions: sympy conditions over the dim symbols; their conjunction
            is :attr:`predicate`.  Simplified: implied conditions are dropped
            and bounds on one dim merged (proved equivalent with Z3 inside the
            dims' ranges).
        status: a :class:`Status`.
        traced_at: the point that was traced to discover the class.
        example: the smallest point of the class (see ``example_minimal``).
        example_minimal: True when Z3's optimizer proved ``example`` minimal
            (smallest sum of sizes, ties broken by the first dim, then the
            second, ...); False when it fell back to ``traced_at``.
        error: for failing classes, the exception and the user line.
        message: for data-dependent and unsupported classes, what happened.
        decision: for a class that branches on data, the condition and the
            user line of that branch.
        output_shapes: for ok classes, the symbolic output shapes.
        records: the engine's guards, specializations and runtime asserts
            on the path (unsimplified).
        data_conditions: runtime asserts about data-dependent values, which
            sizes cannot decide (kept out of the predicate).
        names: symbol -> the user's name (dims by spec name, data values by
            the variable they were assigned to).
        data_axioms: what the ops guarantee about the data-dependent values
            (a count is at most the number of elements).
        imprecise: non-empty when the engine's path condition did not hold
            at its own trace point (an engine bug): the class is then just
            that point, and this says why.
    """

    index: int
    conditions: tuple
    status: Status
    traced_at: dict
    example: dict = field(default_factory=dict)
    example_minimal: bool = False
    error: Optional[ClassError] = None
    message: str = ""
    output_shapes: tuple = ()
    records: tuple = ()
    data_conditions: tuple = ()
    imprecise: str = ""
    decision: Optional[ClassError] = None
    names: dict = field(default_factory=dict, repr=False)
    data_axioms: tuple = field(default=(), repr=False)

    @property
    def predicate(self) -> sympy.Basic:
        """The conjunction of :attr:`conditions` (``True`` for the whole box)."""
        return sympy.And(*self.conditions)

    @property
    def ok(self) -> Optional[bool]:
        """True if the program runs on these sizes, False if it raises, None if unknown
        (data-dependent or unsupported)."""
        if self.status is Status.OK:
            return True
        if self.status is Status.ERROR:
            return False
        return None

    @property
    def data_dependent(self) -> bool:
        return self.status is Status.DATA_DEPENDENT

    def contains(self, sizes: Mapping) -> bool:
        """Whether the point ``sizes`` (dim symbol -> int) satisfies the predicate."""
        subs = {k: sympy.Integer(v) for k, v in sizes.items()}
        return all(holds(c, subs) for c in self.conditions)

    def describe(self) -> str:
        """The predicate as a Python expression over the dim names."""
        return render_conjunction(self.conditions)

    def outcome(self) -> str:
        """One short phrase: ``ok``, ``RuntimeError``, ``ok if data`` (runs if the run-time
        conditions on data hold), ``data-dependent`` (branches on data), ``unsupported``."""
        if self.status is Status.OK:
            return "ok"
        if self.status is Status.ERROR:
            return self.error.type if self.error else "error"
        if self.status is Status.DATA_DEPENDENT:
            return "ok if data" if self.decision is None else "data-dependent"
        return "unsupported"

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "predicate": self.describe(),
            "status": self.status.value,
            "ok": self.ok,
            "error": self.error.to_dict() if self.error else None,
            "message": self.message or None,
            "data_decision": self.decision.to_dict() if self.decision else None,
            "example": dict(self.example),
            "example_minimal": self.example_minimal,
            "traced_at": dict(self.traced_at),
            "output_shapes": [[to_python(e) for e in s] for s in self.output_shapes],
            "data_conditions": [to_python(c, self.names) for c in self.data_conditions],
            "imprecise": self.imprecise or None,
        }

    def __repr__(self) -> str:
        return f"<ShapeClass {self.index} {self.outcome()}: {self.describe()}>"


def _paren(s: str) -> str:
    return f"({s})"


@dataclass
class InputSpace:
    """The classes dinfer found, and how far the search got.

    Attributes:
        specs: the parsed input specs.
        dims: dim name -> ``(lo, hi)`` (``hi`` may be ``math.inf``): the box searched.
        defaulted: dims that had no range and got the default one.
        classes: the :class:`ShapeClass` es in discovery order.
        complete: True once Z3 proved that every point of the box lies in
            some class.
        reason: why the search stopped, in words.
        unexplored_example: when incomplete, a point of the box outside every
            class if one is known.
        traces: how many traces ran; ``elapsed``: seconds.
        overlaps: ``(i, j, point)`` for classes whose predicates share a
            point (the engine's path conditions are then imprecise).
        warnings: anything else the user should know (engine imprecision).
        world_method: how a sharded program's world size was traced (see the field).
        valid_ranges: dim name -> ``(smallest, largest)`` size over the ok
            classes (each dim on its own; None where Z3 gave no answer).  For
            a conv net this is the minimum spatial size, for GPT-2 the
            maximum number of positions.
    """

    specs: tuple
    dims: dict
    symbols: dict
    classes: list = field(default_factory=list)
    complete: bool = False
    reason: str = ""
    unexplored_example: Optional[dict] = None
    traces: int = 0
    elapsed: float = 0.0
    defaulted: tuple = ()
    overlaps: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    program_name: str = ""
    valid_ranges: dict = field(default_factory=dict)
    summary: object = None
    suggestion: object = None
    timed_out: bool = False
    #: how a sharded program was traced: "" (no world), "symbolic world size W", or
    #: "traced per world size W=1..4, joined" (a device mesh needs it concrete)
    world_method: str = ""

    # -- queries ----------------------------------------------------------------------
    def _point(self, sizes, kw) -> dict:
        sizes = dict(sizes or {}, **kw)
        vals = {}
        for k, v in sizes.items():
            name = k if isinstance(k, str) else k.name
            if name not in self.dims:
                raise ValueError(f"{name!r} is not a dim of this program (dims: {', '.join(self.dims)})")
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"size of {name} must be an int, got {v!r}")
            vals[name] = v
        for name, (lo, hi) in self.dims.items():
            if name not in vals and lo == hi:
                vals[name] = lo  # a pinned dim has one value
        missing = [n for n in self.dims if n not in vals]
        if missing:
            raise ValueError(f"no size given for dim(s) {', '.join(missing)}")
        for name, v in vals.items():
            lo, hi = self.dims[name]
            if not lo <= v <= hi:
                raise ValueError(f"{name}={v} lies outside the range searched, {_range_text(lo, hi)}")
        return vals

    def classify(self, sizes: Optional[Mapping] = None, **kw) -> Optional[ShapeClass]:
        """The class the point ``sizes`` (dim name -> int, or keywords) falls in.

        Returns None only when the search was incomplete and left the point
        unexplored.  Raises ValueError for a point outside the searched box.

        Example: ``space.classify({"B": 2, "T": 17})`` or ``space.classify(B=2, T=17)``.
        """
        vals = self._point(sizes, kw)
        subs = {self.symbols[n]: v for n, v in vals.items()}
        for c in self.classes:
            if c.contains(subs):
                return c
        return None

    @property
    def ok_classes(self) -> list:
        return [c for c in self.classes if c.status is Status.OK]

    @property
    def error_classes(self) -> list:
        return [c for c in self.classes if c.status is Status.ERROR]

    @property
    def valid_predicate(self) -> sympy.Basic:
        """The sizes on which the program runs: the union of the ok classes."""
        return sympy.Or(*[c.predicate for c in self.ok_classes])

    # -- output -----------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "program": self.program_name,
            "inputs": [str(s) for s in self.specs],
            "dims": {n: [lo, None if hi == math.inf else hi] for n, (lo, hi) in self.dims.items()},
            "defaulted_dims": list(self.defaulted),
            "complete": self.complete,
            "reason": self.reason,
            "unexplored_example": self.unexplored_example,
            "traces": self.traces,
            "time_s": round(self.elapsed, 3),
            "example_order": "smallest sum of sizes, ties broken by the first dim, then the next",
            "valid_when": " or ".join(_paren(c.describe()) for c in self.ok_classes) or "False",
            "valid_ranges": {n: (None if r is None else [r[0], None if r[1] == math.inf else r[1]])
                             for n, r in self.valid_ranges.items()},
            "summary": self.summary.to_dict() if self.summary is not None else None,
            "timed_out": self.timed_out,
            "world_method": self.world_method,
            "suggested_spec": self.suggestion.text() if self.suggestion is not None else None,
            "classes": [c.to_dict() for c in self.classes],
            "overlaps": [{"classes": [i, j], "point": p} for i, j, p in self.overlaps],
            "warnings": list(self.warnings),
        }

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), **kw)

    def table(self, width: int = 100, detail: bool = False) -> str:
        """A readable report: the summary, one row per outcome (per class with ``detail``),
        details for errors, then the verdict."""
        lines = []
        head = f"{self.program_name}({', '.join(str(s) for s in self.specs)})" if self.program_name else \
            ", ".join(str(s) for s in self.specs)
        lines.append(f"dinfer {head}")
        lines.append("  ranges: " + (", ".join(f"{n} in {_range_text(lo, hi)}" for n, (lo, hi) in self.dims.items())
                                     or "none (every size is static)"))
        for n in self.defaulted:
            lo, hi = self.dims[n]
            lines.append(f"  note: no range given for {n}; searched the default {_range_text(lo, hi)}")
        if self.world_method:
            lines.append(f"  world: {self.world_method}")
        if self.summary is not None and self.classes:
            lines.extend(self.summary.lines(width))
            if self.suggestion is not None:
                lines.append(self.suggestion.text())
            if not detail and self.summary.rows:
                lines.extend(self._rows_text(width))
            else:
                lines.append("classes:")
        if detail or self.summary is None or not self.summary.rows:
            lines.extend(self._classes_text(width))
        lines.extend(self._verdict_text())
        return "\n".join(lines)

    def _rows_text(self, width: int) -> list:
        """One row per outcome and output formula (the summary's rows)."""
        n = len(self.classes)
        lines = [f"outcomes (one row each; --detail lists the {n} class{'es' if n != 1 else ''}):"]
        rows = [("outcome", "smallest example", "sizes")]
        for r in self.summary.rows:
            rows.append((r.outcome(), ", ".join(f"{k}={v}" for k, v in r.region.example.items()), r.region.text()))
        w = [max(len(r[i]) for r in rows) for i in range(2)]
        pad = " " * (4 + w[0])
        for k, r in enumerate(rows):
            lines.append(_clip(f"  {r[0]:<{w[0]}}  {r[1]:<{w[1]}}  {r[2]}", width) if k else
                         f"  {r[0]:<{w[0]}}  {r[1]:<{w[1]}}  {r[2]}")
            if k == 0:
                continue
            row = self.summary.rows[k - 1]
            if row.region.error is not None:
                lines.append(_clip(f"{pad}{clean_message(row.region.error.message)}", width))
                lines.append(_clip(f"{pad}at {row.region.error.location()}", width))
            elif row.region.message:
                lines.append(_clip(f"{pad}{clean_message(row.region.message)}", width))
            if row.ok and row.outputs:
                lines.append(_clip(f"{pad}output {row.output_text()}", width))
        return lines

    def _classes_text(self, width: int) -> list:
        lines = []
        rows = [("#", "outcome", "smallest example", "sizes in the class")]
        for c in self.classes:
            ex = ", ".join(f"{k}={v}" for k, v in c.example.items()) + ("" if c.example_minimal else " (traced)")
            rows.append((str(c.index), c.outcome(), ex, c.describe()))
        w = [max(len(r[i]) for r in rows) for i in range(3)]
        for k, r in enumerate(rows):
            lines.append(f"  {r[0]:>{w[0]}}  {r[1]:<{w[1]}}  {r[2]:<{w[2]}}  {r[3]}")
            if k == 0:
                continue
            c = self.classes[k - 1]
            pad = " " * (4 + w[0])
            if c.error is not None:
                lines.append(_clip(f"{pad}{clean_message(c.error.message)}", width))
                lines.append(_clip(f"{pad}at {c.error.location()}", width))
            elif c.decision is not None:
                lines.append(_clip(f"{pad}{c.decision.message}", width))
                lines.append(_clip(f"{pad}at {c.decision.location()}", width))
            elif c.message:
                lines.append(_clip(f"{pad}{c.message}", width))
            if c.status is Status.OK and c.output_shapes:
                shapes = ", ".join("[" + ", ".join(to_python(e, c.names) for e in s) + "]"
                                   for s in c.output_shapes[:2])
                more = f" (+{len(c.output_shapes) - 2} more)" if len(c.output_shapes) > 2 else ""
                lines.append(_clip(f"{pad}output {shapes}{more}", width))
            for dc in (c.data_conditions if c.status is not Status.DATA_DEPENDENT else ()):
                lines.append(_clip(f"{pad}also needs, at run time: {to_python(dc, c.names)}", width))
            if c.imprecise:
                lines.append(_clip(f"{pad}imprecise: {c.imprecise}", width))
        return lines

    def _verdict_text(self) -> list:
        lines = []
        n_ok = len(self.ok_classes)
        lines.append(f"{len(self.classes)} class(es), {n_ok} ok, {len(self.error_classes)} failing, "
                     f"{len(self.classes) - n_ok - len(self.error_classes)} unknown; "
                     f"{self.traces} trace(s) in {self.elapsed:.2f} s")
        if self.valid_ranges:
            lines.append("runs for sizes within: " + ", ".join(
                f"{n} {_range_text(*r)}" if r else f"{n} ?" for n, r in self.valid_ranges.items())
                + "  (each dim's smallest..largest over the ok classes"
                + (")" if self.complete else " found so far)")
                + ("; some sizes are data-dependent or unsupported" if any(
                    c.status is Status.UNSUPPORTED or c.decision is not None for c in self.classes) else "")
                + ("; given the run-time conditions on data" if any(c.data_conditions for c in self.classes
                                                                    if c.decision is None) else ""))
        elif self.ok_classes:
            lines.append("runs" if not self.dims else "runs for some sizes (no answer from Z3 for their extent)")
        elif any(c.ok is None for c in self.classes):
            lines.append("no size is known to run: the outcome is data-dependent or unsupported by symshape")
        elif self.classes:
            lines.append("runs for no size in the ranges" if self.complete else "no ok size found")
        verdict = "complete: " if self.complete else "INCOMPLETE: "
        unsupported = [c.index for c in self.classes if c.status is Status.UNSUPPORTED]
        reason = self.reason
        if self.complete and unsupported:
            reason += (f"; class(es) {', '.join(map(str, unsupported))} are unsupported by symshape, so "
                       f"what the program does there is not proved")
        lines.append(verdict + reason)
        if self.unexplored_example:
            lines.append("  unexplored, for example: " + ", ".join(f"{k}={v}" for k, v in self.unexplored_example.items()))
        for i, j, p in self.overlaps:
            lines.append(f"  warning: classes {i} and {j} overlap (e.g. at "
                         + ", ".join(f"{k}={v}" for k, v in p.items()) + "); classify picks the first")
        for wmsg in self.warnings:
            lines.append(f"  warning: {wmsg}")
        return lines

    def __repr__(self) -> str:
        return (f"<InputSpace {len(self.classes)} classes, complete={self.complete}, "
                f"{self.traces} traces>")


def _range_text(lo, hi) -> str:
    return f"{lo}..{'' if hi == math.inf else hi}"


def _clip(s: str, width: int) -> str:
    return s if len(s) <= width else s[: width - 3] + "..."
