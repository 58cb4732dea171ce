"""``useful`` FLOPs: causal and triangular-masked attention counted at the entries it keeps.

FlopCounterMode's convention (symshape's ``total``) counts every matmul in
full, so causal attention counts all T*S score entries although a causal
kernel computes only those on or below the diagonal.  ``FlopReport.useful``
counts, for each recognized masked attention, its score matmul (``Q @ K^T``)
and value matmul (``P @ V``), and in a training step their backward matmuls,
at the fraction of score entries the mask keeps: ``T*(T+1)/2`` of ``T*T`` for
a causal mask.  Everything else counts as in ``total``.

Recognized (by following the graph from each softmax back to the score matmul
and forward to the value matmul):

* ``F.scaled_dot_product_attention(..., is_causal=True)`` (its math form on
  meta tensors builds ``ones(L, S).tril()``), and the fused SDPA kernels'
  ``is_causal`` argument;
* masks built as ``torch.ones(T, T).tril()`` / ``.triu(1)`` (and ``tril(k)``,
  ``triu(k)``), or from ``arange`` comparisons (``arange(T)[:, None] >=
  arange(T)[None, :]``, with offsets), combined with ``~``, ``&``, and applied
  with ``masked_fill(mask, -inf)``, ``where(mask, s, -inf)`` or an additive
  bias ``where(mask, 0, -inf)``; a fill at or below -1e4 (``finfo.min``,
  BERT's -10000) counts as masking.

The count of kept entries is a closed form only where it is provably one over
the traced ranges (e.g. ``j <= i + k`` with ``k >= 0`` and ``T + k <= S``);
otherwise the attention is counted in full and ``useful_notes`` says why.

Limitation, packed sequences: a block-diagonal mask built from data, e.g.
``seq_id[:, None] == seq_id[None, :]`` for sequences of lengths ``[3, 5]``
packed into T = 8, keeps ``3*3 + 5*5 = 34`` of 64 entries (causal within each
sequence: ``6 + 15 = 21``), but the lengths are data, not sizes: such masks are
not recognized, counted in full, and listed in ``useful_notes``.

Example::

    >>> import torch, shapes
    >>> import torch.nn.functional as F
    >>> def attn(q, k, v):
    ...     return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    >>> r = shapes.count_flops(attn, "q: f32[B, 4, T, 16]", "k: f32[B, 4, T, 16]", "v: f32[B, 4, T, 16]")
    >>> r.total, r.useful
    (256*B*T**2, 128*B*T*(T + 1))
"""
from __future__ import annotations

import os

from dataclasses import dataclass
from typing import Any

import sympy
import torch
import torch.fx

from . import formulas as ff
from .exprs import formula_text, nice, sum_exprs
from .masks import SOFTMAX, Band, MaskAnalysis, mask_source

aten = torch.ops.aten


@dataclass
class MaskedAttention:
    """One attention counted at the entries its mask keeps.

    ``nodes`` are the matmul nodes (forward, and backward in a training step)
    counted at ``fraction`` = ``kept / entries`` of their FLOPs.
    """

    where: str
    mask: str
    how: str
    kept: Any
    entries: Any
    nodes: list

    @property
    def fraction(self):
        return sympy.factor(self.kept / self.entries)

    def __str__(self) -> str:
        return (f"{self.where}: {self.how}; keeps {self.mask}: {formula_text(sympy.factor(self.kept))} of "
                f"{formula_text(self.entries)} score entries, so its {len(self.nodes)} matmul(s) count "
                f"{formula_text(self.fraction)} of their FLOPs")


def _readable_path(filename: str) -> str:
    """A file as a person reads it in a table: from ``site-packages/`` on for an installed
    library, relative to the working directory under it, else as given (a path is one token
    that no 80-column wrap can break).

    >>> _readable_path("/usr/lib/python3/site-packages/transformers/masking_utils.py")
    'site-packages/transformers/masking_utils.py'
    """
    i = filename.rfind("site-packages" + os.sep)
    if i >= 0:
        return filename[i:]
    rel = os.path.relpath(filename) if os.path.isabs(filename) else filename
    return filename if rel.startswith("..") else rel


def _where(node) -> str:
    prov = node.meta.get("provenance")
    if prov is not None and getattr(prov, "filename", None):
        return f"{_readable_path(prov.filename)}:{prov.lineno} `{prov.code}`"
    return node.name


