"""Never a wrong answer at the edges (issue 17): float size arithmetic, index
bounds, int64 overflow, failures at ``.run``, small guard hygiene.

Each case compares with eager PyTorch at the traced size and at other sizes:
where the trace's guards and asserts accept a size, eager must succeed with
the traced output shape there; where eager fails, the trace must reject it.
"""
import math

import pytest
import sympy
import torch

import shapes
import shapes.facts as shapes_facts
import shapes.value_ranges as value_ranges
from shapes.env import ShapeEnv
from shapes.errors import GuardViolation, TraceError, TracerLimitation
from shapes.functions import PyMod, TrueDiv
from validation.translation import UnsoundStep, validate_env


def _input(spec_dtype, shape):
    if spec_dtype.is_floating_point:
        return torch.randn(shape, dtype=spec_dtype)
    return torch.zeros(shape, dtype=spec_dtype)


def agrees_with_eager(fn, spec, dims, sizes_list):
    """Trace at ``dims``; at each size (dict dim -> int) compare with eager."""
    tp = shapes.trace(fn, spec, dims=dims)
    (s,) = tp.specs
    checked = 0
    for sizes in sizes_list:
        shape = [sizes[d] if isinstance(d, str) else d for d in s.dims]
        x = _input(s.dtype, shape)
        try:
            ref = fn(x)
            eager_error = None
        except (RuntimeError, IndexError) as e:
            ref, eager_error = None, e
        if tp.failing_guards(sizes):
            with pytest.raises(GuardViolation):
                tp.run(x)
            continue
        assert eager_error is None, f"the trace accepts {sizes} but eager raises {eager_error!r}"
        out = tp.run(x)
        assert out.shape == ref.shape, (sizes, out.shape, ref.shape)
        subs = {tp.symbol(k): v for k, v in sizes.items()}
        assert tuple(int(e.xreplace(subs)) for e in tp.output_shapes[0]) == tuple(ref.shape)
        checked += 1
    return tp, checked


# ---------------------------------------------------------------------------- 1. float modulo


def half_is_whole(x):
    if (x.shape[0] / 2) % 1 == 0:
        return x + 1
    return x[:1]


def half_mod_four(x):
    if (x.shape[0] / 2) % 4 > 3:
        return x + 1
    return x[:1]


@pytest.mark.parametrize("fn,traced", [(half_is_whole, 8), (half_is_whole, 7), (half_mod_four, 7),
                                       (half_mod_four, 8)])
def test_float_modulo_is_not_decided_statically(fn, traced):
    tp, checked = agrees_with_eager(fn, "x: f32[N]", {"N": traced}, [{"N": n} for n in range(2, 20)])
    assert tp.guards and checked >= 2  # the path depends on N: a guard says which N take it


def test_float_modulo_in_z3_is_not_zero():
    """The Z3 translation of float % is exact: (N/2) % 1 == 0 is false for odd N."""
    import z3
    from validation.z3_translate import Z3Translator
    N = sympy.Symbol("N", integer=True)
    tr = Z3Translator()
    s = z3.Solver()
    s.add(tr.to_z3(sympy.Ne(PyMod(TrueDiv(N, 2), 1), 0)), tr.to_z3(sympy.Eq(N, 7)))
    assert s.check() == z3.sat
    s2 = z3.Solver()
    s2.add(tr.to_z3(sympy.Gt(PyMod(TrueDiv(N, 2), 4), 3)), tr.to_z3(sympy.Eq(N, 7)))
    assert s2.check() == z3.sat


# ---------------------------------------------------------------------------- 2. Min/Max with floats


def float_min(x):
    m = torch.sym_min(x.shape[0], 5.5)
    if m < 4.5:
        if m >= 4:
            return x[:1]
        return x[:2]
    return x[:3]


def float_min_half(x):
    m = torch.sym_min(x.shape[0] / 2, 5.5)
    if m < 4:
        if m > 3:
            return x[:1]
        return x[:2]
    return x[:3]


