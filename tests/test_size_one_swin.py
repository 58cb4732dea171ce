"""Swin with symbolic B, H, W: the window clamped to the resolution, and a batch of one.

Two defects of issue 9's zoo work: at H = W = 224 Swin-tiny's last stage has
a window of ``min(h, w)``, and a view whose layout question was answered at
the generic point raised "Cannot view a tensor" where eager runs; and the
pooler (``AdaptiveAvgPool1d`` of a transposed input) asked eager's C++
``suggest_memory_format`` through c10's SymInt operators, recording
``B > 1``.  A tiny config (image 56, two stages) has the same last stage.
Translation validation checks every decision of these traces.
"""
import itertools

import pytest
import sympy
import torch

import shapes
from shapes.functions import FloorDiv
from shapes.eager_checks.memory_format import adaptive_avg_pool2d
from tests.zoo_models import Wrapped

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

pytestmark = pytest.mark.translation_validation

SPEC = "pixel_values: f32[B, 3, H, W]"


def swin():
    torch.manual_seed(0)
    cfg = transformers.SwinConfig(image_size=56, patch_size=4, embed_dim=8, depths=[1, 1], num_heads=[1, 1],
                                  window_size=7)
    return Wrapped(transformers.SwinModel(cfg).eval(), ["pixel_values"]).eval()


def check_against_eager(tp, points):
    """Each point: accepted and equal to eager (a fresh model: Swin resizes its windows), or eager raises."""
    accepted = []
    for b, h, w in points:
        x = torch.randn(b, 3, h, w)
        with torch.no_grad():
            try:
                want, eager_error = swin()(x), None
            except Exception as e:  # eager's own verdict
                want, eager_error = None, e
            try:
                got = tp.run(x)
            except shapes.GuardViolation:
                continue
        assert eager_error is None, f"accepted {(b, h, w)} where eager raises {eager_error}"
        for g, e in zip(got, want):
            if isinstance(e, torch.Tensor):
                assert g.shape == e.shape
                torch.testing.assert_close(g, e, atol=1e-4, rtol=1e-4)
        accepted.append((b, h, w))
    return accepted


def test_swin_window_clamped_to_the_resolution_traces_and_matches_eager():
    # 56 -> stages of 14 and 7: the last window is min(h, w) = 7, no padding (224 for Swin-tiny).
    tp = shapes.trace(swin(), SPEC, dims={"B": 2, "H": 56, "W": 56})
    accepted = check_against_eager(tp, [(2, 56, 56), (3, 56, 56), (2, 84, 84), (2, 64, 64)])
    assert (2, 56, 56) in accepted and (3, 56, 56) in accepted


def test_swin_with_padded_last_stage_traces_and_matches_eager():
    # 64 -> stages of 16 and 8: the last stage pads 8 to 14 (256 for Swin-tiny).
    tp = shapes.trace(swin(), SPEC, dims={"B": 2, "H": 64, "W": 64})
    accepted = check_against_eager(tp, [(2, 64, 64), (3, 64, 64), (2, 56, 56)])
    assert (2, 64, 64) in accepted and (3, 64, 64) in accepted


