"""The training backend's dynamo-graph rewrites: masks proved true dropped, bicubic resizing as matmuls.

Each rewrite must give eager's values and gradients, and leave alone what it cannot prove.
"""
import re

import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func

from compiler.separable_resize import nearest_repeat, resize_as_matmuls, separable_resize
from compiler.train_masks import drop_proved_masks


def _sdpa_masks(fn, *args, causal=True):
    """Compile ``fn`` with a backend that runs :func:`drop_proved_masks`; returns (dropped, masks left, output)."""
    got = {}

    def backend(gm, example_inputs):
        got["dropped"] = drop_proved_masks(gm, causal=causal)
        got["left"] = sum(1 for n in gm.graph.nodes if n.op == "call_function" and "scaled_dot_product" in str(n.target)
                          and (n.kwargs.get("attn_mask") is not None or len(n.args) > 3 and n.args[3] is not None))
        return gm.forward

    torch._dynamo.reset()
    out = torch.compile(fn, backend=backend, dynamic=True)(*args)
    return got["dropped"], got["left"], out


def _attn(mask_of):
    def attn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask_of(q, k))
    return attn


def _true_then_cleared(T, S):
    m = torch.arange(S)[None, :].expand(T, S) >= 0
    m = m.clone()
    m.logical_not_()  # all false now: every key masked
    m[:, 0] = True
    return m


def _true_then_cleared_through_a_view(T, S):
    keep = torch.arange(S) >= 0
    alias = keep.view(S)  # the same memory
    alias[0] = False  # key 0 masked for every query: written through the other view
    return keep[None, :]


def _true_then_row_cleared(T, S):
    m = (torch.arange(S)[None, :] >= 0).repeat(T, 1)
    m[1:, 1:] = False
    return m


def _qkv(T, S=None, B=2):
    g = torch.Generator().manual_seed(T)
    return [torch.randn(B, 3, n, 8, generator=g) for n in (T, S or T, S or T)]


@pytest.mark.parametrize("T", [2, 7, 33])
def test_a_mask_true_everywhere_is_dropped_and_values_stay_eager(T):
    # transformers' bidirectional mask under torch.compile (ViT, BERT without padding)
    mask = lambda q, k: (torch.arange(q.shape[-2])[None, None, :, None] >= 0).expand(q.shape[0], 1, q.shape[-2],
                                                                                       k.shape[-2])
    fn = _attn(mask)
    q, k, v = _qkv(T)
    dropped, left, out = _sdpa_masks(fn, q, k, v)
    assert (dropped, left) == (1, 0)
    torch.testing.assert_close(out, fn(q, k, v))


@pytest.mark.parametrize("T,S", [(9, 9), (5, 12), (1, 1)])
def test_a_causal_mask_becomes_is_causal(T, S):
    # transformers' causal mask (kv_idx <= q_idx) under torch.compile (GPT-2, Llama)
    mask = lambda q, k: (torch.arange(k.shape[-2])[None, :] <= torch.arange(q.shape[-2])[:, None])[None, None].expand(
        q.shape[0], 1, -1, -1)
    fn = _attn(mask)
    q, k, v = _qkv(T, S)
    dropped, left, out = _sdpa_masks(fn, q, k, v)
    assert (dropped, left) == (1, 0)
    torch.testing.assert_close(out, fn(q, k, v))
    if T > 1:  # at T = S = 1 (dynamo specializes 1) the causal mask is one true entry, dropped either way
        assert _sdpa_masks(fn, q, k, v, causal=False)[:2] == (0, 1)  # kept when not asked


@pytest.mark.parametrize("name,mask", [
    ("causal, shifted", lambda q, k: torch.arange(k.shape[-2])[None, :] <= torch.arange(q.shape[-2])[:, None] + 1),
    # j <= i over a row of length 1: read broadcast over the query's rows, it is j <= 0, not causal
    ("causal form in a broadcast row", lambda q, k: torch.arange(k.shape[-2])[None, :] <= torch.arange(1)[:, None]),
    ("reads an input", lambda q, k: (q[..., :1] > 0).expand(-1, -1, -1, k.shape[-2])),
    ("true only below 100", lambda q, k: (torch.arange(k.shape[-2]) < 100)[None, :].expand(q.shape[-2], -1)),
    ("float mask", lambda q, k: torch.zeros(q.shape[-2], k.shape[-2])),
    ("written in place after", lambda q, k: _true_then_cleared(q.shape[-2], k.shape[-2])),
    ("row set false after", lambda q, k: _true_then_row_cleared(q.shape[-2], k.shape[-2])),
    ("cleared through a view", lambda q, k: _true_then_cleared_through_a_view(q.shape[-2], k.shape[-2])),
])
def test_a_mask_not_proved_true_is_kept(name, mask):
    fn = _attn(mask)
    q, k, v = _qkv(9)
    dropped, left, out = _sdpa_masks(fn, q, k, v)
    assert (dropped, left) == (0, 1), name
    torch.testing.assert_close(out, fn(q, k, v))


