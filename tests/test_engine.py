"""ShapeEnv unit behaviour: ranges, static decisions, guards, asserts, replacements."""
import sympy
import pytest

from shapes import DataDependentError, GuardKind, ShapeEnv
from shapes.functions import FloorDiv, PyMod
from shapes.value_ranges import INF, ValueRange, bound


def test_static_decision_needs_no_guard():
    env = ShapeEnv()
    B = env.create_symbol("B", 32)
    assert env.evaluate(B >= 2) is True  # the 0/1 policy's range
    assert env.evaluate(sympy.Eq(B, 1)) is False
    assert env.guards == []


def test_hint_decision_records_guard_and_implies_later_ones():
    env = ShapeEnv()
    B = env.create_symbol("B", 32)
    assert env.evaluate(B > 16) is True
    assert env.evaluate(B > 8) is True      # follows from the guard's range
    assert env.evaluate(B <= 16) is False   # its negation
    assert [str(g.expr) for g in env.guards] == ["B > 16"]
    assert env.guards[0].kind is GuardKind.GUARD


def test_zero_one_specialization_policy_is_switchable():
    env = ShapeEnv()
    assert env.create_symbol("B", 1) == 1
    assert env.guards[0].kind is GuardKind.SPECIALIZATION
    env2 = ShapeEnv(specialize_zero_one=False)
    B = env2.create_symbol("B", 1)
    assert B.is_Symbol and env2.ranges[B].lower == 0 and env2.guards == []


def test_equality_unifies_symbols():
    env = ShapeEnv()
    A, C = env.create_symbol("A", 5), env.create_symbol("C", 5)
    assert env.evaluate(sympy.Eq(A, C)) is True
    assert env.simplify(C + 1) == A + 1


def test_int_conversion_specializes():
    env = ShapeEnv()
    B = env.create_symbol("B", 12)
    assert env.evaluate(B * 2) == 24
    g = env.guards[0]
    assert g.kind is GuardKind.SPECIALIZATION and g.expr == sympy.Eq(B, 12)
    assert env.simplify(B + 1) == 13


def test_divisibility_fact_simplifies_mod_and_floordiv():
    env = ShapeEnv()
    N = env.create_symbol("N", 64)
    assert env.expect_true(sympy.Eq(PyMod(N, 8), 0))
    assert env.divisible[N] == 8
    assert env.simplify(PyMod(N, 4)) == 0
    assert env.simplify(8 * FloorDiv(N, 8)) == N
    assert env.ranges[N].lower == 8  # rounded up to a multiple
    assert env.runtime_asserts and not env.guards


def test_expect_true_is_assumed_never_a_guard():
    env = ShapeEnv()
    u = env.create_unbacked(kind="size")
    N = env.create_symbol("N", 10)
    assert env.expect_true(u <= N)
    assert env.guards == [] and len(env.runtime_asserts) == 1
    assert env.static_bool(u < N + 1) is True


def test_unbacked_branch_raises_data_dependent_error():
    env = ShapeEnv()
    u = env.create_unbacked(kind="size")
    with pytest.raises(DataDependentError, match="torch._check"):
        env.evaluate(u > 2)
    assert env.evaluate(u > 2, fallback=False) is False
    assert env.evaluate(u >= 0) is True  # size-like: decided by range


