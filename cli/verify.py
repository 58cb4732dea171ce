"""Checking one contract entry: each expectation proved, refuted with a counterexample, or undecided.

A :class:`Finding` per expectation has a status: ``pass`` (proved over
every size in the ranges), ``fail`` (refuted: the smallest counterexample,
the user line of the guard, assert or error that breaks it, and a
suggested fix), ``undecided`` (the engine could not decide; never reported
as a pass) or ``error`` (the entry itself could not be checked: the program
did not import, a spec is malformed).

Example::

    >>> from cli.contracts import Contract
    >>> c = Contract("rows", "examples/mlp.py:tokens_to_blocks", ["x: f32[B, T, 64]"],
    ...              {"B": (1, 8), "T": (1, 64)}, {"valid": True})
    >>> r = verify(c, ["."])
    >>> f = r.findings[0]
    >>> str(f.status), f.counterexample, f.line > 0
    ('fail', {'B': 1, 'T': 1}, True)
"""
from __future__ import annotations

import math
import os
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Optional

import sympy
import z3

from guards.explanation import DimStatus
from shapes.enums import TextEnum
from shapes.errors import SymshapeError
from shapes.guard import GuardKind
from validation.contracts.pyexpr import ExprError, parse_condition, parse_expr
from validation.z3_translate import UntranslatableExpression

from .contracts import EXPECTATIONS, Contract, load_target
from .loader import CliError


class Verdict(TextEnum):
    """The verdict of one :class:`Finding`."""

    PASS = "pass"
    FAIL = "fail"
    UNDECIDED = "undecided"
    ERROR = "error"


PASS, FAIL, UNDECIDED, ERROR = Verdict.PASS, Verdict.FAIL, Verdict.UNDECIDED, Verdict.ERROR


@dataclass(kw_only=True)
class Finding:
    """The verdict on one expectation of one entry."""

    expectation: str
    status: Verdict
    message: str
    file: Optional[str] = None
    line: Optional[int] = None
    code: str = ""
    counterexample: Optional[dict] = None
    fix: Optional[str] = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class EntryResult:
    """All findings of one contract entry, and the facts found (for ``--update``)."""

    contract: Contract
    findings: list = field(default_factory=list)
    facts: dict = field(default_factory=dict)
    elapsed: float = 0.0

    @property
    def ok(self) -> bool:
        return all(f.status == PASS for f in self.findings)

    def to_dict(self) -> dict:
        c = self.contract
        return {"name": c.name, "program": c.program, "contract_file": c.source, "contract_line": c.line,
                "ok": self.ok, "time_s": round(self.elapsed, 3),
                "findings": [f.to_dict() for f in self.findings], "facts": self.facts}


# --------------------------------------------------------------------------- the facts


class _Facts:
    """The program traced once at a generic point, and dinfer's classes when needed (lazily)."""

    def __init__(self, contract: Contract, roots, time_budget: float, restrict: bool):
        self.c = contract
        self.program = load_target(contract.program, roots, contract.factory, contract.factory_args, restrict)
        self.time_budget = time_budget
        self._space = None
        self._tp = None
        self._trace_error = None

    @property
    def space(self):
        if self._space is None:
            from validation.dinfer import dinfer
            self._space = dinfer(self.program, *self.c.inputs, dims=self.c.dims, time_budget=self.time_budget,
                                 world=self.c.world)
        return self._space

    @property
    def traced(self):
        """A trace at the default example sizes, or else at the smallest ok class's point."""
        if self._tp is None and self._trace_error is None:
            from shapes import TraceError, trace
            from shapes.spec import Dim
            try:
                self._tp = trace(self.program, *self.c.inputs, dims=self.c.dims, world=self.c.world)
            except TraceError as e:
                self._trace_error = e
                for cl in sorted(self.space.ok_classes, key=lambda k: -min(k.traced_at.values(), default=0)):
                    dims = {n: (Dim(v, v, v) if isinstance(v, int) else Dim(v[0], v[1], cl.traced_at[n]))
                            for n, v in self.c.dims.items()}
                    try:
                        self._tp = trace(self.program, *self.c.inputs, dims=dims, world=self.c.world)
                        self._trace_error = None
                        break
                    except TraceError:
                        continue
        if self._tp is None:
            raise self._trace_error
        return self._tp


