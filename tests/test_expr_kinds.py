"""Every expression kind the engine builds, through every analysis and printer.

Each (kind, analysis) pair is either handled, and then checked against
concrete evaluation (``validation.concrete``, exact Python semantics) at
points of a small box, or raises the analysis's :class:`UnhandledExprKind`
naming that kind.  Which pairs are unhandled is fixed below, so a rule that
goes missing fails here.  C++ is compiled with gcc and Triton runs in its
interpreter (``TRITON_INTERPRET=1``).
"""
import ctypes
import itertools
import json
import math
import os
import subprocess
import sys

import pytest
import sympy
import torch
import torch.fx
import z3

from compiler.codegen.cpp import PRELUDE, build
from compiler.codegen.triton import HEADER
from compiler.exprs import compile_exprs
from shapes import printers
from shapes.errors import UnhandledExprKind
from shapes.expr_graph import FxExprBuilder
from shapes.expr_kinds import ExprVisitor, Kind, classify
from shapes.functions import ENGINE_FUNCTIONS, FloorDiv, PyMod, ToFloat, TrueDiv, TruncToInt, Where
from shapes.value_ranges import RangeRules, ValueRange
from validation.concrete import ConcreteSource, evaluate
from validation.z3_translate import Z3Translator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N, M = sympy.symbols("N M", integer=True)
RANGES = {N: ValueRange(2, 9), M: ValueRange(1, 5)}
POINTS = [{N: n, M: m} for n, m in itertools.product(range(2, 10), range(1, 6))]

#: One expression of each kind, as the engine builds it.
SAMPLES = {
    Kind.INTEGER: sympy.Integer(7),
    Kind.RATIONAL: sympy.Rational(3, 2),
    Kind.FLOAT: sympy.Float(0.5),
    Kind.INFINITY: sympy.oo,
    Kind.SYMBOL: N,
    Kind.TRUE: sympy.true,
    Kind.FALSE: sympy.false,
    Kind.ADD: N + 2 * M - 3,
    Kind.MUL: 3 * N * M,
    Kind.POW: N ** 2,
    Kind.FLOOR_DIV: FloorDiv(N - 7, M),
    Kind.PY_MOD: PyMod(N - 7, M),
    Kind.MOD: sympy.Mod(N - 7, M),
    Kind.TRUE_DIV: TrueDiv(N, M),
    Kind.TO_FLOAT: ToFloat(N),
    Kind.TRUNC_TO_INT: TruncToInt(TrueDiv(N - 7, M)),
    Kind.FLOOR: sympy.floor(TrueDiv(N - 7, M)),
    Kind.CEILING: sympy.ceiling(TrueDiv(N - 7, M)),
    Kind.ABS: sympy.Abs(ToFloat(N) - sympy.Float(5.5)),
    Kind.MIN: sympy.Min(N, M + 3, evaluate=False),
    Kind.MAX: sympy.Max(N - 4, M, evaluate=False),
    Kind.WHERE: Where(N > M + 3, N, M),
    Kind.EQ: sympy.Eq(N, M + 1),
    Kind.NE: sympy.Ne(N, M + 1),
    Kind.LT: N < M + 3,
    Kind.LE: N <= M + 3,
    Kind.GT: N > M + 3,
    Kind.GE: N >= M + 3,
    Kind.NOT: sympy.Not(sympy.And(N > 3, M > 2)),
    Kind.AND: sympy.And(N > 3, M < 4),
    Kind.OR: sympy.Or(N > 7, M > 3),
    Kind.EQUIVALENT: sympy.Equivalent(N > 3, M > 2),
}

#: The kinds each analysis has no rule for (anything else must be handled).
UNHANDLED = {
    "ranges": set(),
    "z3": {Kind.INFINITY},
    "concrete": {Kind.INFINITY},
    # Numbers and truth values are graph constants (expr_node returns them as Python values).
    "fx": {Kind.INTEGER, Kind.RATIONAL, Kind.FLOAT, Kind.INFINITY, Kind.TRUE, Kind.FALSE, Kind.EQUIVALENT},
    "python": set(),
    "guard_python": {Kind.INFINITY},
    "cpp": {Kind.INFINITY},
    "triton": {Kind.INFINITY},
}
ANALYSES = list(UNHANDLED)


def test_samples_cover_every_kind():
    assert set(SAMPLES) == set(Kind)
    assert set(ENGINE_FUNCTIONS) <= {type(e) for e in SAMPLES.values()}
    for kind, e in SAMPLES.items():
        assert classify(e) is kind, (kind, e)


