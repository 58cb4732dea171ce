"""Translation validation: real models validate clean; injected wrong rules are caught.

Each mutation test first traces its program with the real engine and checks
the report is clean, then swaps one engine rule (a rewrite rule, a range
function, or a ShapeEnv method) for a deliberately wrong version and checks
that validation names the unsound step and gives a counterexample that
really violates it, evaluated with sympy.
"""
import math

import pytest
import sympy
import torch

import shapes
import shapes.decide as shapes_decide
import shapes.simplify as simplify
import shapes.value_ranges as value_ranges
from torch.fx.experimental.symbolic_shapes import guard_size_oblivious
from shapes.decide import DecisionProcedure
from shapes.env import ShapeEnv
from shapes.facts import FactStore
from tests.mutants import old_size_oblivious_ranges, wrong_mod_range
from shapes.functions import ENGINE_FUNCTIONS, FloorDiv, PyMod, ToFloat, TrueDiv, TruncToInt, Where
from shapes.value_ranges import ValueRange
from validation.translation import UnsoundStep, TranslationValidator, validate, validate_env
from validation.z3_translate import UntranslatableExpression, Z3Translator

HERE = __file__


# ---------------------------------------------------------------------------- helpers


def trace_unsound(fn, *specs, **kw) -> UnsoundStep:
    """Trace with validation on; return the UnsoundStep it must raise."""
    with pytest.raises(UnsoundStep) as info:
        shapes.trace(fn, *specs, translation_validation=True, **kw)
    return info.value


def trace_clean(fn, *specs, **kw):
    tp = shapes.trace(fn, *specs, translation_validation=True, **kw)
    rep = tp.validation_report
    assert rep.ok and not rep.unknown, str(rep)
    assert rep.checked > 0
    return tp


def sympy_value(e, values):
    """Evaluate with sympy itself (independent of validation's own evaluator)."""
    return e.xreplace({s: sympy.Integer(values[s.name]) for s in e.free_symbols})


def assert_counterexample_violates(err: UnsoundStep, env: ShapeEnv, *, allow_div_zero=False):
    """The counterexample satisfies the facts the step relied on and falsifies its claim."""
    step = err.step
    cx = step.counterexample
    assert cx and all(isinstance(v, int) for v in cx.values()), cx
    assert step.status == "unsound" and step.confirmed is True, step.describe()
    for f in env.facts[:step.entry.n_facts]:
        assert sympy_value(f, cx) is sympy.true, (f, cx)
    e = step.entry
    try:
        if e.kind == "static":
            assert sympy_value(e.before, cx) is not e.after, (e, cx)
        elif e.kind == "rewrite":
            before, after = sympy_value(e.before, cx), sympy_value(e.after, cx)
            assert before != after, (e, cx)
        else:
            assert sympy_value(e.before, cx) != sympy_value(e.after, cx), (e, cx)
    except ZeroDivisionError:
        # The step's original divides by zero there (Python raises), its result does not.
        assert allow_div_zero, (e, cx)
        return "div_zero"
    return "value"


def user_line(err: UnsoundStep) -> str:
    p = err.step.provenance
    assert p is not None and p.filename == HERE, p
    return p.code


# ---------------------------------------------------------------------------- clean traces


def tiny_gpt2():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=128, vocab_size=100)
    return transformers.GPT2Model(cfg).eval()


def tiny_bert():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                  intermediate_size=128, vocab_size=100, max_position_embeddings=128)
    return transformers.BertModel(cfg).eval()


@pytest.mark.parametrize("make", [tiny_gpt2, tiny_bert], ids=["GPT2Model", "BertModel"])
def test_models_validate_clean(make):
    tp = trace_clean(make(), "ids: i64[B, T]")
    rep = tp.validation_report
    assert rep.steps == len(tp.env.log) > 100
    assert rep.queries > 10  # real Z3 work happened, not only cache hits
    # Every claim in the log was covered: no step silently skipped.
    claims = sum(1 for e in tp.env.log if e.kind in ("static", "rewrite", "fact"))
    assert rep.checked == claims


def test_environment_variable_switch(monkeypatch):
    monkeypatch.setenv("SYMSHAPE_TRANSLATION_VALIDATION", "1")
    tp = shapes.trace(lambda x: x.view(-1, 8), "x: f32[N]", dims={"N": 64})
    assert tp.validation_report.ok and tp.validation_report.checked > 0
    # The API flag wins over the variable.
    tp = shapes.trace(lambda x: x.view(-1, 8), "x: f32[N]", dims={"N": 64}, translation_validation=False)
    assert not hasattr(tp, "validation_report")