@pytest.mark.parametrize("fn,traced", [(float_min, 4), (float_min, 3), (float_min, 6), (float_min_half, 7),
                                       (float_min_half, 6)])
def test_float_min_is_not_tightened_as_an_integer(fn, traced):
    _, checked = agrees_with_eager(fn, "x: f32[N]", {"N": traced}, [{"N": n} for n in range(2, 14)])
    assert checked >= 1


def test_strict_bound_by_a_fraction_keeps_the_integer_below_it():
    env = ShapeEnv()
    B = env.create_symbol("B", 3)
    assert env.evaluate(B < sympy.Rational(7, 2)) is True
    assert env.ranges[B] == value_ranges.ValueRange(2, 3)
    assert env.evaluate(sympy.Eq(B, 3), ) is True  # still undecided by ranges: a guard, not a contradiction


# ---------------------------------------------------------------------------- 3. index bounds


def test_index_select_needs_non_negative_indices():
    fn = lambda x: x.index_select(0, torch.arange(x.shape[0]) - 2)  # noqa: E731
    with pytest.raises(IndexError):
        fn(torch.randn(5))
    with pytest.raises(TraceError) as info:
        shapes.trace(fn, "x: f32[N]", dims={"N": 5})
    assert isinstance(info.value.exc, IndexError)


def test_gather_checks_its_index_bound():
    fn = lambda x: torch.gather(x, 1, torch.arange(4).view(1, 4))  # noqa: E731
    tp, checked = agrees_with_eager(fn, "x: f32[N, M]", {"N": 5, "M": 6},
                                    [{"N": 5, "M": m} for m in range(2, 9)])
    assert checked == 5 and tp.runtime_asserts


def test_advanced_indexing_admits_negative_indices_down_to_minus_n():
    fn = lambda x: x[torch.arange(x.shape[0] - 8, x.shape[0])]  # noqa: E731
    tp, checked = agrees_with_eager(fn, "x: f32[N]", {"N": 10}, [{"N": n} for n in range(2, 14)])
    assert checked == 10  # N >= 4 works in eager (indices from N - 8 >= -N)


# (op, exception eager raises for index -1 / -n-1, admits -1)
_OPS = {
    "index_select": (lambda x, i: x.index_select(0, i), False),
    "embedding": (lambda x, i: torch.nn.functional.embedding(i, x), False),
    "gather": (lambda x, i: torch.gather(x, 0, i.view(-1, 1).expand(-1, x.shape[1])), False),
    "scatter": (lambda x, i: x.scatter(0, i.view(-1, 1).expand(-1, x.shape[1]), 1.0), False),
    "scatter_add": (lambda x, i: x.scatter_add(0, i.view(-1, 1).expand(-1, x.shape[1]),
                                               torch.ones_like(x)[: i.shape[0]]), False),
    "index_add": (lambda x, i: x.index_add(0, i, torch.ones(i.shape[0], x.shape[1])), False),
    "index_copy": (lambda x, i: x.index_copy(0, i, torch.ones(i.shape[0], x.shape[1])), False),
    "index_fill": (lambda x, i: x.index_fill(0, i, 1.0), True),
    "take": (lambda x, i: x.take(i), True),
    "advanced indexing": (lambda x, i: x[i], True),
    "index_put": (lambda x, i: x.index_put((i,), torch.tensor(1.0)), True),
}


@pytest.mark.parametrize("name", sorted(_OPS))
@pytest.mark.parametrize("offset", [1, "n", "n+1"])
def test_each_op_admits_exactly_the_indices_eager_does(name, offset):
    """Indices arange(N) - k: the trace raises (or rejects the size) exactly where eager does."""
    op, admits_negative = _OPS[name]

    def fn(x):
        n = x.shape[0]
        k = {1: 1, "n": n, "n+1": n + 1}[offset]
        return op(x, torch.arange(n) - k)
    for n in (3, 4):
        x = torch.randn(n, 3)
        try:
            op(x, torch.arange(n) - {1: 1, "n": n, "n+1": n + 1}[offset])
            eager_ok = True
        except (RuntimeError, IndexError):
            eager_ok = False
        if offset == 1:
            assert eager_ok == admits_negative  # the table above states eager's rule
        try:
            tp = shapes.trace(fn, "x: f32[N, 3]", dims={"N": n})
            traced_ok = True
        except TraceError as e:
            assert isinstance(e.exc, (RuntimeError, IndexError))
            traced_ok = False
        assert traced_ok == eager_ok, (name, offset, n)
        if traced_ok:
            assert tp.run(x).shape == fn(x).shape