def _loc(filename, lineno):
    from guards.explain import short_path
    return (short_path(filename) if filename else None), (lineno or None)


def _z3_box(names_syms: dict, box: dict):
    from validation.z3_translate import Z3Translator
    tr = Z3Translator()
    dom = []
    for n, s in names_syms.items():
        lo, hi = box.get(n, (0, math.inf))
        v = tr.var(s)
        dom.append(v >= lo)
        if hi != math.inf:
            dom.append(v <= hi)
    return tr, dom


def _smallest(tr, dom, term, names_syms):
    """The point of ``term`` with the least sum of sizes (None when Z3 finds none)."""
    o = z3.Optimize()
    o.set(timeout=5000)
    o.add(*dom, term)
    vs = [tr.var(s) for s in names_syms.values()]
    if vs:
        o.minimize(z3.Sum(*vs) if len(vs) > 1 else vs[0])
        for v in vs:
            o.minimize(v)
    r = o.check()
    if r == z3.unknown:
        raise _Undecided(f"Z3 could not decide ({o.reason_unknown()})")
    if r != z3.sat:
        return None
    m = o.model()
    return {n: m.eval(tr.var(s), model_completion=True).as_long() for n, s in names_syms.items()}


def _z3box(sp, timeout_s: float = 10.0):
    """dinfer's Z3 view of the searched box (a class of its own since dinfer became a package)."""
    from validation.dinfer.z3box import Z3Box
    return Z3Box(list(sp.symbols), sp.symbols, sp.dims, timeout_s)


# --------------------------------------------------------------------------- expectations


def _check_valid(facts: _Facts, want) -> Finding:
    try:
        return _valid(facts, want)
    except _Undecided as e:
        return Finding(expectation="valid", status=UNDECIDED,
                       message=f"{e}; whether every size in the region runs is not known")


def _valid(facts: _Facts, want) -> Finding:
    from validation.input_space import Status
    sp = facts.space
    z = _z3box(sp)
    if want is True:
        region, region_text = sympy.true, "every size in the ranges"
    else:
        region = parse_condition(want, sp.symbols)
        region_text = f"the region {want}"
    rterm = z.term(region) if region is not sympy.true else z3.BoolVal(True)
    ranked = sorted(sp.classes, key=lambda c: ({Status.ERROR: 0, Status.DATA_DEPENDENT: 1}.get(c.status, 2),
                                              sum(c.example.values())))
    for c in ranked:
        if c.status is Status.OK:
            continue
        term = z.conj(c.conditions)
        point = _smallest(z.tr, z.domain, z3.And(term, rterm), sp.symbols)
        if point is None:
            continue
        at = ", ".join(f"{k}={v}" for k, v in point.items())
        if c.status is Status.ERROR:
            file, line = _loc(c.error.filename, c.error.lineno)
            return Finding(expectation="valid", status=FAIL,
                           message=f"the contract says {region_text} is accepted, but at {at} the program "
                           f"raises {c.error.type}: {c.error.message}",
                           file=file, line=line, code=c.error.code, counterexample=point,
                           fix=_valid_fix(sp, c, want))
        what = c.message or (c.decision.message if c.decision else "the engine could not trace it")
        d = c.decision or c.error
        file, line = _loc(d.filename, d.lineno) if d else (None, None)
        return Finding(expectation="valid", status=UNDECIDED,
                       message=f"at {at} sizes alone do not decide whether the program runs "
                       f"({c.outcome()}: {what})",
                       file=file, line=line, code=getattr(d, "code", ""), counterexample=point)
    if not sp.complete:
        rest = z3.And(*[z3.Not(z.conj(c.conditions)) for c in sp.classes], rterm)
        point = _smallest(z.tr, z.domain, rest, sp.symbols)
        if point is not None:
            return Finding(expectation="valid", status=UNDECIDED,
                           message=f"dinfer did not classify every size ({sp.reason}); "
                           f"for example {point} is unexplored", counterexample=point,
                           fix="raise the time budget (--time-budget) or narrow the dims")
    return Finding(expectation="valid", status=PASS,
                   message=f"{region_text} is accepted ({len(sp.ok_classes)} ok class(es), "
                   f"proved complete by Z3)")


