"""Real diffusers models from tiny hand-written configs: symshape vs torch.export (Dim.AUTO) vs eager.

The diffusers counterpart of ``bench/hf_sweep.py``.  diffusers has no registry of
configs to shrink automatically, so each case below builds one model class people
compile (UNets, VAEs, DiT-family transformers, ControlNet, ...) from a tiny config
(small channels, 1 layer per block, 2 heads, small norm groups) and names its
inputs as symshape specs, with every size the model lets vary symbolic: batch
``B``, latent/pixel ``H`` and ``W`` (or a length ``L``), text sequence ``S``.
Then, like the transformers sweep:

* it traces the case with symshape (``shapes.trace``) and with ``torch.export`` at
  ``Dim.AUTO`` (non-strict), each timed;
* at 3 sizes it compares eager with symshape's ``.run`` (guards checked first: a
  size the guards refuse is *refused*, never run) and with the exported program.

The 3 sizes include one the model rejects where it has a constraint (an odd
latent for a 2x2 patch embedding, a text length other than the prior's fixed
one): symshape must refuse it through its guards, not run it.

Outcomes per size: ``= eager``, ``refused``, ``WRONG SHAPE``, ``MISMATCH``,
``ACCEPTED where eager fails``, ``run error``.  The acceptance checks printed at
the end are hf_sweep's: symshape traces every case torch.export traces; 0 wrong
shapes; 0 sizes accepted where eager fails; 0 ``.run`` errors where eager runs;
the trace time ratio.

Usage::

    python bench/diffusers_sweep.py                              # every case
    python bench/diffusers_sweep.py --only unet2d_cond,flux --timeout 60
    python bench/diffusers_sweep.py --out bench/results/diffusers_sweep_cpu.txt
    python bench/diffusers_sweep.py --list                       # the cases and their specs
"""
from __future__ import annotations

import argparse
import gc
import io
import os
import sys
import warnings
from dataclasses import dataclass, field
from typing import Callable

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import shapes  # noqa: E402
from bench.hf_sweep import Row, _both_traced, _close, conformance_lines, _err, _shapes_agree, _trace_export, _trace_symshape  # noqa: E402
from validation.dinfer.limits import TraceTimeout, time_limit  # noqa: E402


@dataclass
class Case:
    """One model class at a tiny config.

    ``build()`` returns the model; ``call(model, *tensors)`` runs it on the inputs
    ``specs`` name, in order, and returns its tensors.  ``fill`` gives an input's
    values where random normals would be wrong: ``(lo, hi)``, uniform floats in
    ``[lo, hi)`` or integers in ``lo..hi``.  ``points``: 3 sizes to compare at
    (the first is also the example the tracers see).
    """

    name: str
    model: str
    build: Callable
    call: Callable
    specs: tuple
    points: list
    fill: dict = field(default_factory=dict)


class Call(torch.nn.Module):
    """``case.call(model, *tensors)`` as a module: what both tracers and eager run."""

    def __init__(self, model, call):
        super().__init__()
        self.model, self.call = model, call

    def forward(self, *tensors):
        return self.call(self.model, *tensors)


def _d():
    import diffusers
    torch.manual_seed(0)
    return diffusers


# -- tiny configs ------------------------------------------------------------------------
def unet2d_cond():
    return _d().UNet2DConditionModel(
        sample_size=16, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(16, 32),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=16, attention_head_dim=8, norm_num_groups=4)


def unet2d():
    return _d().UNet2DModel(
        sample_size=16, in_channels=3, out_channels=3, layers_per_block=1, block_out_channels=(8, 16),
        norm_num_groups=4, down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D"), attention_head_dim=8)


def vae_kl():
    return _d().AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=4, norm_num_groups=4, block_out_channels=(8, 16),
        layers_per_block=1, down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2)


def vq():
    return _d().VQModel(
        in_channels=3, out_channels=3, latent_channels=4, norm_num_groups=4, block_out_channels=(8, 16),
        layers_per_block=1, down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
        num_vq_embeddings=32)


def vae_tiny():
    return _d().AutoencoderTiny(
        encoder_block_out_channels=(8, 8), decoder_block_out_channels=(8, 8), num_encoder_blocks=(1, 1),
        num_decoder_blocks=(1, 1), latent_channels=4)