def test_index_ranges_follow_clamp_cat_and_mul():
    def fn(x):
        n = x.shape[0]
        i = torch.cat([torch.arange(n), torch.arange(n).clamp(max=n - 3) * 2])
        return x.index_select(0, i)
    tp, checked = agrees_with_eager(fn, "x: f32[N]", {"N": 4}, [{"N": n} for n in range(3, 12)])
    # 2 * (n - 3) < n  <=>  n < 6: eager fails from N = 6 on, and the trace says so.
    assert checked == 3 and tp.runtime_asserts
    with pytest.raises(TraceError):
        shapes.trace(lambda x: x.index_select(0, torch.arange(x.shape[0]).clamp(min=-1) - 1), "x: f32[N]",
                     dims={"N": 4})


def test_constant_index_tensors_are_checked():
    fn = lambda x: x[:, torch.tensor([0, 5])]  # noqa: E731
    tp, checked = agrees_with_eager(fn, "x: f32[2, M]", {"M": 8}, [{"M": m} for m in range(2, 9)])
    assert checked == 3


# ---------------------------------------------------------------------------- 4. int64 overflow


def test_storage_overflow_is_a_limit_with_eagers_message():
    from validation import dinfer
    fn = lambda x: x.repeat(x.shape[0], x.shape[0])  # noqa: E731
    with pytest.raises(RuntimeError, match="Storage size calculation overflowed"):
        fn(torch.empty(2**21, dtype=torch.uint8))
    space = dinfer(fn, "x: u8[N]", dims={"N": (1, 2**31)})
    assert space.complete
    bad = [c for c in space.classes if not c.ok]
    assert len(bad) == 1 and bad[0].example == {"N": 2**21}
    assert "Storage size calculation overflowed" in bad[0].error.message
    assert space.classify(N=2**21 - 1).ok and not space.classify(N=2**21).ok
    tp = shapes.trace(fn, "x: u8[N]", dims={"N": 10})
    assert [str(g.expr) for g in tp.env.limits] == ["N**3 <= 9223372036854775807"]
    assert not tp.failing_guards({"N": 2**21 - 1}) and tp.failing_guards({"N": 2**21})


def test_limits_are_deduplicated_and_proven_by_ranges():
    def mlp(x):
        return torch.relu(x @ torch.ones(8, 32)) @ torch.ones(32, 8)
    tp = shapes.trace(mlp, "x: f32[B, 8]")
    assert [str(g.expr) for g in tp.env.limits] == ["128*B <= 9223372036854775807"]
    tp = shapes.trace(mlp, "x: f32[B, 8]", dims={"B": (2, 1024, 4)})
    assert tp.env.limits == []


# ---------------------------------------------------------------------------- 5. .run failures


