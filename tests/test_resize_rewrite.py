"""Resizing in the compiler's traces as the matmuls it equals (compiler.separable_resize.ResizeAsMatmuls).

``F.interpolate`` with bicubic or bilinear ``size=``, or nearest by 2/4/8, is traced as two
small matmuls (an expand) instead of torch's decomposition, whose sixteen gathers stay ATen
launches in the plan.  The compiled program must equal eager at every size, raise where eager
raises, and leave the program's own errors the program's.
"""
import warnings

import pytest
import torch
import torch.nn.functional as F

import compiler
import shapes
from compiler.separable_resize import ResizeAsMatmuls
from compiler.wrapper import ExternStep
from shapes.errors import TraceError


def _aten_names(cp) -> list:
    """The ATen (extern) calls of every variant ``cp`` compiled."""
    return [str(getattr(s.target, "__name__", s.target)) for v in cp.variants for s in v.plan
            if isinstance(s, ExternStep)]


def _pos_embed(mode):
    """A learned grid resized to the input's patch grid (HF ViT's interpolate_pos_encoding)."""
    grid = torch.randn(1, 8, 5, 5, generator=torch.Generator().manual_seed(0))

    def prog(x):
        h, w = x.shape[-2] // 4, x.shape[-1] // 4
        return x.mean((-2, -1))[:, :, None, None] + F.interpolate(grid, size=(h, w), mode=mode, align_corners=False)
    return prog


def _upsample(x):
    return F.interpolate(x, scale_factor=2.0, mode="nearest") * 2


@pytest.mark.parametrize("mode", ["bicubic", "bilinear"])
def test_resizes_to_symbolic_sizes_equal_eager_without_gathers(mode):
    prog = _pos_embed(mode)
    cp = compiler.compile(prog, "x: f32[B, 8, H, W]")
    for b, h, w in ((1, 4, 4), (2, 28, 12), (3, 52, 44), (1, 20, 20)):
        x = torch.randn(b, 8, h, w)
        torch.testing.assert_close(cp(x), prog(x), atol=1e-5, rtol=1e-5)
    names = _aten_names(cp)
    assert not any("index" in n for n in names), names


def test_nearest_upsampling_is_bit_equal_and_fused():
    cp = compiler.compile(_upsample, "x: f32[B, C, H, W]")
    for shape in ((1, 1, 1, 1), (2, 3, 7, 5), (1, 4, 13, 2)):
        x = torch.randn(*shape)
        assert torch.equal(cp(x), _upsample(x))
    assert not any("index" in n or "upsample" in n for n in _aten_names(cp))


def test_without_the_rewrite_the_plan_has_the_gathers(monkeypatch):
    """What the rewrite saves: torch's decomposition leaves gathers (ATen calls) in the plan."""
    monkeypatch.setenv("SYMSHAPE_RESIZE_REWRITE", "0")
    prog = _pos_embed("bicubic")
    cp = compiler.compile(prog, "x: f32[B, 8, H, W]")
    x = torch.randn(2, 8, 28, 12)
    torch.testing.assert_close(cp(x), prog(x), atol=1e-5, rtol=1e-5)
    assert sum("index" in n for n in _aten_names(cp)) >= 4


def test_an_empty_output_raises_as_eager_does():
    """H // 4 == 0 below H = 4: eager's interpolate raises; the matmuls would return an empty tensor."""
    prog = _pos_embed("bicubic")
    x = torch.randn(1, 8, 3, 8)
    with pytest.raises(RuntimeError, match="greater than 0"):
        prog(x)
    cp = compiler.compile(prog, "x: f32[B, 8, H, W]")
    ok = torch.randn(1, 8, 8, 8)
    torch.testing.assert_close(cp(ok), prog(ok), atol=1e-5, rtol=1e-5)
    with pytest.raises(Exception, match="greater than 0"):
        cp(x)


def test_the_programs_own_error_after_a_resize_stays_the_programs():
    def prog(x):
        y = F.interpolate(x, size=(6, 6), mode="bilinear")
        return y @ torch.ones(5, 2, device=x.device)  # 6 columns against 5 rows: eager raises

    with pytest.raises(TraceError) as e:
        shapes.trace(prog, "x: f32[B, 3, H, W]", function_modes=(ResizeAsMatmuls(),))
    assert "the program raised RuntimeError" in str(e.value) and "reduction dim" in str(e.value)

    def bad_call(x):
        return torch.cat([x, x[:, :, :1, :1]], dim=1)  # a torch error in a call the mode passes through

    with pytest.raises(TraceError) as e:
        shapes.trace(bad_call, "x: f32[B, 3, H, W]", function_modes=(ResizeAsMatmuls(),))
    assert "the program raised" in str(e.value)


def _hf_vit_compiled(image_size, patch_size):
    """(HF ViT's last hidden state at any image size, its compiled program)."""
    transformers = pytest.importorskip("transformers")
    conf = transformers.ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                                  image_size=image_size, patch_size=patch_size)
    conf._attn_implementation = "sdpa"
    torch.manual_seed(0)
    vit = transformers.ViTModel(conf, add_pooling_layer=False).eval()

    def prog(px):
        return vit(pixel_values=px, interpolate_pos_encoding=True).last_hidden_state

    return prog, compiler.compile(prog, "px: f32[B, 3, H, W]")


def _equal_eager_without_gathers(prog, cp, sizes):
    with torch.no_grad():
        for b, h, w in sizes:
            px = torch.randn(b, 3, h, w)
            torch.testing.assert_close(cp(px), prog(px), atol=1e-4, rtol=1e-4)
    assert not any("index" in n for n in _aten_names(cp))


