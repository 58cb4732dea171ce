"""guards.explain: user lines, origins, summary, suggestions, and --at (guard explanation issue).

Acceptance 1: each reported record names the correct user line (file, line
and source text) on the engine's test programs and on GPT2Model.
Acceptance 2: ``at`` names exactly the failing records, checked against
what really happens at those sizes (eager raises / a new trace differs).
"""
import inspect

import pytest
import torch

import guards
import shapes
from guards.explain import ExplainError, tidy
from tests import explain_programs as E
from tests import programs as P


def line_of(obj, text):
    """(file, line number) of the unique line of ``obj``'s source that contains ``text``."""
    obj = inspect.unwrap(obj)  # transformers decorates forward(); the source is the wrapped function's
    src, start = inspect.getsourcelines(obj)
    hits = [i for i, line in enumerate(src) if text in line]
    assert len(hits) == 1, f"{text!r} occurs {len(hits)} times in {obj}"
    return inspect.getsourcefile(obj), start + hits[0]


def assert_names_line(entry, obj, code):
    path, lineno = line_of(obj, code)
    assert (entry.file, entry.line, entry.code) == (path, lineno, code), (
        f"record #{entry.index} {entry.expr} names {entry.file}:{entry.line} `{entry.code}`, "
        f"expected {path}:{lineno} `{code}`")


def by_expr(ex, expr):
    hits = [e for e in ex.entries if e.expr == expr]
    assert len(hits) == 1, f"{expr!r} in {[e.expr for e in ex.entries]}"
    return hits[0]


# -- acceptance 1: the user line of each record ------------------------------------------------


def test_user_branch_names_the_if_line():
    ex = guards.explain(shapes.trace(P.branch_on_size, "x: f32[B, 4]", dims={"B": 32}))
    (e,) = ex.entries
    assert_names_line(e, P.branch_on_size, "if x.shape[0] > 16:")
    assert (e.kind, e.expr, e.user_expr) == ("guard", "B > 16", "x.shape[0] > 16")
    assert e.op is None and e.origin == "user_code"
    assert e.decided_by == "hint" and "B=32" in e.decision_text
    assert e.cost == "recompile" and "x.shape[0] <= 16" in e.cost_text


def test_view_divisibility_names_the_view_line_and_op():
    ex = guards.explain(shapes.trace(P.view_by_8, "x: f32[N]", dims={"N": 64}))
    (e,) = ex.entries
    assert_names_line(e, P.view_by_8, "return x.view(-1, 8)")
    assert (e.kind, e.user_expr, e.op, e.origin) == ("runtime_assert", "x.shape[0] % 8 == 0",
                                                     "aten.view.default", "torch_op")
    assert e.cost == "runtime_error"


def test_matmul_inner_dim_names_the_matmul_line():
    ex = guards.explain(shapes.trace(P.matmul, "a: f32[M, K]", "b: f32[J, N]", dims={"K": 16, "J": 16}))
    (e,) = ex.entries
    assert_names_line(e, P.matmul, "return a @ b")
    assert e.op == "aten.mm.default" and e.origin == "torch_op"
    assert set(e.dims) == {"J", "K"}
    assert {e.user_expr} <= {"a.shape[1] == b.shape[0]", "b.shape[0] == a.shape[1]"}


def test_torch_check_on_unbacked_size_names_the_check_line():
    ex = guards.explain(shapes.trace(P.nonzero_slice_checked, "x: f32[N, 4]", "mask: bool[M]"))
    (e,) = ex.entries
    assert_names_line(e, P.nonzero_slice_checked, "torch._check(n <= x.shape[0])")
    assert e.kind == "runtime_assert" and e.origin == "user_code" and e.decided_by == "user_check"
    assert e.data_dependent == ["n"] and e.dims == ["N"]
    assert ex.data_dependent[0]["name"] == "n" and "nonzero" in ex.data_dependent[0]["what"]


def test_conv_min_size_names_the_module_forward_line():
    ex = guards.explain(shapes.trace(P.ConvPool(), "x: f32[B, 3, H, W]"))
    e = by_expr(ex, "H >= 3")
    # nn.Conv2d.forward is torch's code: the user's line is ConvPool.forward.
    assert_names_line(e, P.ConvPool.forward, "return F.max_pool2d(F.relu(self.conv(x)), 2)")
    assert e.op == "aten.convolution.default" and e.kind == "runtime_assert"
    assert e.function == "forward"


def test_broadcast_equality_names_the_add_line():
    ex = guards.explain(shapes.trace(P.add_same, "a: f32[A]", "b: f32[C]", dims={"A": 8, "C": 8}))
    (e,) = ex.entries
    assert_names_line(e, P.add_same, "return a + b")
    assert e.kind == "guard" and e.op == "aten.add.Tensor"