def transformer2d():
    # continuous input (a conv-free latent of 8 channels) with cross attention
    return _d().Transformer2DModel(num_attention_heads=2, attention_head_dim=8, in_channels=8, norm_num_groups=4,
                                   cross_attention_dim=16)


def dit():
    return _d().DiTTransformer2DModel(num_attention_heads=2, attention_head_dim=8, in_channels=4, num_layers=1,
                                      sample_size=8, patch_size=2, num_embeds_ada_norm=10)


def pixart():
    return _d().PixArtTransformer2DModel(num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=8,
                                         num_layers=1, sample_size=8, patch_size=2, cross_attention_dim=16,
                                         caption_channels=16)


def sd3():
    return _d().SD3Transformer2DModel(sample_size=8, patch_size=2, in_channels=4, out_channels=4, num_layers=1,
                                      attention_head_dim=8, num_attention_heads=2, joint_attention_dim=16,
                                      caption_projection_dim=16, pooled_projection_dim=8, pos_embed_max_size=16)


def flux():
    return _d().FluxTransformer2DModel(patch_size=1, in_channels=8, num_layers=1, num_single_layers=1,
                                       attention_head_dim=8, num_attention_heads=2, joint_attention_dim=16,
                                       pooled_projection_dim=8, axes_dims_rope=(2, 2, 4))


def controlnet():
    return _d().ControlNetModel(
        in_channels=4, block_out_channels=(16, 32), layers_per_block=1, norm_num_groups=4, cross_attention_dim=16,
        attention_head_dim=8, down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        conditioning_embedding_out_channels=(4, 8))


def unet1d():
    # the Fourier time embedding (2 x 32 channels) is concatenated to the input: extra_in_channels=64
    return _d().UNet1DModel(
        in_channels=2, out_channels=2, extra_in_channels=64, block_out_channels=(32, 32, 64), norm_num_groups=8,
        layers_per_block=1,  # the 1D attention blocks have channels // 32 heads: 32 channels at least
        down_block_types=("DownBlock1DNoSkip", "DownBlock1D", "AttnDownBlock1D"),
        up_block_types=("AttnUpBlock1D", "UpBlock1D", "UpBlock1DNoSkip"))


def prior():
    return _d().PriorTransformer(num_attention_heads=2, attention_head_dim=8, num_layers=1, embedding_dim=16,
                                 num_embeddings=6, additional_embeddings=4)


def lumina2():
    return _d().Lumina2Transformer2DModel(
        sample_size=8, patch_size=2, in_channels=4, hidden_size=32, num_layers=1, num_refiner_layers=1,
        num_attention_heads=2, num_kv_heads=1, multiple_of=16, axes_dim_rope=(4, 6, 6), axes_lens=(64, 32, 32),
        cap_feat_dim=16)


def sana():
    return _d().SanaTransformer2DModel(
        in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=8, num_layers=1,
        num_cross_attention_heads=2, cross_attention_head_dim=8, cross_attention_dim=16, caption_channels=16,
        sample_size=8, patch_size=1)


def wan():
    return _d().WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=8, in_channels=4,
                                      out_channels=4, text_dim=16, freq_dim=16, ffn_dim=32, num_layers=1,
                                      rope_max_seq_len=32)


def auraflow():
    return _d().AuraFlowTransformer2DModel(sample_size=8, patch_size=2, in_channels=4, num_mmdit_layers=1,
                                           num_single_dit_layers=1, attention_head_dim=8, num_attention_heads=2,
                                           joint_attention_dim=16, caption_projection_dim=16, out_channels=4,
                                           pos_embed_max_size=64)


def cogvideox():
    return _d().CogVideoXTransformer3DModel(
        num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=4, time_embed_dim=8,
        text_embed_dim=16, num_layers=1, sample_width=8, sample_height=8, sample_frames=9, patch_size=2,
        temporal_compression_ratio=4, max_text_seq_length=8)


def qwenimage():
    return _d().QwenImageTransformer2DModel(patch_size=2, in_channels=16, out_channels=4, num_layers=1,
                                            attention_head_dim=8, num_attention_heads=2, joint_attention_dim=16,
                                            axes_dims_rope=(2, 2, 4))


def ltx():
    return _d().LTXVideoTransformer3DModel(in_channels=8, out_channels=8, num_attention_heads=2, attention_head_dim=8,
                                           cross_attention_dim=16, num_layers=1, caption_channels=16)