def test_validate_after_the_fact_with_guards_and_asserts():
    def f(x, y):
        n, m = x.shape[0], y.shape[0]
        torch._check(m % 4 == 0)
        if n > 16:
            x = x[: n // 2]
        return x.view(-1, 2), y.view(4, -1), (m // 4) * 4
    tp = shapes.trace(f, "x: f32[N]", "y: f32[M]", dims={"N": 40, "M": 12})
    assert tp.guards and tp.runtime_asserts
    rep = validate(tp)
    assert rep.ok and not rep.unknown, str(rep)
    assert rep.queries > 0


def test_engine_tests_run_with_validation_on(request):
    """The conftest switch is what makes the engine's own tests validate."""
    import tests.conftest as conftest
    assert "test_engine" in conftest._VALIDATED_MODULES and "test_models" in conftest._VALIDATED_MODULES


# ---------------------------------------------------------------------------- mutations


def prog_mod8(x):
    n = x.shape[0]
    if n % 8 == 7:
        return x * 2
    return x


def test_mutation_wrong_range_for_mod(monkeypatch):
    """x % 8 given the range [0, 6] (off by one): `n % 8 == 7` decided False."""
    trace_clean(prog_mod8, "x: f32[N]", dims={"N": 16})
    wrong_mod_range(monkeypatch)
    err = trace_unsound(prog_mod8, "x: f32[N]", dims={"N": 16})
    assert err.step.kind == "static"
    assert err.counterexample["N"] % 8 == 7
    assert_counterexample_violates(err, err.env)
    assert user_line(err) == "if n % 8 == 7:"


def prog_trunc_div(x):
    n = x.shape[0]
    if (n - 10) // 4 >= -1:
        return x + 1
    return x


def test_mutation_truncating_floordiv_range(monkeypatch):
    """Range analysis rounding // toward zero (C semantics) instead of down."""
    trace_clean(prog_trunc_div, "x: f32[N]", dims={"N": (3, 100, 20)})

    def trunc_floordiv(a, b):
        q = value_ranges.truediv(a, b)
        t = lambda v: v if isinstance(v, float) else math.trunc(v)  # noqa: E731
        return ValueRange(t(q.lower), t(q.upper))
    monkeypatch.setattr(value_ranges, "floordiv", trunc_floordiv)
    err = trace_unsound(prog_trunc_div, "x: f32[N]", dims={"N": (3, 100, 20)})
    assert err.step.kind == "static"
    n = err.counterexample["N"]
    assert 3 <= n and (n - 10) // 4 < -1
    assert_counterexample_violates(err, err.env)
    assert user_line(err) == "if (n - 10) // 4 >= -1:"


def prog_cancel(x, y):
    n, m = x.shape[0], y.shape[0]
    k = (n * m + 2) // m
    return x.new_zeros(k)


def test_mutation_floordiv_cancelled_with_remainder(monkeypatch):
    """(q*d + r) // d cancelled to q, dropping a remainder that can reach d."""
    trace_clean(prog_cancel, "x: f32[N]", "y: f32[M]", dims={"N": 5, "M": 8})

    def bad_cancel(env, e):
        if not isinstance(e, FloorDiv) or e.args[1].is_number:
            return None
        a, d = e.args
        q, r = sympy.div(sympy.Poly(a, d), sympy.Poly(d, d))
        return q.as_expr() if r.is_ground else None
    monkeypatch.setitem(simplify.RULES, "floordiv_cancel", bad_cancel)
    err = trace_unsound(prog_cancel, "x: f32[N]", "y: f32[M]", dims={"N": 5, "M": 8})
    assert (err.step.kind, err.step.rule) == ("rewrite", "floordiv_cancel")
    assert err.counterexample["M"] in (1, 2)  # the remainder 2 reaches the divisor
    assert_counterexample_violates(err, err.env)


def prog_cancel_zero(x, y):
    n, m = x.shape[0], y.shape[0]
    return x.new_zeros((n * m) // m + 1)


def test_mutation_floordiv_cancelled_without_nonzero_divisor(monkeypatch):
    """(n*m) // m cancelled to n although m may be 0 (no proof that m != 0).

    By default a step only has to hold where the program's expression is
    defined (removing a ZeroDivisionError is a refinement, as sympy's own
    ``0*(x//m) -> 0`` is); strict division semantics report it.
    """
    kw = dict(dims={"N": 5, "M": (0, 64, 8)}, specialize_zero_one=False)
    trace_clean(prog_cancel_zero, "x: f32[N]", "y: f32[M]", **kw)
    assert validate(shapes.trace(prog_cancel_zero, "x: f32[N]", "y: f32[M]", **kw), strict_division=True).ok

    def bad_cancel(env, e):
        if not isinstance(e, FloorDiv) or e.args[1].is_number:
            return None
        q = sympy.cancel(e.args[0] / e.args[1])
        return q if q.is_polynomial() and q.as_numer_denom()[1] == 1 else None
    monkeypatch.setitem(simplify.RULES, "floordiv_cancel", bad_cancel)
    tp = shapes.trace(prog_cancel_zero, "x: f32[N]", "y: f32[M]", **kw)
    assert validate(tp).ok  # equal wherever (n*m)//m is defined
    monkeypatch.setenv("SYMSHAPE_TRANSLATION_VALIDATION", "strict")
    err = trace_unsound(prog_cancel_zero, "x: f32[N]", "y: f32[M]", **kw)
    assert (err.step.kind, err.step.rule) == ("rewrite", "floordiv_cancel")
    assert err.counterexample["M"] == 0
    assert assert_counterexample_violates(err, err.env, allow_div_zero=True) == "div_zero"


def prog_mul_floordiv(x):
    n = x.shape[0]
    return x.new_zeros((n // 2) * 2 + 1)


def test_mutation_mul_floordiv_without_divisibility(monkeypatch):
    """2 * (n // 2) -> n without knowing that 2 divides n."""
    trace_clean(prog_mul_floordiv, "x: f32[N]", dims={"N": 6})

    def bad(env, e):
        if not e.is_Mul:
            return None
        c, rest = e.as_coeff_Mul()
        if isinstance(rest, FloorDiv) and rest.args[1].is_Integer and c.is_Integer and int(c) % int(rest.args[1]) == 0:
            return sympy.Integer(int(c) // int(rest.args[1])) * rest.args[0]
        return None
    monkeypatch.setitem(simplify.RULES, "mul_floordiv_exact", bad)
    err = trace_unsound(prog_mul_floordiv, "x: f32[N]", dims={"N": 6})
    assert (err.step.kind, err.step.rule) == ("rewrite", "mul_floordiv_exact")
    assert err.counterexample["N"] % 2 == 1
    assert_counterexample_violates(err, err.env)


def prog_mod_negative(x):
    n = x.shape[0]
    if (n - 10) % 16 > 3:
        return x + 1
    return x


def test_mutation_mod_range_without_nonnegative_check(monkeypatch):
    """a % b -> a when a < b, forgetting that a may be negative."""
    kw = dict(dims={"N": (2, 20, 16)})
    trace_clean(prog_mod_negative, "x: f32[N]", **kw)

    def bad(env, e):
        if isinstance(e, PyMod) and env.static_bool(sympy.Lt(e.args[0], e.args[1]), log=False) is True:
            return e.args[0]
        return None
    monkeypatch.setitem(simplify.RULES, "mod_range", bad)
    err = trace_unsound(prog_mod_negative, "x: f32[N]", **kw)
    assert (err.step.kind, err.step.rule) == ("rewrite", "mod_range")
    assert err.counterexample["N"] < 10
    assert_counterexample_violates(err, err.env)


def prog_same_size(x, y):
    if x.shape[0] == y.shape[0]:
        return x + y
    return x


def test_mutation_equality_from_equal_hints(monkeypatch):
    """N == M assumed because the example sizes are equal, without a guard."""
    trace_clean(prog_same_size, "x: f32[N]", "y: f32[M]", dims={"N": 8, "M": 8})
    good = DecisionProcedure.static_bool

    def bad(self, expr, *, log=True, size_oblivious=False):
        v = good(self, expr, log=log, size_oblivious=size_oblivious)
        if v is None and isinstance(expr, sympy.Eq) and not self.table.has_unbacked(expr) \
                and self.hint_of(expr) is True:
            if log:
                self.log_step("static", expr, sympy.true, "static")
            return True
        return v
    monkeypatch.setattr(DecisionProcedure, "static_bool", bad)
    err = trace_unsound(prog_same_size, "x: f32[N]", "y: f32[M]", dims={"N": 8, "M": 8})
    assert err.step.kind == "static" and err.step.entry.after is sympy.true
    assert err.counterexample["N"] != err.counterexample["M"]
    assert_counterexample_violates(err, err.env)
    # The innermost user frame is the mutant itself (it lives in this file); the program's
    # line is next on the recorded stack.
    assert any("in prog_same_size" in s for s in err.step.provenance.stack)


def prog_checked(x):
    n = x.shape[0]
    torch._check(n < 64)
    if n == 63:
        return x * 3
    return x


def test_mutation_range_refinement_off_by_one(monkeypatch):
    """Learning `n < 64` as the range n <= 62."""
    trace_clean(prog_checked, "x: f32[N]", dims={"N": 16})
    good = FactStore._refine_range

    def bad(self, f):
        good(self, f)
        if isinstance(f, sympy.Lt) and f.lhs.is_Symbol and f.rhs.is_Integer:
            r = self.ranges[f.lhs]
            self.ranges[f.lhs] = ValueRange(r.lower, min(r.upper, int(f.rhs) - 2))
    monkeypatch.setattr(FactStore, "_refine_range", bad)
    err = trace_unsound(prog_checked, "x: f32[N]", dims={"N": 16})
    assert err.step.kind == "static"
    assert err.counterexample["N"] == 63
    assert_counterexample_violates(err, err.env)
    assert user_line(err) == "if n == 63:"


def prog_guarded(x):
    if x.shape[0] < 16:
        return x * 2
    return x


def test_mutation_guard_simplified_to_a_weaker_condition(monkeypatch):
    """Canonical form making a strict bound inclusive without the -1: `N < 16` kept as `N <= 16`."""
    trace_clean(prog_guarded, "x: f32[N]", dims={"N": 8})
    good = shapes_decide.canonical_condition

    def bad(e):
        e = good(e)
        if isinstance(e, sympy.Lt) and e.rhs.is_Integer:
            return sympy.Le(e.lhs, e.rhs)
        return e
    monkeypatch.setattr(shapes_decide, "canonical_condition", bad)
    err = trace_unsound(prog_guarded, "x: f32[N]", dims={"N": 8})
    assert err.step.kind == "fact"
    assert err.counterexample["N"] == 16
    assert_counterexample_violates(err, err.env)
    assert user_line(err) == "if x.shape[0] < 16:"


def test_mutation_min_taken_without_proof(monkeypatch):
    """Min(a, b) -> a whenever a <= b at the example sizes (no guard)."""
    def prog(x):
        return x.new_zeros(torch.sym_min(x.shape[0], 16))
    trace_clean(prog, "x: f32[N]", dims={"N": 8})

    def bad(env, e):
        if isinstance(e, sympy.Min) and len(e.args) == 2:
            a, b = e.args
            return a if env.hint_of(sympy.Le(a, b)) else b
        return None
    monkeypatch.setitem(simplify.RULES, "min_max", bad)
    err = trace_unsound(prog, "x: f32[N]", dims={"N": 8})
    assert (err.step.kind, err.step.rule) == ("rewrite", "min_max")
    assert err.counterexample["N"] > 16
    assert_counterexample_violates(err, err.env)


# ---------------------------------------------------------------------------- translation


def test_every_engine_function_translates_and_matches_python():
    """Each engine function (negative operands included) agrees with Python at many points."""
    import z3
    a, b = sympy.symbols("a b", integer=True)
    exprs = [FloorDiv(a, b), PyMod(a, b), TrueDiv(a, b), ToFloat(a) * 2, TruncToInt(TrueDiv(a, b)),
             Where(a > b, a, b), sympy.Min(a, b), sympy.Max(a, -b), a ** 2 - b ** 3, sympy.Mod(a, b),
             sympy.And(a > 0, sympy.Or(b < 0, sympy.Not(sympy.Eq(a, b))))]
    kinds = {type(x) for e in exprs for x in sympy.preorder_traversal(e)}
    assert all(f in kinds for f in ENGINE_FUNCTIONS)
    tr = Z3Translator()
    for e in exprs:
        ze = tr.to_z3(e)
        for va in range(-7, 8):
            for vb in (-3, -2, -1, 1, 2, 5):
                want = e.xreplace({a: sympy.Integer(va), b: sympy.Integer(vb)})
                got = z3.simplify(z3.substitute(ze, (tr.var(a), z3.IntVal(va)), (tr.var(b), z3.IntVal(vb))))
                if want in (sympy.true, sympy.false):
                    assert z3.is_true(got) == (want is sympy.true), (e, va, vb)
                else:
                    gv = got.as_fraction() if z3.is_rational_value(got) else got.as_long()
                    assert sympy.Rational(gv) == sympy.Rational(str(want)) or abs(float(gv) - float(want)) < 1e-9, \
                        (e, va, vb, got, want)


def test_untranslatable_kind_is_an_explicit_error():
    x = sympy.Symbol("x", integer=True)
    with pytest.raises(UntranslatableExpression, match="sin"):
        Z3Translator().to_z3(sympy.sin(x) > 0)
    env = ShapeEnv()
    env.create_symbol("x", 8)
    X = env.symbols["x"]
    env.log_step("static", sympy.sin(X) > 2, sympy.false, "static")
    rep = validate_env(env)
    assert not rep.ok and rep.failures[0].status == "error" and "sin" in rep.failures[0].message


def test_timeout_is_unknown_never_sound():
    """A true claim Z3 cannot prove in time is reported as unknown."""
    env = ShapeEnv()
    x, y, z = (env.create_symbol(n, 5) for n in "xyz")
    # No positive cubes sum to a cube (Fermat, n=3): true, but beyond Z3 in 100 ms.
    env.log_step("static", sympy.Eq(x ** 3 + y ** 3, z ** 3), sympy.false, "static")
    rep = validate_env(env, timeout_ms=100)
    assert rep.ok and len(rep.unknown) == 1 and rep.unknown[0].status == "unknown"
    assert rep.checked == 0
    assert "NOT known to be sound" in str(rep)


def test_validator_reports_first_step_and_stops_tracing():
    """Through the tracer switch the error carries the report and the env."""
    env = ShapeEnv()
    v = TranslationValidator(env)
    n = env.create_symbol("n", 8)
    env.log_step("rewrite", PyMod(n, 4), n, "made_up")
    rep = v.validate()
    assert rep.first_unsound.rule == "made_up" and rep.first_unsound.index == len(env.log) - 1
    assert rep.first_unsound.counterexample["n"] >= 4


def prog_bool_item(x):
    b = (x > 0).any().item()
    if guard_size_oblivious(b):
        return x * 2
    return x


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_size_oblivious_boolean_item_is_not_decided(monkeypatch):
    """Engine bug found by validation: a boolean item() was assumed to be >= 2 by
    size-oblivious reasoning, so `guard_size_oblivious(b)` was False with no guard."""
    with pytest.raises(shapes.DataDependentError):
        shapes.trace(prog_bool_item, "x: f32[N]", translation_validation=True)
    old_size_oblivious_ranges(monkeypatch)
    err = trace_unsound(prog_bool_item, "x: f32[N]")
    assert (err.step.kind, err.step.rule) == ("static", "size_oblivious")
    assert err.counterexample["u0"] == 1
    assert_counterexample_violates(err, err.env)


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_size_oblivious_decisions_validate_under_their_assumption():
    """A nonzero count is assumed >= 2 by size-oblivious reasoning; validation allows exactly that."""
    def f(x):
        n = torch.nonzero(x).shape[0]
        return x * 2 if guard_size_oblivious(n == 1) else x
    tp = trace_clean(f, "x: f32[N, M]")
    assert any(e.rule == "size_oblivious" for e in tp.env.log)


def test_float_folding_is_checked_up_to_rounding():
    """`/` of constants folds to Python's double; a wrong float is still caught."""
    env = ShapeEnv()
    u = env.create_unbacked(kind="size")
    env.expect_true(sympy.Eq(u, 7))
    assert env.simplify(TrueDiv(-5, u)) == sympy.Float(-5 / 7)  # logged as a replacement rewrite
    rep = validate_env(env)
    assert rep.ok and not rep.unknown and rep.queries >= 1, str(rep)
    env.log_step("rewrite", TrueDiv(-5, u), sympy.Float(-0.7142), "made_up")
    rep = validate_env(env)
    assert rep.first_unsound.rule == "made_up" and rep.first_unsound.counterexample == {"u0": 7}