def test_int_conversion_names_the_int_line():
    ex = guards.explain(shapes.trace(E.size_as_int, "x: f32[N, 4]"))
    (e,) = ex.entries
    assert_names_line(e, E.size_as_int, "n = int(x.shape[0])")
    assert (e.kind, e.decided_by, e.expr) == ("specialization", "int_conversion", "N == 8")
    assert ex.dim("N").status == "specialized" and ex.dim("N").value == 8


@pytest.fixture(scope="module")
def gpt2():
    transformers = pytest.importorskip("transformers")
    from transformers.utils import logging
    logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=128, vocab_size=100)
    m = transformers.GPT2Model(cfg).eval()
    return m, shapes.trace(m, "ids: i64[B, T]")


def test_gpt2_position_bound_names_the_transformers_line(gpt2):
    m, tp = gpt2
    ex = guards.explain(tp)
    # The other two entries are transformers' own branches on T == 1 (see test_models).
    (e,) = [e for e in ex.entries if e.kind == "runtime_assert"]
    # transformers is installed in site-packages: its modeling file is the user's code.
    from transformers.models.gpt2 import modeling_gpt2
    assert_names_line(e, modeling_gpt2.GPT2Model.forward, "position_embeds = self.wpe(position_ids)")
    assert e.file.endswith("transformers/models/gpt2/modeling_gpt2.py")
    assert (e.kind, e.expr, e.user_expr) == ("runtime_assert", "T <= 128", "ids.shape[1] <= 128")
    assert e.op == "aten.embedding.default" and e.origin == "torch_op"
    assert "at most 128" in e.suggestion
    assert [d.status for d in ex.dims] == ["dynamic", "dynamic"]
    assert ex.dim("T").range == (2, 128) and ex.dim("B").range == (1, None)
    text = guards.explain(tp, at={"B": 2, "T": 200}).text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "site-packages/transformers/models/gpt2/modeling_gpt2.py:" in text.replace("\n", "")


# -- acceptance 2: --at names exactly the failing records ------------------------------------


def failing_exprs(ex):
    return sorted(ex.entries[i].user_expr for i in ex.at.failing)


def test_at_user_branch_recompiles_exactly_there():
    tp = shapes.trace(P.branch_on_size, "x: f32[B, 4]", dims={"B": 32})
    ex = guards.explain(tp, at={"B": 4})
    assert failing_exprs(ex) == ["x.shape[0] > 16"]
    assert ex.at.verdict == "recompile" and ex.at.reasons[0].startswith(
        "this call would recompile because x.shape[0] > 16 is false at B=4")
    # Really another path: tracing at B=4 records the opposite guard.
    assert [str(g.expr) for g in shapes.trace(P.branch_on_size, "x: f32[B, 4]", dims={"B": 4}).guards] \
        == ["B <= 16"]
    ok = guards.explain(tp, at="B=17")
    assert ok.at.failing == [] and ok.at.verdict == "ok"
    assert torch.equal(tp.run(torch.ones(17, 4)), P.branch_on_size(torch.ones(17, 4)))


def test_at_guard_and_assert_fail_independently():
    tp = shapes.trace(E.branch_and_view, "x: f32[B, T]", dims={"B": 8, "T": 32})
    cases = {
        (2, 12): (["x.shape[0] > 4", "x.shape[1] % 8 == 0"], "recompile"),
        (8, 12): (["x.shape[1] % 8 == 0"], "runtime_error"),
        (2, 16): (["x.shape[0] > 4"], "recompile"),
        (5, 40): ([], "ok"),
    }
    for (b, t), (expected, verdict) in cases.items():
        ex = guards.explain(tp, at={"B": b, "T": t})
        assert failing_exprs(ex) == expected, (b, t)
        assert ex.at.verdict == verdict
        assert [e.fails_at_point for e in ex.entries] == [e.user_expr in expected for e in ex.entries]
        eager_raises = t % 8 != 0
        try:
            E.branch_and_view(torch.ones(b, t))
            raised = False
        except RuntimeError:
            raised = True
        assert raised == eager_raises == ("x.shape[1] % 8 == 0" in expected)
    ex = guards.explain(tp, at={"B": 8, "T": 12})
    assert ex.at.reasons == [
        "this call would fail at run time because x.shape[1] % 8 == 0 is false at B=8, T=12 "
        "(T % 8 == 0); runtime_assert #1 from tests/explain_programs.py:"
        f"{line_of(E.branch_and_view, 'return x.view')[1]} `return x.view(x.shape[0], -1, 8)` "
        "(in aten.view.default)"]