def svd():
    return _d().UNetSpatioTemporalConditionModel(
        sample_size=8, in_channels=8, out_channels=4, layers_per_block=1, block_out_channels=(32, 64),  # 32 groups
        down_block_types=("CrossAttnDownBlockSpatioTemporal", "DownBlockSpatioTemporal"),
        up_block_types=("UpBlockSpatioTemporal", "CrossAttnUpBlockSpatioTemporal"), addition_time_embed_dim=4,
        projection_class_embeddings_input_dim=12, cross_attention_dim=16, num_attention_heads=(2, 2))


def hunyuan_video():
    return _d().HunyuanVideoTransformer3DModel(
        in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=8, num_layers=1, num_single_layers=1,
        num_refiner_layers=1, patch_size=2, patch_size_t=1, text_embed_dim=16, pooled_projection_dim=8,
        rope_axes_dim=(2, 2, 4), guidance_embeds=False)


# -- cases -------------------------------------------------------------------------------
_T = {"timestep": (0.0, 1000.0)}
_T01 = {"timestep": (0.0, 1.0)}  # flow-matching transformers take t in [0, 1) (Flux scales it by 1000)
_IMG3 = [{"B": 2, "H": 16, "W": 24}, {"B": 3, "H": 8, "W": 16}, {"B": 1, "H": 12, "W": 20}]
# 2x2 patches: an odd latent size (the third point) is one the model cannot patchify.
_LAT = [{"B": 2, "H": 8, "W": 12}, {"B": 3, "H": 6, "W": 10}, {"B": 1, "H": 7, "W": 8}]
_LAT_S = [{"B": 2, "H": 8, "W": 12, "S": 5}, {"B": 3, "H": 6, "W": 10, "S": 7}, {"B": 1, "H": 7, "W": 8, "S": 3}]
# UNets with one 2x downsampling: even and odd latents both run (conv stride 2 + interpolate to the skip's size)
_UNET_S = [{"B": 2, "H": 8, "W": 12, "S": 5}, {"B": 3, "H": 6, "W": 10, "S": 7}, {"B": 1, "H": 7, "W": 9, "S": 3}]


def _sample(out):
    return out.sample