def _valid_fix(sp, bad_class, want) -> str:
    """Change the user line that raises, or narrow the ranges (when that is exact), or state the region."""
    from guards.explain import short_path
    fixes = []
    err = bad_class.error
    if err is not None and err.filename and not err.filename.startswith("<") \
            and "site-packages" not in err.filename:
        fixes.append(f"change {short_path(err.filename)}:{err.lineno} (`{err.code.strip()}`) so that it "
                     f"accepts these sizes")
    narrowed = {n: r for n, r in (sp.valid_ranges or {}).items()
                if r is not None and tuple(r) != tuple(sp.dims[n])}
    region = valid_region_text(sp)
    if narrowed and region != "False" and " or " not in region:
        fixes.append("narrow the dims to " + ", ".join(
            f'{n} = "{lo}..{"inf" if hi == math.inf else hi}"' for n, (lo, hi) in narrowed.items()))
    elif region not in ("False", "True") and len(region) <= 160:
        fixes.append(f'state the region it accepts: valid = "{region}"')
    elif region == "False":
        fixes.append("no size in the ranges runs")
    return "; or ".join(fixes) or "state a narrower region in `valid`"


def valid_region_text(sp) -> str:
    """The sizes the program accepts as one Python condition: the ``valid iff`` summary when dinfer
    provides one, else the box narrowed to each dim's valid range when Z3 proves that exact, else
    the union of the ok classes."""
    summary = getattr(getattr(sp, "summary", None), "valid_iff", None)
    if isinstance(summary, str) and summary and sp.complete:
        return summary
    oks = sp.ok_classes
    if not oks:
        return "False"
    if len(oks) == len(sp.classes) and sp.complete:
        return "True"
    z = _z3box(sp, 5.0)
    union = z3.Or(*[z.conj(c.conditions) for c in oks])
    parts, box = [], []
    for n, r in (sp.valid_ranges or {}).items():
        if r is None:
            box = None
            break
        lo, hi = r
        blo, bhi = sp.dims[n]
        v = z.vars[n]
        box += [v >= lo] + ([v <= hi] if hi != math.inf else [])
        if lo > blo and hi < bhi:
            parts.append(f"{lo} <= {n} <= {hi}")
        elif lo > blo:
            parts.append(f"{n} >= {lo}")
        elif hi < bhi:
            parts.append(f"{n} <= {hi}")
    if box is not None and sp.complete:
        s = z.solver()
        s.add(z3.And(*box) != union)
        if s.check() == z3.unsat:
            return " and ".join(parts) or "True"
    return " or ".join(f"({c.describe()})" for c in oks)


def _ok_classes(facts: _Facts):
    """dinfer's ok classes, each with a Z3 term for its sizes (facts hold per class, not per trace)."""
    sp = facts.space
    z = _z3box(sp)
    return sp, z, [(c, z.conj(c.conditions)) for c in sp.ok_classes]


def _by_name(expr, sp):
    """``expr`` over the space's own symbols (the engine may build equal-named symbols of its own)."""
    e = sympy.sympify(expr)
    return e.xreplace({s: sp.symbols[s.name] for s in e.free_symbols if s.name in sp.symbols})


def _differs(z, sp, class_term, got, want):
    """The smallest point of the class where ``got != want``; None when Z3 proves them equal there."""
    t = z.tr.to_z3(_by_name(got, sp)) != z.tr.to_z3(_by_name(want, sp))
    s = z.solver()
    s.add(class_term, t)
    r = s.check()
    if r == z3.unsat:
        return None
    if r == z3.unknown:
        raise _Undecided(f"Z3 could not decide whether {got} equals {want}")
    model = s.model()
    try:
        return _smallest(z.tr, z.domain, z3.And(class_term, t), sp.symbols) or z.point(model)
    except _Undecided:  # a point of it is known, just not the smallest
        return z.point(model)


class _Undecided(Exception):
    pass


