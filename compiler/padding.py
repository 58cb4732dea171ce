"""Which dynamic dims may be padded to a bucket size without changing the positions the caller keeps.

Padding ``T`` to a bucket ``T' >= T`` runs the traced graph at ``T'`` on
inputs whose positions ``>= T`` hold arbitrary finite values, then slices every
output back to its size at ``T``.  That is exact when no kept output position
depends on a padded position: pointwise ops, matmuls over other dims,
reductions over other dims, prefix scans and causal attention along its query
dim keep that; a softmax, mean, sum or norm over the padded dim, a reshape that
moves padded positions between kept ones, or a slice from the end does not.
The analysis proves this over the symbolic graph, op by op
(:mod:`compiler.padding_rules`); an op it has no rule for is *not proved*,
never safe by default.

Example::

    >>> import torch, shapes
    >>> from compiler.padding import analyze_padding
    >>> tp = shapes.trace(lambda x: torch.softmax(x, -1).cumsum(1), "x: f32[B, T, 8]")
    >>> report = analyze_padding(tp)
    >>> report.safe_dims
    ['B', 'T']
    >>> tp = shapes.trace(lambda x: x.mean(1), "x: f32[B, T, 8]")
    >>> report = analyze_padding(tp)
    >>> report.safe_dims, report.by_dim["T"].reasons[0].op
    (['B'], 'aten.mean.dim')
"""
from __future__ import annotations

import operator
import os
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Optional

import sympy
import torch
import torch.fx

from shapes.flops.masks import MaskAnalysis

from .padding_facts import Fact, MixKind, Mixing, default_layout, is_padded, kept_prefix
from .padding_rules import rule_for


@dataclass(frozen=True)
class PaddingVerdict:
    """Whether the dims ``dims`` may be padded together.

    ``safe``: proved that every kept output position is independent of the
    padded ones.  Otherwise ``reasons`` say which op mixes them (or what could
    not be proved), at which user line, and what mask would make it safe.
    ``outputs``: per output leaf, the dims to slice back (empty where none).
    """

    dims: tuple
    safe: bool
    reasons: tuple = ()
    outputs: tuple = ()

    def __bool__(self) -> bool:
        return self.safe


@dataclass
class PaddingReport:
    """Per dynamic dim, whether it pads alone; and the verdict for the safe dims together.

    >>> import shapes
    >>> from compiler.padding import analyze_padding
    >>> print(analyze_padding(shapes.trace(lambda x: x.sum(0), "x: f32[N, C]")).text())  # doctest: +ELLIPSIS
    padding to a bucket size (outputs sliced back):
      N  cannot pad:
          - ...: aten.sum.dim_IntList reduces over dim 0, a padded dim (N): ...; to pad safely: zeros at ...
      C  pads: kept outputs never read a padded position
    <BLANKLINE>
    """

    by_dim: dict = field(default_factory=dict)
    joint: Optional[PaddingVerdict] = None

    @property
    def safe_dims(self) -> list:
        return list(self.joint.dims) if self.joint is not None and self.joint.safe else []

    def text(self) -> str:
        lines = ["padding to a bucket size (outputs sliced back):"]
        w = max([len(n) for n in self.by_dim] + [1])
        for name, v in self.by_dim.items():
            if v.safe:
                lines.append(f"  {name:<{w}}  pads: kept outputs never read a padded position")
                continue
            head = "cannot pad" if any(r.kind is MixKind.MIXES for r in v.reasons) else "not proved"
            lines.append(f"  {name:<{w}}  {head}:")
            lines += [f"  {'':<{w}}   - {r}" for r in v.reasons]
        alone = [n for n, v in self.by_dim.items() if v.safe]
        if set(alone) - set(self.safe_dims):
            lines.append(f"  together they cannot all pad: {', '.join(self.safe_dims) or 'none'} pad, "
                         f"{', '.join(n for n in alone if n not in self.safe_dims)} keep exact sizes")
        return "\n".join(lines) + "\n"