def test_hf_vit_at_new_image_sizes_equals_eager_without_gathers():
    prog, cp = _hf_vit_compiled(image_size=32, patch_size=8)
    _equal_eager_without_gathers(prog, cp, ((2, 45, 45), (1, 8, 8), (1, 56, 40), (3, 104, 88)))


def test_hf_vit_general_trace_rewrites_at_small_example_grids():
    """The first trace's example sizes may give a tiny output grid (2 x 3): the rewrite depends on the
    input grid alone, so the variant serving every size has no gathers."""
    prog, cp = _hf_vit_compiled(image_size=224, patch_size=16)
    _equal_eager_without_gathers(prog, cp, ((1, 224, 224), (1, 333, 333), (1, 48, 48)))


def test_a_large_image_keeps_torchs_resize():
    """Two matmuls cost multiply-adds per output that grow with the input's sides: fine for a small
    grid, far more than bilinear's 4 taps for an image; such a call is traced as torch's op."""
    def big(x):
        return F.interpolate(x, size=(x.shape[-2] * 2, x.shape[-1] * 2), mode="bilinear")

    cp = compiler.compile(big, "x: f32[B, 3, H, W]", dims={"H": 96, "W": 96})
    x = torch.randn(1, 3, 96, 96)
    torch.testing.assert_close(cp(x), big(x), atol=1e-5, rtol=1e-5)
    assert any("index" in n for n in _aten_names(cp))


# Training steps: the training backend rewrites dynamo's graph (resize_as_matmuls) before AOTAutograd.

def _nearest_conv(m, h):
    return m.post(F.interpolate(h, scale_factor=2, mode="nearest"))


def _bicubic_quarter(m, h):
    return m.post(F.interpolate(h, size=(h.shape[-2] // 4, h.shape[-1] // 4), mode="bicubic", align_corners=False))


def _nearest_of_channels(m, h):
    return F.interpolate(h[:, : h.shape[-2] // 4], scale_factor=2, mode="nearest") * m.gain


def _bicubic_of_rows(m, h):
    return m.post(F.interpolate(h[:, :, : h.shape[-2] // 4], size=(5, 3), mode="bicubic", align_corners=False))


def _bilinear_of_channels(m, h):
    return F.interpolate(h[:, : h.shape[-2] // 4], size=(5, 3), mode="bilinear", align_corners=True) * m.gain


class _Step(torch.nn.Module):
    """A learned per-channel scale (which takes an empty plane, as eager's convs do not), ``resize(self, h)``,
    and parameters after it (a conv, or a gain): gradients flow through the resize's backward."""

    def __init__(self, resize):
        super().__init__()
        torch.manual_seed(0)
        self.scale = torch.nn.Parameter(torch.rand(1, 3, 1, 1) + 0.5)
        self.post = torch.nn.Conv2d(3, 4, 1)
        self.gain = torch.nn.Parameter(torch.tensor(1.5))
        self.resize = resize

    def forward(self, x):
        return self.resize(self, x * self.scale)


def _train_step(model, params, x):
    """(output, every parameter's gradient) of one step of ``model`` on ``x``, or what it raised."""
    for p in params:
        p.grad = None
    try:
        out = model(x)
        out.square().sum().backward()
    except Exception as e:  # noqa: BLE001 -- compared with what eager raised
        return e
    return out.detach(), [p.grad for p in params]


@pytest.mark.parametrize("resize", [_nearest_conv, _bicubic_quarter, _nearest_of_channels, _bicubic_of_rows,
                                    _bilinear_of_channels])
def test_training_steps_at_empty_planes_raise_as_eager_does(resize):
    """Where eager's resize refuses the sizes (an empty input or output plane, no channels), the compiled
    training step raises eager's error, never returns a tensor; elsewhere its values and gradients are eager's.

    torch's decomposition, which AOTAutograd records, lacks eager's checks: with no channels it returned an
    empty tensor, with an empty input plane it raised IndexError.  Where dynamo's own fake-tensor run of
    ``F.interpolate`` fails first (an empty output plane, or nearest's empty input: it divides by the
    size), it raises its TorchRuntimeError (a RuntimeError) before any backend sees the graph, as
    with ``backend="aot_eager"``: that error is torch's, and symshape's backend is never called."""
    from compiler.backend import BACKEND_STATS

    model = _Step(resize)
    params = list(model.parameters())
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="symshape", dynamic=True)
    refused = 0
    for shape in ((2, 3, 8, 8), (1, 3, 13, 9), (1, 3, 3, 8), (2, 3, 2, 9), (2, 3, 0, 5), (2, 3, 12, 16)):
        x = torch.randn(*shape)
        want = _train_step(model, params, x)
        graphs = BACKEND_STATS["graphs"]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = _train_step(compiled, params, x)
        # The program's own error is not reported as a graph symshape could not compile.
        assert not [w for w in caught if w.category.__name__ == "TrainingFallback"], (shape, caught[0].message)
        if isinstance(want, Exception):
            refused += 1
            assert isinstance(got, Exception), (shape, "a tensor where eager raises", want)
            if isinstance(got, torch._dynamo.exc.TorchRuntimeError) and "fake tensor" in str(got):
                assert BACKEND_STATS["graphs"] == graphs, shape  # dynamo's refusal, before the backend
                continue
            assert (type(got), str(got)) == (type(want), str(want)), shape
        else:
            assert not isinstance(got, Exception), (shape, got)
            torch.testing.assert_close(got[0], want[0], atol=1e-4, rtol=1e-4)
            for g, w in zip(got[1], want[1]):
                torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)
    assert refused, "no size was refused"
