"""Quick-mode fuzzing of the engine's range analysis, rewrites and static decisions.

The long mode is ``python bench/fuzz_ranges.py`` (100,000 expressions).
"""
import math

import sympy

import shapes.value_ranges as value_ranges
from shapes.value_ranges import ValueRange
from validation.concrete import evaluate
from validation.fuzz import chunk_seed, run_fuzz, run_fuzz_jobs
from tests.mutants import old_size_oblivious_ranges, wrong_mod_range


def test_quick_fuzz_finds_nothing_unsound():
    res = run_fuzz(2000, seed=0)
    assert res.expressions == 2000
    assert res.unsound == [], "\n".join(map(str, res.unsound[:5]))
    assert res.translation_mismatches == [] and res.errors == [], (res.translation_mismatches, res.errors)
    # It really exercised the engine and both oracles.
    assert res.points_evaluated > 20 * res.expressions
    assert res.static_decided > 100 and res.z3_checks > 100
    assert res.validated_envs > 0 and res.validated_steps > 0
    # Float-valued expressions and the seeded edge cases (negative divisors, floats) are in the mix.
    assert res.float_valued > 300 and res.seeded > 300


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
    wrong_mod_range(monkeypatch)
    res = run_fuzz(1500, seed=0)
    assert res.unsound
    assert any(isinstance(x, type(sympy.Integer(8))) and x == 8 for c in res.unsound
               for x in sympy.preorder_traversal(c.expr))


def test_fuzz_catches_the_size_oblivious_boolean_bug(monkeypatch):
    """The engine bug translation validation found (a boolean item() widened to [2, 2]
    by size-oblivious reasoning) is also found by the fuzzer when reinstated."""
    old_size_oblivious_ranges(monkeypatch)
    res = run_fuzz(2000, seed=0)
    cases = [c for c in res.unsound if c.check == "static (size-oblivious)"]
    assert cases
    c = cases[0]
    assert evaluate(c.expr, {s: c.point[s.name] for s in c.expr.free_symbols}) != c.engine


def test_fuzz_catches_a_nested_floordiv_rule_with_negative_divisors(monkeypatch):
    """(x // m) // n -> x // (m*n) holds for positive m, n only; the quick fuzz
    (its seeded negative-divisor cases) refutes it at a concrete point."""
    import shapes.simplify as simplify
    from shapes.functions import FloorDiv

    def nest_any_sign(env, e):
        if not isinstance(e, FloorDiv) or not isinstance(e.args[0], FloorDiv):
            return None
        n, m = e.args[1], e.args[0].args[1]
        if not (n.is_Integer and m.is_Integer) or n == 0 or m == 0:
            return None
        return FloorDiv(e.args[0].args[0], m * n)
    monkeypatch.setitem(simplify.RULES, "floordiv_nest", nest_any_sign)
    res = run_fuzz(2000, seed=0)
    cases = [c for c in res.unsound if c.check in ("simplify", "validation")]
    assert cases, res.table()
    c = next(c for c in cases if c.check == "simplify")
    values = {s: c.point[s.name] for s in c.expr.free_symbols}
    assert evaluate(c.expr, values) != evaluate(c.engine, values)


def test_fuzz_catches_an_integer_mod_bound_on_floats(monkeypatch):
    """A float % bounded like an integer one ([0, k - 1]) is refuted by the quick fuzz."""
    monkeypatch.setattr(value_ranges, "real_mod", value_ranges.mod)
    res = run_fuzz(2000, seed=0)
    assert res.unsound
    c = next(c for c in res.unsound if c.check in ("bound", "static"))
    values = {s: c.point[s.name] for s in c.expr.free_symbols}
    x = evaluate(c.expr, values)
    if c.check == "bound":
        assert not (c.engine.lower <= x <= c.engine.upper)
    else:
        assert bool(x) != c.engine


def test_long_mode_splits_over_jobs_and_merges_one_table():
    # bench/fuzz_ranges.py --jobs N: chunks with their own seeds, run side by side, merged.
    kw = dict(z3_every=1000, validate_every=0)
    res, seeds = run_fuzz_jobs(41, 2, seed=0, **kw)
    assert seeds == [0, chunk_seed(0, 1)] and seeds[1] != 0
    chunks = [run_fuzz(21, seed=0, **kw), run_fuzz(20, seed=seeds[1], **kw)]
    assert res.expressions == 41 and res.unsound_count == 0
    assert res.points_evaluated == sum(r.points_evaluated for r in chunks)
    assert res.checks == sum(r.checks for r in chunks) and res.seed == 0