def test_value_ranges_are_sound_on_floor_semantics():
    x = sympy.Symbol("x", integer=True)
    r = bound(FloorDiv(x, 3), {x: ValueRange(-7, 7)})
    vals = [v // 3 for v in range(-7, 8)]
    assert r.lower <= min(vals) and r.upper >= max(vals)
    r = bound(PyMod(x, 8), {x: ValueRange(-INF, INF)})
    assert (r.lower, r.upper) == (0, 7)


def test_factored_difference_decides_products():
    env = ShapeEnv()
    B, T = env.create_symbol("B", 4), env.create_symbol("T", 6)
    assert env.static_bool(sympy.Ne(B * T, B)) is True  # B*(T-1) != 0


def test_every_decision_is_logged():
    env = ShapeEnv()
    B = env.create_symbol("B", 32)
    env.evaluate(B > 16)
    env.evaluate(B > 8)
    kinds = [e.kind for e in env.log]
    assert "axiom" in kinds and "fact" in kinds and "static" in kinds


def test_a_guard_that_fixes_a_quotient_replaces_it_everywhere():
    # Swin's last stage: the window count (W + H - 1) // H is 1 at the example, and B*count == B
    # (B >= 2, so never 0) fixes it; later questions hold the count and are asked about 1.
    env = ShapeEnv()
    B, H, W = env.create_symbol("B", 2), env.create_symbol("H", 7), env.create_symbol("W", 7)
    count = FloorDiv(W + H - 1, H)
    assert env.evaluate(sympy.Eq(B * count, B)) is True
    assert env.simplify(H * count) == H and env.simplify(FloorDiv(W, count)) == W
    assert env.evaluate(sympy.Eq(count, 1)) is True and env.evaluate(sympy.Eq(H**2 * count, H**2)) is True
    assert len(env.guards) == 1
    # A later replacement of a symbol in the quotient keeps the quotient's value known.
    assert env.evaluate(sympy.Eq(W, H)) is True
    assert env.simplify(FloorDiv(2 * H - 1, H)) == 1


def test_a_factor_that_may_be_zero_fixes_nothing():
    # B*count == B says nothing of count where B may be 0.
    env = ShapeEnv(specialize_zero_one=False)
    B, H, W = env.create_symbol("B", 2), env.create_symbol("H", 7), env.create_symbol("W", 7)
    count = FloorDiv(W + H - 1, H)
    assert env.evaluate(sympy.Eq(B * count, B)) is True
    assert env.simplify(count) == count
    assert env.evaluate(sympy.Eq(count, 1)) is True and len(env.guards) == 2


def test_a_remainder_known_zero_is_replaced_also_for_a_symbolic_modulus():
    env = ShapeEnv()
    N, M = env.create_symbol("N", 12), env.create_symbol("M", 4)
    assert env.evaluate(sympy.Eq(PyMod(N, M), 0)) is True
    assert env.simplify(PyMod(N, M) + M) == M
    assert env.static_bool(sympy.Ne(PyMod(N, M), 1)) is True


def test_a_product_equation_with_a_nonzero_factor_unifies_symbols():
    env = ShapeEnv()
    B, T, S = env.create_symbol("B", 3), env.create_symbol("T", 5), env.create_symbol("S", 5)
    assert env.evaluate(sympy.Eq(B * T, B * S)) is True
    assert env.simplify(S + 1) == T + 1


def test_a_quotient_is_never_replaced_by_a_data_dependent_size():
    env = ShapeEnv()
    N = env.create_symbol("N", 8)
    u = env.create_unbacked(kind="size")
    assert env.expect_true(sympy.Eq(FloorDiv(N, 2), 2 * u))
    assert env.evaluate(FloorDiv(N, 2) > 3) is True  # still decided by N's example value


def test_a_bug_in_a_range_rule_is_not_read_as_undecided(monkeypatch):
    """"No range rule" is the typed UnsupportedExpression; a plain TypeError (a bug) propagates
    instead of turning the question into "undecided" (a guard on the example sizes)."""
    from shapes.value_ranges import RangeRules, UnsupportedExpression
    env = ShapeEnv()
    B = env.create_symbol("B", 8, range=(2, 64))
    assert env.static_bool(sympy.Max(B, 4) < 100, log=False) is True  # by the ranges: Max(B, 4) <= 64

    from shapes.expr_kinds import Kind

    def no_rule(self, e):
        raise UnsupportedExpression("no rule for Max here")
    monkeypatch.setitem(RangeRules._dispatch, Kind.MAX, no_rule)
    env = ShapeEnv()
    B = env.create_symbol("B", 8, range=(2, 64))
    assert env.static_bool(sympy.Max(B, 4) < 100, log=False) is None  # undecided, as designed

    def buggy(self, e):
        raise TypeError("unsupported operand type(s)")
    monkeypatch.setitem(RangeRules._dispatch, Kind.MAX, buggy)
    env = ShapeEnv()
    B = env.create_symbol("B", 8, range=(2, 64))
    with pytest.raises(TypeError, match="unsupported operand"):
        env.static_bool(sympy.Max(B, 4) < 100, log=False)
