"""The plain-text explanation report, readable at 80 columns.

Every line is wrapped to ``width`` columns (long paths and expressions are
broken rather than allowed to overflow), so the report reads well in a
terminal and in CI logs.

Example::

    >>> import shapes, guards
    >>> tp = shapes.trace(lambda x: x.view(-1, 8), "x: f32[N]")
    >>> text = guards.explain(tp).text()
    >>> max(len(line) for line in text.splitlines()) <= 80
    True
    >>> "x.shape[0] % 8 == 0" in text
    True
"""
from __future__ import annotations

import textwrap

from typing import TYPE_CHECKING

from shapes.guard import GuardKind

from .explanation import DimStatus
from .render import short_path
from .suggestions import INPUT_SPEC, TORCH_OP, TORCH_PYTHON, USER_CODE

if TYPE_CHECKING:  # pragma: no cover
    from .explanation import Entry
    from .explanation import ExplanationModel as Explanation

_KIND_TITLE = {"guard": "guard", "runtime_assert": "runtime assert", "specialization": "specialization"}
_LABEL_WIDTH = 12


def _wrap(text: str, width: int, first: str, rest: str) -> list:
    """``text`` wrapped at spaces outside parentheses and brackets (a formula keeps ``(H // 4)``
    and ``[:T, :T]`` on one line) unless such a group is itself wider than a line."""
    glued, depth = [], 0
    for ch in text:
        depth += ch in "([{"
        depth -= ch in ")]}" and depth > 0
        glued.append(_GLUE if ch == " " and depth > 0 else ch)
    glued = "".join(glued).replace(" // ", f"{_GLUE}//{_GLUE}").replace(" % ", f"{_GLUE}%{_GLUE}")
    lines = textwrap.wrap(glued, width=width, initial_indent=first, subsequent_indent=rest,
                          break_long_words=False, break_on_hyphens=False)
    if any(len(line) > width for line in lines):  # a group wider than a line: break it after all
        text = text.replace(" // ", f"{_GLUE}//{_GLUE}").replace(" % ", f"{_GLUE}%{_GLUE}")
        lines = textwrap.wrap(text, width=width, initial_indent=first, subsequent_indent=rest,
                              break_long_words=True, break_on_hyphens=False)
    return [line.replace(_GLUE, " ") for line in lines] or [first.rstrip()]


_GLUE = "\x00"  # a space inside parentheses: not a place to break a line


def _field(label: str, text: str, width: int, indent: int = 2) -> list:
    head = " " * indent + (label + ":").ljust(_LABEL_WIDTH)
    return _wrap(text, width, head, " " * len(head))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _range_text(lo, hi) -> str:
    return f"{'?' if lo is None else lo}..{'inf' if hi is None else hi}"