def test_at_matmul_mismatch_fails_at_run_time():
    tp = shapes.trace(P.matmul, "a: f32[M, K]", "b: f32[J, N]", dims={"K": 16, "J": 16})
    ex = guards.explain(tp, at="M=3,K=5,J=6,N=7")
    assert len(ex.at.failing) == 1 and ex.at.verdict == "runtime_error"
    assert ex.entries[ex.at.failing[0]].op == "aten.mm.default"
    with pytest.raises(RuntimeError):
        P.matmul(torch.ones(3, 5), torch.ones(6, 7))


def test_at_gpt2_too_long_sequence_and_batch_of_one(gpt2):
    m, tp = gpt2
    ex = guards.explain(tp, at={"B": 2, "T": 200})
    assert failing_exprs(ex) == ["ids.shape[1] <= 128"] and ex.at.verdict == "runtime_error"
    assert "would fail at run time because ids.shape[1] <= 128 is false" in ex.at.reasons[0]
    assert "modeling_gpt2.py" in ex.at.reasons[0]
    with pytest.raises(IndexError):
        m(torch.zeros(2, 200, dtype=torch.long))
    # B=1 breaks no record and is in B's range: a batch of one takes this trace.
    one = guards.explain(tp, at={"B": 1, "T": 7})
    assert one.at.failing == [] and one.at.out_of_range == [] and one.at.verdict == "ok"
    # Under PyTorch's 0/1 policy (on request) it gets its own trace.
    tp2 = shapes.trace(m, "ids: i64[B, T]", specialize_zero_one=True)
    one = guards.explain(tp2, at={"B": 1, "T": 7})
    assert one.at.failing == [] and one.at.verdict == "recompile"
    assert [o["dim"] for o in one.at.out_of_range] == ["B"]
    assert "B >= 2" in one.at.reasons[0] and "sizes 0 and 1" in one.at.reasons[0]


def test_at_specialized_dim():
    tp = shapes.trace(E.reduce_rows, "x: f32[B, T]", dims={"B": 1}, specialize_zero_one=True)
    ex = guards.explain(tp, at={"B": 3, "T": 9})
    assert failing_exprs(ex) == ["x.shape[0] == 1"] and ex.at.verdict == "recompile"
    assert "the trace specialized it" in ex.at.reasons[0]
    assert guards.explain(tp, at={"B": 1, "T": 9}).at.verdict == "ok"


def test_at_data_dependent_records_are_undecided():
    tp = shapes.trace(P.nonzero_slice_checked, "x: f32[N, 4]", "mask: bool[M]")
    ex = guards.explain(tp, at={"N": 3, "M": 7})
    assert ex.at.failing == [] and ex.at.undecided == [0] and ex.entries[0].fails_at_point is None


def test_at_errors_are_one_line_and_name_the_dims():
    tp = shapes.trace(P.branch_on_size, "x: f32[B, 4]", dims={"B": 32})
    with pytest.raises(ExplainError, match=r"names Q, which the program does not have; its dims are B"):
        guards.explain(tp, at={"Q": 1})
    tp2 = shapes.trace(E.branch_and_view, "x: f32[B, T]", dims={"B": 8, "T": 32})
    with pytest.raises(ExplainError, match=r"no value for T; give every dim \(B=N, T=N\)"):
        guards.explain(tp2, at="B=3")
    with pytest.raises(ExplainError, match="non-negative"):
        guards.explain(tp, at={"B": -1})
    with pytest.raises(ExplainError, match="expected NAME=INT"):
        guards.explain(tp, at="B=x")


# -- summary -------------------------------------------------------------------------------


def test_summary_dims_dynamic_specialized_unified():
    ex = guards.explain(shapes.trace(P.add_same, "a: f32[A]", "b: f32[C]", dims={"A": 8, "C": 8}))
    a, c = ex.dim("A"), ex.dim("C")
    assert a.status == "dynamic" and a.sources == ["a.shape[0]"] and a.example == 8
    assert c.status == "unified" and c.unified_with == "A" and c.record == 0
    assert c.reason.startswith("unified with A by record #0")

    ex = guards.explain(shapes.trace(E.reduce_rows, "x: f32[B, T]", dims={"B": 1}, specialize_zero_one=True))
    b = ex.dim("B")
    assert (b.status, b.value, b.record, b.range) == ("specialized", 1, 0, (1, 1))
    assert "0/1 policy" in b.reason
    (e,) = ex.entries
    assert (e.kind, e.origin, e.decided_by) == ("specialization", "input_spec", "zero_one")
    # No source line caused it: the report names the spec's dim instead of the trace() caller.
    assert (e.file, e.line, e.code, e.snippet) == ("<input spec>", 0, "x.shape[0]", [])
    assert ex.dim("T").status == "dynamic"