def test_the_training_backend_drops_the_mask_and_gradients_equal_eager():
    from compiler.backend import BACKEND_STATS

    class Attn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(16, 48)

        def forward(self, x):
            B, T, _ = x.shape
            q, k, v = self.qkv(x).view(B, T, 3, 2, 8).permute(2, 0, 3, 1, 4)
            mask = (torch.arange(T)[None, None, :, None] >= 0).expand(B, 1, T, T)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum()

    torch._dynamo.reset()
    torch.manual_seed(0)
    m = Attn()
    f = torch.compile(m, backend="symshape", dynamic=True)
    before = BACKEND_STATS.get("masks_dropped", 0)
    for T in (1, 5, 13):
        x = torch.randn(2, T, 16)
        f(x).backward()
        got = m.qkv.weight.grad.clone()
        m.zero_grad()
        m(x).backward()
        torch.testing.assert_close(got, m.qkv.weight.grad, atol=1e-5, rtol=1e-4)
        m.zero_grad()
    assert BACKEND_STATS.get("masks_dropped", 0) > before


@pytest.mark.parametrize("mode", ["bicubic", "bilinear"])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("ih,iw,oh,ow", [(14, 14, 29, 29), (14, 14, 5, 3), (1, 1, 4, 4), (3, 2, 1, 1), (7, 5, 97, 13),
                                         (16, 16, 8, 8), (2, 9, 1, 31)])