def _output_fix(sp, c) -> str:
    """The ``output`` the contract could state: the one formula of every ok class (the summary's
    ok row, e.g. ``[B, T, 32]`` and not ``[1, 1, 32]`` of the smallest class), if there is one."""
    rows = [r for r in (sp.summary.rows if getattr(sp, "summary", None) is not None else ())
            if r.ok]
    if len(rows) == 1 and rows[0].outputs:
        return f"output = {_toml(_shape_fact(rows[0].outputs))}"
    if len(rows) > 1:
        return ("the output shape differs between sizes (" + "; ".join(
            f"{r.output_text()} where {r.region.text()}" for r in rows) + "): narrow `dims` to one of them")
    return f"output = {_toml(_shape_fact(c.output_shapes))}"


def _check_output(facts: _Facts, want) -> Finding:
    from guards.render import to_python
    wants = want if want and all(isinstance(s, list) for s in want) else [want]
    sp, z, classes = _ok_classes(facts)
    if not classes:
        return Finding(expectation="output", status=FAIL,
                       message="no size in the ranges runs, so there is no output shape",
                       fix="see the `valid` expectation")
    wexprs = [[sympy.Integer(d) if isinstance(d, int) else parse_expr(d, sp.symbols) for d in w] for w in wants]
    try:
        for c, term in classes:
            got = [list(s) for s in c.output_shapes]
            got_text = "; ".join("[" + ", ".join(to_python(e) for e in s) + "]" for s in got)
            if len(wants) != len(got):
                return Finding(expectation="output", status=FAIL,
                               message=f"the program returns {len(got)} tensor(s) ({got_text}) where "
                               f"{c.describe()}; the contract lists {len(wants)}", counterexample=dict(c.example),
                               fix=_output_fix(sp, c))
            for i, (w, we, g) in enumerate(zip(wants, wexprs, got)):
                if len(w) != len(g):
                    return Finding(expectation="output", status=FAIL,
                                   message=f"output {i} is [{', '.join(map(to_python, g))}] (rank {len(g)}) "
                                   f"where {c.describe()}; the contract says rank {len(w)}",
                                   counterexample=dict(c.example), fix=_output_fix(sp, c))
                for j, (wd, wx, gd) in enumerate(zip(w, we, g)):
                    pt = _differs(z, sp, term, gd, wx)
                    if pt is not None:
                        at = ", ".join(f"{k}={v}" for k, v in pt.items())
                        return Finding(expectation="output", status=FAIL,
                                       message=f"output {i} dim {j} is {to_python(gd)} where {c.describe()}, "
                                       f"the contract says {wd} (at {at})", counterexample=pt,
                                       fix=_output_fix(sp, c))
    except _Undecided as e:
        return Finding(expectation="output", status=UNDECIDED, message=str(e))
    shapes = {"; ".join("[" + ", ".join(to_python(e) for e in s) + "]" for s in c.output_shapes) for c, _ in classes}
    if not sp.complete:
        return _incomplete("output", sp, len(classes))
    return Finding(expectation="output", status=PASS,
                   message=f"output shape(s) match the contract in all {len(classes)} ok class(es)"
                   + (f" ({next(iter(shapes))})" if len(shapes) == 1 else ""))


def _toml(v) -> str:
    from .contracts import toml_value
    return toml_value(v)


def _shape_fact(output_shapes):
    from guards.render import to_python
    shapes = [[int(e) if getattr(e, "is_Integer", False) or isinstance(e, int) else to_python(e) for e in s]
              for s in output_shapes]
    return shapes[0] if len(shapes) == 1 else shapes


def _constraints(tp):
    return sympy.And(*[g.expr for g in tp.env.constraints + tp.env.records
                       if g.expr.free_symbols <= set(tp.dim_symbols.values())])


def _explained(facts):
    from guards.explain import explain
    return explain(facts.traced)


