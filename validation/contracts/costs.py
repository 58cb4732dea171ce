"""The ``flops`` and ``comm`` expectations: closed forms proved equal to the contract's formula.

Each ok class dinfer finds is checked with the FLOP report of its own path
(:meth:`~validation.contracts.facts.ProgramFacts.report_of_class`): equal in form,
or proved equal over the class by Z3, or refuted at the smallest size where they differ.

Example::

    >>> import torch
    >>> from validation.contracts.contract import Contract
    >>> from validation.contracts.facts import ProgramFacts
    >>> c = Contract(name="v", program="", inputs=["x: f32[N]"], dims={"N": (1, 64)},
    ...              expectations={"flops": "4*N"})
    >>> f = ProgramFacts(c, lambda x: x.view(-1, 4) @ torch.ones(4, 2), time_budget=20)
    >>> str(check_flops(f, "4*N").status), check_flops(f, "8*N").counterexample
    ('pass', {'N': 4})
"""
from __future__ import annotations

import sympy
import z3

from validation.z3_translate import UntranslatableExpression

from .expectations import ok_classes
from .findings import FAIL, PASS, UNDECIDED, Finding, incomplete
from .points import Undecided, by_name, differs
from .pyexpr import parse_expr


def check_flops(facts, want) -> Finding:
    """The symbolic FLOP count equals ``want`` in every ok class."""
    from guards.render import to_python
    sp, z, classes = ok_classes(facts)
    if not classes:
        return Finding(expectation="flops", status=FAIL,
                       message="no size in the ranges runs", fix="see the `valid` expectation")
    we = sympy.Integer(want) if isinstance(want, int) else parse_expr(want, sp.symbols)
    for c, term in classes:
        total = by_name(sympy.sympify(facts.report_of_class(c).total), sp)
        if sympy.expand(total - we) == 0:
            continue
        try:
            pt = differs(z, sp, term, total, we)
        except Undecided as e:
            return Finding(expectation="flops", status=UNDECIDED, message=str(e))
        except (UntranslatableExpression, z3.Z3Exception) as e:  # a formula Z3 cannot express: undecided
            return Finding(expectation="flops", status=UNDECIDED,
                           message=f"cannot compare {to_python(total)} with {want} ({e})")
        if pt is None:
            continue
        sub = {sp.symbols[k]: v for k, v in pt.items()}
        at = ", ".join(f"{k}={v}" for k, v in pt.items())
        return Finding(expectation="flops", status=FAIL,
                       message=f"FLOPs are {to_python(total)} where {c.describe()}, the contract says "
                       f"{want} (at {at}: {total.xreplace(sub)} vs {we.xreplace(sub)})", counterexample=pt,
                       fix=f'flops = "{to_python(total)}"')
    if not sp.complete:
        return incomplete("flops", sp, len(classes))
    return Finding(expectation="flops", status=PASS,
                   message=f"FLOPs proved equal to {want} in all {len(classes)} ok class(es)")


def check_comm(facts, want: dict) -> Finding:
    """Each collective kind's per-rank bytes equal the contract's formula in every ok class (Z3 where
    they differ in form); a kind the program uses and the contract omits fails, and one the contract states
    that a class does not issue counts 0 bytes there."""
    from guards.render import to_python
    sp, z, classes = ok_classes(facts)
    if not classes:
        return Finding(expectation="comm", status=FAIL, message="no size in the ranges runs", fix="see the `valid` expectation")
    wants = {k: sympy.Integer(v) if isinstance(v, int) else parse_expr(v, sp.symbols, rational=True)
             for k, v in want.items()}
    for c, term in classes:
        got = {k: by_name(sympy.sympify(e), sp) for k, e in facts.report_of_class(c).comm.by_kind.items()}
        if set(got) - set(wants):
            return Finding(expectation="comm", status=FAIL, message=f"the program's collectives are {sorted(got) or 'none'} where "
                           f"{c.describe()}, the contract states {sorted(wants)}",
                           fix="comm = { " + ", ".join(f'{k} = "{to_python(e)}"' for k, e in got.items()) + " }")
        # A kind the contract states and this class does not issue sends 0 bytes here (a mesh of one device).
        got.update({k: sympy.Integer(0) for k in wants if k not in got})
        for k, e in got.items():
            if sympy.simplify(e - wants[k]) == 0:
                continue
            try:
                pt = differs(z, sp, term, e, wants[k])
            except Undecided as err:
                return Finding(expectation="comm", status=UNDECIDED, message=str(err))
            except (UntranslatableExpression, z3.Z3Exception) as err:  # a formula Z3 cannot express: undecided
                return Finding(expectation="comm", status=UNDECIDED, message=f"cannot compare {to_python(e)} with {want[k]} ({err})")
            if pt is None:
                continue
            return Finding(expectation="comm", status=FAIL, message=f"{k} sends {to_python(e)} bytes per rank where {c.describe()}, the "
                           f"contract says {want[k]}", counterexample=pt, fix=f'{k} = "{to_python(e)}"')
    if not sp.complete:
        return incomplete("comm", sp, len(classes))
    return Finding(expectation="comm", status=PASS, message=f"bytes per rank of {', '.join(sorted(wants))} proved equal in all "
                   f"{len(classes)} ok class(es)")