CASES = [
    Case("unet2d_cond", "UNet2DConditionModel", unet2d_cond,
         lambda m, x, t, e: m(x, t, e).sample,
         ("sample: f32[B, 4, H, W]", "timestep: f32[B]", "encoder_hidden_states: f32[B, S, 16]"), _UNET_S, _T),
    Case("unet2d", "UNet2DModel", unet2d, lambda m, x, t: m(x, t).sample,
         ("sample: f32[B, 3, H, W]", "timestep: f32[B]"), _IMG3, _T),
    Case("vae_kl_encode", "AutoencoderKL", vae_kl, lambda m, x: m.encode(x).latent_dist.mode(),
         ("sample: f32[B, 3, H, W]",), _IMG3),
    Case("vae_kl_decode", "AutoencoderKL", vae_kl, lambda m, z: m.decode(z).sample,
         ("z: f32[B, 4, H, W]",), _LAT),
    Case("vq", "VQModel", vq, lambda m, x: m(x).sample, ("sample: f32[B, 3, H, W]",), _IMG3),
    Case("vae_tiny", "AutoencoderTiny", vae_tiny, lambda m, x: m(x).sample, ("sample: f32[B, 3, H, W]",), _IMG3),
    Case("transformer2d", "Transformer2DModel", transformer2d, lambda m, x, e: m(x, e).sample,
         ("hidden_states: f32[B, 8, H, W]", "encoder_hidden_states: f32[B, S, 16]"), _LAT_S),
    Case("dit", "DiTTransformer2DModel", dit, lambda m, x, t, c: m(x, t, c).sample,
         ("hidden_states: f32[B, 4, H, W]", "timestep: i64[B] in 0..999", "class_labels: i64[B] in 0..9"), _LAT,
         {"timestep": (0, 999), "class_labels": (0, 9)}),
    Case("pixart", "PixArtTransformer2DModel", pixart,
         lambda m, x, e, t: m(x, e, t, added_cond_kwargs={"resolution": None, "aspect_ratio": None}).sample,
         ("hidden_states: f32[B, 4, H, W]", "encoder_hidden_states: f32[B, S, 16]", "timestep: f32[B]"), _LAT_S, _T),
    Case("sd3", "SD3Transformer2DModel", sd3, lambda m, x, e, p, t: m(x, e, p, t).sample,
         ("hidden_states: f32[B, 4, H, W]", "encoder_hidden_states: f32[B, S, 16]", "pooled_projections: f32[B, 8]",
          "timestep: f32[B]"), _LAT_S, _T),
    # Flux takes packed latents [B, L, C] with their ids [L, 3] and the text's ids [S, 3].
    Case("flux", "FluxTransformer2DModel", flux, lambda m, x, e, p, t, ii, ti: m(x, e, p, t, ii, ti).sample,
         ("hidden_states: f32[B, L, 8]", "encoder_hidden_states: f32[B, S, 16]", "pooled_projections: f32[B, 8]",
          "timestep: f32[B]", "img_ids: f32[L, 3]", "txt_ids: f32[S, 3]"),
         [{"B": 2, "L": 24, "S": 5}, {"B": 3, "L": 16, "S": 7}, {"B": 1, "L": 9, "S": 3}],
         {**_T01, "img_ids": (0.0, 8.0), "txt_ids": (0.0, 1.0)}),
    # The control image is at 2x the latent (the tiny conditioning embedding downsamples once).
    Case("controlnet", "ControlNetModel", controlnet,
         lambda m, x, t, e, c: (lambda o: (*o.down_block_res_samples, o.mid_block_res_sample))(m(x, t, e, c)),
         ("sample: f32[B, 4, H, W]", "timestep: f32[B]", "encoder_hidden_states: f32[B, S, 16]",
          "controlnet_cond: f32[B, 3, 2*H, 2*W]"), _UNET_S, _T),
    Case("unet1d", "UNet1DModel", unet1d, lambda m, x, t: m(x, t).sample,
         ("sample: f32[B, 2, L]", "timestep: f32[B]"), [{"B": 2, "L": 32}, {"B": 3, "L": 16}, {"B": 1, "L": 24}], _T),
    # The prior's positional embedding has room for num_embeddings = 6 text tokens: S = 6 only.
    Case("prior", "PriorTransformer", prior, lambda m, x, t, p, e: m(x, t, p, e).predicted_image_embedding,
         ("hidden_states: f32[B, 16]", "timestep: f32[B]", "proj_embedding: f32[B, 16]",
          "encoder_hidden_states: f32[B, S, 16]"),
         [{"B": 2, "S": 6}, {"B": 3, "S": 6}, {"B": 1, "S": 7}], _T),
    Case("lumina2", "Lumina2Transformer2DModel", lumina2, lambda m, x, t, e, k: m(x, t, e, k).sample,
         ("hidden_states: f32[B, 4, H, W]", "timestep: f32[B]", "encoder_hidden_states: f32[B, S, 16]",
          "encoder_attention_mask: i64[B, S] in 1..1"), _LAT_S, {**_T01, "encoder_attention_mask": (1, 1)}),
    Case("sana", "SanaTransformer2DModel", sana, lambda m, x, e, t: m(x, e, t).sample,
         ("hidden_states: f32[B, 4, H, W]", "encoder_hidden_states: f32[B, S, 16]", "timestep: f32[B]"),
         [{"B": 2, "H": 8, "W": 12, "S": 5}, {"B": 3, "H": 6, "W": 10, "S": 7}, {"B": 1, "H": 7, "W": 9, "S": 3}], _T),
    # video latents [B, C, F, H, W]
    Case("wan", "WanTransformer3DModel", wan, lambda m, x, t, e: m(x, t, e).sample,
         ("hidden_states: f32[B, 4, F, H, W]", "timestep: f32[B]", "encoder_hidden_states: f32[B, S, 16]"),
         [{"B": 2, "F": 3, "H": 8, "W": 12, "S": 5}, {"B": 3, "F": 2, "H": 6, "W": 10, "S": 7},
          {"B": 1, "F": 1, "H": 7, "W": 8, "S": 3}], _T),
    Case("auraflow", "AuraFlowTransformer2DModel", auraflow, lambda m, x, e, t: m(x, e, t).sample,
         ("hidden_states: f32[B, 4, H, W]", "encoder_hidden_states: f32[B, S, 16]", "timestep: f32[B]"), _LAT_S, _T),
    # CogVideoX takes [B, F, C, H, W] latents; its sincos positions hold max_text_seq_length = 8 text tokens: S = 8
    Case("cogvideox", "CogVideoXTransformer3DModel", cogvideox, lambda m, x, e, t: m(x, e, t).sample,
         ("hidden_states: f32[B, F, 4, H, W]", "encoder_hidden_states: f32[B, S, 16]", "timestep: f32[B]"),
         [{"B": 2, "F": 3, "H": 8, "W": 12, "S": 8}, {"B": 3, "F": 2, "H": 6, "W": 10, "S": 8},
          {"B": 1, "F": 1, "H": 7, "W": 8, "S": 3}], _T),
    # Qwen-Image takes packed latents [B, H*W, C] and their grid as Python ints: a size-only
    # `grid: f32[H, W]` input carries H and W (symbolic) into img_shapes.  img_shapes is a list with
    # one entry per sample, so B is specialized (B == 2); the model's int(max text length) fixes S too.
    Case("qwenimage", "QwenImageTransformer2DModel", qwenimage,
         lambda m, x, e, k, t, g: m(x, e, k, t, img_shapes=[(1, g.shape[0], g.shape[1])] * x.shape[0]).sample,
         ("hidden_states: f32[B, H*W, 16]", "encoder_hidden_states: f32[B, S, 16]",
          "encoder_hidden_states_mask: i64[B, S] in 1..1", "timestep: f32[B]", "grid: f32[H, W]"),
         [{"B": 2, "H": 4, "W": 6, "S": 5}, {"B": 3, "H": 3, "W": 5, "S": 7}, {"B": 1, "H": 4, "W": 4, "S": 3}],
         {**_T01, "encoder_hidden_states_mask": (1, 1)}),
    # LTX-Video: packed latents [B, F*H*W, C], with F, H, W given as ints (here: from a size-only input)
    Case("ltx", "LTXVideoTransformer3DModel", ltx,
         lambda m, x, e, t, k, g: m(x, e, t, k, num_frames=g.shape[0], height=g.shape[1], width=g.shape[2]).sample,
         ("hidden_states: f32[B, F*H*W, 8]", "encoder_hidden_states: f32[B, S, 16]", "timestep: f32[B]",
          "encoder_attention_mask: i64[B, S] in 1..1", "grid: f32[F, H, W]"),
         [{"B": 2, "F": 2, "H": 4, "W": 6, "S": 5}, {"B": 3, "F": 3, "H": 3, "W": 5, "S": 7},
          {"B": 1, "F": 1, "H": 4, "W": 4, "S": 3}], {**_T, "encoder_attention_mask": (1, 1)}),
    # Stable Video Diffusion: frames folded into the batch ([B, F, C, H, W]), 3 added time ids per clip
    Case("svd", "UNetSpatioTemporalConditionModel", svd, lambda m, x, t, e, a: m(x, t, e, a).sample,
         ("sample: f32[B, F, 8, H, W]", "timestep: f32[B]", "encoder_hidden_states: f32[B, 1, 16]",
          "added_time_ids: f32[B, 3]"),
         [{"B": 2, "F": 3, "H": 8, "W": 12}, {"B": 3, "F": 2, "H": 6, "W": 10}, {"B": 1, "F": 4, "H": 7, "W": 9}], _T),
    Case("hunyuan_video", "HunyuanVideoTransformer3DModel", hunyuan_video,
         lambda m, x, t, e, k, p: m(x, t, e, k, p).sample,
         ("hidden_states: f32[B, 4, F, H, W]", "timestep: f32[B]", "encoder_hidden_states: f32[B, S, 16]",
          "encoder_attention_mask: i64[B, S] in 1..1", "pooled_projections: f32[B, 8]"),
         [{"B": 2, "F": 3, "H": 8, "W": 12, "S": 5}, {"B": 3, "F": 2, "H": 6, "W": 10, "S": 7},
          {"B": 1, "F": 1, "H": 7, "W": 8, "S": 3}], {**_T, "encoder_attention_mask": (1, 1)}),
]


