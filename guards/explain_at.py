"""What a traced program's records say at one concrete point: does a call there reuse the trace, recompile, or fail at run time?

:func:`evaluate_at` checks every guard, specialization and runtime assert of
a trace at the given sizes and says why in one sentence per failing record;
:func:`guards.explain` attaches its :class:`AtResult` to an Explanation when
given ``at``.

Example::

    >>> import shapes, guards
    >>> tp = shapes.trace(lambda x: x.reshape(2, -1), "x: f32[N]", dims={"N": 10})
    >>> guards.explain(tp, at="N=7").at.verdict
    'runtime_error'
"""
from __future__ import annotations

from dataclasses import dataclass

from shapes.errors import SpecError, SymshapeError
from shapes.guard import Decision, GuardKind
from shapes.spec import parse_sizes

from .checker import check_sizes
from .render import short_path
from .suggestions import INPUT_SPEC


class ExplainError(SymshapeError, ValueError):
    """A bad request to :func:`explain` (for example an ``at`` point naming unknown dims)."""


@dataclass
class AtResult:
    """The records evaluated at one concrete point.

    ``failing`` lists the indices of the records that are false there,
    ``undecided`` those that depend on data (only known at run time) and
    ``out_of_range`` the dims whose value lies outside what the trace
    assumes without any record (the declared range, or sizes 0 and 1 under
    the 0/1 policy).  ``verdict`` is ``"ok"``, ``"recompile"`` or
    ``"runtime_error"``; ``reasons`` has one sentence per failure.
    """

    point: dict
    failing: list
    undecided: list
    out_of_range: list
    verdict: str
    reasons: list


def parse_at(text: str) -> dict:
    try:
        return parse_sizes(text)
    except SpecError as e:
        raise ExplainError(str(e)) from e


def evaluate_at(traced, ex, at) -> AtResult:
    """Evaluate the records of ``traced`` (explained as ``ex``) at the point ``at``
    (``"B=4, T=7"`` or a mapping of dim names to sizes).

    Example::

        >>> import shapes, guards
        >>> tp = shapes.trace(lambda x: x[:8], "x: f32[N]", dims={"N": 10})
        >>> evaluate_at(tp, guards.explain(tp), "N=3").verdict
        'recompile'
    """
    point = _point(traced, at)
    at_text = ", ".join(f"{k}={v}" for k, v in point.items())
    failed = check_sizes(traced, point)
    # Input constraints (the 0/1 policy's B >= 2, ranges given with --dim) are
    # what the trace assumed before the program ran: not records of the program
    # (index < 0), reported as dims out of range.
    failing = sorted(f.guard.index for f in failed if f.guard.index >= 0)
    env = traced.env
    given = {env.symbols[k] for k in point}
    undecided = [g.index for g in env.records if not g.expr.free_symbols <= given]

    out_of_range = _out_of_range(failed, point)
    reasons = [f"this call would recompile because {o['reason']}" for o in out_of_range]
    recompile, runtime = bool(out_of_range), False
    by_index = {e.index: e for e in ex.entries}
    for i in failing:
        e = by_index[i]
        reasons.append(_failing_reason(e, at_text))
        if e.kind is GuardKind.RUNTIME_ASSERT:
            runtime = True
        else:
            recompile = True
    verdict = "recompile" if recompile else "runtime_error" if runtime else "ok"
    if verdict == "ok":
        reasons.append(f"this call reuses the trace: every guard and check over input dims holds at "
                       f"{at_text}")
    if undecided:
        reasons.append("not decidable from sizes alone (they depend on data, checked at run time): "
                       + ", ".join(f"#{i}" for i in undecided))
    return AtResult(point=point, failing=failing, undecided=undecided, out_of_range=out_of_range,
                    verdict=verdict, reasons=reasons)


def _point(traced, at) -> dict:
    """``at`` as ``{dim name: size}`` in the program's dim order, every dim given once."""
    point = parse_at(at) if isinstance(at, str) else {
        (k if isinstance(k, str) else k.name): v for k, v in dict(at).items()}
    dims = list(traced.hints)
    unknown = [k for k in point if k not in traced.hints]
    if unknown:
        raise ExplainError(f"--at names {', '.join(unknown)}, which the program does not have; its dims are "
                           f"{', '.join(dims) or 'none'}")
    missing = [k for k in dims if k not in point]
    if missing:
        raise ExplainError(f"--at gives no value for {', '.join(missing)}; give every dim "
                           f"({', '.join(f'{d}=N' for d in dims)})")
    for k, v in point.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ExplainError(f"--at {k}={v!r}: sizes are non-negative integers")
    return {k: point[k] for k in dims}


def _out_of_range(failed, point) -> list:
    """The dims outside the ranges the trace assumed (failed input constraints), each with why."""
    out = []
    for f in failed:
        g = f.guard
        if g.index >= 0:
            continue
        for sym in sorted(g.expr.free_symbols, key=str):
            name = str(sym)
            v = point.get(name)
            if g.decided_by is Decision.ZERO_ONE and v is not None and v < 2:
                why = (f"{name}={v}, but the trace assumes {name} >= 2: PyTorch specializes sizes 0 "
                       f"and 1, so a call with {name}={v} gets its own trace")
            else:
                why = f"{name}={v} is outside the range the trace assumes for {name} ({f.in_dims})"
            out.append({"dim": name, "value": v, "reason": why})
    return out


def _failing_reason(e, at_text: str) -> str:
    """Why the record explained as ``e`` fails at the point: a recompile or a run-time error, and where."""
    if e.origin == INPUT_SPEC:
        where = f"{e.kind} #{e.index} from the example size ({e.decision_text})"
    else:
        where = f"{e.kind} #{e.index} from {short_path(e.file)}:{e.line}"
    if e.code and e.origin != INPUT_SPEC:
        where += f" `{e.code}`"
    if e.op:
        where += f" (in {e.op})"
    if e.kind is GuardKind.RUNTIME_ASSERT:
        return (f"this call would fail at run time because {e.user_expr} is false at "
                f"{at_text} ({e.expr}); {where}")
    what = "the trace specialized it" if e.kind is GuardKind.SPECIALIZATION else \
        "the trace took the path where it holds"
    return f"this call would recompile because {e.user_expr} is false at {at_text} ({e.expr}; {what}); {where}"


