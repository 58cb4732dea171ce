"""Chains of views from a contiguous tensor made as one direct view (compiler.view_chains), against eager."""
import pytest
import torch

import compiler


def _layout(t):
    """Sizes and strides, the strides of size-1 dims left out: no element's address depends on them,
    and eager's view and the trace's meta kernels may pick different ones."""
    return tuple((n, st) for n, st in zip(t.shape, t.stride()) if n != 1), t.shape


def _heads(x, w):
    """GPT-2's attention input: a fused projection split in three, each viewed as heads and transposed."""
    B, T = x.shape[0], x.shape[1]
    q, k, v = (x @ w).split(16, -1)
    q, k, v = (t.view(B, T, 4, 4).transpose(1, 2) for t in (q, k, v))
    return q * 2 + k, v.select(1, 3), k.unsqueeze(0).expand(2, -1, -1, -1, -1)[1, :, :, ::2]


def _unbound(x):
    """A kernel's output unbound and sliced: every link a view of it."""
    y = torch.relu(x) + 1
    a, b = y.unbind(-1)
    return a.t() * 3, b[1:], y.permute(2, 0, 1).narrow(1, 0, 1)


@pytest.mark.parametrize("prog,specs,make", [
    (_heads, ("x: f32[B, T, 16]", "w: f32[16, 48]"), lambda B, T: (torch.randn(B, T, 16), torch.randn(16, 48))),
    (_unbound, ("x: f32[B, T, 2]",), lambda B, T: (torch.randn(B, T, 2),)),
])
def test_view_chains_equal_eager_at_every_size(prog, specs, make):
    f = compiler.compile(prog, *specs)
    src = f.variants[0].source
    assert "REINTERPRET(" in src
    for B, T in [(2, 3), (1, 1), (3, 13), (5, 64)]:
        args = make(B, T)
        with torch.no_grad():
            got, want = f(*args), prog(*args)
        for g, e in zip(got, want):
            assert _layout(g) == _layout(e)
            torch.testing.assert_close(g, e)


def test_a_chain_is_one_direct_view_and_its_links_are_not_called():
    f = compiler.compile(_heads, "x: f32[B, T, 16]", "w: f32[16, 48]")
    src = f.variants[0].source
    assert "split" not in src and src.count("REINTERPRET(b_mm") >= 3, src


def test_a_start_that_is_not_contiguous_runs_the_chain_s_own_calls():
    """A chain's start that is contiguous in the trace but strided at run time (a slice of a wider
    tensor, a transpose) takes the chain's own calls: eager's values and layouts, or eager's error."""
    def prog(x):
        y = x.view(x.shape[0], -1, 2)[:, 1:].transpose(1, 2)
        return y * 2, x.unsqueeze(1)

    f = compiler.compile(prog, "x: f32[N, 8]")
    assert "REINTERPRET(b_x" in f.variants[0].source
    for x in (torch.randn(3, 8), torch.randn(5, 16)[:, :8], torch.randn(8, 7).t(), torch.randn(1, 8)):
        try:
            want = prog(x)
        except RuntimeError as e:
            with pytest.raises(RuntimeError, match="view"):
                f(x)
            assert "view" in str(e)
            continue
        got = f(x)
        for g, e in zip(got, want):
            torch.testing.assert_close(g, e)
        # The view (the chain's end) has eager's layout; the kernel's output its own dense one.
        assert _layout(got[1]) == _layout(want[1]) and got[1].data_ptr() == x.data_ptr()


_LINKS = ("view", "transpose", "permute", "select", "slice", "narrow", "unsqueeze", "expand", "split", "unbind", "t")


def _random_chain(seed):
    """A chain of 1 to 5 random views from a matmul's result (or from the input), then a kernel."""
    import random
    rng = random.Random(seed)
    links = [rng.choice(_LINKS) for _ in range(rng.randint(1, 5))]
    from_input = rng.random() < 0.3

    def prog(x, w):
        y = x if from_input else x @ w
        for op in links:
            d = y.dim()
            if op == "view":
                y = y.reshape(*y.shape[:-1], -1, 2) if y.shape[-1] % 2 == 0 else y.reshape(-1)
            elif op == "transpose" and d >= 2:
                y = y.transpose(0, d - 1)
            elif op == "permute" and d >= 2:
                y = y.permute(*reversed(range(d)))
            elif op == "select" and d >= 2 and y.shape[-1] > 1:
                y = y.select(-1, 1)
            elif op == "slice" and y.shape[-1] > 2:
                y = y[..., 1::2]
            elif op == "narrow" and y.shape[0] > 1:
                y = y.narrow(0, 1, y.shape[0] - 1)
            elif op == "unsqueeze":
                y = y.unsqueeze(1)
            elif op == "expand":
                y = y.unsqueeze(0).expand(3, *y.shape)
            elif op == "split" and y.shape[-1] >= 4:
                y = y.split(2, -1)[1]
            elif op == "unbind" and d >= 2:
                y = y.unbind(0)[0]
            elif op == "t" and d == 2:
                y = y.t()
        return y * 2, y
    return prog, links


