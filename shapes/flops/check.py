"""Check a hand-written FLOP formula against the traced closed form.

:meth:`FlopReport.check` parses the formula (Python syntax over the program's
dims and named constants), then:

* **equal**: the difference simplifies to 0 (a proof for every size), or the
  engine proves it 0 from the ranges and guards of the traced path;
* **equal where ...**: the traced count is piecewise (e.g. size 1 on its own
  branch) and the formula matches some branches: those branches' conditions;
* **different**: the smallest sizes on the traced path (by sum, then in dim
  order) where the two differ, with both values.  A nonzero polynomial of
  degree d in a dim has a non-root among any d + 1 values of that dim, so the
  search over the lowest values of each dim finds one when the difference is a
  polynomial;
* **unknown**: not proved equal and no counterexample among the sizes searched
  (a distinct outcome, never reported as equal).

Example::

    >>> import torch, shapes
    >>> r = shapes.count_flops(torch.nn.Linear(64, 32), "x: f32[B, 64]")
    >>> print(r.check("2*B*D_in*D_out", consts={"D_in": 64, "D_out": 32}))
    equal: 2*B*D_in*D_out == 4096*B for every size (the difference simplifies to 0)
    >>> res = r.check("2*B*64*64")
    >>> res.outcome, res.values[1] == 2 * res.values[0]
    ('different', True)
"""
from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import sympy

from ..errors import GuardViolation, SpecError, SymshapeError, UnhandledExprKind
from ..printers import to_python
from .exprs import formula_text

#: Largest number of size points tried before the outcome is "unknown".
SEARCH_LIMIT = 2000


class FormulaError(SpecError):
    """The formula cannot be parsed, or names something that is neither a dim nor a constant."""


@dataclass
class CheckResult:
    """What :meth:`FlopReport.check` found.

    ``outcome`` is ``"equal"``, ``"equal_where"``, ``"different"`` or
    ``"unknown"``; ``counterexample`` the sizes where they differ and
    ``values`` the (traced, formula) counts there; ``region`` the condition
    (Python syntax) under which they are equal for ``"equal_where"``.
    ``bool(result)`` is True only for ``"equal"``.
    """

    outcome: str
    formula: Any
    traced: Any
    message: str
    counterexample: Optional[dict] = None
    values: Optional[tuple] = None
    region: Optional[str] = None
    searched: dict = field(default_factory=dict)

    def __bool__(self) -> bool:
        return self.outcome == "equal"

    def __str__(self) -> str:
        return self.message


# --------------------------------------------------------------------------- parsing

_BINOPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.Div: lambda a, b: a / b, ast.Pow: lambda a, b: a ** b}


def parse_formula(text: str, symbols: Mapping[str, sympy.Symbol], consts: Mapping[str, int]) -> sympy.Expr:
    """``text`` (Python syntax: ``+ - * / // % **``, ``min``, ``max``, ints) as a
    sympy expression; names are dims (``symbols``) or ``consts`` (exact ints)."""
    from ..functions import FloorDiv, PyMod
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise FormulaError(f"cannot parse the formula {text!r}: {e.msg} at column {e.offset}; write it in "
                           f"Python syntax, e.g. '6*P*B*T + 12*L*D*B*T**2'") from None
    unknown: list[str] = []

    def conv(n):
        if isinstance(n, ast.Expression):
            return conv(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) and not isinstance(n.value, bool):
            return sympy.Integer(n.value) if isinstance(n.value, int) else sympy.Rational(str(n.value))
        if isinstance(n, ast.Name):
            if n.id in consts:
                return sympy.Integer(consts[n.id])
            if n.id in symbols:
                return symbols[n.id]
            unknown.append(n.id)
            return sympy.Integer(1)
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
            v = conv(n.operand)
            return -v if isinstance(n.op, ast.USub) else v
        if isinstance(n, ast.BinOp):
            a, b = conv(n.left), conv(n.right)
            if type(n.op) in _BINOPS:
                return _BINOPS[type(n.op)](a, b)
            if isinstance(n.op, ast.FloorDiv):
                return FloorDiv(a, b)
            if isinstance(n.op, ast.Mod):
                return PyMod(a, b)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("min", "max") \
                and n.args and not n.keywords:
            args = [conv(a) for a in n.args]
            return sympy.Min(*args) if n.func.id == "min" else sympy.Max(*args)
        raise FormulaError(f"the formula {text!r} uses {ast.unparse(n)!r}, which is not arithmetic on sizes; "
                           f"use + - * / // % ** min max, integers and names")

    expr = conv(tree)
    if unknown:
        names = ", ".join(dict.fromkeys(unknown))
        raise FormulaError(
            f"the formula names {names}, which is neither a dim of the program ({', '.join(symbols) or 'none'}) "
            f"nor a constant ({', '.join(consts) or 'none given'}); give constants as consts={{'{unknown[0]}': "
            f"...}} (--const {unknown[0]}=... on the command line)")
    return expr