def _windows_round_trip(x):
    # Swin's last stage in miniature: the window clamped to min(h, w), w padded to a
    # multiple of it, windows out and back.  At h == w the window count is 1.
    b, h, w, c = x.shape
    ws = min(h, w)
    pad_r = (ws - w % ws) % ws
    x = torch.nn.functional.pad(x, (0, 0, 0, pad_r))
    wp = w + pad_r
    win = x.view(b, h // ws, ws, wp // ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, c) * 2
    y = win.view(b, h // ws, wp // ws, ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h, wp, c)
    return y[:, :, :w, :].contiguous().view(b, h * w, c)


def test_a_window_count_fixed_by_a_guard_is_written_as_its_value():
    # Once a guard fixes the window count (w + h - 1) // h to 1, the engine writes it as 1:
    # no later question holds it, so no later guard does (main before this: 7 more guards,
    # and Swin-tiny at 224 spent most of its trace on such questions).
    tp = shapes.trace(_windows_round_trip, "x: f32[B, H, W, 8]", dims={"B": 2, "H": 7, "W": 7})
    B, H, W = (tp.symbol(n) for n in "BHW")
    count = FloorDiv(W + H - 1, H)
    assert tp.env.simplify(count) == 1
    (fixing,) = [i for i, g in enumerate(tp.guards) if g.expr == sympy.Eq(B * count, B)]
    assert not any(g.expr.has(FloorDiv) for g in tp.guards[fixing + 1:]), tp.guards
    assert len(tp.guards) <= 3, tp.guards
    for b, h, w in [(2, 7, 7), (3, 5, 5), (1, 8, 8), (2, 7, 9), (2, 9, 7), (2, 7, 14)]:
        x = torch.randn(b, h, w, 8)
        try:
            want, eager_error = _windows_round_trip(x), None
        except RuntimeError as e:
            want, eager_error = None, e
        try:
            got = tp.run(x)
        except shapes.GuardViolation:
            continue
        assert eager_error is None, f"accepted {(b, h, w)} where eager raises {eager_error}"
        torch.testing.assert_close(got, want)


def test_swin_traced_at_batch_two_accepts_batch_one():
    tp = shapes.trace(swin(), SPEC, dims={"B": 2, "H": 56, "W": 56})
    # Guards may mention B where it multiplies a window count; none is about B alone (`B > 1`).
    assert not any(set(map(str, g.expr.free_symbols)) == {"B"} for g in tp.guards), tp.guards
    assert (1, 56, 56) in check_against_eager(tp, [(1, 56, 56)])


def test_pooling_a_transposed_input_records_no_size_guard():
    pool = torch.nn.AdaptiveAvgPool1d(1)

    def f(x):
        return pool(x.transpose(1, 2))

    tp = shapes.trace(f, "x: f32[B, L, 8]", dims={"B": 2, "L": 5})
    assert tp.guards == []
    for b, length in [(1, 5), (2, 1), (1, 1), (3, 4)]:
        x = torch.randn(b, length, 8)
        got, want = tp.run(x), f(x)
        assert got.shape == want.shape
        torch.testing.assert_close(got, want)


def test_adaptive_avg_pool2d_port_has_eager_shapes_strides_and_values():
    # Every permutation of inputs with dims of size 1: the memory format eager picks is the port's.
    for shape in [(2, 8, 1, 5), (1, 8, 1, 5), (2, 8, 1, 1), (1, 1, 1, 1), (2, 1, 3, 4), (2, 3, 4, 5)]:
        base = torch.randn(*shape)
        for perm in itertools.permutations(range(4)):
            x = base.permute(*perm)
            for size in ([1, 1], [2, 1]):
                got, want = adaptive_avg_pool2d(x, size), torch.ops.aten.adaptive_avg_pool2d.default(x, size)
                assert (got.shape, got.stride()) == (want.shape, want.stride()), (shape, perm, size)
                torch.testing.assert_close(got, want)


def _merge_a_window_count_of_one(x):
    # Swin's last-stage window count is (w + h - 1) // h, 1 at the example: merging it
    # with h after a permute is a view exactly where that count is 1.
    b, h, w = x.shape
    y = x.new_zeros(b, h, w // h, 3)
    return y.permute(0, 2, 1, 3).view(b, h * (w // h), 3)


def test_an_error_after_a_layout_answer_against_the_example_is_symshapes_limit(monkeypatch):
    # Were the view's collapse check taken for reshape's again (the defect fixed here), the
    # generic answer would make the view fail where eager runs: that must be symshape's
    # TracerLimitation, never a TraceError blaming the program.  (Swin itself no longer
    # asks it: a guard fixes its window count to 1 before the view, and the engine then
    # writes the count as 1.)
    from shapes import size_oblivious
    tp = shapes.trace(_merge_a_window_count_of_one, "x: f32[B, H, W]", dims={"B": 2, "H": 4, "W": 4})
    x = torch.randn(2, 4, 7)
    assert tp.run(x).shape == _merge_a_window_count_of_one(x).shape
    monkeypatch.setattr(size_oblivious, "_copy_allowed", lambda frame: True)
    with pytest.raises(shapes.TracerLimitation, match="layout question") as info:
        shapes.trace(_merge_a_window_count_of_one, "x: f32[B, H, W]", dims={"B": 2, "H": 4, "W": 4})
    assert not isinstance(info.value, shapes.TraceError)