@pytest.mark.parametrize("seed", range(0, 200, 8))
def test_random_view_chains_equal_eager(seed):
    """Random chains of views (from a matmul or from the input, contiguous or strided at run time,
    at sizes 1 and primes): eager's values and shapes, the returned view with eager's layout
    wherever it stays a view."""
    prog, links = _random_chain(seed)
    w = torch.randn(8, 12)
    f = compiler.compile(prog, "x: f32[B, T, 8]", "w: f32[8, 12]")
    for B, T, strided in [(2, 3, False), (3, 5, True), (1, 1, False), (2, 7, True)]:
        x = torch.randn(B, 8, T).transpose(1, 2) if strided else torch.randn(B, T, 8)
        try:
            want = prog(x, w)
        except RuntimeError:
            with pytest.raises(RuntimeError):
                f(x, w)
            continue
        got = f(x, w)
        for g, e in zip(got, want):
            assert g.shape == e.shape, (links, B, T)
            torch.testing.assert_close(g, e, rtol=0, atol=0)


class _Tied(torch.nn.Module):
    """An embedding whose weight is the output projection too (BERT's and GPT-2's LM heads): the
    training graphs view the shared weight through chains of transposes."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 16)
        self.proj = torch.nn.Linear(16, 16)

    def forward(self, ids):
        return torch.nn.functional.linear(torch.tanh(self.proj(self.emb(ids))), self.emb.weight)


def test_training_graphs_view_parameters_directly_and_train_as_eager(monkeypatch):
    """AOTAutograd runs a training step's graphs under no_grad: a chain from a parameter (autograd
    tracks it) is one direct view there, not the chain's own calls at every step, and the gradients
    are eager's."""
    from compiler import view_chains
    calls = []
    own = view_chains.ChainCalls.__call__
    monkeypatch.setattr(view_chains.ChainCalls, "__call__", lambda self, start, s: calls.append(self.start) or own(self, start, s))
    torch.manual_seed(0)
    model = _Tied()
    f = torch.compile(model, backend="symshape", dynamic=True)
    for n in (5, 1, 7, 3):
        ids = torch.randint(0, 50, (2, n))
        f(ids).pow(2).mean().backward()
        got = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        model(ids).pow(2).mean().backward()
        for g, e in zip(got, [p.grad for p in model.parameters()]):
            torch.testing.assert_close(g, e)
        model.zero_grad()
    assert calls == [], calls


def test_a_returned_view_of_a_parameter_says_requires_grad_as_eager_does():
    """Outside training graphs a view the program returns keeps ATen's flags: under no_grad eager's
    view of a parameter still says requires_grad, and so does the compiled program's."""
    def prog(x, w):
        return x * 2, w.view(4, 16).view(8, 8).t()

    f = compiler.compile(prog, "x: f32[N, 8]", "w: f32[8, 8]")
    x, w = torch.randn(3, 8), torch.nn.Parameter(torch.randn(8, 8))
    with torch.no_grad():
        got, want = f(x, w)[1], prog(x, w)[1]
    assert torch.equal(got, want) and got.requires_grad == want.requires_grad, (got.requires_grad, want.requires_grad)


def test_a_direct_view_of_a_part_that_starts_inside_its_storage():
    """A direct view of an ATen result that starts past its storage's start (the second of an
    unbind's parts): the view starts where that part does.  Torch's binding takes the offset
    relative to the tensor's own; given the absolute one, the view of the middle of three parts
    read the third's values with no error (pixtral's image patches, found by
    bench/hf_compile_sweep.py, failed out of bounds)."""
    def prog(x, w, m):
        return [img.flatten(1).T @ m for img in torch.conv2d(x, w, stride=2)]

    f = compiler.compile(prog, "x: f32[3, 3, H, W]", "w: f32[4, 3, 2, 2]", "m: f32[4, 5]")
    assert "REINTERPRET(b_getitem_1" in f.variants[0].source
    for H, W in [(6, 8), (2, 2), (9, 13)]:
        x, w, m = torch.randn(3, 3, H, W), torch.randn(4, 3, 2, 2), torch.randn(4, 5)
        with torch.no_grad():
            for g, e in zip(f(x, w, m), prog(x, w, m)):
                torch.testing.assert_close(g, e)


def test_reinterpret_takes_the_offset_from_the_tensors_own_start():
    """Both forms of the direct view (torch's binding and the as_strided fallback) agree."""
    from compiler.wrapper import reinterpret
    base = torch.arange(24.0)
    part = base[8:16]
    got = reinterpret(part, (2, 2), (2, 1), 4)
    assert got.storage_offset() == 12 and got.tolist() == [[12.0, 13.0], [14.0, 15.0]]
    assert torch.equal(part.as_strided((2, 2), (2, 1), part.storage_offset() + 4), got)