def parse_consts(text: str) -> dict:
    """``"L=12,D=768"`` as ``{"L": 12, "D": 768}`` (the CLI's ``--const``)."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, eq, value = part.partition("=")
        name = name.strip()
        try:
            if not eq or not name.isidentifier():
                raise ValueError
            out[name] = int(value.strip().replace("_", ""))
        except ValueError:
            raise FormulaError(f"bad constant {part!r}: write NAME=INT, e.g. --const L=12,D=768") from None
    return out


# --------------------------------------------------------------------------- checking

def check(report, formula, consts: Optional[Mapping] = None, of: str = "total") -> CheckResult:
    """Compare ``formula`` with the report's count ``of`` (``"total"``,
    ``"useful"``, or a phase: ``"forward"``, ``"backward"``, ``"optimizer"``)."""
    consts = dict(consts or {})
    for k, v in consts.items():
        if not isinstance(k, str) or not k.isidentifier() or isinstance(v, bool) or not isinstance(v, int):
            raise FormulaError(f"constants map names to ints, got {k!r}: {v!r}")
    env = report.traced.env
    dims = report.dims
    symbols = {d: env.symbols[d] for d in dims}
    clash = sorted(set(consts) & set(symbols))
    if clash:
        raise FormulaError(f"{', '.join(clash)} is a dim of the program; a constant cannot have its name")
    if isinstance(formula, str):
        user = parse_formula(formula, symbols, consts)
        shown = formula.strip()
    else:
        user = sympy.sympify(formula).xreplace({sympy.Symbol(k): v for k, v in consts.items()})
        shown = _user_text(formula)
    if of == "total":
        traced = report.total
    elif of == "useful":
        traced = report.useful
    elif of in report.phase_totals:
        traced = report.phase_totals[of]
    else:
        raise FormulaError(f"of= must be 'total', 'useful' or one of the phases {', '.join(report.phase_totals)}; "
                           f"got {of!r}")
    stray = user.free_symbols - set(symbols.values())
    if stray:
        raise FormulaError(f"the formula has symbols {', '.join(map(str, stray))} that are not dims of the program")

    branches = _branches(traced)
    zero = [_is_zero(e - user, env) for e, _ in branches]
    if all(zero):
        how = "simplifies to 0" if all(z == "identity" for z in zero) else "is 0 on the traced path's ranges"
        return CheckResult("equal", user, traced, f"equal: {shown} == {formula_text(traced)} for every size (the difference {how})")
    point = _counterexample(report, traced, user)
    roots = _roots(report, branches, user) if not any(zero) and len(branches) == 1 else []
    if roots and point:
        region = " or ".join(roots)
        return CheckResult("equal_where", user, traced,
                           f"equal for sizes where {region}; different elsewhere, e.g. "
                           f"{_point_text(report, point, traced, user)}",
                           *_point_fields(report, point, traced, user), region=region)
    if any(zero):
        region = " or ".join(_py_cond(c) for (e, c), z in zip(branches, zero) if z)
        msg = f"equal for sizes where {region}"
        if point:
            msg += f"; different elsewhere, e.g. {_point_text(report, point, traced, user)}"
        return CheckResult("equal_where", user, traced, msg, *(_point_fields(report, point, traced, user)),
                           region=region)
    if point:
        return CheckResult("different", user, traced, f"different: {_point_text(report, point, traced, user)}",
                           *_point_fields(report, point, traced, user))
    return CheckResult("unknown", user, traced,
                       f"unknown: {shown} could not be proved equal to {formula_text(traced)}, and they agree at every size "
                       f"searched on the traced path ({_searched_text(report)})")


def _roots(report, branches, user) -> list[str]:
    """Sizes on the traced ranges where a polynomial difference vanishes through
    one of its factors that involves a single dim (``T == 8``), in Python syntax."""
    env = report.traced.env
    d = sympy.expand(branches[0][0] - user)
    try:
        _, factors = sympy.factor_list(d)
    except sympy.polys.polyerrors.BasePolynomialError:  # not a polynomial: no region
        return []
    out = []
    for f, _ in factors:
        free = f.free_symbols
        if len(free) != 1:
            continue
        sym = next(iter(free))
        r = env.ranges.get(sym)
        for root in sympy.solve(f, sym):
            if root.is_Integer and (r is None or r.lower <= root <= r.upper):
                out.append(f"{sym} == {root}")
    return list(dict.fromkeys(out))


def _branches(e):
    e = sympy.piecewise_fold(e) if isinstance(e, sympy.Basic) else sympy.sympify(e)
    if isinstance(e, sympy.Piecewise):
        return [(b.expr, b.cond) for b in e.args]
    return [(e, sympy.true)]


def _is_zero(d, env):
    d = sympy.expand(d)
    if d == 0:
        return "identity"
    d = sympy.simplify(d)
    if d == 0:
        return "identity"
    try:
        if env.static_bool(sympy.Eq(d, 0), log=False) is True:
            return "ranges"
    except SymshapeError:  # a form the engine has no rule for: not proved
        pass
    return None


def _candidates(report, traced, user):
    env = report.traced.env
    per_dim = []
    diff = sympy.expand(traced - user)
    for d in report.dims:
        sym = env.symbols[d]
        r = env.ranges.get(sym)
        lo = 0 if r is None or r.lower == -sympy.oo else int(max(r.lower, 0))
        hi = None if r is None or r.upper in (sympy.oo, float("inf")) else int(r.upper)
        try:
            deg = sympy.Poly(diff, sym).degree() if diff.is_polynomial(sym) else 8
        except sympy.polys.polyerrors.BasePolynomialError:  # not a polynomial in sym: search wide
            deg = 8
        top = lo + max(deg, 1) + 16
        per_dim.append(list(range(lo, (top if hi is None else min(top, hi)) + 1)))
    return per_dim


def _counterexample(report, traced, user):
    per_dim = _candidates(report, traced, user)
    dims = report.dims
    points = sorted(itertools.product(*per_dim), key=lambda p: (sum(p), p))
    for p in points[:SEARCH_LIMIT]:
        sizes = dict(zip(dims, p))
        try:
            a = report.evaluate(sizes, expr=traced)
        except (GuardViolation, SymshapeError):
            continue  # off the traced path: the closed form says nothing there
        b = _value(user, report, sizes)
        if b is None or a != b:
            return sizes
    return None


def _value(expr, report, sizes):
    subs = {report.traced.env.symbols[k]: sympy.Integer(v) for k, v in sizes.items()}
    v = sympy.sympify(expr).xreplace(subs)
    if not v.is_number:
        v = sympy.simplify(v)
    if v.is_Integer:
        return int(v)
    return v


def _point_fields(report, point, traced, user):
    if not point:
        return None, None
    return point, (report.evaluate(point, expr=traced), _value(user, report, point))


def _point_text(report, point, traced, user):
    a, b = _point_fields(report, point, traced, user)[1]
    at = ", ".join(f"{k}={v}" for k, v in point.items())
    return f"at {at} the traced count is {a} and the formula gives {_user_text(b)}"


def _searched_text(report):
    env = report.traced.env
    parts = []
    for d in report.dims:
        r = env.ranges.get(env.symbols[d])
        parts.append(f"{d} from {r.lower if r is not None else 0}")
    return ", ".join(parts) + f", up to {SEARCH_LIMIT} points"


def _py_cond(c) -> str:
    from ..conditions import canonical_condition
    if c is sympy.true:
        return "True"
    if isinstance(c, sympy.And):
        return " and ".join(_py_cond(a) for a in c.args)
    if isinstance(c, sympy.Or):
        return "(" + " or ".join(_py_cond(a) for a in c.args) + ")"
    if isinstance(c, sympy.Not):
        return f"not ({_py_cond(c.args[0])})"
    return to_python(canonical_condition(c))


def _user_text(e) -> str:
    """The user's formula (or its value) in Python syntax; a sympy object of a
    kind the printer has no rule for (``Piecewise``) is shown as the user wrote it."""
    if not isinstance(e, sympy.Basic):
        return str(e)
    try:
        return to_python(e)
    except UnhandledExprKind:
        return str(e)
