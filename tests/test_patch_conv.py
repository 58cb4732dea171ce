"""Patch embeddings as one matmul (compiler.patch_conv): values and gradients equal
``torch.conv2d``'s, only patch embeddings are rewritten, eager's refusals are kept, and a
compiled training step at new image sizes matches eager without a recompile."""
import warnings

import pytest
import torch

import compiler
from compiler.patch_conv import patch_conv, patch_convs_as_matmuls
from compiler.training import TrainingFallback


def _grads(fn, x, w, b):
    x, w = x.clone().requires_grad_(), w.clone().requires_grad_()
    b = b.clone().requires_grad_() if b is not None else None
    out = fn(x, w, b)
    (out.float() * torch.linspace(-1, 1, out.numel()).reshape(out.shape)).sum().backward()
    return out, x.grad, w.grad, (b.grad if b is not None else None)


@pytest.mark.parametrize("shape,kernel,bias", [
    ((2, 3, 32, 48), (16, 16), True),
    ((1, 3, 35, 50), (16, 16), True),   # sides past the last whole patch are left out
    ((3, 4, 17, 16), (4, 8), False),    # a rectangular patch, no bias
    ((0, 3, 16, 16), (8, 8), True),     # an empty batch, as eager allows
    ((2, 1, 8, 8), (8, 8), True),       # one patch
])
def test_values_and_gradients_equal_conv2d(shape, kernel, bias):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g, dtype=torch.float64)
    w = torch.randn(5, shape[1], *kernel, generator=g, dtype=torch.float64)
    b = torch.randn(5, generator=g, dtype=torch.float64) if bias else None
    got = _grads(lambda x, w, b: patch_conv(x, w, b, kernel), x, w, b)
    want = _grads(lambda x, w, b: torch.conv2d(x, w, b, stride=kernel), x, w, b)
    assert got[0].shape == want[0].shape
    for a, e in zip(got, want):
        if e is None:
            assert a is None
        else:
            torch.testing.assert_close(a, e)


def test_autocast_dtype_and_values_follow_conv2d():
    x, w, b = torch.randn(2, 3, 32, 32), torch.randn(8, 3, 16, 16), torch.randn(8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = patch_conv(x, w, b, (16, 16)), torch.conv2d(x, w, b, stride=16)
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want.float(), atol=0.25, rtol=2e-2)


def test_an_image_smaller_than_a_patch_raises_eagers_error():
    x, w = torch.randn(1, 3, 8, 20), torch.randn(4, 3, 16, 16)
    with pytest.raises(RuntimeError) as want:
        torch.conv2d(x, w, stride=16)
    with pytest.raises(RuntimeError) as got:
        patch_conv(x, w, None, (16, 16))
    assert str(got.value) == str(want.value)


def _rewritten_run(fn, x, enabled=True):
    """``fn(x)`` through dynamo with its graph's patch embeddings rewritten: (rewrites, output)."""
    counts = []

    def rewrite(gm, example_inputs):
        counts.append(patch_convs_as_matmuls(gm, enabled=enabled))
        return gm
    torch._dynamo.reset()
    out = torch.compile(fn, backend=rewrite, dynamic=True)(x)
    return sum(counts), out


class _Conv(torch.nn.Module):
    def __init__(self, flatten=True, **conv):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 6, **conv)
        self.flatten = flatten

    def forward(self, x):
        y = self.conv(x)
        return y.flatten(2) if self.flatten else y


@pytest.mark.parametrize("module,rewritten", [
    (lambda: _Conv(kernel_size=4, stride=4), 1),
    (lambda: _Conv(kernel_size=(4, 2), stride=(4, 2), padding="valid"), 1),
    (lambda: _Conv(kernel_size=4, stride=4, padding=1), 0),            # padded
    (lambda: _Conv(kernel_size=4, stride=2), 0),                       # overlapping patches
    (lambda: _Conv(kernel_size=4, stride=4, dilation=2), 0),           # dilated
    (lambda: _Conv(kernel_size=1, stride=1), 0),                       # 1 x 1: not a patch embedding
    (lambda: _Conv(flatten=False, kernel_size=4, stride=4), 0),        # the graph's output: eager's strides
])
def test_only_patch_embeddings_are_rewritten(module, rewritten):
    torch.manual_seed(0)
    m, x = module(), torch.randn(2, 3, 16, 20)
    n, got = _rewritten_run(m, x)
    assert n == rewritten
    torch.testing.assert_close(got, m(x), atol=1e-5, rtol=1e-5)


class _Patchify(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Conv2d(3, 16, 8, stride=8)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.proj(x).flatten(2).transpose(1, 2)).mean(1)


def test_off_by_default(monkeypatch):
    monkeypatch.delenv("SYMSHAPE_PATCH_CONV", raising=False)
    n, _ = _rewritten_run(_Conv(kernel_size=4, stride=4), torch.randn(2, 3, 16, 20), enabled=None)
    assert n == 0


@pytest.mark.parametrize("input_grad", [False, True])
def test_compiled_training_at_new_image_sizes_equals_eager(input_grad, monkeypatch):
    monkeypatch.setenv("SYMSHAPE_PATCH_CONV", "1")
    torch.manual_seed(0)
    ref = _Patchify()
    mine = _Patchify()
    mine.load_state_dict(ref.state_dict())
    compiler.register()
    torch._dynamo.reset()
    before = dict(compiler.BACKEND_STATS)
    f = torch.compile(mine, backend="symshape", dynamic=True, options={"target": "cpp"})
    graphs = []
    for h, w in [(8, 13), (24, 16), (29, 41), (40, 17)]:
        x = torch.randn(3, 3, h, w)
        xs = [x.clone().requires_grad_(input_grad) for _ in range(2)]
        with warnings.catch_warnings():
            warnings.simplefilter("error", TrainingFallback)
            f(xs[0]).square().sum().backward()
        ref(xs[1]).square().sum().backward()
        for (name, p), q in zip(mine.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4, msg=f"{name} at {h}x{w}")
        if input_grad:
            torch.testing.assert_close(xs[0].grad, xs[1].grad, atol=1e-5, rtol=1e-4)
        mine.zero_grad(), ref.zero_grad()
        graphs.append(compiler.BACKEND_STATS["graphs"] - before.get("graphs", 0))
    assert compiler.BACKEND_STATS.get("patch_convs_as_matmuls", 0) > before.get("patch_convs_as_matmuls", 0)
    assert graphs[1] == graphs[-1], f"dynamo compiled again at a new image size: {graphs}"