def _where(node) -> str:
    prov = node.meta.get("provenance")
    if prov is not None and getattr(prov, "filename", None) and prov.filename != "<unknown>":
        name = prov.filename
        try:
            rel = os.path.relpath(name)
            name = rel if not rel.startswith("..") else name
        except ValueError:
            pass
        return f"{name}:{prov.lineno} `{prov.code.strip()}`"
    return f"<{node.name}>"


class _Context:
    """The analysis of one graph for one set of padded symbols (what the rules see)."""

    def __init__(self, tp, padded):
        self.tp = tp
        self.padded = set(padded)
        self.facts: dict = {}
        repl = tp.env.replacements
        self.fix = (lambda e: sympy.sympify(e).xreplace(repl)) if repl else sympy.sympify
        self.masks = MaskAnalysis(SimpleNamespace(traced=tp))

    # -- what rules ask ------------------------------------------------------------------
    def fact(self, a) -> Optional[Fact]:
        f = self.facts.get(a) if isinstance(a, torch.fx.Node) else None
        return f if isinstance(f, Fact) else None

    def shape(self, a) -> tuple:
        return tuple(self.fix(s) for s in a.meta["shape"])

    def expr(self, a):
        if isinstance(a, torch.fx.Node) and "expr" in a.meta:
            return self.fix(a.meta["expr"])
        if isinstance(a, (torch.SymInt, torch.SymFloat)):
            return self.fix(a.node.expr)
        return a

    def tainted(self, a) -> bool:
        if isinstance(a, (list, tuple)):
            return any(self.tainted(x) for x in a)
        e = self.expr(a)
        return isinstance(e, sympy.Basic) and bool(e.free_symbols & self.padded)

    def expr_text(self, a) -> str:
        return str(self.expr(a))

    def shape_text(self, a) -> str:
        return "[" + ", ".join(str(s) for s in self.shape(a)) + "]"

    @staticmethod
    def layout_text(layout) -> str:
        if layout is None:
            return "?"
        return "*".join(f"{s}" for s, _ in layout)

    def mixed(self, node, why, fix="", kind=MixKind.MIXES) -> Fact:
        m = Mixing(str(node.target), _where(node), why, fix, kind)
        return Fact(self._defaults(node), mixed=(m,))

    def not_proved(self, node) -> Fact:
        return self.mixed(node, "has no padding rule: symshape cannot prove that kept positions ignore the "
                                "padded ones", "keep the dims it touches unpadded", MixKind.NOT_PROVED)

    def _defaults(self, node):
        val = node.meta.get("shape")
        if not isinstance(val, (tuple, list)) or not all(isinstance(s, (int, sympy.Basic)) for s in val):
            return ()
        return tuple(default_layout(self.fix(s), self.padded) for s in val)

    # -- masks -----------------------------------------------------------------------------
    def causal_band(self, band) -> bool:
        return band is not None and not band.empty and band.lo is None and band.hi is not None and \
            self.masks.proved(sympy.Le(band.hi, 0))

    def causal_softmax(self, node, f: Fact, d: int) -> Optional[str]:
        """``None`` when a causal mask keeps every kept row's padded columns at -inf; else why not."""
        r = len(f.layout)
        if d != r - 1 or r < 2 or f.layout[-1] != f.layout[-2] or len(f.layout[-1]) != 1:
            return "no causal mask: rows and columns are not the same padded dim"
        res = self.masks.scores(node)
        if res is None:
            return "no mask on the scores"
        if res[0] == "unrecognized":
            return res[2] or "its mask is not recognized"
        mm, band, _, masked = res
        if not masked or not self.causal_band(band):
            return f"its mask keeps {band.describe() if band is not None else 'an unknown set'}, not j <= i"
        scores = self.fact(mm)
        if scores is None or not scores.finite:
            return "the scores at padded positions may not be finite"
        return None

    def causal_mask(self, mask, qlay, klay) -> Optional[str]:
        if mask is None:
            return "no mask"
        if not (qlay == klay and len(qlay) == 1):
            return "queries and keys are laid out differently"
        val = mask.meta.get("val") if isinstance(mask, torch.fx.Node) else None
        if isinstance(val, torch.Tensor) and val.dtype == torch.bool:
            band = self.masks.pred(mask)
        else:
            b = self.masks.bias(mask)
            band = b[0] if b is not None else None
        return None if self.causal_band(band) else "its attn_mask is not proved causal"

    # -- the walk ------------------------------------------------------------------------------
    def run(self) -> PaddingVerdict:
        reasons: list = []
        outputs = []
        for node in self.tp.graph.nodes:
            if node.op == "placeholder":
                f = Fact(tuple(default_layout(self.fix(s), self.padded) for s in node.meta["shape"]))
                if any(lay is None for lay in f.layout):
                    reasons.append(Mixing("input", node.name, f"has a dim {self.shape_text(node)} that involves a "
                                          f"padded dim but is not it: its padded positions are not at its end",
                                          "give that dim its own name", MixKind.NOT_PROVED))
                self.facts[node] = f
            elif node.op == "get_attr":
                if isinstance(node.meta.get("val"), torch.Tensor):
                    self.facts[node] = Fact(tuple(default_layout(self.fix(s), self.padded)
                                                  for s in node.meta["shape"]))
            elif node.op == "call_function":
                self.facts[node] = self.visit(node)
            elif node.op == "output":
                for i, a in enumerate(node.args[0]):
                    outputs.append(self.output(a, reasons))
        uniq = tuple(dict.fromkeys(reasons))
        return PaddingVerdict(tuple(sorted(str(s) for s in self.padded)), not uniq, uniq, tuple(outputs))

    def output(self, a, reasons) -> tuple:
        f = self.fact(a)
        if f is None:
            if self.tainted(a):
                reasons.append(Mixing("output", "return", f"returns {self.expr_text(a)}, a size of a padded dim: "
                                      f"at the bucket size it is the padded size", "return sizes from the inputs",
                                      MixKind.MIXES))
            return ()
        if f.mixed:
            reasons.extend(f.mixed)
            return ()
        dims = []
        for d, lay in enumerate(f.layout):
            if is_padded(lay):
                if not kept_prefix(lay):
                    reasons.append(Mixing("output", f"<{a.name}>", f"dim {d} ({self.layout_text(lay)}) merges a "
                                          f"padded dim inside another: slicing cannot recover the kept positions",
                                          "return the dims unmerged (view back before returning)"))
                dims.append(d)
        return tuple(dims)

    def check_sizes(self, node, f):
        """Layouts must multiply out to the node's sizes: an unpadded dim a rule kept
        from its input takes its own size; a padded one that does not match is not proved."""
        shapes_ = node.meta.get("shape")
        if isinstance(f, tuple):
            if not isinstance(shapes_, (tuple, list)) or len(shapes_) != len(f) or not all(
                    isinstance(s, (tuple, list)) for s in shapes_):
                return f
            return tuple(self._fit(node, x, s) for x, s in zip(f, shapes_))
        if isinstance(f, Fact) and isinstance(shapes_, (tuple, list)):
            return self._fit(node, f, shapes_)
        return f

    def _fit(self, node, f, shape):
        if not isinstance(f, Fact) or f.mixed or len(f.layout) != len(shape):
            return f
        lay = list(f.layout)
        for d, (l, s) in enumerate(zip(f.layout, shape)):
            s = self.fix(s)
            if l is None or sympy.simplify(_size(l) - s) == 0:
                continue
            if is_padded(l):
                return self.mixed(node, f"gives dim {d} the size {s} where its padding rule expected "
                                        f"{_size(l)}", "keep the dims it touches unpadded", MixKind.NOT_PROVED)
            lay[d] = default_layout(s, self.padded)
        return f.with_(layout=tuple(lay))

    def visit(self, node):
        if node.target is operator.getitem:
            src = self.facts.get(node.args[0])
            if isinstance(src, tuple):
                return src[node.args[1]] if node.args[1] < len(src) else self.not_proved(node)
            if isinstance(src, Fact) and src.mixed:
                return src
            return self.not_proved(node) if isinstance(node.meta.get("val"), torch.Tensor) else None
        val = node.meta.get("val")
        if not isinstance(val, (torch.Tensor, tuple, list)):
            return None  # a size computation: its uses are checked where it is used
        ins = [a for a in node.all_input_nodes if isinstance(self.facts.get(a), (Fact, tuple))]
        mixed = tuple(dict.fromkeys(m for a in ins if isinstance(self.facts[a], Fact) for m in self.facts[a].mixed))
        if mixed:
            return Fact(self._defaults(node), mixed=mixed)
        touches = any(isinstance(self.facts[a], Fact) and any(is_padded(x) for x in self.facts[a].layout)
                      for a in ins) or any(self.tainted(a) for a in node.args) or any(
            lay is None or is_padded(lay) for lay in self._defaults(node))
        if not touches:
            f = Fact(self._defaults(node), finite=all(self.facts[a].finite for a in ins
                                                      if isinstance(self.facts[a], Fact)))
        else:
            rule = rule_for(node.target)
            try:
                f = rule(self, node) if rule is not None else self.not_proved(node)
            except (IndexError, KeyError, TypeError, ValueError, AttributeError) as e:
                # A form of the op the rule does not read (an unusual overload): not proved.
                f = self.mixed(node, f"has a form its padding rule does not cover ({type(e).__name__})",
                               "keep the dims it touches unpadded", MixKind.NOT_PROVED)
        if isinstance(val, (tuple, list)) and isinstance(f, Fact):
            f = tuple(f for _ in val) if not f.mixed else f
        f = self.check_sizes(node, f)
        for x in (f if isinstance(f, tuple) else (f,)):
            if isinstance(x, Fact) and not x.mixed and any(lay is None for lay in x.layout):
                shape = self.shape_text(node) if isinstance(val, torch.Tensor) else "its result"
                return self.mixed(node, f"makes a tensor of shape {shape} with a dim that involves a padded dim "
                                        f"but is not it: its padded positions are not at its end",
                                  "keep that dim unpadded", MixKind.NOT_PROVED)
        return f