def summary_lines(ex: Explanation, width: int = 80) -> list:
    """The summary block: inputs, dims, counts by kind and origin."""
    out = []
    out += _wrap(f"symshape explain: {ex.program}", width, "", "  ")
    if ex.summary_line():
        out += _wrap(ex.summary_line(), width, "", "  ")
    out += _field("inputs", "; ".join(ex.inputs), width, 0)
    out += _field("traced at", ", ".join(f"{k}={v}" for k, v in ex.example_sizes.items()) or "no named dims",
                  width, 0)
    if len(ex.paths) > 1:
        out += _field("paths", f"{len(ex.paths)} joined; this report is path {ex.path_index + 1}: "
                      + "; ".join(f"{i + 1}) {c}" for i, c in enumerate(ex.paths)), width, 0)
    if ex.device_reads:
        first = ex.device_reads[0].provenance
        out += _field("device", f"{ex.device}, assumed: the program read it at {len(ex.device_reads)} "
                      f"place(s), first at {short_path(first.filename)}:{first.lineno}", width, 0)
    k = ex.counts["by_kind"]
    out += _field("records", f"{ex.counts['total']} ({_plural(k['guard'], 'guard')}, "
                  f"{_plural(k['specialization'], 'specialization')}, "
                  f"{_plural(k['runtime_assert'], 'runtime assert')})", width, 0)
    o = ex.counts["by_origin"]
    inside = o[TORCH_OP] + o[TORCH_PYTHON]
    origin = f"your code {o[USER_CODE]}, inside torch {inside}"
    if ex.counts["by_op"]:
        origin += " (" + ", ".join(f"{op} {n}" for op, n in ex.counts["by_op"].items()) + ")"
    origin += f", input spec {o[INPUT_SPEC]}"
    out += _field("by origin", origin, width, 0)
    n = ex.static_decisions
    out += _field("static", f"{_plural(n, 'size condition')} {'was' if n == 1 else 'were'} decided "
                  "from known facts, with no guard", width, 0)
    out.append("")
    out.append("Dims")
    if not ex.dims:
        out.append("  (no named dims)")
    for d in ex.dims:
        src = ", ".join(d.sources) or "-"
        if d.status is DimStatus.DYNAMIC:
            what = f"dynamic, sizes {_range_text(*d.range)} (example {d.example})"
        else:
            what = d.reason
        out += _wrap(f"{d.name} = {src}: {what}", width, "  ", "      ")
    if ex.data_dependent:
        out.append("")
        out.append("Data-dependent sizes")
        for u in ex.data_dependent:
            out += _wrap(f"{u['name']}: {u['what']}", width, "  ", "      ")
    return out


def at_lines(ex: Explanation, width: int = 80) -> list:
    """The ``--at`` block: which records fail at the point, and what the call does."""
    if ex.at is None:
        return []
    at = ex.at
    point = ", ".join(f"{k}={v}" for k, v in at.point.items())
    n = len(at.failing)
    out = [f"At {point}: " + (f"{n} of {_plural(len(ex.entries), 'record')} "
                               f"{'fails' if n == 1 else 'fail'}" if n else "no record fails")]
    for r in at.reasons:
        out += _wrap(r, width, "  - ", "    ")
    return out


def entry_lines(e: Entry, width: int = 80) -> list:
    """One record: expression, user line, origin, decision, cost, suggestion."""
    title = f"#{e.index} {_KIND_TITLE[e.kind]}"
    if e.fails_at_point:
        title += (" (FAILS at --at: fails at run time)" if e.kind is GuardKind.RUNTIME_ASSERT
                  else " (FAILS at --at: recompiles)")
    out = [("-- " + title + " ").ljust(min(width, 60), "-")]
    out += _wrap(e.user_expr, width, "  ", "    ")
    out += _field("in dims", e.expr, width)
    if e.raw != e.expr:
        out += _field("as traced", e.raw, width)
    if e.origin == INPUT_SPEC:
        out += _field("where", "the input spec (the example size); no source line caused it", width)
    else:
        where = f"{short_path(e.file)}:{e.line}" + (f" in {e.function}" if e.function else "")
        out += _field("where", where, width)
        if e.code:
            out += _wrap(e.code, width, f"  {e.line:>6} | ", " " * 9 + "| ")
    out += _field("asked by", e.origin_text, width)
    out += _field("decided", e.decision_text, width)
    out += _field("cost", e.cost_text, width)
    if e.message:
        out += _field("note", e.message, width)
    if e.suggestion:
        out += _field("avoid it", e.suggestion, width)
    return out


def render(ex: Explanation, width: int = 80) -> str:
    """The whole report: summary, the ``--at`` verdict if any, then every record."""
    lines = summary_lines(ex, width)
    if ex.at is not None:
        lines.append("")
        lines += at_lines(ex, width)
    for e in ex.entries:
        lines.append("")
        lines += entry_lines(e, width)
    if not ex.entries:
        lines.append("")
        lines += _wrap("No guards, specializations or runtime asserts: the trace covers every size "
                       "in the dim ranges above.", width, "", "")
    return "\n".join(line.rstrip() for line in lines) + "\n"
