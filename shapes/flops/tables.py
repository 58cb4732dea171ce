"""Text tables for :class:`shapes.flops.FlopReport` (80 columns by default).

The report imports these renderers (``FlopReport.table()``); they read the
report's attributes and import nothing of it, not even for typing.
"""
from __future__ import annotations

import textwrap
from typing import Mapping

from .costs import CostKind
from .exprs import formula_text, nice


def _human(n) -> str:
    n = int(n)
    for unit, scale in (("T", 10**12), ("G", 10**9), ("M", 10**6), ("K", 10**3)):
        if abs(n) >= scale:
            return f"{n / scale:.3f}{unit}"
    return str(n)


_GLUE = "\x00"  # a space that is not a place to break a line


def wrap_formula(text: str, width: int, **kw) -> list[str]:
    """``textwrap.wrap`` for formulas: never between the operands of ``//`` or ``%``
    (``(H //`` then ``2)`` on the next line reads as two formulas).

    >>> wrap_formula("2*(H // 2) + 4*(W // 2)", 12)
    ['2*(H // 2) +', '4*(W // 2)']
    """
    glued = text.replace(" // ", f"{_GLUE}//{_GLUE}").replace(" % ", f"{_GLUE}%{_GLUE}")
    return [line.replace(_GLUE, " ") for line in textwrap.wrap(glued, width, break_on_hyphens=False,
                                                                               break_long_words=False, **kw)]


def _grid(rows, widths, aligns, sep="  ") -> list[str]:
    """Rows of cells, each cell wrapped to its column; a wrapped row spans lines."""
    lines = []
    for row in rows:
        cells = [wrap_formula(str(c), w) or [""] for c, w in zip(row, widths)]
        for i in range(max(len(c) for c in cells)):
            parts = []
            for c, w, a in zip(cells, widths, aligns):
                s = c[i] if i < len(c) else ""
                parts.append(s.rjust(w) if a == ">" else s.ljust(w))
            lines.append(sep.join(parts).rstrip())
    return lines


def _wrapped(label: str, text: str, width: int) -> list[str]:
    return wrap_formula(text, width, initial_indent=label, subsequent_indent=" " * len(label)) or [label.rstrip()]


def render_table(r, sizes, width: int) -> str:
    what = "training step (forward + backward" + (" + optimizer" if "optimizer" in r.phase_totals else "") + ")"
    lines = [f"FLOPs of {r.name}({', '.join(str(s) for s in r.traced.specs)})"
             + (f", {what}" if r.mode == "train" else "")]
    lines += _wrapped("  total FLOPs  ", formula_text(r.total), width)
    if r.mode == "train":
        for ph, f in r.phase_totals.items():
            lines += _wrapped(f"    {ph:<9}  ", formula_text(f), width)
    if r.useful != r.total:
        lines += _wrapped("  useful FLOPs ", f"{formula_text(r.useful)}  (masked attention at the entries it keeps)", width)
    lines += _wrapped("  total bytes  ", formula_text(r.total_bytes), width)
    shown = [c for c in r.ops_in_order() if c.kind in (CostKind.COUNTED, CostKind.UNCOUNTED) or c.bytes != 0]
    lines.append("")
    rows = [(c.op + (" (!)" if c.kind is CostKind.UNCOUNTED else ""), c.calls,
             formula_text(c.flops) if c.kind is not CostKind.UNCOUNTED else "?", formula_text(c.bytes)) for c in shown]
    lines += _expr_table("op", rows, width, with_calls=True)
    points = [] if sizes is None else [sizes] if isinstance(sizes, Mapping) else list(sizes)
    for pt in points:
        v = r.at(pt)
        lines.append("")
        useful = f" ({v.useful:,} useful)" if v.useful is not None and v.useful != v.flops else ""
        lines += _wrapped("at " + ", ".join(f"{k}={n}" for k, n in v.sizes.items()) + ": ",
                          f"{v.flops:,} FLOPs{useful}, {v.bytes:,} bytes, {_ratio(v.flops, v.bytes)} FLOP/byte", width)
        if len(v.phases) > 1:
            lines += _wrapped("  ", "; ".join(f"{p} {f:,} FLOPs, {b:,} bytes" for p, (f, b) in v.phases.items()),
                              width)
        numw = 10
        opw = max([len("op")] + [len(c.op) for c in shown])
        opw = min(opw, width - 5 - 2 * numw - 7 - 8)
        rows = [(c.op, c.calls, _human(v.ops[c.op][1]), _human(v.ops[c.op][2]),
                 _ratio(v.ops[c.op][1], v.ops[c.op][2])) for c in shown]
        lines += _grid([("op", "calls", "FLOPs", "bytes", "FLOP/B")] + rows, (opw, 5, numw, numw, 7),
                       ("<", ">", ">", ">", ">"))
    notes = []
    if r.masked_attention or r.useful_notes:
        lines.append("")
        lines.append("useful FLOPs: attention counted at the score entries its mask keeps:")
        for m in r.masked_attention:
            lines += _wrapped("  - ", str(m), width)
        for note in r.useful_notes:
            lines += _wrapped("  - ", note, width)
    if r.uncounted:
        notes.append(("UNCOUNTED (torch counts these, symshape has no formula; totals exclude them): ",
                      r.uncounted))
    if r.matmul_like_uncounted:
        notes.append(("matrix ops torch's convention counts as 0 FLOPs: ", r.matmul_like_uncounted))
    if r.beyond_torch:
        notes.append(("counted here, not by torch's FlopCounterMode: ", r.beyond_torch))
    if r.zero_by_convention:
        notes.append(("0 FLOPs by convention: ", r.zero_by_convention))
    views = {c.op: c.calls for c in r.ops.values() if c.kind is CostKind.VIEW}
    if views:
        notes.append(("views (0 FLOPs, 0 bytes): ", views))
    if notes:
        lines.append("")
    for label, d in notes:
        # A NUL keeps "op xN" on one line through the wrapping.
        text = ", ".join(f"{k}\0x{n}" for k, n in sorted(d.items()))
        lines += [line.replace("\0", " ") for line in _wrapped(label, text, width)]
    return "\n".join(lines)


