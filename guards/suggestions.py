"""Concrete suggestions for avoiding a guard, specialization or runtime assert
(or its cost): ``torch._check``, padding to a multiple, declaring a range,
naming two dims alike.  Used by :mod:`guards.explain`."""
from __future__ import annotations

from typing import Optional

import sympy

from shapes.data_names import data_name
from shapes.functions import PyMod
from shapes.guard import Decision, Guard, GuardKind

from .render import to_python

# Where a record came from.
USER_CODE = "user_code"        # the user's own Python (a branch on a size, their torch._check)
TORCH_OP = "torch_op"          # an ATen op's meta function, during dispatch
TORCH_PYTHON = "torch_python"  # torch's Python code outside an op (torch.nn.functional.*)
INPUT_SPEC = "input_spec"      # the example size itself (0/1 specialization at symbol creation)


def _classify(e):
    """(shape of the condition, details) for picking a suggestion."""
    if isinstance(e, sympy.Eq):
        a, b = e.lhs, e.rhs
        if b.is_number and isinstance(a, PyMod) and a.args[1].is_Integer and b == 0:
            return "divisible", (a.args[0], int(a.args[1]))
        if a.is_number and isinstance(b, PyMod) and b.args[1].is_Integer and a == 0:
            return "divisible", (b.args[0], int(b.args[1]))
        if b.is_number and a.is_Symbol:
            return "eq_const", (a, b)
        if a.is_number and b.is_Symbol:
            return "eq_const", (b, a)
        if not a.is_number and not b.is_number:
            return "eq_dims", (a, b)
    if isinstance(e, sympy.Ne):
        return "ne", (e.lhs, e.rhs)
    if isinstance(e, (sympy.Ge, sympy.Gt)) and e.rhs.is_number:
        return "lower", (e.lhs, e.rhs + (1 if isinstance(e, sympy.Gt) else 0))
    if isinstance(e, (sympy.Le, sympy.Lt)) and e.rhs.is_number:
        return "upper", (e.lhs, e.rhs - (1 if isinstance(e, sympy.Lt) else 0))
    return "other", ()


def _spec_with(traced, sym, value) -> Optional[str]:
    """The input spec that mentions ``sym`` with the dim written as ``value``."""
    for s in traced.specs:
        if sym.name in s.dims:
            dims = [str(value) if d == sym.name else str(d) for d in s.dims]
            return str(s).split("[")[0] + "[" + ", ".join(dims) + "]"
    return None


def _src(sym, names) -> str:
    return names.get(sym, str(sym))


def _guard_suggestion(g: Guard, t, origin, user, neg_user, shape, who) -> str:
    """How to avoid a guard (a recompile where it fails)."""
    if g.message == "this check fails at the example sizes":
        return (f"the example sizes violate a torch._check, so the program raises there; "
                f"trace at example sizes where {neg_user} (--dim NAME=N)")
    if shape == "eq_dims":
        return (f"{who} needs {user}; give these dims one name in the input specs so they are "
                f"equal by construction (no guard), or state torch._check({user}) before this "
                f"line so it becomes a run-time check instead of a recompile")
    if origin == USER_CODE:
        dims = ", ".join(sorted(str(s) for s in t.free_symbols)) or "a size"
        return (f"this branch specializes on {dims}: calls where {neg_user} take the other path "
                f"and recompile; if both paths are valid, use torch.cond or restructure so the code "
                f"does not branch on the size; if only this one is, torch._check({user})")
    if shape in ("ne", "eq_const"):
        # A special case inside library code (a fast path at one size): the other side is
        # usually just as valid, so a torch._check would reject sizes that run.
        return (f"a special case inside {who}: calls where {neg_user} take another path inside torch "
                f"and recompile; not a condition on your sizes, so do not torch._check it (that "
                f"would reject sizes where {neg_user}, which may be valid; `dinfer` says which run)")
    return (f"{who} took a size-dependent path here; calls where {neg_user} take another path and "
            f"recompile; if every valid input satisfies it, state torch._check({user}) before this "
            f"line: the trace then assumes it and checks it at run time, no recompile")


