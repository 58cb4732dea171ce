"""transformers' GPT2Model and BertModel traced with symbolic batch and sequence length."""
import pytest
import sympy
import torch

import shapes
from tests.programs import tiny_bert, tiny_gpt2

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def gpt2():
    m = tiny_gpt2()
    return m, shapes.trace(m, "ids: i64[B, T]")


@pytest.fixture(scope="module")
def bert():
    m = tiny_bert()
    return m, shapes.trace(m, "ids: i64[B, T]")


def test_gpt2_outputs_are_symbolic(gpt2):
    m, tp = gpt2
    B, T = tp.env.symbols["B"], tp.env.symbols["T"]
    assert tp.output_shapes[0] == (B, T, 64)
    # Size 1 is in B's and T's range.  The only guard is transformers' own branch on T > 1
    # (SDPA's is_causal; traced as torch.export traces, the mask takes no T == 1 shortcut):
    # none about layout, none on B.
    assert [g.expr for g in tp.guards] == [sympy.Gt(T, 1)]
    assert all("transformers" in g.filename for g in tp.guards)
    # The position-embedding lookup bounds T by n_positions, as a runtime assert.
    (ra,) = tp.runtime_asserts
    assert ra.expr == sympy.Le(T, 128)
    assert ra.filename.endswith("modeling_gpt2.py") and "wpe" in ra.code


def test_gpt2_run_matches_eager(gpt2):
    m, tp = gpt2
    for b, t in [(2, 2), (2, 7), (3, 20), (2, 128), (4, 33)]:
        ids = torch.randint(0, 100, (b, t))
        with torch.no_grad():
            ref = m(ids).last_hidden_state
            out = tp.run(ids).last_hidden_state
        assert torch.allclose(out, ref, atol=1e-5), (b, t)


def test_gpt2_past_max_positions_is_rejected(gpt2):
    m, tp = gpt2
    with pytest.raises(shapes.GuardViolation, match="T <= 128"):
        tp.run(torch.randint(0, 100, (2, 129)))


def test_bert_outputs_are_symbolic(bert):
    m, tp = bert
    B, T = tp.env.symbols["B"], tp.env.symbols["T"]
    assert tp.output_shapes == [(B, T, 64), (B, 64)]
    g, causal = tp.guards
    assert g.expr == sympy.Le(T, 128)  # slicing the position_ids buffer
    assert g.filename.endswith("modeling_bert.py")
    assert causal.expr == sympy.Gt(T, 1) and causal.filename.endswith("sdpa_attention.py")


def test_bert_run_matches_eager(bert):
    m, tp = bert
    for b, t in [(2, 2), (2, 9), (3, 31), (2, 128), (5, 4)]:
        ids = torch.randint(0, 100, (b, t))
        with torch.no_grad():
            ref = m(ids)
            out = tp.run(ids)
        assert torch.allclose(out.last_hidden_state, ref.last_hidden_state, atol=1e-5), (b, t)
        assert torch.allclose(out.pooler_output, ref.pooler_output, atol=1e-5), (b, t)


def test_size_one_runs_on_the_same_trace(gpt2):
    # Size 1 is a size: B = 1 takes the traced path (this used to need a trace of its own).
    m, tp = gpt2
    ids = torch.randint(0, 100, (1, 5))
    with torch.no_grad():
        assert torch.allclose(tp.run(ids).last_hidden_state, m(ids).last_hidden_state, atol=1e-5)
    # T = 1 truly takes another path (transformers branches on it): a guard says so.
    with pytest.raises(shapes.GuardViolation, match="masking_utils.py|sdpa_attention.py"):
        tp.run(torch.randint(0, 100, (2, 1)))
    tp1 = shapes.trace(m, "ids: i64[B, T]", dims={"T": 1})
    ids = torch.randint(0, 100, (3, 1))
    with torch.no_grad():
        assert torch.allclose(tp1.run(ids).last_hidden_state, m(ids).last_hidden_state, atol=1e-5)
    # PyTorch's policy is still there on request.
    tp2 = shapes.trace(m, "ids: i64[B, T]", specialize_zero_one=True)
    with pytest.raises(shapes.GuardViolation, match="input constraint B >= 2"):
        tp2.run(torch.randint(0, 100, (1, 5)))
