"""Tracing real PyTorch programs at symbolic sizes (engine issue, acceptance 1-5)."""
import inspect

import pytest
import sympy
import torch

import shapes
from shapes import DataDependentError, GuardKind, GuardViolation, SpecError, TraceError
from tests import programs as P


def sym(tp, name):
    return tp.env.symbols[name]


def same_function(expr, fn, syms, points):
    """expr (sympy) equals fn(*values) at every point."""
    for pt in points:
        val = expr.xreplace({s: sympy.Integer(v) for s, v in zip(syms, pt)})
        if int(val) != fn(*pt):
            return False
    return True


# -- acceptance 1: symbolic outputs -------------------------------------------------------


def test_mlp_gelu_layernorm():
    tp = shapes.trace(P.MLP(), "x: f32[B, T, 32]")
    B, T = sym(tp, "B"), sym(tp, "T")
    assert tp.output_shapes == [(B, T, 32)]
    assert tp.guards == []


def test_causal_attention_views_into_heads():
    tp = shapes.trace(P.CausalSelfAttention(), "x: f32[B, T, 32]")
    B, T = sym(tp, "B"), sym(tp, "T")
    assert tp.output_shapes == [(B, T, 32)]
    assert tp.guards == []


def test_scaled_dot_product_attention():
    tp = shapes.trace(P.SDPABlock(), "x: f32[B, T, 32]")
    assert tp.output_shapes == [(sym(tp, "B"), sym(tp, "T"), 32)]


