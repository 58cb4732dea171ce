"""``F.scaled_dot_product_attention`` stays one node in the trace and one fused call when compiled.

Trace: every form (masks bool/float and broadcast, is_causal, enable_gqa, scale, dropout 0)
is one ``aten.scaled_dot_product_attention`` node with eager's shape checks and no guard from
the math decomposition; however the program reached it.  Compiled (C++ target here; Triton
under ``TRITON_INTERPRET=1`` in a subprocess, or on CUDA): equal to eager in fp32/fp16/bf16 at
sizes 1 and primes, with one SDPA call and no attention-score buffer in the plan.
"""
import os

import pytest
import sympy
import torch
import torch.nn.functional as F
from torch.nn.functional import scaled_dot_product_attention as sdpa_imported_early

import shapes
from shapes.errors import TraceError
from tests import interpreted
from tests import attention_forms as AF

SDPA = torch.ops.aten.scaled_dot_product_attention.default
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MATH_OPS = {torch.ops.aten.bmm.default, torch.ops.aten._softmax.default, torch.ops.aten._safe_softmax.default,
            torch.ops.aten.mm.default}


def _targets(tp):
    return [n.target for n in tp.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("form", AF.FORMS, ids=lambda f: f.name)
def test_every_form_is_one_node_without_guards(form):
    tp = shapes.trace(form.fn, *form.specs("f32"), dims={"T": 5, **({"S": 6} if form.cross else {})})
    ts = _targets(tp)
    assert ts.count(SDPA) == 1 and not MATH_OPS & set(ts)
    assert tp.guards == [] and tp.runtime_asserts == []  # every check is decided by the static sizes
    B, T = tp.symbol("B"), tp.symbol("T")
    assert tp.output_shapes[0] == (B, T, form.heads[0], 8)


def test_imported_before_the_trace_and_called_as_aten():
    def prog(q, k, v):
        return sdpa_imported_early(q, k, v, is_causal=True) + torch.ops.aten.scaled_dot_product_attention(q, k, v)

    tp = shapes.trace(prog, "q: f32[B, H, T, D]", "k: f32[B, H, T, D]", "v: f32[B, H, T, D]")
    assert _targets(tp).count(SDPA) == 2 and not MATH_OPS & set(_targets(tp))
    # No guard from inside the math decomposition (D > 1, T != 1, ...): eager's kernels ask none.
    assert tp.guards == [] and tp.runtime_asserts == []
    q = torch.randn(2, 3, 1, 1)
    torch.testing.assert_close(tp.run(q, q, q), prog(q, q, q))


def test_symbolic_heads_and_lengths_assert_what_eager_checks():
    def gqa(q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True)

    tp = shapes.trace(gqa, "q: f32[B, H, T, E]", "k: f32[B, G, S, E]", "v: f32[B, G, S2, Ev]",
                      "m: bool[M, 1, T, S]", dims={"H": 6, "G": 3, "S2": 7, "S": 7, "M": 2, "B": 2})
    assert tp.guards == []
    H, G, S, S2, M, B = (tp.symbol(n) for n in ("H", "G", "S", "S2", "M", "B"))
    asserts = [g.expr for g in tp.runtime_asserts]

    def holds(**at):
        vals = {tp.symbol(n): sympy.Integer(v) for n, v in at.items()}
        return all(a.xreplace(vals) is sympy.true for a in asserts)

    base = dict(B=2, H=6, G=3, S=7, S2=7, M=2, T=4, E=8, Ev=5)
    assert holds(**base)
    assert not holds(**{**base, "H": 7})       # heads of key/value must divide the query's
    assert not holds(**{**base, "S2": 6})      # one key/value length
    assert not holds(**{**base, "M": 3})       # the mask broadcasts into the scores
    assert holds(**{**base, "M": 1})
    assert tp.output_shapes[0] == (B, H, tp.symbol("T"), tp.symbol("Ev"))


def test_batch_broadcast_is_a_guard_as_for_matmul():
    def prog(q, k, v):
        return F.scaled_dot_product_attention(q, k, v)

    tp = shapes.trace(prog, "q: f32[A, 2, T, 8]", "k: f32[B, 2, T, 8]", "v: f32[B, 2, T, 8]", dims={"A": 3, "B": 3})
    # A == B at the example: a guard (at A = 1 eager broadcasts, another trace), not an assert.
    A, B = tp.symbol("A"), tp.symbol("B")
    assert [g.expr for g in tp.guards] == [sympy.Eq(A, B)] and tp.runtime_asserts == []
    tp1 = shapes.trace(prog, "q: f32[A, 2, T, 8]", "k: f32[B, 2, T, 8]", "v: f32[B, 2, T, 8]", dims={"A": 1, "B": 3})
    assert tp1.output_shapes[0][0] == tp1.symbol("B")
    q, k = torch.randn(1, 2, 4, 8), torch.randn(3, 2, 4, 8)
    assert F.scaled_dot_product_attention(q, k, k).shape == (3, 2, 4, 8)  # eager broadcasts


@pytest.mark.parametrize("bad", ["dtype", "heads", "mask_grows", "mask_dtype"])
def test_errors_at_the_example_sizes_are_eagers(bad):
    q, k = "q: f32[B, 4, T, 8]", "k: f32[B, 4, T, 8]"
    specs, kw = [q, k, "v: f32[B, 4, T, 8]"], {}
    if bad == "dtype":
        specs[2] = "v: f16[B, 4, T, 8]"
    elif bad == "heads":
        specs = [q, "k: f32[B, 3, T, 8]", "v: f32[B, 3, T, 8]"]
        kw = {"enable_gqa": True}
    elif bad == "mask_grows":
        specs.append("m: f32[B, 2, 4, T, T]")
    elif bad == "mask_dtype":
        specs.append("m: i64[T, T]")

    def prog(q, k, v, m=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m, **kw)

    with pytest.raises(TraceError):
        shapes.trace(prog, *specs, dims={"B": 2, "T": 4})
    real = [torch.zeros([2 if d.strip() == "B" else 4 if d.strip() == "T" else int(d)
                         for d in s.split("[")[1].rstrip("]").split(",")],
                        dtype={"f32": torch.float32, "f16": torch.float16, "i64": torch.int64}[s.split()[1][:3].rstrip("[")])
            for s in specs]
    with pytest.raises((RuntimeError, IndexError)):
        prog(*real)


def test_with_grad_the_trace_differentiates_the_math_form():
    # A training trace needs SDPA's backward: the op decomposes above autograd, as in eager.
    r = shapes.count_flops(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                           "q: f32[B, 2, T, 8]", "k: f32[B, 2, T, 8]", "v: f32[B, 2, T, 8]", mode="train")
    assert r.total != 0


@pytest.mark.parametrize("form", AF.FORMS, ids=lambda f: f.name)
def test_compiled_cpp_equals_eager(form):
    for dt in AF.DTYPES:
        AF.check(form, "cpp", dt)


@pytest.mark.triton
def test_compiled_triton_equals_eager():
    if torch.cuda.is_available():
        results = AF.run_all("triton")
    else:
        results = interpreted.script_results(os.path.join(interpreted.ROOT, "tests", "attention_forms.py"), "triton")
    bad = {k: v for k, v in results.items() if v != "ok"}
    assert len(results) == 3 * len(AF.FORMS) and not bad, bad