def _intensity_text(m) -> str:
    return formula_text(m.intensity)


def _expr_table(first: str, rows, width: int, with_calls: bool, intensity: bool = False) -> list[str]:
    """Rows of (name, [calls,] FLOPs, bytes[, FLOP/byte]) with symbolic cells:
    columns when they fit in ``width``, else one block per row."""
    if intensity:
        namew = max([len(first)] + [len(x[0]) for x in rows])
        cols = [max([len(h)] + [len(x[i]) for x in rows]) for i, h in ((1, "FLOPs"), (2, "bytes"), (3, "FLOP/byte"))]
        if namew + sum(cols) + 6 <= width:
            return _grid([(first, "FLOPs", "bytes", "FLOP/byte")] + list(rows), (namew, *cols), ("<", "<", "<", "<"))
        lines = []
        for row in rows:
            lines.append(row[0])
            indent = " " * (len(row[0]) - len(row[0].lstrip()))
            lines += _wrapped(indent + "    FLOPs      ", row[1], width)
            lines += _wrapped(indent + "    bytes      ", row[2], width)
            lines += _wrapped(indent + "    FLOP/byte  ", row[3], width)
        return lines
    namew = max([len(first)] + [len(x[0]) for x in rows])
    fw = max([len("FLOPs")] + [len(x[-2]) for x in rows])
    bw = max([len("bytes")] + [len(x[-1]) for x in rows])
    if with_calls:
        if namew + 5 + fw + bw + 6 <= width:
            return _grid([(first, "calls", "FLOPs", "bytes")] + list(rows), (namew, 5, fw, bw), ("<", ">", "<", "<"))
    elif namew + fw + bw + 4 <= width:
        return _grid([(first, "FLOPs", "bytes")] + list(rows), (namew, fw, bw), ("<", "<", "<"))
    lines = []
    for row in rows:
        head = row[0]
        if with_calls:
            head += f"  ({row[1]} call{'s' if row[1] != 1 else ''})"
        lines.append(head)
        indent = " " * (len(row[0]) - len(row[0].lstrip()))
        lines += _wrapped(indent + "    FLOPs  ", row[-2], width)
        lines += _wrapped(indent + "    bytes  ", row[-1], width)
    return lines


def _ratio(f: int, b: int) -> str:
    return f"{f / b:.2f}" if b else "-"


def render_modules(r, sizes, depth: int, width: int) -> str:
    if not r.by_module:
        return f"{r.name} is not an nn.Module: no module breakdown"
    v = r.at(sizes) if sizes is not None else None
    mods = [m for m in r.by_module.values() if m.depth <= depth]
    namew = min(width - 41, max(len("module"), *(2 * m.depth + len(m.name or m.cls) +
                                                 (len(m.cls) + 3 if m.name else 0) for m in mods)))
    names = []
    for m in mods:
        label = ("  " * m.depth) + (m.name or m.cls)
        if m.name and len(label) + len(m.cls) + 3 <= namew:
            label += f" ({m.cls})"  # the class when it fits
        names.append(label)
    if v is None:
        rows = [(n, formula_text(nice(m.flops)), formula_text(nice(m.bytes)), _intensity_text(m)) for n, m in zip(names, mods)]
        return "\n".join(_expr_table("module", rows, width, with_calls=False, intensity=True))
    rows = []
    for n, m in zip(names, mods):
        f, b = v.by_module[m.name]
        share = f"{100 * f / v.flops:.1f}%" if v.flops else "-"
        rows.append((n, _human(f), share, _human(b), _ratio(f, b)))
    return "\n".join(_grid([("module", "FLOPs", "%", "bytes", "FLOP/B")] + rows, (namew, 10, 6, 10, 7),
                           ("<", ">", ">", ">", ">")))


# --------------------------------------------------------------------------- entry point