def _check_no_specialization(facts: _Facts, want: bool) -> Finding:
    ex = _explained(facts)
    spec = [d for d in ex.dims if d.status is DimStatus.SPECIALIZED]
    if not want:
        return Finding(expectation="no_specialization", status=PASS, message="not required")
    if not spec:
        return Finding(expectation="no_specialization", status=PASS, message="no dim is fixed to a constant")
    d = spec[0]
    e = ex.entries[d.record] if d.record is not None and d.record < len(ex.entries) else None
    rng = facts.c.dims.get(d.name)
    cex = None
    if isinstance(rng, tuple):
        other = rng[0] if rng[0] != d.value else rng[0] + 1
        if other <= rng[1]:
            cex = {d.name: other}
    file, line = _loc(e.file, e.line) if e else (None, None)
    return Finding(expectation="no_specialization", status=FAIL,
                   message=f"{d.name} is specialized to {d.value}: {d.reason}", file=file, line=line,
                   code=e.code if e else "", counterexample=cex,
                   fix=(e.suggestion if e and e.suggestion else f"keep {d.name} symbolic at that line"))


def _check_max_guards(facts: _Facts, want: int) -> Finding:
    ex = _explained(facts)
    guards = [e for e in ex.entries if e.kind is GuardKind.GUARD]
    if len(guards) <= want:
        return Finding(expectation="max_guards", status=PASS, message=f"{len(guards)} guard(s), at most {want} allowed")
    extra = guards[want]
    file, line = _loc(extra.file, extra.line)
    return Finding(expectation="max_guards", status=FAIL,
                   message=f"{len(guards)} guards, the contract allows {want}; guard {want + 1}: "
                           f"{extra.expr} ({extra.user_expr})", file=file, line=line, code=extra.code,
                   fix=extra.suggestion or f"raise max_guards to {len(guards)} if these recompiles are intended")


def _report_of_class(facts: _Facts, c):
    """The FLOP report of a trace at the class's own point."""
    from shapes import trace
    from shapes.flops import count_flops
    from shapes.spec import Dim
    sp = facts.space
    dims = {n: Dim(lo, hi, c.traced_at[n]) for n, (lo, hi) in sp.dims.items()}
    return count_flops(trace(facts.program, *facts.c.inputs, dims=dims, world=facts.c.world))


def _flops_of_class(facts: _Facts, c):
    """The symbolic FLOP count of a trace at the class's own point."""
    return sympy.sympify(_report_of_class(facts, c).total)


def _check_comm(facts: _Facts, want: dict) -> Finding:
    """Each collective kind's per-rank bytes equal the contract's formula in every ok class (Z3 where
    they differ in form); a kind the program uses and the contract omits, or the reverse, fails."""
    from guards.render import to_python
    sp, z, classes = _ok_classes(facts)
    if not classes:
        return Finding(expectation="comm", status=FAIL, message="no size in the ranges runs", fix="see the `valid` expectation")
    wants = {k: sympy.Integer(v) if isinstance(v, int) else parse_expr(v, sp.symbols, rational=True)
             for k, v in want.items()}
    for c, term in classes:
        got = {k: _by_name(sympy.sympify(e), sp) for k, e in _report_of_class(facts, c).comm.by_kind.items()}
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
                pt = _differs(z, sp, term, e, wants[k])
            except _Undecided as err:
                return Finding(expectation="comm", status=UNDECIDED, message=str(err))
            except Exception as err:  # a formula Z3 cannot express: undecided, never a pass
                return Finding(expectation="comm", status=UNDECIDED, message=f"cannot compare {to_python(e)} with {want[k]} ({err})")
            if pt is None:
                continue
            return Finding(expectation="comm", status=FAIL, message=f"{k} sends {to_python(e)} bytes per rank where {c.describe()}, the "
                           f"contract says {want[k]}", counterexample=pt, fix=f'{k} = "{to_python(e)}"')
    if not sp.complete:
        return _incomplete("comm", sp, len(classes))
    return Finding(expectation="comm", status=PASS, message=f"bytes per rank of {', '.join(sorted(wants))} proved equal in all "
                   f"{len(classes)} ok class(es)")


def _check_flops(facts: _Facts, want) -> Finding:
    from guards.render import to_python
    sp, z, classes = _ok_classes(facts)
    if not classes:
        return Finding(expectation="flops", status=FAIL,
                       message="no size in the ranges runs", fix="see the `valid` expectation")
    we = sympy.Integer(want) if isinstance(want, int) else parse_expr(want, sp.symbols)
    for c, term in classes:
        total = _by_name(_flops_of_class(facts, c), sp)
        if sympy.expand(total - we) == 0:
            continue
        try:
            pt = _differs(z, sp, term, total, we)
        except _Undecided as e:
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
        return _incomplete("flops", sp, len(classes))
    return Finding(expectation="flops", status=PASS,
                   message=f"FLOPs proved equal to {want} in all {len(classes)} ok class(es)")