def test_unknown_expression_types_are_named():
    with pytest.raises(UnhandledExprKind, match="sin"):
        classify(sympy.sin(N))
    with pytest.raises(UnhandledExprKind, match="sin") as info:
        printers.to_cpp(sympy.sin(N) + 1)
    assert info.value.kind is None


def _expected(e, p):
    v = evaluate(e, p)
    return float(v) if not isinstance(v, bool) else v


def _close(got, want):
    if isinstance(want, bool):
        return bool(got) == want
    return math.isclose(float(got), float(want), rel_tol=1e-6, abs_tol=1e-9)


# --- one checker per analysis ------------------------------------------------------------


def check_ranges(kind, e):
    r = RangeRules(RANGES, {}).bound(e)
    if kind is Kind.INFINITY:
        assert r.lower == r.upper == math.inf
        return
    for p in POINTS:
        v = evaluate(e, p)
        assert r.lower <= v <= r.upper, (e, p, v, r)


def check_z3(kind, e):
    tr = Z3Translator()
    term = tr.to_z3(e)
    for p in POINTS[::3]:
        subs = [(tr.var(s), z3.IntVal(v)) for s, v in p.items() if s in tr.vars]
        got = z3.simplify(z3.substitute(term, *subs) if subs else term)
        want = _expected(e, p)
        if z3.is_bool(got):
            assert z3.is_true(got) == want, (e, p)
        else:
            val = got.as_fraction() if z3.is_rational_value(got) else got.as_long()
            assert _close(val, want), (e, p, got, want)


def check_concrete(kind, e):
    """Against sympy's own substitution, which folds the engine's functions on constants."""
    ConcreteSource({N: "N", M: "M"}).visit(e)  # the named error for an unhandled kind
    for p in POINTS[::2]:
        folded = e.xreplace({s: sympy.Integer(v) for s, v in p.items()})
        want = bool(folded) if folded in (sympy.true, sympy.false) else float(folded)
        assert _close(evaluate(e, p), want), (e, p, folded)


class _Inputs:
    """The tracer's graph builder, reduced to two size inputs."""

    def __init__(self):
        self.graph = torch.fx.Graph()
        self.nodes = {N: self.graph.placeholder("N"), M: self.graph.placeholder("M")}

    def symbol_node(self, s):
        return self.nodes[s]

    def expr_node(self, e):
        if e is sympy.true or e is sympy.false:
            return e is sympy.true
        if e.is_Integer:
            return int(e)
        if e.is_number:
            return float(e)
        return FxExprBuilder(self).visit(e)


def check_fx(kind, e):
    inputs = _Inputs()
    out = FxExprBuilder(inputs).visit(e)
    inputs.graph.output(out)
    gm = torch.fx.GraphModule(torch.nn.Module(), inputs.graph)
    for p in POINTS:
        assert _close(gm(p[N], p[M]), _expected(e, p)), (e, p)


def check_python(kind, e):
    text = printers.to_python(e)
    assert "Mod(" not in text and "ToFloat" not in text and "ceiling" not in text
    for p in POINTS:
        got = eval(text, {"math": math}, {"N": p[N], "M": p[M]})  # noqa: S307 - our own printer's output
        if kind is Kind.INFINITY:
            assert got == math.inf
        else:
            assert _close(got, _expected(e, p)), (text, p)


def check_guard_python(kind, e):
    f = compile_exprs([e], [N, M])
    for p in POINTS:
        assert _close(f(p[N], p[M])[0], _expected(e, p)), (e, p)


def check_cpp(kind, e):
    text = printers.to_cpp(e, nonneg=lambda x: False)
    src = PRELUDE + f'extern "C" double f(int64_t N, int64_t M) {{ return (double)({text}); }}\n'
    f = build(src).f
    f.restype, f.argtypes = ctypes.c_double, [ctypes.c_int64, ctypes.c_int64]
    for p in POINTS:
        assert _close(f(p[N], p[M]), _expected(e, p)), (text, p)


def check_triton(kind, e):
    assert not any(w in printers.to_triton(e) for w in ("ToFloat", "TruncToInt", "Not(", "Mod("))
    # Run in the interpreter together with every other sample (one subprocess): see test_triton_values.


CHECKS = {"ranges": check_ranges, "z3": check_z3, "concrete": check_concrete, "fx": check_fx,
          "python": check_python, "guard_python": check_guard_python, "cpp": check_cpp, "triton": check_triton}
ERRORS = {"ranges": RangeRules, "z3": Z3Translator, "concrete": ConcreteSource, "fx": FxExprBuilder,
          "python": printers.PythonPrinter, "guard_python": printers.GuardPythonPrinter,
          "cpp": printers.CppPrinter, "triton": printers.TritonPrinter}