def test_run_raises_a_guard_violation_not_zero_division():
    fn = lambda x: x.view(x.shape[0], x.shape[1] // 4, 4, x.shape[2]).sum(2)  # noqa: E731
    tp, checked = agrees_with_eager(fn, "x: f32[B, C, L]", {"B": 2, "C": 8, "L": 3},
                                    [{"B": 2, "C": c, "L": 3} for c in range(2, 13)])
    assert checked == 3  # C = 4, 8 and 12
    with pytest.raises(GuardViolation) as info:
        tp.run(torch.randn(2, 3, 3))
    assert info.value.guard is not None
    assert len({g.expr for g in tp.records}) == len(tp.records)  # no guard twice


def test_run_prints_conditions_in_python_syntax():
    # A semantic size-1 guard (broadcast) and a float modulo: neither reads as sympy (Ne(T, 1), Mod).
    def f(x, y):
        if (x.shape[0] / 2) % 4 > 3:
            return x + y
        return (x + y) * 2
    tp = shapes.trace(f, "x: f32[N, T]", "y: f32[N, 3]", dims={"N": 8, "T": 3})
    texts = []
    for n, t in [(7, 3), (8, 1)]:
        with pytest.raises(GuardViolation) as info:
            tp.run(torch.randn(n, t), torch.randn(n, 3))
        texts.append(str(info.value))
    assert "(N / 2) % 4" in texts[0] and " <= 3" in texts[0], texts[0]
    assert "T == 3" in texts[1] or "T != 1" in texts[1], texts[1]
    for text in texts:
        assert not any(w in text for w in ("Ne(", "Eq(", "Mod(", "PyMod(", "TrueDiv(")), text


def _zeros_of_a_quotient(x):
    b, t, _ = x.shape
    return x.new_zeros((b * t) // b, 96)


def test_limit_of_a_path_says_nothing_where_its_sizes_do_not_exist():
    # A tensor of (B*T) // B rows: its storage limit exists where B != 0, and must not
    # refuse B = 0 as if eager's limit failed there.
    tp = shapes.trace(_zeros_of_a_quotient, "x: f32[B, T, 32]", dims={"B": (0, 64), "T": (0, 64)})
    (lim,) = [g for g in tp.limits if g.expr.has(sympy.floor) or "//" in str(g.expr)] or [None]
    assert lim is not None and lim.defined_when == sympy.Ne(tp.symbol("B"), 0)
    assert lim not in tp.failing_guards({"B": 0, "T": 5})
    # Linear on [B, T, 32] views its output as [B, (B*T) // B, 96] (a guard then fixes the
    # quotient to T).  At B = 0 this path is not taken (its guards say so), and no limit
    # is among the guards that say so.
    from tests.programs import MLP
    tp = shapes.trace(MLP(32, 96).eval(), "x: f32[B, T, 32]", dims={"B": (0, 64), "T": (0, 64)})
    bad = tp.failing_guards({"B": 0, "T": 5})
    assert bad and all(g.decided_by.value != "eager_limit" for g in bad)
    report = shapes.count_flops(MLP(32, 96).eval(), "x: f32[B, T, 32]", dims={"B": (0, 64), "T": (0, 64)})
    assert report.evaluate({"B": 0, "T": 5}) == 0 and report.evaluate({"B": 3, "T": 0}) == 0


def test_reshape_of_an_empty_tensor_fails_like_eager():
    # eager checks (n > 0 && m % n == 0) || m == n and never computes m % 0; at B = 0 the
    # trace must reach eager's own error, not divide by zero inside symshape.
    def unfold_pairs(x):
        return x.unfold(-1, 4, 2).reshape(x.shape[0], -1, 8)
    with pytest.raises(RuntimeError, match="cannot reshape tensor of 0 elements") as eager:
        unfold_pairs(torch.zeros(0, 8))
    with pytest.raises(TraceError, match="cannot reshape tensor of 0 elements") as traced:
        shapes.trace(unfold_pairs, "x: f32[B, N]", dims={"B": (0, 8, 0), "N": (0, 8, 8)})
    assert type(traced.value.exc) is type(eager.value)
    tp = shapes.trace(unfold_pairs, "x: f32[B, N]", dims={"B": (0, 8, 2), "N": (0, 8, 6)})
    assert tp.failing_guards({"B": 0, "N": 6})  # the reshape's assert, evaluated as eager does
    assert not tp.failing_guards({"B": 3, "N": 6})


# ---------------------------------------------------------------------------- 6. smaller


@pytest.mark.parametrize("rnd", [math.ceil, math.floor])
def test_math_ceil_and_floor_of_a_size(rnd):
    fn = lambda x: x[: rnd(x.shape[0] / 2)]  # noqa: E731
    tp, checked = agrees_with_eager(fn, "x: f32[N]", {"N": 7}, [{"N": n} for n in range(2, 16)])
    assert checked == 14 and not tp.records


def test_float_arange_records_no_guard():
    fn = lambda x: torch.arange(0, x.shape[0], 0.5)  # noqa: E731
    tp, checked = agrees_with_eager(fn, "x: f32[N]", {"N": 7}, [{"N": n} for n in range(2, 12)])
    assert checked == 10 and not tp.records


def test_abs_of_a_size_is_non_negative():
    fn = lambda x: x.new_zeros(abs(x.shape[0] - 3))  # noqa: E731
    tp, checked = agrees_with_eager(fn, "x: f32[N]", {"N": 7}, [{"N": n} for n in range(2, 10)])
    assert checked == 8 and not tp.records


# ---------------------------------------------------------------------------- mutations


def test_mutation_integer_mod_bound_on_floats_is_caught(monkeypatch):
    """A float % bounded like an integer one ([0, 3] for x % 4) decides (N/2) % 4 > 3 false."""
    tp = shapes.trace(half_mod_four, "x: f32[N]", dims={"N": 8}, translation_validation=True)
    assert tp.validation_report.ok
    monkeypatch.setattr(value_ranges, "real_mod", value_ranges.mod)
    with pytest.raises(UnsoundStep) as info:
        shapes.trace(half_mod_four, "x: f32[N]", dims={"N": 8}, translation_validation=True)
    step = info.value.step
    assert step.kind == "static" and step.confirmed is True
    n = step.counterexample["N"]
    assert (n / 2) % 4 > 3  # Python itself refutes the decision there


def test_mutation_integer_tightening_of_a_float_min_is_caught(monkeypatch):
    """Min(N / 2, 5.5) < 4 tightened as if integer to <= 3 decides m > 3 false (N = 7: 3.5)."""
    tp = shapes.trace(float_min_half, "x: f32[N]", dims={"N": 7}, translation_validation=True)
    assert tp.validation_report.ok
    monkeypatch.setattr(shapes_facts, "integer_valued", lambda e: True)
    with pytest.raises(UnsoundStep) as info:
        shapes.trace(float_min_half, "x: f32[N]", dims={"N": 7}, translation_validation=True)
    step = info.value.step
    assert step.kind == "static" and step.confirmed is True
    m = min(step.counterexample["N"] / 2, 5.5)
    assert m < 4 and m > 3  # the fact holds, and "m > 3 is false" is wrong there


def test_mutation_integer_rewrite_on_a_float_is_caught(monkeypatch):
    """x % 1 -> 0 applied to N / 4 (k | x taken for granted on a float)."""
    import shapes.simplify as simplify
    env = ShapeEnv()
    N = env.create_symbol("N", 8)
    e = PyMod(TrueDiv(N, 4), 1)
    assert env.simplify(e) == e and validate_env(env).ok
    monkeypatch.setattr(simplify, "divides", lambda env, k, e: k == 1)
    env = ShapeEnv()
    N = env.create_symbol("N", 8)
    assert env.simplify(PyMod(TrueDiv(N, 4), 1)) == 0
    rep = validate_env(env)
    step = rep.first_unsound
    assert step is not None and step.rule == "mod_divisible" and step.confirmed is True
    assert (step.counterexample["N"] / 4) % 1 != 0


def test_an_in_place_write_forgets_index_ranges():
    """arange(N) shifted in place (seen through a view): its old range no longer holds, so it
    must not be used.  The sizes still determine the values, and eager fails at every N: the
    trace notes the unchecked lookup and dinfer never calls a size ok."""
    def fn(x):
        i = torch.arange(x.shape[0])
        j = i.view(-1)
        i.add_(3)
        return x.index_select(0, j)
    with pytest.raises(IndexError):
        fn(torch.randn(5))
    tp = shapes.trace(fn, "x: f32[N]", dims={"N": 5})
    assert not tp.runtime_asserts  # no assert from the stale range ...
    ((prov, msg),) = tp.unchecked_indices  # ... and the lookup is not silently passed
    assert prov.lineno and "cannot bound them" in msg
    from validation import dinfer
    space = dinfer(fn, "x: f32[N]", dims={"N": (1, 8)})
    assert all(not space.classify(N=n).ok for n in range(1, 9))


# ---------------------------------------------------------------------------- 3b. loose and unknown index ranges


def first_two_rows(x, y):
    # Values {0, 1}; the engine knows only [0, N - 1] (a slice is a subset): loose.
    return x.index_select(0, torch.arange(y.shape[0])[:2])


def test_a_loose_index_range_is_a_guard_and_a_limitation_outside_it():
    specs = ["x: f32[M]", "y: f32[N]"]
    tp = shapes.trace(first_two_rows, *specs, dims={"M": 5, "N": 3})
    assert not tp.runtime_asserts  # never claimed as eager's check: eager passes at N = 9, M = 5
    (g,) = [g for g in tp.guards if g.expr.free_symbols == {tp.symbol("M"), tp.symbol("N")}]
    assert not tp.failing_guards({"M": 5, "N": 5}) and tp.failing_guards({"M": 5, "N": 9})
    first_two_rows(torch.randn(5), torch.randn(9))  # eager runs there ...
    with pytest.raises(TracerLimitation, match="only loosely"):  # ... and symshape says it cannot tell
        shapes.trace(first_two_rows, *specs, dims={"M": 5, "N": 9})
    from validation import dinfer
    space = dinfer(first_two_rows, *specs, dims={"M": (1, 6), "N": (1, 6)})
    for m in range(1, 7):
        for n in range(1, 7):
            c = space.classify(M=m, N=n)
            try:
                first_two_rows(torch.randn(m), torch.randn(n))
                eager_ok = True
            except IndexError:
                eager_ok = False
            # Never the program's error where eager runs, never ok where eager fails
            # (symshape's limitation, ok None, is honest on either side).
            if eager_ok:
                assert c.ok is not False and c.error is None, (m, n, c)
            else:
                assert not c.ok, (m, n, c)


def test_flipped_and_rolled_indices_keep_their_exact_range():
    for reorder in (lambda i: i.flip(0), lambda i: i.roll(1)):
        fn = lambda x, y, reorder=reorder: x.index_select(0, reorder(torch.arange(y.shape[0])))  # noqa: E731
        tp = shapes.trace(fn, "x: f32[M]", "y: f32[N]", dims={"M": 5, "N": 3})
        assert tp.runtime_asserts and not tp.unchecked_indices
        for m, n in [(5, 3), (5, 5), (5, 6), (2, 7)]:
            try:
                fn(torch.randn(m), torch.randn(n))
                eager_ok = True
            except IndexError:
                eager_ok = False
            assert (not tp.failing_guards({"M": m, "N": n})) == eager_ok, (m, n)


def test_index_values_the_sizes_determine_but_the_engine_cannot_bound_are_noted():
    fn = lambda x, y: x.index_select(0, torch.arange(y.shape[0]).cumsum(0))  # noqa: E731
    with pytest.raises(IndexError):
        fn(torch.randn(3), torch.randn(5))  # eager fails wherever N * (N - 1) // 2 >= M
    tp = shapes.trace(fn, "x: f32[M]", "y: f32[N]", dims={"M": 5, "N": 3})
    assert len(tp.unchecked_indices) == 1
    from validation import dinfer
    space = dinfer(fn, "x: f32[M]", "y: f32[N]", dims={"M": (1, 4), "N": (1, 4)})
    for m in range(1, 5):
        for n in range(1, 5):
            c = space.classify(M=m, N=n)
            assert not c.ok and c.error is None, (m, n, c)  # symshape's limitation, both sides of eager
    # Indices read from data are not a question of sizes: nothing to check or note.
    tp = shapes.trace(lambda x, i: x.index_select(0, i), "x: f32[M]", "i: i64[K]")
    assert not tp.runtime_asserts and not tp.unchecked_indices
