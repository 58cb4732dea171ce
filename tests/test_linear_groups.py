"""compiler.linear_groups: linears reading one input trained as one linear over stacked weights.

Training steps through ``backend="symshape"`` (C++ target, CPU) with the rewrite on, against
eager: losses and every parameter's gradient at sizes 1, a prime and others; the rewrite is
counted, and a graph whose rewrite AOTAutograd cannot trace is traced as dynamo gave it.
"""
import copy

import pytest
import torch
import torch.nn.functional as F

import compiler
from compiler import linear_groups


class Block(torch.nn.Module):
    """An attention block as transformers writes it (q, k, v linears with biases, ``view`` to
    heads) and a SwiGLU MLP (gate and up projections without bias), pre-norm, residuals."""

    def __init__(self, d=32, heads=4, kv_heads=2, inter=48):
        super().__init__()
        self.h, self.kvh, self.dh = heads, kv_heads, d // heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.q = torch.nn.Linear(d, d)
        self.k = torch.nn.Linear(d, kv_heads * self.dh)
        self.v = torch.nn.Linear(d, kv_heads * self.dh)
        self.o = torch.nn.Linear(d, d)
        self.gate = torch.nn.Linear(d, inter, bias=False)
        self.up = torch.nn.Linear(d, inter, bias=False)
        self.down = torch.nn.Linear(inter, d, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        y = self.norm1(x)
        q = self.q(y).view(b, t, self.h, self.dh).transpose(1, 2)
        k = self.k(y).view(b, t, self.kvh, self.dh).transpose(1, 2)
        v = self.v(y).view(b, t, self.kvh, self.dh).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, -1))
        y = self.norm2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class Flattening(torch.nn.Module):
    """Reads one grouped output through ``aten.view`` into one dim: a slice of the stacked output
    cannot be viewed so, and the rewrite leaves ``aten.view`` calls as they are."""

    def __init__(self, d=16):
        super().__init__()
        self.a, self.b = torch.nn.Linear(d, d), torch.nn.Linear(d, 8)

    def forward(self, x):
        return torch.ops.aten.view.default(self.a(x), [-1]).sum() + self.b(x).pow(2).sum()


def _train(model, make, sizes, monkeypatch):
    monkeypatch.setattr(linear_groups, "ENABLED", True)
    compiler.register()
    torch._dynamo.reset()
    ref = copy.deepcopy(model)
    f = torch.compile(model, backend="symshape", dynamic=True)
    before = dict(compiler.BACKEND_STATS)
    g = torch.Generator().manual_seed(0)
    for n in sizes:
        x = make(n, g)
        got, want = f(x), ref(x)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        got.float().pow(2).mean().backward()
        want.float().pow(2).mean().backward()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=f"{name} at size {n}")
        model.zero_grad()
        ref.zero_grad()
    return {k: compiler.BACKEND_STATS.get(k, 0) - before.get(k, 0)
            for k in ("linear_groups", "linear_groups_reverted", "eager_train_graphs")}


def test_attention_and_swiglu_groups_train_as_eager(monkeypatch):
    torch.manual_seed(0)
    stats = _train(Block(), lambda n, g: torch.randn(2, n, 32, generator=g), (1, 7, 16, 5), monkeypatch)
    # q/k/v and gate/up, in the graph dynamo compiles for size 1 and in the one for every other size.
    assert stats["linear_groups"] == 4 and stats["linear_groups_reverted"] == 0, stats
    assert stats["eager_train_graphs"] == 0, stats


def test_a_rewrite_aotautograd_cannot_trace_is_undone(monkeypatch):
    torch.manual_seed(0)
    stats = _train(Flattening(), lambda n, g: torch.randn(n, 16, generator=g), (3, 5, 11), monkeypatch)
    assert stats["linear_groups_reverted"] >= 1 and stats["linear_groups"] == 0, stats
    assert stats["eager_train_graphs"] == 0, stats


def test_groups_need_one_input_and_biases_on_all_or_none():
    def program(x, y, w1, w2, w3, b1):
        return F.linear(x, w1, b1) + F.linear(x, w2) + F.linear(y, w3)

    gm = torch.fx.symbolic_trace(program)
    args = [torch.randn(3, 8), torch.randn(3, 8), torch.randn(4, 8), torch.randn(4, 8), torch.randn(4, 8),
            torch.randn(4)]
    from torch.fx.passes.shape_prop import ShapeProp
    ShapeProp(gm).propagate(*args)
    assert linear_groups.group_linears(gm, enabled=True) == 0  # x's linears differ in bias; y's is alone


@pytest.mark.parametrize("enabled", [False, True])
def test_the_switch(enabled, monkeypatch):
    monkeypatch.setattr(linear_groups, "ENABLED", enabled)

    def program(x, w1, w2):
        return F.linear(x, w1) * F.linear(x, w2)

    gm = torch.fx.symbolic_trace(program)
    args = [torch.randn(3, 8), torch.randn(4, 8), torch.randn(4, 8)]
    from torch.fx.passes.shape_prop import ShapeProp
    ShapeProp(gm).propagate(*args)
    want = gm(*args)
    assert linear_groups.group_linears(gm) == int(enabled)
    torch.testing.assert_close(gm(*args), want)
