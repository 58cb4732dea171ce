"""CUDA graphs for training steps (:mod:`compiler.train_graphs`), their rules tested on the CPU.

``SYMSHAPE_TRAIN_GRAPHS=emulate`` records nothing and replays by running the program again on
the recorded inputs (parameters in place, arena slots, the input arena) and writing the
recorded output slots: a rule that let a replay overwrite memory a caller still holds, or read
an input from the wrong place, changes the gradients here as it would on the GPU.
"""
import copy

import pytest
import torch

from compiler import train_graphs
from tests import train_cases as cases

pytest.importorskip("transformers")


@pytest.fixture
def emulated(monkeypatch):
    monkeypatch.setattr(train_graphs, "MODE", "emulate")
    for k in ("recorded", "replays", "plain"):
        monkeypatch.setitem(train_graphs.STATS, k, 0)
    monkeypatch.setitem(train_graphs.STATS, "refused", [])
    return train_graphs.STATS


# Sizes met again and again: each size records at its second call and replays from its third.
# The larger size's recording doubles the forward arena, so the smaller one records again once.
_SIZES = {"vit": (2, 3) * 4, "vit_sizes": (2, 3) * 4}


@pytest.mark.parametrize("name", ["mlp", "convnet", "attention", "lm_head", "dropout_p0", "batchnorm", "gpt2",
                                  "llama_gqa", "bert_mask", "vit"])
def test_replayed_steps_give_eager_gradients(emulated, name):
    cases.check(name, "cpp", sizes=_SIZES.get(name, (7, 13) * 4))
    assert emulated["recorded"] >= 2, emulated["refused"]
    assert emulated["replays"] >= 4, (emulated, emulated["refused"])


def test_dropout_records_no_graph(emulated):
    """A replay would draw the recorded mask again: a program with dropout never records."""
    cases.case_dropout_stats("cpp")
    assert emulated["replays"] == 0
    assert any("random numbers" in r for r in emulated["refused"]), emulated["refused"]


def _mlp_pair():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    ref = copy.deepcopy(m)
    torch._dynamo.reset()
    return m, ref, torch.compile(m, backend="symshape", dynamic=True, options={"target": "cpp"})


def _grads_equal(m, ref):
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=2e-5, rtol=1e-4)


def test_a_forward_whose_saved_activations_are_alive_runs_without_its_graph(emulated):
    """Gradient accumulation: the first forward's activations (views of the forward arena) are
    alive when the second forward comes; replaying it would overwrite them."""
    m, ref, f = _mlp_pair()
    g = torch.Generator().manual_seed(1)
    for n in (5, 9, 5, 9, 5, 9):  # records at each size's second call, then replays
        x = torch.randn(n, 16, generator=g)
        f(x).square().mean().backward()
        ref(x).square().mean().backward()
    assert emulated["replays"] >= 2
    replays = emulated["replays"]
    m.zero_grad(), ref.zero_grad()
    x1, x2 = torch.randn(9, 16, generator=g), torch.randn(9, 16, generator=g)
    a, b = f(x1).square().mean(), f(x2).square().mean()  # the first replays, the second must not
    (a + b).backward()
    (ref(x1).square().mean() + ref(x2).square().mean()).backward()
    _grads_equal(m, ref)
    assert emulated["replays"] == replays + 2  # the first forward and its backward


def test_a_parameter_replaced_runs_without_the_graph(emulated):
    """A graph reads parameters in place: one the optimizer replaced is no longer where it was."""
    m, ref, f = _mlp_pair()
    g = torch.Generator().manual_seed(2)
    for n in (5, 9, 5, 9, 5, 9):
        x = torch.randn(n, 16, generator=g)
        f(x).sum().backward()
        ref(x).sum().backward()
    with torch.no_grad():
        m[0].weight.data = m[0].weight.data * 0.5
        ref[0].weight.data = ref[0].weight.data * 0.5
    m.zero_grad(), ref.zero_grad()
    replays = emulated["replays"]
    x = torch.randn(5, 16, generator=g)
    f(x).sum().backward()
    ref(x).sum().backward()
    _grads_equal(m, ref)
    assert emulated["replays"] == replays  # its forward ran without the graph, so did its backward


def test_saved_activations_are_views_of_the_forward_arena(emulated):
    """What makes replays cheap: a replayed forward hands the backward views of its arena, and the
    caller's loss is a copy (it outlives the next forward)."""
    m, ref, f = _mlp_pair()
    g = torch.Generator().manual_seed(3)
    losses = []
    for n in (5, 9, 5, 9, 5, 9):
        x = torch.randn(n, 16, generator=g)
        loss = f(x).sum()
        losses.append(loss)
        loss.backward()
    assert emulated["replays"] >= 2
    assert not train_graphs.FORWARD.holds(losses[-1])
    assert not train_graphs.FORWARD.in_use()  # the backward released the saved views


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("name", ["mlp", "attention", "gpt2", "llama_gqa", "bert_mask", "vit"])
def test_cuda_graph_replays_give_eager_gradients(monkeypatch, name):
    """The same steps with real CUDA graphs (Triton kernels, cuBLAS, SDPA recorded)."""
    monkeypatch.setattr(train_graphs, "MODE", "1")
    monkeypatch.setitem(train_graphs.STATS, "replays", 0)
    monkeypatch.setitem(train_graphs.STATS, "refused", [])
    cases.check(name, "triton", "cuda", sizes=_SIZES.get(name, (7, 13) * 4))
    assert train_graphs.STATS["replays"] >= 4, train_graphs.STATS["refused"]


def test_a_new_length_at_every_step_records_nothing(emulated):
    """Recording costs a run and a capture: a run that never meets a length twice pays none."""
    m, ref, f = _mlp_pair()
    g = torch.Generator().manual_seed(4)
    for n in range(3, 23):
        x = torch.randn(n, 16, generator=g)
        f(x).sum().backward()
    assert emulated["recorded"] == 0


def test_a_run_that_keeps_coming_back_records_new_sizes_at_their_first_call(emulated):
    m, ref, f = _mlp_pair()
    g = torch.Generator().manual_seed(5)
    for n in [5, 6, 7, 8] * 4:  # from the second round on, every call meets a size seen before
        x = torch.randn(n, 16, generator=g)
        f(x).sum().backward()
        ref(x).sum().backward()
    _grads_equal(m, ref)
    recorded = emulated["recorded"]
    f(torch.randn(11, 16, generator=g)).sum().backward()  # new, in a run of repeats: records at once
    assert emulated["recorded"] == recorded + 2


def test_a_recording_refused_for_one_call_is_tried_again(emulated):
    """Two forwards before one backward at a size's second call: the first backward cannot map
    its inputs to a recorded forward then (a refusal for that call only); later steps record and
    replay, with eager's gradients throughout."""
    m, ref, f = _mlp_pair()
    g = torch.Generator().manual_seed(6)
    x = torch.randn(5, 16, generator=g)
    f(x).sum().backward(), ref(x).sum().backward()
    x1, x2 = torch.randn(5, 16, generator=g), torch.randn(5, 16, generator=g)
    a, b = f(x1).sum(), f(x2).square().sum()
    (a + b).backward()
    (ref(x1).sum() + ref(x2).square().sum()).backward()
    _grads_equal(m, ref)
    for _ in range(3):
        m.zero_grad(), ref.zero_grad()
        x = torch.randn(5, 16, generator=g)
        f(x).sum().backward(), ref(x).sum().backward()
        _grads_equal(m, ref)
    assert emulated["replays"] >= 2, emulated