def _size(layout):
    return sympy.Mul(*[s for s, _ in layout]) if layout is not None else None


def input_dims(tp) -> list:
    """The named dims of the inputs, in the order the specs name them."""
    names = []
    for s in tp.specs:
        for d in s.dims:
            if isinstance(d, str) and d not in names:
                names.append(d)
    return names


def padding_verdict(tp, dims) -> PaddingVerdict:
    """The verdict for padding ``dims`` (names) of a traced program together."""
    syms = {tp.env.symbols[n] for n in dims}
    return _Context(tp, syms).run()


def analyze_padding(tp, dims=None) -> PaddingReport:
    """Each input dim of ``tp`` (or of ``dims``) alone, then the safe ones together."""
    names = list(dims) if dims is not None else input_dims(tp)
    report = PaddingReport()
    fixed = {n for n in names if sympy.sympify(tp.env.replacements.get(tp.env.symbols[n], tp.env.symbols[n])).is_number}
    for n in names:
        if n in fixed:
            # The trace holds at one size of n only: there is nothing to pad to.
            why = Mixing("trace", "guards", f"fix {n} = {tp.env.replacements[tp.env.symbols[n]]}: this trace "
                         f"serves that size only", "", MixKind.NOT_PROVED)
            report.by_dim[n] = PaddingVerdict((n,), False, (why,))
        else:
            report.by_dim[n] = padding_verdict(tp, [n])
    # Dims that pad alone may not pad together: keep each one only while the joint verdict stays safe.
    joint = PaddingVerdict((), False)
    chosen: list = []
    for n in names:
        if report.by_dim[n].safe:
            v = padding_verdict(tp, chosen + [n])
            if v.safe:
                chosen, joint = chosen + [n], v
            elif not chosen:
                joint = v
    report.joint = joint
    return report


__all__ = ["PaddingVerdict", "PaddingReport", "Mixing", "analyze_padding", "padding_verdict", "input_dims"]
