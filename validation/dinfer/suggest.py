"""A suggested spec in the user's ecosystem: torch.export ``Dim`` s and ``torch._check`` lines.

From the valid region of the summary: per-dim bounds become ``Dim(min=,
max=)``; ``N % 4 == 0`` becomes a derived dim ``N = 4*_N``; ``A == B`` one
``Dim`` for both; a dim with one valid size stays static.  What a ``Dim``
cannot say (``(B*N) % 4 == 0``, a disjunction) and the run-time conditions
on data become ``torch._check`` lines in the user's names (``x.shape[0]``,
``k``), never internal symbols.

Example::

    >>> from validation import dinfer
    >>> def heads(x):
    ...     B, T, C = x.shape
    ...     return x.view(B, T, 4, C // 4)
    >>> space = dinfer(heads, "x: f32[B, T, C]", dims={"B": (1, 4), "T": (1, 8), "C": (1, 64)})
    >>> space.summary.valid_iff
    'C % 4 == 0'
    >>> print(space.suggestion.text())
    suggested torch.export spec (exactly the valid sizes in the ranges searched):
      from torch.export import Dim
      B = Dim("B", min=1, max=4)
      T = Dim("T", min=1, max=8)
      _C = Dim("_C", min=1, max=16)  # C = 4*_C
      dynamic_shapes = ({0: B, 1: T, 2: 4*_C},)
      # export inside torch.fx.experimental._config.patch(backed_size_oblivious=True): else torch.export specializes sizes that can be 1 inside the program
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import sympy

from guards.render import render_dnf, to_python
from shapes.functions import PyMod

from .summary import RegionKind
from .z3box import bound_of


@dataclass
class ExportSpec:
    """Dims for ``torch.export.export(..., dynamic_shapes=...)`` and the checks they cannot say.

    Attributes:
        ranges: dim name -> ``(min, max)`` (``max`` None: no upper end).
        multiple: dim name -> ``k`` when the dim must be a multiple of ``k``.
        same: dim name -> the dim it must equal (shares its ``Dim``).
        static: dim name -> its one valid size.
        checks: ``torch._check(...)`` lines in the user's names.
        exact: True when the ``Dim`` s alone say exactly the valid sizes.
        specs: the input specs (positions of each dim).
    """

    ranges: dict
    multiple: dict = field(default_factory=dict)
    same: dict = field(default_factory=dict)
    static: dict = field(default_factory=dict)
    checks: list = field(default_factory=list)
    exact: bool = True
    specs: tuple = ()
    note: str = ""

    def _var(self, n) -> str:
        n = self.same.get(n, n)
        return f"{self.multiple[n]}*_{n}" if n in self.multiple else n

    def text(self) -> str:
        """The spec as Python the user can paste."""
        head = ("suggested torch.export spec (exactly the valid sizes in the ranges searched):" if self.exact
                else "suggested torch.export spec (Dims cannot say it all: add the checks below):"
                if self.checks else "suggested torch.export spec (the sizes known to run):")
        lines = [head, "  from torch.export import Dim"]
        for n, (lo, hi) in self.ranges.items():
            if n in self.same or n in self.static:
                continue
            mx = "" if hi is None else f", max={hi}"
            if n in self.multiple:
                k = self.multiple[n]
                blo = -(-lo // k)
                bmx = "" if hi is None else f", max={hi // k}"
                lines.append(f'  _{n} = Dim("_{n}", min={blo}{bmx})  # {n} = {k}*_{n}')
            else:
                lines.append(f'  {n} = Dim("{n}", min={lo}{mx})')
        for n, m in self.same.items():
            lines.append(f"  # {n} must equal {m}: both use {self._var(m)}")
        for n, v in self.static.items():
            lines.append(f"  # {n} is always {v}: left static")
        shapes = []
        for s in self.specs:
            entries = [f"{i}: {self._var(d)}" for i, d in enumerate(s.dims)
                       if isinstance(d, str) and d in self.ranges and d not in self.static]
            shapes.append("{" + ", ".join(entries) + "}" if entries else "None")
        lines.append(f"  dynamic_shapes = ({', '.join(shapes)},)" if len(shapes) == 1 else
                     f"  dynamic_shapes = ({', '.join(shapes)})")
        lines.append("  # export inside torch.fx.experimental._config.patch(backed_size_oblivious=True): else "
                     "torch.export specializes sizes that can be 1 inside the program")
        if self.checks:
            lines.append("  # and in the program, before the line that needs each:")
            lines.extend(f"  {c}" for c in self.checks)
        if self.note:
            lines.append(f"  # {self.note}")
        return "\n".join(lines)

    def dynamic_shapes(self) -> tuple:
        """The spec as real ``torch.export.Dim`` objects, one entry per input."""
        from torch.export import Dim
        dims = {}
        for n, (lo, hi) in self.ranges.items():
            if n in self.same or n in self.static:
                continue
            kw = {"min": lo} if hi is None else {"min": lo, "max": hi}
            if n in self.multiple:
                k = self.multiple[n]
                kw = {"min": -(-lo // k)} if hi is None else {"min": -(-lo // k), "max": hi // k}
                dims[n] = k * Dim(f"_{n}", **kw)
            else:
                dims[n] = Dim(n, **kw)
        out = []
        for s in self.specs:
            d = {i: dims[self.same.get(x, x)] for i, x in enumerate(s.dims)
                 if isinstance(x, str) and self.same.get(x, x) in dims}
            out.append(d or None)
        return tuple(out)

    def corners(self) -> list:
        """The smallest and the largest sizes the spec allows (dim name -> size)."""
        out = []
        for pick in (0, 1):
            p = {}
            for n, (lo, hi) in self.ranges.items():
                if n in self.static:
                    p[n] = self.static[n]
                    continue
                m = self.same.get(n, n)
                lo2, hi2 = self.ranges[m]
                k = self.multiple.get(m, 1)
                v = (-(-lo2 // k)) * k if pick == 0 else (None if hi2 is None else (hi2 // k) * k)
                if v is None:
                    v = max(lo2, 64) // k * k
                p[n] = v
            out.append(p)
        return out


def _source_names(space) -> dict:
    out = {}
    for s in space.specs:
        for i, d in enumerate(s.dims):
            if isinstance(d, str) and d in space.symbols:
                out.setdefault(space.symbols[d], f"{s.name}.shape[{i}]")
    return out


def suggest_spec(space) -> Optional[ExportSpec]:
    """The :class:`ExportSpec` for ``space``'s valid region, or None when nothing runs.

    The region must come from the summary (``space.summary``); sizes the
    search did not classify are outside the suggestion.
    """
    summary = getattr(space, "summary", None)
    valid = summary.valid if summary is not None else None
    if valid is None or not space.dims:
        return None
    src = _source_names(space)
    ranges = {n: (lo, None if hi == math.inf else hi) for n, (lo, hi) in space.dims.items()}
    spec = ExportSpec(ranges=ranges, specs=tuple(space.specs))
    for n, (lo, hi) in space.dims.items():
        if lo == hi:
            spec.static[n] = lo
    if valid.short and len(valid.dnf) == 1:
        rest = []
        for a in valid.dnf[0]:
            if not _absorb(spec, a):
                rest.append(a)
        if rest:
            spec.exact = False
            spec.checks.append(f"torch._check({render_dnf([tuple(rest)], src)})")
    else:
        spec.exact = False
        for n, r in space.valid_ranges.items():
            if r is not None and r[0] is not None:
                spec.ranges[n] = (r[0], None if r[1] == math.inf else r[1])
        spec.checks.append(f"torch._check({_paren_or(valid.formula(), valid, src)})")
    for n, (lo, hi) in list(spec.ranges.items()):
        if n not in spec.static and hi is not None and lo == hi:
            spec.static[n] = lo
    if valid.run_time:
        spec.exact = False
        for c in (x for x in space.classes if x.data_conditions and x.decision is None):
            names = dict(c.names)
            names.update(src)
            for d in c.data_conditions:
                line = f"torch._check({to_python(d, names)})"
                if line not in spec.checks:
                    spec.checks.append(line)
            break
    if not space.complete:
        spec.exact = False
        spec.note = "the search was incomplete: sizes it did not classify may behave otherwise"
    elif any(r.kind in (RegionKind.UNSUPPORTED, RegionKind.DATA_DEPENDENT) for r in summary.regions):
        spec.exact = False
        spec.note = "only the sizes where the outcome is known; others may run too"
    return spec


def _paren_or(text, valid, src) -> str:
    return render_dnf(valid.dnf, src)


def _absorb(spec, a) -> bool:
    """Fold ``a`` into the Dims if a Dim can say it."""
    b = bound_of(a)
    if b is not None and b[0].name in spec.ranges:
        s, lo, hi = b
        olo, ohi = spec.ranges[s.name]
        nlo = olo if lo == -math.inf else max(olo, int(lo))
        nhi = ohi if hi == math.inf else (int(hi) if ohi is None else min(ohi, int(hi)))
        spec.ranges[s.name] = (nlo, nhi)
        if nhi is not None and nlo == nhi:
            spec.static[s.name] = nlo
        return True
    if isinstance(a, sympy.Eq) and a.rhs == 0 and isinstance(a.lhs, PyMod):
        x, k = a.lhs.args
        if x.is_Symbol and k.is_Integer and x.name in spec.ranges and x.name not in spec.multiple:
            spec.multiple[x.name] = int(k)
            return True
    if isinstance(a, sympy.Eq) and a.lhs.is_Symbol and a.rhs.is_Symbol:
        p, q = sorted((a.lhs.name, a.rhs.name))
        if p in spec.ranges and q in spec.ranges and q not in spec.same and p not in spec.same:
            spec.same[q] = p
            lo = max(spec.ranges[p][0], spec.ranges[q][0])
            his = [h for h in (spec.ranges[p][1], spec.ranges[q][1]) if h is not None]
            spec.ranges[p] = (lo, min(his) if his else None)
            return True
    return False