def make_inputs(case: Case, point: dict, seed: int = 0) -> list:
    """Random inputs of ``case`` at ``point`` (the values ``case.fill`` gives, else normals)."""
    from shapes.spec import parse_specs
    g = torch.Generator().manual_seed(seed)
    parsed, _ = parse_specs(case.specs)
    out = []
    for s in parsed:
        shape = [d if isinstance(d, int) else (point[d] if isinstance(d, str) else d.evaluate(point)) for d in s.dims]
        lo_hi = case.fill.get(s.name)
        if s.dtype.is_floating_point:
            t = torch.randn(shape, generator=g)
            if lo_hi is not None:
                t = lo_hi[0] + (lo_hi[1] - lo_hi[0]) * torch.rand(shape, generator=g)
        else:
            lo, hi = lo_hi if lo_hi is not None else (0, 63)
            t = torch.randint(lo, hi + 1, shape, generator=g, dtype=s.dtype)
        out.append(t)
    return out


# -- one case ----------------------------------------------------------------------------
def sweep_one(case: Case, timeout: float) -> Row:
    """One case's row; ``timeout`` limits each step (the eager call, each trace, each size) apart."""
    row = Row(model_type=case.name, model=case.model, inputs="; ".join(case.specs), config="tiny")
    try:
        _sweep(row, case, timeout)
    except TraceTimeout:
        row.status = row.status or "timeout"
        row.note = f"a step ran over {timeout:g} s"
    except Exception as e:  # noqa: BLE001 -- a process boundary: one row per case
        row.status = row.status or f"sweep error: {_err(e)}"
        row.note = str(e).splitlines()[0][:120] if str(e) else ""
    return row