def _incomplete(what, sp, n) -> Finding:
    """Holding in the classes found is not holding everywhere: undecided, never a pass."""
    return Finding(expectation=what, status=UNDECIDED,
                   message=f"holds in the {n} ok class(es) found, but dinfer did not classify every size "
                   f"({sp.reason})", counterexample=sp.unexplored_example,
                   fix="raise --time-budget or narrow the dims")


_CHECKS = {"output": _check_output, "valid": _check_valid, "no_specialization": _check_no_specialization,
           "max_guards": _check_max_guards, "flops": _check_flops, "comm": _check_comm}


def verify(contract: Contract, roots=None, time_budget: float = 60.0, facts: bool = False) -> EntryResult:
    """Check every expectation of ``contract``.  Its program path is relative to the contract's
    folder; with ``roots`` (the server) it must lie inside one of them.

    With ``facts=True`` also record the current facts (output, valid region,
    specialization, guard count, FLOPs) in :attr:`EntryResult.facts`.
    """
    t0 = time.monotonic()
    restrict = roots is not None
    roots = list(roots) if roots is not None else [contract.base_dir]
    res = EntryResult(contract)
    try:
        f = _Facts(contract, roots, time_budget, restrict)
    except (CliError, SymshapeError) as e:
        res.findings.append(Finding(expectation="program", status=ERROR,
                                    message=" ".join(str(e).split()), file=contract.source, line=contract.line))
        res.elapsed = time.monotonic() - t0
        return res
    for k in EXPECTATIONS:
        if k not in contract.expectations:
            continue
        res.findings.append(_guarded(k, lambda: _CHECKS[k](f, contract.expectations[k]), contract))
    if facts:
        try:
            res.facts = current_facts(f)
        except (SymshapeError, CliError, ExprError) as e:  # best effort: the findings say what failed
            res.facts = {"error": f"{type(e).__name__}: {e}"}
    res.elapsed = time.monotonic() - t0
    return res


def _guarded(k, fn, contract) -> Finding:
    from shapes import TraceError
    try:
        return fn()
    except (ExprError, CliError) as e:
        return Finding(expectation=k, status=ERROR,
                       message=" ".join(str(e).split()), file=contract.source, line=contract.line)
    except TraceError as e:
        p = e.provenance
        exc = e.exc if e.exc is not None else e
        file, line = _loc(getattr(p, "filename", None), getattr(p, "lineno", None))
        return Finding(expectation=k, status=FAIL,
                       message=f"the program raises at every traced point: {type(exc).__name__}: "
                       f"{str(exc).splitlines()[0] if str(exc) else ''}",
                       file=file, line=line, code=getattr(p, "code", ""))
    except SymshapeError as e:
        return Finding(expectation=k, status=UNDECIDED,
                       message=f"symshape could not decide: {' '.join(str(e).split())}")
    except Exception as e:  # a symshape bug must not read as a pass or as the program's error
        tb = traceback.extract_tb(e.__traceback__)[-1]
        return Finding(expectation=k, status=UNDECIDED, message=f"symshape failed ({type(e).__name__}: {e} at "
                       f"{os.path.basename(tb.filename)}:{tb.lineno}); not decided")


def current_facts(f: _Facts) -> dict:
    """What the program does now, in contract form (what ``--update`` writes)."""
    from guards.render import to_python
    from shapes.flops import count_flops
    out = {}
    try:
        tp = f.traced
    except SymshapeError:  # the program does not trace: no output fact
        tp = None
    if tp is not None:
        out["output"] = _shape_fact(tp.output_shapes)
    region = valid_region_text(f.space)
    out["valid"] = True if region == "True" else region
    if tp is not None:
        ex = _explained(f)
        out["no_specialization"] = not any(d.status is DimStatus.SPECIALIZED for d in ex.dims)
        out["max_guards"] = sum(1 for e in ex.entries if e.kind is GuardKind.GUARD)
        out["flops"] = to_python(sympy.sympify(count_flops(tp).total))
    return out
