"""plan_graph solves a size symbol that tensors carry only linearly (issue #23).

A backward graph of ``conv(F.interpolate(img, scale_factor=2))`` sees sizes ``2*s``
but never ``s`` alone, and one of patches plus a class token sees ``s + 1``: each such
symbol is a named dim that only dim expressions give, solved by the binder at every
call, and SymInt arguments over it are computed from the tensors.  Before, such a
graph ran uncompiled (a TrainingFallback).  A size the relation does not hold for
(an odd size where ``2*s`` is written) is a GuardViolation, never a rounded ``s``.
"""
import copy
import itertools
import warnings

import pytest
import sympy
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._dynamo.source import ConstantSource
from torch.fx.experimental.symbolic_shapes import ShapeEnv

import compiler
from compiler.graph_inputs import ArgKind, linear_in, plan_graph
from compiler.runtime import CompiledProgram
from compiler.training import TrainingFallback, compile_aten_graph
from shapes.errors import GuardViolation
from shapes.spec import DimExpr

_NAMES = itertools.count()


def _sym(env, value):
    return env.create_symintnode(env.create_symbol(value, ConstantSource(f"x{next(_NAMES)}")), hint=value)


def _meta(*shape):
    return torch.empty(*shape, device="meta")


# -- plan_graph on hand-made symbolic sizes -------------------------------------------------------

@pytest.mark.parametrize("a,b", [(2, 0), (1, 1), (4, 2), (2, 1)])
def test_a_linear_dim_gives_its_symbol(a, b):
    env = ShapeEnv()
    s = _sym(env, 5)
    size = a * 5 + b
    plan = plan_graph([torch.randn(3, size), 5], [_meta(3, a * s + b), s])
    name = str(s)
    (spec,) = plan.specs
    assert spec.dims[0] == 3 and isinstance(spec.dims[1], DimExpr) and spec.dims[1].names == (name,)
    assert plan.dims == {name: 5}  # the solved symbol's hint, read off the example's size
    assert plan.layout[1] == (ArgKind.EXPR, s.node.expr)  # the SymInt argument: s, computed
    for n in (1, 2, 7, 13):
        assert plan.args([torch.randn(3, a * n + b)])[1] == n
        assert plan.dim_values([torch.randn(3, a * n + b)]) == (n,)
    if a > 1:
        with pytest.raises(GuardViolation, match="not a multiple of"):
            plan.dim_values([torch.randn(3, a * 7 + b + 1)])


def test_a_symbol_solved_from_one_dim_writes_the_others_as_expressions():
    env = ShapeEnv()
    s, t = _sym(env, 6), _sym(env, 3)
    # t is carried plainly; s only as 2*s + t (b holds a known symbol), then 4*s and s*t elsewhere
    plan = plan_graph([torch.randn(15), torch.randn(3, 24), torch.randn(18), 6],
                      [_meta(2 * s + t), _meta(t, 4 * s), _meta(s * t), s * t + 1])
    assert set(plan.solved) == {s.node.expr}
    assert all(isinstance(d, DimExpr) for d in (plan.specs[0].dims[0], plan.specs[1].dims[1], plan.specs[2].dims[0]))
    assert not [n for n in plan.dims if n.startswith("a")]  # no size became a dim of its own
    assert plan.args([torch.randn(2 * 9 + 5), torch.randn(5, 36), torch.randn(45)])[3] == 9 * 5 + 1