def test_separable_resize_equals_eager_values_and_gradients(ih, iw, oh, ow, align_corners, mode):
    x = torch.randn(2, 3, ih, iw, dtype=torch.float64, requires_grad=True)
    g = torch.randn(2, 3, oh, ow, dtype=torch.float64)
    got = separable_resize(x, (oh, ow), mode=mode, align_corners=align_corners)
    (gx,) = torch.autograd.grad(got, x, g)
    want = F.interpolate(x, size=(oh, ow), mode=mode, align_corners=align_corners)
    (wx,) = torch.autograd.grad(want, x, g)
    torch.testing.assert_close(got, want, atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(gx, wx, atol=1e-9, rtol=1e-9)


def _joint_ops(fn, x):
    """The ATen ops of AOTAutograd's forward and backward graphs of ``fn`` after :func:`resize_as_matmuls`."""
    ops = {"fw": set(), "bw": set(), "rewritten": 0}

    def grab(key):
        def compiler(gm, example_inputs):
            ops[key] |= {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}
            return make_boxed_func(gm)
        return compiler

    inner = aot_autograd(fw_compiler=grab("fw"), bw_compiler=grab("bw"))

    def backend(gm, example_inputs):
        ops["rewritten"] += resize_as_matmuls(gm)
        return inner(gm, example_inputs)

    torch._dynamo.reset()
    out = torch.compile(fn, backend=backend, dynamic=True)(x)
    out.sum().backward()
    return ops, out


@pytest.mark.parametrize("mode", ["bicubic", "bilinear"])
def test_resize_as_matmuls_leaves_no_index_put_in_the_backward(mode):
    pos = torch.randn(1, 8, 14, 14, requires_grad=True)

    def fn(img):
        h, w = img.shape[-2] // 16, img.shape[-1] // 16
        return F.interpolate(pos, size=(h, w), mode=mode, align_corners=False) * img.mean()

    img = torch.randn(1, 3, 16 * 11, 16 * 7)
    ops, out = _joint_ops(fn, img)
    assert ops["rewritten"] == 1
    assert not any("index_put" in o for o in ops["bw"]), sorted(ops["bw"])
    assert any("mm" in o for o in ops["bw"])
    torch.testing.assert_close(out, F.interpolate(pos, size=(11, 7), mode=mode, align_corners=False) * img.mean())


@pytest.mark.parametrize("kwargs", [dict(scale_factor=2.0, mode="bicubic"), dict(size=(9, 9), mode="nearest"),
                                    dict(scale_factor=3.0, mode="nearest"), dict(scale_factor=2.0, mode="nearest-exact"),
                                    dict(size=(9, 9), mode="bicubic", antialias=True)])
def test_resize_calls_it_cannot_match_exactly_are_left(kwargs):
    pos = torch.randn(1, 2, 5, 5)
    seen = []

    def backend(gm, example_inputs):
        seen.append(resize_as_matmuls(gm))
        return gm.forward

    torch._dynamo.reset()
    fn = lambda x: F.interpolate(pos * x.mean(), **kwargs)
    x = torch.randn(3, 4)
    out = torch.compile(fn, backend=backend, dynamic=True)(x)
    assert seen == [0]
    torch.testing.assert_close(out, fn(x))


def test_a_backward_with_derived_sizes_keeps_one_dim_per_symbol():
    # ViT-like: patches of 16 px, a class token: the backward's sizes are (H//16)**2 + 1 and
    # H//16; written as dim expressions of H they stay one dim (before: one dim per tensor dim)
    from compiler.graph_inputs import plan_graph
    conv = torch.nn.Conv2d(3, 8, 16, stride=16)
    cls = torch.nn.Parameter(torch.randn(1, 1, 8))
    seen = []

    def bw(gm, example_inputs):
        seen.append(plan_graph(list(example_inputs)))
        return make_boxed_func(gm)

    def fn(img):
        p = conv(img).flatten(2).transpose(1, 2)
        x = torch.cat([cls.expand(img.shape[0], -1, -1), p], dim=1)
        return (x.softmax(-1) * x).sum()

    torch._dynamo.reset()
    f = torch.compile(fn, backend=aot_autograd(fw_compiler=lambda gm, ex: make_boxed_func(gm), bw_compiler=bw), dynamic=True)
    f(torch.randn(2, 3, 16 * 5, 16 * 5)).backward()
    (plan,) = seen
    own = [n for n in plan.dims if re.fullmatch(r"a\d+_\d+", n)]  # a size no dim expression wrote
    assert not own, plan.dims
    derived = [d for spec in plan.specs for d in spec.dims if not isinstance(d, (int, str))]
    assert derived, [spec.dims for spec in plan.specs]


def test_one_mask_read_by_every_layer_goes_from_every_call():
    def two_layers(q, k, v):
        T = q.shape[-2]
        mask = (torch.arange(T)[None, None, :, None] >= 0).expand(q.shape[0], 1, T, T)
        h = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return F.scaled_dot_product_attention(h, k, v, attn_mask=mask)

    q, k, v = _qkv(11)
    dropped, left, out = _sdpa_masks(two_layers, q, k, v)
    assert (dropped, left) == (2, 0)
    torch.testing.assert_close(out, two_layers(q, k, v))


@pytest.mark.parametrize("mode", ["bicubic", "bilinear"])
def test_the_training_backend_resizes_as_matmuls_and_gradients_equal_eager(mode):
    from compiler.backend import BACKEND_STATS

    class PosEmbed(torch.nn.Module):  # ViT's position embedding, interpolated to the image's patch grid
        def __init__(self):
            super().__init__()
            self.grid = torch.nn.Parameter(torch.randn(1, 4, 7, 7))
            self.proj = torch.nn.Conv2d(3, 4, 4, stride=4)

        def forward(self, img):
            p = self.proj(img)
            pos = F.interpolate(self.grid, size=p.shape[-2:], mode=mode, align_corners=False)
            return ((p + pos) ** 2).mean()

    torch._dynamo.reset()
    torch.manual_seed(0)
    m = PosEmbed()
    f = torch.compile(m, backend="symshape", dynamic=True)
    before = BACKEND_STATS.get("resizes_as_matmuls", 0)
    for h, w in ((4, 4), (20, 28), (52, 12), (44, 44)):  # patch grids 1x1, 5x7, 13x3, 11x11
        img = torch.randn(2, 3, h, w)
        f(img).backward()
        got = [p.grad.clone() for p in m.parameters()]
        m.zero_grad()
        m(img).backward()
        for a, p in zip(got, m.parameters()):
            torch.testing.assert_close(a, p.grad, atol=1e-5, rtol=1e-4)
        m.zero_grad()
    assert BACKEND_STATS.get("resizes_as_matmuls", 0) > before


@pytest.mark.parametrize("factors", [(2, 2), (4, 4), (2, 4), (8, 2)])
@pytest.mark.parametrize("h,w", [(1, 1), (3, 7), (13, 5)])
def test_nearest_repeat_equals_eager_values_and_gradients(factors, h, w):
    x = torch.randn(2, 3, h, w, dtype=torch.float64, requires_grad=True)
    got = nearest_repeat(x, factors)
    want = F.interpolate(x, scale_factor=factors, mode="nearest")
    g = torch.randn_like(want)
    assert torch.equal(got, want)
    torch.testing.assert_close(torch.autograd.grad(got, x, g)[0], torch.autograd.grad(want, x, g)[0])


def test_nearest_upsampling_by_two_leaves_no_index_put_in_the_backward():
    conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def fn(img):  # diffusers' Upsample2D: nearest by 2, then a convolution
        return conv(F.interpolate(img, scale_factor=2.0, mode="nearest")).square().mean()

    img = torch.randn(2, 3, 11, 7, requires_grad=True)
    ops, out = _joint_ops(fn, img)
    assert ops["rewritten"] == 1
    assert not any("index_put" in o for o in ops["bw"]), sorted(ops["bw"])
    torch.testing.assert_close(out, fn(img))