def test_counts_by_kind_origin_and_op():
    ex = guards.explain(shapes.trace(E.branch_and_view, "x: f32[B, T]", dims={"B": 8, "T": 32}))
    assert ex.counts["total"] == 2
    assert ex.counts["by_kind"] == {"guard": 1, "runtime_assert": 1, "specialization": 0}
    assert ex.counts["by_origin"] == {"user_code": 1, "torch_op": 1, "torch_python": 0, "input_spec": 0}
    assert ex.counts["by_op"] == {"aten.view.default": 1}
    assert ex.static_decisions > 0
    assert ex.dim("B").range == (5, None)  # the guard B > 4 is what this trace covers


def test_no_records():
    ex = guards.explain(shapes.trace(P.MLP(), "x: f32[B, T, 32]"))
    assert ex.entries == [] and ex.counts["total"] == 0
    assert all(d.status == "dynamic" for d in ex.dims)
    assert "No guards" in ex.text()


# -- suggestions are concrete, and following them works ----------------------------------------


def test_branch_suggestion_and_following_it():
    ex = guards.explain(shapes.trace(P.branch_on_size, "x: f32[B, 4]", dims={"B": 32}))
    s = ex.entries[0].suggestion
    assert "this branch specializes on B" in s and "torch.cond" in s and "torch._check(x.shape[0] > 16)" in s
    # With the suggested torch._check the guard becomes a runtime assert: no recompile.
    tp = shapes.trace(E.branch_checked, "x: f32[B]", dims={"B": 32})
    assert tp.guards == [] and [str(g.expr) for g in tp.runtime_asserts] == ["B > 16"]


def test_divisibility_suggestion_pads_to_a_multiple():
    ex = guards.explain(shapes.trace(P.view_by_8, "x: f32[N]", dims={"N": 64}))
    assert ex.entries[0].suggestion.startswith("pad x.shape[0] to a multiple of 8")


def test_equality_suggestion_one_name_and_following_it():
    ex = guards.explain(shapes.trace(P.matmul, "a: f32[M, K]", "b: f32[J, N]", dims={"K": 16, "J": 16}))
    assert "one name in the input specs" in ex.entries[0].suggestion
    assert shapes.trace(P.matmul, "a: f32[M, K]", "b: f32[K, N]").records == []


def test_zero_one_suggestion_and_following_it():
    ex = guards.explain(shapes.trace(E.reduce_rows, "x: f32[B, T]", dims={"B": 1}, specialize_zero_one=True))
    s = ex.entries[0].suggestion
    assert "example size >= 2" in s and "--dim B=8" in s and "(x: f32[1, T])" in s
    assert "specialize_zero_one=False" in s
    tp = shapes.trace(E.reduce_rows, "x: f32[B, T]", dims={"B": 1}, specialize_zero_one=False)
    assert guards.explain(tp).dim("B").status == "dynamic"
    assert guards.explain(shapes.trace(E.reduce_rows, "x: f32[B, T]", dims={"B": 8})).dim("B").status == "dynamic"


def test_min_size_suggestion():
    ex = guards.explain(shapes.trace(E.conv_only, "x: f32[B, 3, H, W]", "w: f32[8, 3, 3, 3]"))
    assert [e.expr for e in ex.entries] == ["H >= 3", "W >= 3"]
    assert ex.entries[0].suggestion.startswith("x.shape[2] must be at least 3 for aten.convolution.default")


def test_upper_bound_suggestion_and_following_it(gpt2):
    m, tp = gpt2
    (e,) = [e for e in guards.explain(tp).entries if e.kind == "runtime_assert"]
    assert "--dim T=1..128" in e.suggestion
    # Declaring the range makes the check hold statically: no runtime assert left (the
    # guards that remain are transformers' branches on T == 1).
    tp2 = shapes.trace(m, "ids: i64[B, T]", dims={"T": (1, 128)})
    assert tp2.runtime_asserts == [] and all("T" in str(g.expr) and "128" not in str(g.expr) for g in tp2.guards)


def test_user_torch_check_needs_no_change():
    ex = guards.explain(shapes.trace(E.branch_checked, "x: f32[B]", dims={"B": 32}))
    (e,) = ex.entries
    assert e.origin == "user_code" and "your own torch._check" in e.suggestion


def test_tidy_moves_constants_exactly():
    import sympy
    T, S = sympy.symbols("T S", integer=True)
    assert tidy(T - 1 < 128) == sympy.Le(T, 128)
    assert tidy(sympy.Gt(16, T)) == sympy.Lt(T, 16)
    assert tidy(sympy.Ge(-T + 5, 0)) == sympy.Le(T, 5)
    assert tidy(sympy.Eq(T, S)) == sympy.Eq(T, S)
    for e in (T - 1 < 128, sympy.Gt(16, T), sympy.Ge(-T + 5, 0), sympy.Ne(T + 2, 9)):
        for v in range(-3, 140):
            assert bool(e.subs(T, v)) == bool(tidy(e).subs(T, v))
