"""Size-1 paths joined into one traced program (shapes/paths.py).

Decoders take another path at B == 1 (masking) or T == 1 (SDPA's causal
flag): a trace at B, T >= 2 refuses those sizes though eager runs them.  The
joined program runs each on its own path and matches eager everywhere.
"""
import pytest
import torch

import shapes
from tests import zoo_models as zoo

transformers = pytest.importorskip("transformers")


def gemma2():
    t = zoo._t()
    return t.Gemma2Model(t.Gemma2Config(**zoo._DEC, num_key_value_heads=1, head_dim=8, sliding_window=4))


class Decoder(torch.nn.Module):
    def __init__(self, model, with_mask):
        super().__init__()
        self.model, self.with_mask = model, with_mask

    def forward(self, ids, *mask):
        kw = {"attention_mask": mask[0]} if self.with_mask else {}
        return self.model(input_ids=ids, use_cache=False, **kw).last_hidden_state


def _inputs(B, T, with_mask):
    ids = torch.randint(0, zoo.VOCAB, (B, T), generator=torch.Generator().manual_seed(B * 31 + T))
    if not with_mask:
        return (ids,)
    mask = torch.ones(B, T, dtype=torch.int64)
    if T > 1:
        mask[0, : T // 3] = 0  # left padding on one row
    return ids, mask


@pytest.mark.parametrize("with_mask", [False, True], ids=["no_mask", "mask"])
@pytest.mark.parametrize("build", [zoo.llama, zoo.qwen2, gemma2], ids=["llama", "qwen2", "gemma2"])
def test_one_program_runs_every_size_eager_runs(build, with_mask):
    model = Decoder(build().eval(), with_mask)
    specs = ["ids: i64[B, T]"] + (["mask: i64[B, T]"] if with_mask else [])
    single = shapes.trace(model, *specs, dims={"B": 2, "T": 5})
    tp = shapes.trace_paths(model, *specs, dims={"B": 2, "T": 5})
    refused = [(B, T) for B, T in ((1, 1), (1, 6), (3, 1)) if single.failing_guards({"B": B, "T": T})]
    # Gemma-2 with a mask asks no semantic question about size 1 (its stride questions are
    # layout-only): then the single trace itself must run every size as eager does.
    assert refused or (build is gemma2 and with_mask), "the single trace no longer splits on size 1"
    if not refused:
        tp = single
    for B, T in ((1, 1), (1, 6), (3, 1), (2, 2), (3, 7)):
        assert not tp.failing_guards({"B": B, "T": T})
        x = _inputs(B, T, with_mask)
        with torch.no_grad():
            torch.testing.assert_close(tp.run(*x), model(*x), atol=1e-5, rtol=1e-5)


def test_a_path_where_the_program_raises_is_not_joined():
    def f(x):
        if x.shape[0] == 1:
            raise ValueError("no batch of one")
        return x * 2

    tp = shapes.trace_paths(f, "x: f32[B, 4]")
    assert len(tp.paths) == 1
    with pytest.raises(shapes.GuardViolation):
        tp.run(torch.ones(1, 4))


def test_explain_summary_and_dinfer_accept_every_size_a_path_takes():
    import guards
    from validation import dinfer
    from validation.dinfer.path import trace_summary

    model = Decoder(zoo.llama().eval(), False)
    tp = shapes.trace_paths(model, "ids: i64[B, T]", dims={"B": 2, "T": 5})
    assert len(tp.paths) >= 2
    for point in ({"B": 1, "T": 1}, {"B": 2, "T": 1}, {"B": 3, "T": 4}):
        ex = guards.explain(tp, at=point)
        assert ex.at.verdict == "ok" and len(ex.paths) == len(tp.paths)
    assert "paths:" in guards.explain(tp).text()
    assert trace_summary(tp) == ("True", "True")
    space = dinfer(model, "ids: i64[B, T]", dims={"B": (1, 4), "T": (1, 16)})
    assert space.complete and len(space.classes) == 1 and space.classes[0].ok
    assert space.summary.valid_iff == "True"