@pytest.mark.parametrize("analysis", ANALYSES)
@pytest.mark.parametrize("kind", list(Kind), ids=lambda k: k.name)
def test_kind_is_handled_or_named(kind, analysis):
    visitor: type[ExprVisitor] = ERRORS[analysis]
    e = SAMPLES[kind]
    if kind in UNHANDLED[analysis]:
        assert not visitor.handles(kind)
        with pytest.raises(UnhandledExprKind) as info:
            CHECKS[analysis](kind, e)
        assert isinstance(info.value, visitor.error) and info.value.kind is kind
        assert kind.name in str(info.value) and visitor.analysis in str(info.value)
    else:
        assert visitor.handles(kind)
        CHECKS[analysis](kind, e)


def test_kernel_printers_refuse_float_operands_of_integer_division():
    """C's / and % on a float operand would truncate it first: a wrong answer, so no text at all."""
    e = FloorDiv(ToFloat(N), 2)
    for to in (printers.to_cpp, printers.to_triton):
        with pytest.raises(UnhandledExprKind, match="FLOOR_DIV"):
            to(e)


def test_kernel_printers_use_native_division_only_where_known_nonneg():
    e = FloorDiv(N - 7, M)
    assert printers.to_cpp(e, nonneg=lambda x: True) == "((N - 7) / M)"
    assert printers.to_cpp(e, nonneg=lambda x: False) == "sym_floordiv(N - 7, M)"
    assert printers.to_triton(e, nonneg=lambda x: False) == "_floordiv(N - 7, M)"


TRITON_SCRIPT = r"""
import json, sys
{header}
import triton
import triton.language as tl
import torch
results = {{}}
{kernels}
for name, kern in KERNELS:
    vals = []
    for n, m in json.loads(sys.argv[1]):
        out = torch.zeros(1, dtype=torch.float64)
        kern[(1,)](out, n, m)
        vals.append(float(out[0]))
    results[name] = vals
print(json.dumps(results))
"""


def test_triton_values():
    """Every sample the Triton printer handles, run in Triton's interpreter at the box's points."""
    kernels, names = [], []
    for kind, e in SAMPLES.items():
        if kind in UNHANDLED["triton"]:
            continue
        text = printers.to_triton(e, nonneg=lambda x: False)
        kernels.append(f"@triton.jit\ndef k_{kind.value}(out, N, M):\n    tl.store(out, {text})\n")
        names.append(kind)
    kernels.append("KERNELS = [" + ", ".join(f"({k.value!r}, k_{k.value})" for k in names) + "]")
    script = TRITON_SCRIPT.format(header=HEADER, kernels="\n\n".join(kernels))
    pts = [(p[N], p[M]) for p in POINTS[::4]]
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=ROOT)
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"symshape_kinds_{os.getpid()}.py")
    with open(path, "w") as f:
        f.write(script)
    r = subprocess.run([sys.executable, path, json.dumps(pts)], capture_output=True, text=True, env=env,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    for kind in names:
        e = SAMPLES[kind]
        for (n, m), v in zip(pts, got[kind.value]):
            want = _expected(e, {N: n, M: m})
            # Triton's / on integers is float32: compare at its precision.
            assert math.isclose(v, float(want), rel_tol=1e-6, abs_tol=1e-6), (kind, n, m, v, want)


def test_printed_python_evaluates_to_the_expressions_value():
    """The Python printer's text (what guards and reports show, and what compiled guards run)
    has the expression's value at every point: checked against sympy's own evaluation of the
    substituted expression, on random integer expressions with // and % in sums, leading
    minus signs and negative divisors."""
    import random

    from shapes.printers import to_python
    from validation.fuzz_scenarios import ExprGenerator

    rng = random.Random(7)
    syms = list(sympy.symbols("a b c", integer=True))
    gen = ExprGenerator(rng, syms)
    checked = 0
    for _ in range(400):
        try:
            e = gen.int_expr(4)
        except ZeroDivisionError:  # a constant divisor folded to 0
            continue
        text = to_python(e)
        for _ in range(6):
            point = {s: rng.randint(-9, 20) for s in syms}
            try:
                want = e.subs(point)
            except ZeroDivisionError:
                continue
            if not want.is_Integer:
                continue
            try:
                got = eval(text, {"math": math}, {s.name: v for s, v in point.items()})
            except ZeroDivisionError:
                continue
            assert got == int(want), (text, point)
            checked += 1
    assert checked > 1000