def _sdpa_band(an, args):
    """(Band kept, how) for a fused attention call: its ``is_causal`` flag, or the
    ``attn_mask`` it is given (bool: kept where true; float: an additive bias);
    (None, why) when the mask is not recognized, (None, "") when nothing is masked."""
    if args.get("is_causal"):
        return Band(hi=0), "is_causal=True"
    mask = args.get("attn_mask")
    if not isinstance(mask, torch.fx.Node):
        return None, ""
    val = mask.meta.get("val")
    if val is not None and val.dtype == torch.bool:
        band = an.pred(mask)
    else:
        b = an.bias(mask)
        band = b[0] if b is not None else None
    if band is None:
        why = an._data_reason(mask) or "attention mask not recognized as triangular (not in a form symshape follows)"
        return None, why
    if band.lo is None and band.hi is None and not band.empty:
        return None, ""
    source = mask_source(mask)
    at = f"{source.target._overloadpacket} at {_where(source)}" if source is not None else mask.name
    return band, f"attn_mask from {at}"


def analyze(report) -> None:
    """Set ``report.useful``, ``report.useful_by_op``, ``report.masked_attention``
    and ``report.useful_notes``."""
    an = MaskAnalysis(report)
    graph = report.traced.graph
    found: list[MaskedAttention] = []
    notes: list[str] = []
    fraction: dict = {}
    by_seq: dict = {}
    for n in graph.nodes:
        if "autograd_seq" in n.meta and n in report.node_flops:
            by_seq.setdefault(n.meta["autograd_seq"], []).append(n)

    def with_backward(nodes):
        out = list(nodes)
        for n in nodes:
            seq = n.meta.get("autograd_seq")
            if seq is not None and n.meta.get("phase") == "forward":
                out += [m for m in by_seq.get(seq, ()) if m.meta.get("phase") == "backward"]
        return out

    for n in graph.nodes:
        if n.op != "call_function":
            continue
        p = getattr(n.target, "_overloadpacket", None)
        if p in ff.SDPA_CAUSAL_ARG and n in report.node_flops:
            ma, note = _causal_sdpa(an, n, p, with_backward)
        elif p in SOFTMAX:
            ma, note = _masked_softmax(an, n, with_backward, report.node_flops)
        else:
            continue
        if note is not None:
            notes.append(note)
        if ma is not None:
            found.append(ma)
            for m in ma.nodes:
                fraction[m] = ma.fraction

    by_op: dict = {}
    terms = []
    for node, f in report.node_flops.items():
        u = f * fraction[node] if node in fraction else f
        terms.append(u)
        by_op.setdefault(str(node.target._overloadpacket), []).append(u)
    report.useful = nice(sympy.simplify(sum_exprs(terms))) if fraction else report.total
    report.useful_by_op = {k: nice(sum_exprs(v)) for k, v in by_op.items()}
    report.masked_attention = found
    report.useful_notes = notes


def _causal_sdpa(an, n, p, with_backward):
    """``(MaskedAttention or None, note or None)`` for a fused attention op: its ``is_causal``
    flag, or the triangular ``attn_mask`` it is given (:func:`_sdpa_band`)."""
    args = ff.bind(n.target, n.args, n.kwargs)
    band, how = _sdpa_band(an, args)
    if band is None:
        return None, (f"{_where(n)}: {how}: counted in full" if how else None)
    q, k = an.shape(args["query"]), an.shape(args["key"])
    T, S = q[-2], k[-2]
    if p in ff.BSHD_KERNELS:
        T, S = q[1], k[1]
    kept, why = an.kept(band, T, S)
    if kept is None:
        return None, f"{_where(n)}: {how} counted in full: {why}"
    return MaskedAttention(_where(n), band.describe(), f"{p} with {how}", kept, T * S, with_backward([n])), None


def _masked_softmax(an, n, with_backward, node_flops):
    """``(MaskedAttention or None, note or None)`` for a softmax over masked attention scores."""
    res = an.scores(n)
    if res is None:
        return None, None
    if res[0] == "unrecognized":
        why = res[2] if len(res) > 2 and res[2] else (
            "attention mask not recognized as triangular (not in a form symshape follows)")
        return None, f"{_where(res[1])}: {why}: counted in full"
    score, band, origin, masked = res
    if not masked or band is None or (band.lo is None and band.hi is None and not band.empty):
        if masked and band is None:
            return None, f"{_where(score)}: could not combine the attention masks: counted in full"
        return None, None
    out = an.shape(score)
    T, S = out[-2], out[-1]
    kept, why = an.kept(band, T, S)
    if kept is None:
        return None, f"{_where(score)}: mask keeps {band.describe()}, counted in full: {why}"
    value = an.value_matmul(n)
    nodes = with_backward([score] + ([value] if value is not None else []))
    source = mask_source(origin) if isinstance(origin, torch.fx.Node) else None
    origin_at = f"{source.target._overloadpacket} at {_where(source)}" if source is not None else "the program"
    how = (f"score matmul {score.target._overloadpacket}"
           + (f" and value matmul {value.target._overloadpacket}" if value is not None else "")
           + f", mask from {origin_at}")
    return MaskedAttention(_where(score), band.describe(), how, kept, T * S,
                           [m for m in nodes if m in node_flops]), None