@pytest.mark.parametrize("make", [lambda s, t: s * s, lambda s, t: s + t, lambda s, t: s // 2])
def test_a_dim_not_linear_in_one_unknown_stays_its_own_dim(make):
    env = ShapeEnv()
    s, t = _sym(env, 6), _sym(env, 4)
    e = make(s, t)
    hint = e.node.hint
    plan = plan_graph([torch.randn(hint)], [_meta(e)])
    assert plan.specs[0].dims == ("a0_0",) and not plan.solved
    # a SymInt argument over the unsolved symbol: no plan (the graph runs uncompiled, as before)
    assert plan_graph([torch.randn(hint), 6], [_meta(e), s]) is None


def test_linear_in():
    s, t = sympy.symbols("s t", integer=True)
    assert linear_in(2 * s, s) == (2, 0)
    assert linear_in(s + 1, s) == (1, 1)
    assert linear_in(3 - s, s) == (-1, 3)
    assert linear_in(s * t + 1, s) is None and linear_in(s + s * s, s) is None and linear_in(t + 1, s) is None


def test_the_binder_checks_every_dim_of_a_solved_symbol():
    env = ShapeEnv()
    s = _sym(env, 5)
    plan = plan_graph([torch.randn(10, 3), torch.randn(6)], [_meta(2 * s, 3), _meta(s + 1)])
    prog = CompiledProgram(lambda x, y: x.sum(0).repeat(y.shape[0] - 1), plan.specs, plan.dims, "cpp")
    # the program's output has s * 3 elements: s was solved and used
    assert prog(torch.ones(14, 3), torch.ones(8)).shape == (21,)
    with pytest.raises(GuardViolation, match="no size"):
        prog(torch.ones(15, 3), torch.ones(8))  # 15 is not 2*s for any s
    with pytest.raises(GuardViolation):
        prog(torch.ones(14, 3), torch.ones(9))  # 2*s = 14 but s + 1 = 9


def test_the_training_graph_checks_its_size_arguments():
    """A backward whose SymInt argument ``s`` and tensor of ``2*s`` disagree is refused, not run."""
    env = ShapeEnv()
    s = _sym(env, 5)

    def f(n, x):
        return (x.reshape(2, n) * 3,)

    gm = torch.fx.symbolic_trace(f)
    out = next(n for n in gm.graph.nodes if n.op == "output")
    out.args[0][0].meta["val"] = _meta(2, s)
    stats = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error", TrainingFallback)
        run = compile_aten_graph(gm, [s, _meta(2 * s)], target="cpp", graph="backward", stats=stats)
    assert run.compiled.specs[0].dims[0] == DimExpr.parse(f"2*{s}")
    x = torch.randn(14)
    torch.testing.assert_close(run([7, x])[0], x.reshape(2, 7) * 3)
    with pytest.raises(GuardViolation, match="size argument"):
        run([6, torch.randn(14)])
    with pytest.raises(GuardViolation):
        run([7, torch.randn(15)])


@pytest.mark.parametrize("spec,a,b", [("x: f32[2*T + 1]", 2, 1), ("x: f32[4*T + 2]", 4, 2), ("x: f32[T + 1]", 1, 1)])
def test_a_symbol_only_an_expression_gives_lowers_as_a_size(spec, a, b):
    # T used as a value (a repeat count) where only a*T + b gives it: the tracer's sym_size - b
    # had no size expression, and lowering it failed (SympifyError) for a > 1 and b > 0
    fn = lambda x: x.new_ones(5).repeat((x.shape[0] - b) // a).sum() + x.sum()  # noqa: E731
    f = compiler.compile(fn, spec)
    for t in (1, 2, 7):
        x = torch.randn(a * t + b)
        torch.testing.assert_close(f(x), fn(x))
    if a > 1:
        with pytest.raises(GuardViolation):
            f(torch.randn(a * 7 + b + 1))


# -- end to end: the training backend compiles these backwards -------------------------------------

class Upsample(nn.Module):  # diffusers' Upsample2D: nearest by 2, then a convolution (sizes 2*s)
    def __init__(self, factor=2, pad=0):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.factor, self.pad = factor, pad

    def forward(self, x):
        y = F.interpolate(x, scale_factor=self.factor, mode="nearest")
        if self.pad:
            y = F.pad(y, (self.pad,) * 4)
        return self.conv(y).square().mean()


class ClassToken(nn.Module):  # ViT's tokens: s patches and a class token (sizes s + 1)
    def __init__(self):
        super().__init__()
        self.cls = nn.Parameter(torch.randn(1, 1, 8))
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        h = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1)
        return (self.lin(h).softmax(-1) * h).square().mean()


MODELS = {
    "upsample2": (lambda: Upsample(2), lambda n: torch.randn(2, 3, n, n + 2)),
    "upsample4_pad1": (lambda: Upsample(4, 1), lambda n: torch.randn(2, 3, n, 3)),  # 4*s + 2
    "class_token": (ClassToken, lambda n: torch.randn(2, n, 8)),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_training_backend_compiles_backwards_of_solved_sizes(name, monkeypatch):
    build, inputs = MODELS[name]
    plans = []

    def spy(*args, **kw):
        plans.append(plan_graph(*args, **kw))
        return plans[-1]

    monkeypatch.setattr(compiler.training, "plan_graph", spy)
    torch.manual_seed(0)
    mine = build()
    ref = copy.deepcopy(mine)
    torch._dynamo.reset()
    f = torch.compile(mine, backend="symshape", dynamic=True, options={"target": "cpp"})
    stats = compiler.BACKEND_STATS
    eager0, graphs0 = stats["eager_train_graphs"], stats["train_graphs"]
    for n in (1, 5, 6, 13):
        x = inputs(n)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            f(x).backward()
        assert not [w for w in caught if issubclass(w.category, TrainingFallback)], [str(w.message) for w in caught]
        ref(x).backward()
        for (pn, p), q in zip(mine.named_parameters(), ref.parameters()):
            assert torch.allclose(p.grad, q.grad, atol=1e-5, rtol=1e-4), f"grad of {pn} at size {n}"
        mine.zero_grad(), ref.zero_grad()
    assert stats["eager_train_graphs"] == eager0
    assert stats["train_graphs"] > graphs0
    assert any(p is not None and p.solved for p in plans), "no graph had a symbol to solve"