def _sweep(row, case, timeout):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = Call(case.build().eval(), case.call)
    dims = dict(case.points[0])
    ex_inputs = make_inputs(case, dims)
    try:
        with torch.no_grad(), time_limit(timeout):
            prog(*ex_inputs)
    except TraceTimeout:
        raise
    except Exception as e:  # noqa: BLE001 -- the config is hand-written; say so rather than sweep on
        row.status, row.note = "eager fails at the example", f"{_err(e)}: {str(e).strip()[:100]}"
        return
    # Alternate which tracer goes first, so that neither always meets the model cold.
    order = (_trace_symshape, _trace_export) if sum(map(ord, case.name)) % 2 else (_trace_export, _trace_symshape)
    found = {}
    for step in order:
        gc.collect()
        found.update(step(row, prog, case.specs, dims, ex_inputs, timeout))
    tp, ep = found.get("tp"), found.get("ep")
    if tp is not None:
        GUARDS[case.name] = _guard_texts(tp)
    for point in case.points:
        with time_limit(timeout):
            _check_point(row, case, prog, tp, ep, point)
    bad = row.wrong_shapes + row.accepted_eager_fails + row.run_errors + row.mismatches
    row.status = f"symshape: {row.symshape}" if tp is None else ("WRONG" if bad else "ok")


def _check_point(row, case, prog, tp, ep, point):
    x = make_inputs(case, point, seed=1)
    try:
        with torch.no_grad():
            ref = prog(*x)
        eager = "runs"
    except Exception as e:  # noqa: BLE001 -- the model's own refusal is an outcome
        ref, eager = None, f"fails ({_err(e)})"
    sym = "-"
    if tp is not None:
        sym = _symshape_at(row, tp, x, ref, point)
    exp = "-"
    if ep is not None:
        try:
            with torch.no_grad():
                got = ep.module()(*x)
            exp = "= eager" if ref is not None and _close(got, ref) else ("runs, eager fails" if ref is None else "MISMATCH")
        except Exception as e:  # noqa: BLE001 -- export's refusal is an outcome
            exp = f"refused ({_err(e)})"
    row.sizes.append((point, eager, sym, exp))


def _symshape_at(row, tp, x, ref, point) -> str:
    """symshape's outcome at ``point`` (counted into ``row``): guards first, then ``.run``."""
    if tp.failing_guards(point):
        return "refused"
    if ref is None:
        row.accepted_eager_fails += 1
        return "ACCEPTED where eager fails"
    try:
        with torch.no_grad():
            got = tp.run(*x)
    except shapes.GuardViolation:
        return "refused"
    except Exception as e:  # noqa: BLE001 -- any other error of .run where eager ran is a finding
        row.run_errors += 1
        row.note = row.note or f".run at {point}: {_err(e)}: {str(e).strip()[:100]}"
        return f"run error ({_err(e)})"
    if not _shapes_agree(tp, got, ref, point):
        row.wrong_shapes += 1
        return "WRONG SHAPE"
    if not _close(got, ref):
        row.mismatches += 1
        return "MISMATCH"
    return "= eager"