def test_conv_pool_output_is_closed_form():
    tp = shapes.trace(P.ConvPool(), "x: f32[B, 3, H, W]")
    B, H, W = sym(tp, "B"), sym(tp, "H"), sym(tp, "W")
    out = tp.output_shapes[0]
    assert out[0] == B and out[1] == 8
    pts = [(h,) for h in range(4, 60)]
    assert same_function(out[2], lambda h: (h - 3 + 1) // 2, [H], pts)
    assert same_function(out[3], lambda w: (w - 3 + 1) // 2, [W], pts)
    # The minimum spatial size is a runtime assert (an error, not a recompile):
    # conv 3x3 then pool 2 needs H >= 4.  (torch versions phrase the checks
    # differently, so check what they mean, not their text.)
    def fails(records, h, w):
        vals = {H: sympy.Integer(h), W: sympy.Integer(w), B: sympy.Integer(2)}
        return any(g.expr.xreplace(vals) is not sympy.true for g in records)
    # The conv's kernel-size requirement is a runtime assert in every torch version.
    assert fails(tp.runtime_asserts, 2, 20) and fails(tp.runtime_asserts, 20, 2)
    # Size 3 passes the conv but not the pool: torch 2.13's pool meta asserts it,
    # torch 2.11's branches on it (a guard), so look at every record.
    for h, w in [(3, 20), (20, 3)]:
        assert fails(tp.records, h, w)
    assert not fails(tp.records, 20, 20) and not fails(tp.records, 4, 4)


def test_cat_broadcast_and_reshape():
    tp = shapes.trace(P.cat_last, "a: f32[B, N]", "b: f32[B, M]")
    assert tp.output_shapes == [(sym(tp, "B"), sym(tp, "M") + sym(tp, "N"))]
    tp = shapes.trace(P.broadcast_outer, "a: f32[A, 1]", "b: f32[1, C]")
    assert tp.output_shapes == [(sym(tp, "A"), sym(tp, "C"))]
    tp = shapes.trace(P.flatten_heads, "x: f32[B, 4, H]")
    B, H = sym(tp, "B"), sym(tp, "H")
    assert sympy.simplify(tp.output_shapes[0][0] - B * H) == 0


# -- acceptance 2: guards are exact and minimal ------------------------------------------------


def test_user_branch_gives_one_guard_with_user_line():
    tp = shapes.trace(P.branch_on_size, "x: f32[B, 4]", dims={"B": 32})
    assert len(tp.guards) == 1 and not tp.runtime_asserts
    g = tp.guards[0]
    assert str(g.expr) == "B > 16"
    assert g.filename == inspect.getsourcefile(P)
    src, start = inspect.getsourcelines(P.branch_on_size)
    assert g.lineno == start + 1 and g.code == "if x.shape[0] > 16:"
    assert g.op is None  # the user's own code asked


def test_outer_broadcast_has_no_guards():
    tp = shapes.trace(P.broadcast_outer, "a: f32[A, 1]", "b: f32[1, C]")
    assert tp.records == []


def test_equal_hints_unify():
    tp = shapes.trace(P.add_same, "a: f32[A]", "b: f32[C]", dims={"A": 8, "C": 8})
    A, C = sym(tp, "A"), sym(tp, "C")
    assert len(tp.records) == 1 and tp.records[0].expr == sympy.Eq(A, C)
    assert tp.env.replacements == {C: A}
    assert tp.output_shapes == [(A,)]


def test_view_minus_one_gives_divisibility_fact():
    tp = shapes.trace(P.view_by_8, "x: f32[N]", dims={"N": 64})
    N = sym(tp, "N")
    assert tp.env.divisible.get(N) == 8
    assert [str(g.expr) for g in tp.runtime_asserts] == ["Eq((N % 8), 0)"]
    assert tp.output_shapes == [(shapes.functions.FloorDiv(N, 8), 8)]


def test_matmul_gives_inner_dim_equality():
    tp = shapes.trace(P.matmul, "a: f32[M, K]", "b: f32[J, N]", dims={"K": 16, "J": 16})
    K, J = sym(tp, "K"), sym(tp, "J")
    eqs = [g.expr for g in tp.records]
    assert eqs == [sympy.Eq(J, K)]  # canonical order: by name
    assert tp.env.replacements == {J: K}  # the later-named dim is expressed by the first
    assert tp.output_shapes == [(sym(tp, "M"), sym(tp, "N"))]


# -- acceptance 3: unbacked sizes -------------------------------------------------------------


def test_branch_on_data_dependent_size_names_the_user_line():
    # How many pieces x.split(n) makes depends on data: torch.export stops there too.
    with pytest.raises(DataDependentError) as ei:
        shapes.trace(P.nonzero_split, "x: f32[N, 4]", "mask: bool[M]")
    err = ei.value
    src, start = inspect.getsourcelines(P.nonzero_split)
    assert err.provenance.filename == inspect.getsourcefile(P)
    assert err.provenance.lineno == start + 2 and "x.split(n)" in err.provenance.code
    assert "torch._check" in str(err) and "aten.split" in str(err)


def test_slice_to_a_data_dependent_end_clamps_like_python():
    # x[:n] with n unrelated to N: torch's fake kernel gives min(n, N) rows, and so does symshape.
    tp = shapes.trace(P.nonzero_slice, "x: f32[N, 4]", "mask: bool[M]")
    assert [str(s) for s in tp.output_shapes[0]] == ["Min(N, u0)", "4"]
    x = torch.randn(5, 4)
    for mask in (torch.ones(3, dtype=torch.bool), torch.ones(9, dtype=torch.bool)):
        assert torch.equal(tp.run(x, mask), P.nonzero_slice(x, mask))


def test_user_branch_on_unbacked_raises():
    with pytest.raises(DataDependentError, match=r"if n > 2"):
        shapes.trace(P.nonzero_branch, "x: f32[N]", "mask: bool[N]")


def test_torch_check_makes_it_trace_and_is_checked_at_run_time():
    tp = shapes.trace(P.nonzero_slice_checked, "x: f32[N, 4]", "mask: bool[M]")
    assert tp.guards == []
    (ra,) = tp.runtime_asserts
    assert ra.kind is GuardKind.RUNTIME_ASSERT and ra.code == "torch._check(n <= x.shape[0])"
    x, mask = torch.randn(10, 4), torch.tensor([1, 0, 1, 1, 0, 1, 0], dtype=torch.bool)
    assert torch.equal(tp.run(x, mask), P.nonzero_slice_checked(x, mask))
    with pytest.raises(GuardViolation, match="runtime assert"):
        tp.run(torch.randn(3, 4), torch.ones(7, dtype=torch.bool))


def test_count_bounded_by_numel_needs_no_check():
    # Same-size mask: the nonzero count is at most N by the op's semantics.
    tp = shapes.trace(P.nonzero_slice, "x: f32[N, 4]", "mask: bool[N]")
    assert tp.records == []


def test_item_gives_unbacked_scalar():
    def f(x, y):
        n = y.sum().item()
        torch._check(n >= 0)
        torch._check(n <= x.shape[0])
        return x[:n].sum(0)

    tp = shapes.trace(f, "x: f32[N, 3]", "y: i64[K]")
    assert len(tp.runtime_asserts) == 2
    x, y = torch.randn(9, 3), torch.tensor([1, 2, 3])
    assert torch.allclose(tp.run(x, y), f(x, y))


def test_data_dependent_symbols_record_their_producer_as_a_typed_source():
    from shapes.data_names import data_name
    from shapes.symbols import DataRead, DataSource, UnbackedKind
    tp = shapes.trace(P.nonzero_slice, "x: f32[N, 4]", "mask: bool[M]")
    (u, src), = tp.env.unbacked.items()
    _, start = inspect.getsourcelines(P.nonzero_slice)
    assert src == DataSource(kind=UnbackedKind.SIZE, read=DataRead.NONZERO, op="aten.nonzero",
                             filename=inspect.getsourcefile(P), lineno=start + 1, code="n = mask.nonzero().shape[0]")
    assert tp.env.describe_symbol(u) == (f"number of nonzero elements (nonzero at {src.filename}:{start + 1} "
                                         f"`n = mask.nonzero().shape[0]`)")
    assert data_name(tp.env, u) == "n"
    with pytest.raises(TypeError, match="DataSource"):
        tp.env.table.add_unbacked("number of nonzero elements")


def _longest_row(x, mask):
    lens = mask.sum(dim=1).tolist()
    return x.new_zeros(max(n + x.shape[1] for n in lens))


def _longest_row_checked(x, mask):
    lens = mask.sum(dim=1).tolist()
    torch._check(lens[0] >= lens[1])
    return x.new_zeros(max(n + x.shape[1] for n in lens))


def test_values_one_tolist_line_reads_get_a_name_each():
    # Lumina2's rope embedder: every row's mask length comes from one `lens = ....tolist()` line.
    # Before, both values were named `lens`, and the error printed `T + lens > T + lens`: a
    # tautology in the text for a condition the trace rightly cannot decide.
    from guards import render_guard
    with pytest.raises(DataDependentError) as info:
        shapes.trace(_longest_row, "x: f32[B, T]", "mask: i64[B, S] in 0..1", dims={"B": 2})
    msg = str(info.value)
    assert "lens[0]" in msg and "lens[1]" in msg and "T + lens >" not in msg, msg
    tp = shapes.trace(_longest_row_checked, "x: f32[B, T]", "mask: i64[B, S] in 0..1", dims={"B": 2})
    assert "lens[0] >= lens[1]" in [render_guard(g, tp.env) for g in tp.runtime_asserts]
    x, mask = torch.randn(2, 3), torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert tp.run(x, mask).shape == _longest_row(x, mask).shape


def _branch_on_allclose(a, b):
    if torch.allclose(a, b):
        return a
    return b


def test_a_truth_value_read_from_data_is_named_as_a_value():
    # allclose's result is a value: named by its expression, never as a length (len(...)).
    # allclose returns a Python bool (a trace can only decide it): the read suggested is isclose's.
    with pytest.raises(DataDependentError, match=r"torch\.allclose\(a, b\) reads the data again.*"
                       r"value = torch\.isclose\(a, b\)\.all\(\)\.item\(\); then torch\._check\(value\)"):
        shapes.trace(_branch_on_allclose, "a: f32[N]", "b: f32[N]")


def _branch_on_a_tensor(x):
    if x.sum() > 0:
        return x
    return -x


def _branch_on_a_tensor_checked(x):
    value = (x.sum() > 0).item()
    torch._check(torch.sym_not(value))
    if value:
        return x
    return -x


def test_the_suggested_check_for_a_tensor_truth_value_runs_and_settles_the_branch():
    # A check on x.sum() > 0 itself would read the data again into another value (and torch._check
    # refuses a tensor): the suggestion reads the value once, checks it, and branches on it.
    with pytest.raises(DataDependentError, match=r"value = \(x\.sum\(\) > 0\)\.item\(\); then "
                       r"torch\._check\(value\) or torch\._check\(torch\.sym_not\(value\)\)"):
        shapes.trace(_branch_on_a_tensor, "x: f32[N]")
    x = -torch.ones(3)
    assert torch.equal(_branch_on_a_tensor_checked(x), -x)  # the suggestion as written runs in eager
    tp = shapes.trace(_branch_on_a_tensor_checked, "x: f32[N]")
    assert torch.equal(tp.run(x), -x)  # and settles the branch; the read truth value binds as 0/1
    with pytest.raises(GuardViolation, match="sym_not"):
        tp.run(torch.ones(3))


# -- acceptance 4: differential against eager ---------------------------------------------------

DIFFERENTIAL = [
    (P.MLP(), ["x: f32[B, T, 32]"], [(2, 3), (2, 5), (3, 17), (4, 8), (5, 2)], lambda b, t: [(b, t, 32)]),
    (P.CausalSelfAttention(), ["x: f32[B, T, 32]"], [(2, 2), (3, 7), (2, 16), (5, 9), (4, 3)],
     lambda b, t: [(b, t, 32)]),
    (P.SDPABlock(), ["x: f32[B, T, 32]"], [(2, 2), (3, 7), (2, 16), (5, 9), (4, 3)], lambda b, t: [(b, t, 32)]),
    (P.ConvPool(), ["x: f32[B, 3, H, W]"], [(2, 10, 12), (3, 9, 7), (2, 20, 15), (4, 11, 11), (2, 8, 30)],
     lambda b, h, w: [(b, 3, h, w)]),
    (P.cat_last, ["a: f32[B, N]", "b: f32[B, M]"], [(2, 3, 4), (5, 6, 7), (3, 2, 9), (7, 3, 3), (2, 10, 2)],
     lambda b, n, m: [(b, n), (b, m)]),
    (P.flatten_heads, ["x: f32[B, 4, H]"], [(2, 3), (3, 5), (4, 4), (5, 9), (2, 7)], lambda b, h: [(b, 4, h)]),
    (P.view_by_8, ["x: f32[N]"], [(16,), (24,), (64,), (800,), (40,)], lambda n: [(n,)]),
]


@pytest.mark.parametrize("prog,specs,points,make", DIFFERENTIAL, ids=lambda v: getattr(v, "__name__", None)
                         or type(v).__name__ if not isinstance(v, (list, tuple)) else None)
def test_run_matches_eager(prog, specs, points, make):
    torch.manual_seed(0)
    first = shapes.trace(prog, *specs)
    for pt in points:
        shapes_ = make(*pt)
        inputs = [torch.randn(s) for s in shapes_]
        sizes = dict(zip(first.hints, pt))
        tp = first
        if first.failing_guards(sizes):
            # Another path (torch versions differ in what their meta kernels
            # guard on): retrace there, as a compiler would recompile.
            tp = shapes.trace(prog, *specs, dims=sizes)
            assert tp.failing_guards(sizes) == []
        out = tp.run(*inputs)
        ref = prog(*inputs)
        assert out.shape == ref.shape
        assert torch.allclose(out, ref, atol=1e-5, rtol=1e-4), pt
        # and the symbolic output shape evaluates to the real one
        subs = {tp.env.symbols[n]: v for n, v in zip(tp.hints, pt)}
        assert tuple(int(sympy.sympify(e).xreplace(subs)) for e in tp.output_shapes[0]) == tuple(ref.shape)


def test_run_rejects_inputs_that_violate_guards():
    tp = shapes.trace(P.branch_on_size, "x: f32[B, 4]", dims={"B": 32})
    with pytest.raises(GuardViolation, match=r"B > 16.*if x.shape\[0\] > 16"):
        tp.run(torch.randn(5, 4))


# -- acceptance 5: bad input ---------------------------------------------------------------------


@pytest.mark.parametrize("spec,msg", [
    ("x f32[B]", "malformed input spec"),
    ("x: f33[B]", "unknown dtype 'f33'"),
    ("x: f32[B, 2.5]", "bad dim '2.5'"),
    ("x: f32[B", "malformed input spec"),
])
def test_bad_specs(spec, msg):
    with pytest.raises(SpecError, match=msg):
        shapes.trace(P.view_by_8, spec)


def test_wrong_number_of_inputs():
    with pytest.raises(SpecError, match="takes 1 positional input"):
        shapes.trace(P.view_by_8, "x: f32[N]", "y: f32[N]")
    with pytest.raises(SpecError, match="missing: b"):
        shapes.trace(P.matmul, "a: f32[M, K]")
    tp = shapes.trace(P.view_by_8, "x: f32[N]")
    with pytest.raises(SpecError, match="traced with 1 input"):
        tp.run(torch.randn(8), torch.randn(8))


def test_bad_dims_argument():
    with pytest.raises(SpecError, match="no input spec uses"):
        shapes.trace(P.view_by_8, "x: f32[N]", dims={"Q": 4})
    with pytest.raises(SpecError, match="outside the range"):
        shapes.trace(P.view_by_8, "x: f32[N]", dims={"N": (1, 8, 16)})


def test_a_dim_expression_dividing_by_zero_at_the_example_sizes_is_a_spec_error():
    with pytest.raises(SpecError, match=r"dim N // M of input x divides by zero at the example sizes N=8, M=0; give"):
        shapes.trace(lambda x, y: x.sum(), "x: f32[N // M]", "y: f32[N, M]", dims={"N": 8, "M": (0, 4, 0)})


def test_program_that_raises_names_the_line_and_path():
    with pytest.raises(TraceError) as ei:
        shapes.trace(P.raises_on_small, "x: f32[B]", dims={"B": 2})
    err = ei.value
    assert isinstance(err.exc, ValueError) and "need at least 4 rows" in str(err)
    src, start = inspect.getsourcelines(P.raises_on_small)
    assert err.provenance.lineno == start + 2
    assert [str(g.expr) for g in err.path] == ["B < 4"]


class _ChannelsLastConvThenGroupNorm(torch.nn.Module):
    """The CPU convolution returns channels-last for a channels-last input (the meta kernel: contiguous)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 6, 1)
        self.norm = torch.nn.GroupNorm(2, 6)

    def forward(self, x):
        y = self.conv(x.contiguous(memory_format=torch.channels_last))
        b, c, h, w = y.shape
        # group_norm makes its input contiguous in C++: a no-op on the meta layout, so no node.
        return self.norm(y.view(b, c, h * w).transpose(1, 2).transpose(1, 2))


def test_run_follows_the_traced_layout_where_the_cpu_kernel_picks_another():
    model = _ChannelsLastConvThenGroupNorm()
    tp = shapes.trace(model, "x: f32[B, 8, H, W]")
    for size in [(2, 8, 5, 6), (1, 8, 3, 4)]:
        x = torch.randn(size)
        torch.testing.assert_close(tp.run(x), model(x))


def test_a_data_dependent_question_torch_rewraps_stays_data_dependent():
    # unflatten's C++ binding catches the engine's DataDependentError and raises its text as a
    # RuntimeError: the trace must still say "data-dependent", never blame the program (TraceError).
    def f(x, mask):
        return x.unflatten(0, (mask.nonzero().shape[0], -1))

    with pytest.raises(DataDependentError) as ei:
        shapes.trace(f, "x: f32[N, 4]", "mask: bool[M]")
    assert not isinstance(ei.value, TraceError)


def test_item_of_a_constant_tensor_is_its_value():
    # VITS slices with `torch.IntTensor([hidden])[0]`: the constant's value, as eager
    # reads it (and torch.export's fake tensors), not a value read from data.
    def f(x):
        n = torch.IntTensor([3])
        return x[:, : n[0]]

    tp = shapes.trace(f, "x: f32[B, T]", dims={"T": 8})
    assert tp.output_shapes == [(tp.symbol("B"), 3)]
    assert not tp.runtime_asserts
    x = torch.randn(2, 5)
    assert torch.equal(tp.run(x), f(x))


def test_runtime_assert_on_a_bool_read_from_data_holds_when_true():
    # The assert is Eq(u0, 1) over a 0/1 symbol; at run time .item() gives the bool True.
    def f(x):
        torch._check_tensor_all(x.abs() >= 0)
        return x * 2

    tp = shapes.trace(f, "x: f32[B, T]")
    assert len(tp.runtime_asserts) == 1
    x = torch.randn(2, 3)
    assert torch.equal(tp.run(x), x * 2)


def test_a_value_read_from_a_count_is_bounded_by_what_was_counted():
    # Flaubert: `assert lengths.max().item() <= slen` with lengths = (ids != pad).sum(1):
    # a count of T elements is at most T, so the assert needs no data.
    def f(ids):
        lengths = (ids != 0).sum(dim=1)
        assert lengths.max().item() <= ids.shape[1]
        return ids * 2

    tp = shapes.trace(f, "ids: i64[B, T]")
    assert not tp.guards and not tp.runtime_asserts
    ids = torch.randint(0, 3, (3, 5))
    assert torch.equal(tp.run(ids), f(ids))


def _split_by_counts(x, counts):
    parts = torch.split(x, counts.tolist())
    return torch.cat([p * 2 for p in parts])


def test_tolist_reads_values_from_data_and_run_checks_them_as_eager_does():
    # tolist() copies storage below the dispatcher; the trace reads element by element instead
    # (jetmoe's expert sizes). Before, a meta tensor's missing storage was blamed on the program.
    tp = shapes.trace(_split_by_counts, "x: f32[N, 4]", "counts: i64[3]")
    x, counts = torch.randn(6, 4), torch.tensor([1, 2, 3])
    assert torch.equal(tp.run(x, counts), _split_by_counts(x, counts))
    with pytest.raises(RuntimeError):
        _split_by_counts(x, torch.tensor([1, 2, 4]))  # eager refuses these counts ...
    with pytest.raises(GuardViolation, match="split"):
        tp.run(x, torch.tensor([1, 2, 4]))  # ... and so does the traced program
