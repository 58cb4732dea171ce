"""Quick-mode fuzzing of the engine's range analysis, rewrites and static decisions.

The long mode is ``python bench/fuzz_ranges.py`` (100,000 expressions).
"""
import math

import sympy

import shapes.value_ranges as value_ranges
from shapes.value_ranges import ValueRange
from validation.concrete import evaluate
from validation.fuzz import run_fuzz


def test_quick_fuzz_finds_nothing_unsound():
    res = run_fuzz(2000, seed=0)
    assert res.expressions == 2000
    assert res.unsound == [], "\n".join(map(str, res.unsound[:5]))
    assert res.translation_mismatches == [] and res.errors == [], (res.translation_mismatches, res.errors)
    # It really exercised the engine and both oracles.
    assert res.points_evaluated > 20 * res.expressions
    assert res.static_decided > 100 and res.z3_checks > 100
    assert res.validated_envs > 0 and res.validated_steps > 0


def test_fuzz_is_reproducible():
    a, b = run_fuzz(150, seed=3), run_fuzz(150, seed=3)
    assert (a.points_evaluated, a.static_decided, a.z3_checks) == (b.points_evaluated, b.static_decided, b.z3_checks)


def test_fuzz_catches_a_truncating_floordiv_range(monkeypatch):
    """With // bounded like C's truncating division, the fuzzer reports unsound bounds."""
    def trunc_floordiv(a, b):
        q = value_ranges.truediv(a, b)
        t = lambda v: v if isinstance(v, float) else math.trunc(v)  # noqa: E731
        return ValueRange(t(q.lower), t(q.upper))
    monkeypatch.setattr(value_ranges, "floordiv", trunc_floordiv)
    res = run_fuzz(400, seed=0)
    assert res.unsound
    case = next(c for c in res.unsound if c.check == "bound")
    values = {s: case.point[s.name] for s in case.expr.free_symbols}
    x = evaluate(case.expr, values)
    assert x == case.actual and not (case.engine.lower <= x <= case.engine.upper)


def test_fuzz_catches_a_wrong_mod_range(monkeypatch):
    """x % 8 bounded by [0, 6]: some decision or bound is refuted at a concrete point."""
    good = value_ranges.mod

    def bad_mod(a, b):
        r = good(a, b)
        if b.is_singleton and b.lower == 8:
            return ValueRange(r.lower, min(r.upper, 6))
        return r
    monkeypatch.setattr(value_ranges, "mod", bad_mod)
    res = run_fuzz(1500, seed=0)
    assert res.unsound
    assert any(isinstance(x, type(sympy.Integer(8))) and x == 8 for c in res.unsound
               for x in sympy.preorder_traversal(c.expr))


def test_fuzz_catches_the_size_oblivious_boolean_bug(monkeypatch):
    """The engine bug translation validation found (a boolean item() widened to [2, 2]
    by size-oblivious reasoning) is also found by the fuzzer when reinstated."""
    from shapes.env import ShapeEnv
    from tests.test_translation_validation import _old_ranges_for
    monkeypatch.setattr(ShapeEnv, "_ranges_for", _old_ranges_for)
    res = run_fuzz(2000, seed=0)
    cases = [c for c in res.unsound if c.check == "static (size-oblivious)"]
    assert cases
    c = cases[0]
    assert evaluate(c.expr, {s: c.point[s.name] for s in c.expr.free_symbols}) != c.engine