# -- report ------------------------------------------------------------------------------
def table(rows) -> str:
    out = io.StringIO()
    out.write(f"{'case':<14} {'model':<27} {'symshape':<16} {'sym s':>6}  {'export':<16} {'exp s':>6} {'ratio':>6}  "
              f"{'sizes (symshape)':<34} status\n")
    for r in rows:
        ss = f"{r.symshape_s:.2f}" if r.symshape_s is not None else "-"
        es = f"{r.export_s:.2f}" if r.export_s is not None else "-"
        ratio = f"{r.symshape_s / r.export_s:.2f}" if _both_traced(r) and r.export_s else "-"
        per = ", ".join(_short(s) for _, _, s, _ in r.sizes) or "-"
        out.write(f"{r.model_type:<14} {r.model:<27} {r.symshape or '-':<16} {ss:>6}  {r.export or '-':<16} "
                  f"{es:>6} {ratio:>6}  {per:<34} {r.status}{('  ' + r.note) if r.note and r.status != 'ok' else ''}\n")
    return out.getvalue()


def _short(outcome: str) -> str:
    return {"= eager": "=", "refused": "refused"}.get(outcome, outcome)


def summary(rows) -> str:
    built = [r for r in rows if r.symshape or r.export]
    refused = sum(s == "refused" for r in rows for _, _, s, _ in r.sizes)
    refused_eager_runs = sum(s == "refused" and e == "runs" for r in rows for _, e, s, _ in r.sizes)
    head = f"cases: {len(rows)} ({len({r.model for r in rows})} model classes); built and run by eager: {len(built)}"
    extra = (f"sizes refused by symshape's guards: {refused} ({refused_eager_runs} of them where eager runs: "
             f"a specialization, not an error)",)
    return "\n".join([head, *conformance_lines(rows, built, extra)]) + "\n"


# Each traced case's guards and runtime asserts, rendered: what symshape found the model needs.
GUARDS: dict[str, list[str]] = {}


def _guard_texts(tp) -> list[str]:
    import guards
    return [guards.render_guard(g, tp.env) for g in (*tp.guards, *tp.runtime_asserts)]


def guards_text(rows) -> str:
    out = io.StringIO()
    for r in rows:
        if r.model_type in GUARDS:
            items = GUARDS[r.model_type]
            out.write(f"  {r.model_type}: {'; '.join(items) if items else '(none)'}\n")
    return out.getvalue()


def per_size(rows) -> str:
    out = io.StringIO()
    for r in rows:
        for point, eager, sym, exp in r.sizes:
            out.write(f"  {r.model_type} {point}: {eager} | {sym} | {exp}\n")
    return out.getvalue()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated case names")
    ap.add_argument("--timeout", type=float, default=180.0,
                    help="seconds per step of a case (the eager call, each trace, each size)")
    ap.add_argument("--out", help="also write the table, summary and per-size outcomes to this file")
    ap.add_argument("--list", action="store_true", help="list the cases and their specs, sweep nothing")
    args = ap.parse_args(argv)
    cases = [c for c in CASES if not args.only or c.name in args.only.split(",")]
    if args.list:
        for c in cases:
            print(f"{c.name:<14} {c.model:<27} {'; '.join(c.specs)}")
        return 0
    import diffusers
    diffusers.utils.logging.set_verbosity_error()
    rows = []
    for i, case in enumerate(cases):
        r = sweep_one(case, args.timeout)
        rows.append(r)
        print(f"[{i + 1}/{len(cases)}] {case.name}: {r.status} (symshape {r.symshape or '-'} "
              f"{r.symshape_s or 0:.1f}s, export {r.export or '-'} {r.export_s or 0:.1f}s) {r.note}",
              file=sys.stderr, flush=True)
    text = table(rows) + "\n" + summary(rows) + ("\nsymshape's guards and runtime asserts per case:\n" + guards_text(rows)
                                           + "\nper size (sizes: eager | symshape | torch.export):\n" + per_size(rows))
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(f"# python bench/diffusers_sweep.py {' '.join(argv or sys.argv[1:])}: torch {torch.__version__}, "
                    f"diffusers {diffusers.__version__}\n\n{text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