def suggest(traced, g: Guard, t, names, origin, user, neg_user) -> Optional[str]:
    """A concrete way to avoid the record or its cost, or None when there is nothing to do."""
    env = traced.env
    shape, det = _classify(t)
    who = "your code" if origin == USER_CODE else (g.op or "torch")
    unbacked = [s for s in t.free_symbols if s in env.unbacked]

    if g.kind is GuardKind.SPECIALIZATION:
        if shape == "eq_const":
            sym, v = det
            src = _src(sym, names)
            spec = _spec_with(traced, sym, v)
            static = f"mark the dim static by writing {v} in the spec ({spec})" if spec else \
                "mark the dim static"
            if g.decided_by is Decision.ZERO_ONE:
                return (f"give an example size >= 2 to keep {sym} dynamic (--dim {sym}=8, or "
                        f"dims={{'{sym}': 8}}); if {src} is always {v}, {static}; or trace with "
                        f"specialize_zero_one=False to keep 0 and 1 in the dynamic range")
            if g.decided_by is Decision.INT_CONVERSION:
                return (f"int()/float()/math.* turned {src} into the constant {v} here; keep it a "
                        f"size: pass {src} itself to torch ops and use // and % instead of int(), "
                        f"math.ceil or math.floor")
            return (f"{who} compared {user} and it held at the example size, so {sym} is fixed to {v}; "
                    f"if {src} is always {v}, {static}; if other sizes must work, trace at one of them "
                    f"too, or avoid comparing the size with a constant (torch.cond / restructure)")
        if g.decided_by is Decision.INT_CONVERSION:
            return (f"int()/float()/math.* on a size made {user} a constant here; keep sizes "
                    f"symbolic (use // and % instead of int(), math.ceil, math.floor)")
        return None

    if g.kind is GuardKind.GUARD:
        return _guard_suggestion(g, t, origin, user, neg_user, shape, who)

    # Runtime asserts.
    if unbacked:
        what = "; ".join(f"{data_name(env, u)} = {env.describe_symbol(u)}" for u in sorted(unbacked, key=str))
        return (f"depends on data ({what}): checked when the program runs; calls whose data make "
                f"{neg_user} raise; nothing to change if valid data always satisfy it")
    if origin == USER_CODE:
        return (f"your own torch._check: assumed while tracing and checked at run time; calls where "
                f"{neg_user} raise; nothing to change if valid inputs always satisfy it")
    if shape == "divisible":
        e, k = det
        if e.is_Symbol:
            src = _src(e, names)
            return (f"pad {src} to a multiple of {k} (for example x = F.pad(x, ...)) or only pass "
                    f"sizes that are multiples of {k}; other sizes fail at run time in {g.op}")
        parts = ", ".join(_src(s, names) for s in sorted(e.free_symbols, key=str))
        return (f"make {to_python(e, names)} a multiple of {k}: pad one of {parts} (F.pad) or only "
                f"pass such sizes; other sizes fail at run time in {g.op}")
    if shape == "lower" and det[0].is_Symbol:
        sym, b = det
        src = _src(sym, names)
        return (f"{src} must be at least {b} for {g.op}; pad it up to {b} (F.pad) or reject smaller "
                f"inputs before this line")
    if shape == "upper" and det[0].is_Symbol:
        sym, b = det
        src = _src(sym, names)
        return (f"{src} must be at most {b} for {g.op}; truncate or split longer inputs into chunks "
                f"of at most {b}, and declare the range (--dim {sym}=1..{b}, or dims={{'{sym}': (1, {b})}}) "
                f"so that the check holds statically")
    if shape == "eq_dims":
        return (f"{g.op} needs {user}; give both dims one name in the input specs so it holds by "
                f"construction and no run-time check is needed")
    return f"{g.op} asserts {user}; calls where {neg_user} fail at run time"
