"""One trace's summary for ``symshape explain``: ``valid iff ...`` on the sizes it covers.

The same printer and the same Z3 simplification as dinfer's summary, for a
single trace: its guards and specializations say which sizes reuse it, its
runtime asserts over sizes where, on those, the program runs.
"""
from __future__ import annotations

import math
import time

import z3

from guards.for_people import people_conjunction
from guards.render import render_conjunction
from shapes.guard import GuardKind
from shapes.paths import path_of

from ..z3_translate import UntranslatableExpression
from .z3box import Z3Box


def trace_summary(traced, timeout_s: float = 3.0):
    """One trace's path and validity, simplified with Z3 inside the dims' ranges:
    ``(valid_iff, covers)`` as Python text over the dim names.

    ``covers`` is the conjunction of the trace's guards and specializations (the
    sizes that reuse this trace; others recompile); ``valid_iff`` that of its
    runtime asserts over sizes (where, on those sizes, the program runs).

    Example::

        >>> import shapes
        >>> from validation.dinfer.path import trace_summary
        >>> def f(x):
        ...     if x.shape[0] > 16:
        ...         return x.view(-1, 8)
        ...     return x
        >>> trace_summary(shapes.trace(f, "x: f32[N]", dims={"N": (1, 64, 32)}))
        ('N % 8 == 0', 'N >= 17')
    """
    if len(path_of(traced)) > 1:
        return paths_summary(traced, timeout_s)
    z, path, asserts = _box_and_conditions(traced, timeout_s)
    out = []
    for conds, given in ((asserts, path), (path, [])):
        try:
            simple = list(z.simplify(list(conds)))
            if simple and given:
                # Drop what the path already implies: on these sizes it holds anyway.
                gt = [z.term(c) for c in given]
                simple = [c for c in simple if not z.implied(c, gt)]
            out.append(people_conjunction(simple, ranges=z.box, always="True", never="False"))
        except (UntranslatableExpression, z3.Z3Exception):
            out.append(render_conjunction(conds))
    return out[0], out[1]


def paths_summary(traced, timeout_s: float = 3.0):
    """:func:`trace_summary` of a program with joined paths (:class:`shapes.paths.TracedPaths`):
    it covers the sizes any path covers, and is valid where the path taken there is.

    Example::

        >>> import shapes
        >>> from validation.dinfer.path import trace_summary
        >>> def f(x):
        ...     return x.sum(0) if x.shape[0] != 1 else x[0]
        >>> trace_summary(shapes.trace_paths(f, "x: f32[B, 4]"))
        ('True', 'True')
    """
    import sympy

    z = None
    covers, valid = [], []
    for p in path_of(traced):
        z, path, asserts = _box_and_conditions(p, timeout_s)
        covers.append(sympy.And(*path))
        valid.append(sympy.And(*path, *asserts))
    out = []
    for alts in (valid, covers):
        cond = sympy.Or(*alts)
        try:
            s = z.solver()
            s.add(z3.Not(z.term(cond)))
            out.append("True" if s.check() == z3.unsat else " or ".join(
                f"({render_conjunction(list(sympy.And.make_args(a)))})" for a in alts))
        except (UntranslatableExpression, z3.Z3Exception):
            out.append(" or ".join(f"({render_conjunction(list(sympy.And.make_args(a)))})" for a in alts))
    return out[0], out[1]


def _box_and_conditions(traced, timeout_s):
    """The Z3 box of ``traced``'s dim ranges, its path conditions and its runtime asserts over sizes."""
    env = traced.env
    syms = dict(traced.dim_symbols)
    names = list(syms)
    box = {}
    for n in names:
        d = traced.dims.get(n)  # the range given, not the one the guards narrowed
        lo = 1 if d is None or d.min is None else int(d.min)  # a dim's range starts at 1 unless given
        hi = math.inf if d is None or d.max is None or d.max == math.inf else int(d.max)
        box[n] = (lo, hi)
    z = Z3Box(names, syms, box, timeout_s, deadline=time.monotonic() + 4 * timeout_s)
    dimsyms = set(syms.values())
    path, asserts = [], []
    for g in [*getattr(env, "constraints", ()), *env.records]:  # the 0/1 policy's B >= 2 first
        if not g.expr.free_symbols <= dimsyms:
            continue
        (asserts if g.kind is GuardKind.RUNTIME_ASSERT else path).append(g.expr)
    return z, path, asserts
