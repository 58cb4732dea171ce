"""Where kernels store values only kernels read, and where they keep eager's layout.

Whisper's encoder adds positions to a convolution's output viewed transposed; eager's residual
sums then keep that layout through every layer.  symshape stores such internal values
contiguous (read along rows by the norms), and keeps eager's strides on what the program returns.
"""
import torch
import torch.nn.functional as F

import compiler
from compiler.ir import BufferKind, contiguous_strides


def residual_blocks(x, w, m1, m2, m3):
    h = x.permute(0, 2, 1) + w  # eager: the transposed layout of x
    for m in (m1, m2, m3):  # each sum is read by a norm and by the next sum
        h = h + F.layer_norm(h, (h.shape[-1],)) @ m
    return F.layer_norm(h, (h.shape[-1],)), h


SPECS = ("x: f32[B, D, T]", "w: f32[D]", "m1: f32[D, D]", "m2: f32[D, D]", "m3: f32[D, D]")


def _args(b, t, d=16):
    g = torch.Generator().manual_seed(b * 100 + t)
    return (torch.randn(b, d, t, generator=g), torch.randn(d, generator=g),
            *[torch.randn(d, d, generator=g) / 4 for _ in range(3)])


def test_an_internal_residual_stream_is_stored_contiguous_and_outputs_keep_eagers_strides():
    c = compiler.compile(residual_blocks, *SPECS, dims={"D": 16})
    for b, t in ((2, 9), (1, 7), (3, 1)):
        args = _args(b, t)
        got, ref = c(*args), residual_blocks(*args)
        for g, r in zip(got, ref):
            torch.testing.assert_close(g, r, atol=1e-4, rtol=1e-4)
            # what the program returns is laid out as eager's (a size-1 dim's stride is any)
            assert [st for st, n in zip(g.stride(), g.shape) if n > 1] == [
                st for st, n in zip(r.stride(), r.shape) if n > 1]
    assert residual_blocks(*_args(2, 9))[1].stride()[-1] != 1  # the stream is transposed in eager
    lp = c.variants[0].lp
    out_names = {o.value for o in lp.outputs if hasattr(o, "value")}
    stored = [b for b in lp.buffers.values() if b.kind is BufferKind.KERNEL and b.name not in out_names]
    sums = [b for b in stored if b.name.startswith("add")]
    assert sums, "the residual sums read twice are stored"
    assert all(b.strides == contiguous_strides(b.shape) for b in stored), [(b.name, b.strides) for b in stored]


def test_whispers_residual_stream_is_stored_contiguous_in_the_real_encoder():
    # transformers' Whisper encoder: conv -> GELU -> permute(0, 2, 1) + positions, then residual
    # sums that eager keeps transposed through every layer.
    from tests.attention_models import BY_NAME, last_hidden

    case = BY_NAME["whisper_encoder"]
    m = case.build().eval()
    c = compiler.compile(m, *case.specs)
    with torch.no_grad():
        for b in (1, 3):
            x = torch.randn(b, 8, 32, generator=torch.Generator().manual_seed(b))
            torch.testing.assert_close(last_hidden(c(x)), last_hidden(m(x)), atol=1e-5, rtol=1e-5)
    lp = c.variants[0].lp
    out_names = {o.value for o in lp.outputs if hasattr(o, "value")}
    sums = [b for b in lp.buffers.values() if b.kind is BufferKind.KERNEL and b.name not in out_names
            and b.name.startswith("add")]
    assert sums, "the residual sums read by a norm and the next sum are stored"
    assert all(b.strides == contiguous_strides(b.shape) for b in sums), [(b.name, b.strides) for b in sums]
