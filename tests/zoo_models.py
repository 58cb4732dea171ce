"""The model zoo: tiny random transformers/diffusers models, their input specs and sizes.

Each :class:`ZooCase` builds a model from a small config (no download), wraps
it so that ``forward`` takes exactly the spec'd inputs (keyword flags such as
``use_cache`` fixed), and says which sizes to trace at and which grid of
sizes to compare against eager.  Shared by tests/test_model_zoo.py and
bench/zoo_bench.py.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch
import torch.nn as nn

VOCAB = 96
MAXPOS = 40  # position tables of this size: T = 41 must be rejected where eager fails


class Wrapped(nn.Module):
    """Calls ``model(**inputs, **flags)`` so a spec names each input."""

    def __init__(self, model, names, flags=None, method=None):
        super().__init__()
        self.model = model
        self.names = list(names)
        self.flags = dict(flags or {})
        self.method = method

    def forward(self, *args):
        fn = getattr(self.model, self.method) if self.method else self.model
        out = fn(**dict(zip(self.names, args)), **self.flags)
        return out


@dataclass
class ZooCase:
    """One model and how the zoo exercises it."""

    name: str
    build: Callable[[], nn.Module]
    specs: tuple
    dims: dict = field(default_factory=dict)
    # Size grid (dim name -> values) compared with eager; includes sizes eager rejects.
    grid: dict = field(default_factory=dict)
    flags: dict = field(default_factory=dict)
    cache_flag: bool = False  # also trace with use_cache=True
    slow: bool = False
    # A known gap, with the reason; the test is an expected (strict) failure until it is closed.
    gap: Optional[str] = None
    # forward() changes the module (Swin resizes its windows), so eager history matters:
    # compare each size with a fresh copy.
    stateful: bool = False
    method: Optional[str] = None

    def module(self, **extra_flags):
        m = self.build().eval()
        return Wrapped(m, [s.split(":")[0].strip() for s in self.specs], {**self.flags, **extra_flags},
                       self.method).eval()

    def inputs(self, sizes: dict, seed: int = 0):
        """Random inputs for ``sizes`` (dim name -> int), one per spec."""
        from shapes.spec import parse_specs
        g = torch.Generator().manual_seed(seed)
        parsed, _ = parse_specs(self.specs)
        out = []
        for s in parsed:
            shape = [sizes[d] if isinstance(d, str) else d for d in s.dims]
            if s.dtype == torch.int64:
                if s.name in ("attention_mask", "decoder_attention_mask"):
                    t = torch.ones(shape, dtype=torch.int64)
                    if len(shape) == 2 and shape[1] > 1:
                        t[0, : max(1, shape[1] // 3)] = 0  # left padding on one row
                else:
                    t = torch.randint(0, VOCAB, shape, generator=g)
            else:
                t = torch.randn(shape, generator=g)
            out.append(t)
        return out

    def grid_points(self):
        names = list(self.grid)
        for vals in itertools.product(*(self.grid[n] for n in names)):
            yield dict(zip(names, vals))


def _seed():
    torch.manual_seed(0)


def _t():
    import transformers
    _seed()
    return transformers


_DEC = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, max_position_embeddings=MAXPOS)


def llama():
    t = _t()
    return t.LlamaModel(t.LlamaConfig(**_DEC, num_key_value_heads=2))


def mistral():
    t = _t()
    return t.MistralModel(t.MistralConfig(**_DEC, num_key_value_heads=2, sliding_window=None))


def qwen2():
    t = _t()
    return t.Qwen2Model(t.Qwen2Config(**_DEC, num_key_value_heads=2))


def qwen3():
    t = _t()
    return t.Qwen3Model(t.Qwen3Config(**_DEC, num_key_value_heads=2, head_dim=8))


def phi():
    t = _t()
    return t.PhiModel(t.PhiConfig(**_DEC))


def phi3():
    t = _t()
    return t.Phi3Model(t.Phi3Config(**_DEC, pad_token_id=0))


def gemma():
    t = _t()
    return t.GemmaModel(t.GemmaConfig(**_DEC, num_key_value_heads=1, head_dim=8))


def gpt_neox():
    t = _t()
    return t.GPTNeoXModel(t.GPTNeoXConfig(**_DEC))


def gptj():
    t = _t()
    return t.GPTJModel(t.GPTJConfig(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, rotary_dim=4,
                                    n_positions=MAXPOS))


def falcon():
    t = _t()
    return t.FalconModel(t.FalconConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                        num_attention_heads=4, max_position_embeddings=MAXPOS))


def opt():
    t = _t()
    return t.OPTModel(t.OPTConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, ffn_dim=64,
                                  num_attention_heads=4, max_position_embeddings=MAXPOS,
                                  word_embed_proj_dim=32))


def bloom():
    t = _t()
    return t.BloomModel(t.BloomConfig(vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=4))


def gpt2():
    t = _t()
    return t.GPT2Model(t.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=MAXPOS))


def gpt_bigcode():
    t = _t()
    return t.GPTBigCodeModel(t.GPTBigCodeConfig(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4,
                                                n_positions=MAXPOS))


_ENC = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=MAXPOS)


def bert():
    t = _t()
    return t.BertModel(t.BertConfig(**_ENC))


def roberta():
    t = _t()
    # RoBERTa's positions start at padding_idx + 1: T <= MAXPOS - 2.
    return t.RobertaModel(t.RobertaConfig(**_ENC))


def deberta_v2():
    t = _t()
    return t.DebertaV2Model(t.DebertaV2Config(**_ENC, relative_attention=True, position_buckets=16,
                                              pos_att_type=["p2c", "c2p"]))


def distilbert():
    t = _t()
    return t.DistilBertModel(t.DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4,
                                                hidden_dim=64, max_position_embeddings=MAXPOS))


def albert():
    t = _t()
    return t.AlbertModel(t.AlbertConfig(**_ENC, embedding_size=16))


def electra():
    t = _t()
    return t.ElectraModel(t.ElectraConfig(**_ENC, embedding_size=16))


def t5():
    t = _t()
    return t.T5Model(t.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                                decoder_start_token_id=0))


def bart():
    t = _t()
    return t.BartModel(t.BartConfig(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
                                    encoder_attention_heads=4, decoder_attention_heads=4,
                                    encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=MAXPOS))


def vit():
    t = _t()
    return t.ViTModel(t.ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=64))


def deit():
    t = _t()
    return t.DeiTModel(t.DeiTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                    num_attention_heads=4, intermediate_size=64))


def swin():
    t = _t()
    return t.SwinModel(t.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                                    num_heads=[2, 2], window_size=4))


def convnext():
    t = _t()
    return t.ConvNextModel(t.ConvNextConfig(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2))


def resnet():
    t = _t()
    return t.ResNetModel(t.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                                        layer_type="basic"))


def mobilenet_v2():
    t = _t()
    return t.MobileNetV2Model(t.MobileNetV2Config(depth_multiplier=0.25, image_size=32, tf_padding=False))


def segformer():
    t = _t()
    return t.SegformerModel(t.SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
                                              hidden_sizes=[8, 16], num_attention_heads=[1, 2],
                                              patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2]))


def wav2vec2():
    t = _t()
    return t.Wav2Vec2Model(t.Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                            intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2),
                                            conv_kernel=(10, 3), num_conv_pos_embeddings=8,
                                            num_conv_pos_embedding_groups=2, do_stable_layer_norm=True,
                                            mask_time_prob=0.0))


def whisper():
    t = _t()
    return t.WhisperModel(t.WhisperConfig(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
                                          encoder_attention_heads=4, decoder_attention_heads=4,
                                          encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=8,
                                          max_source_positions=16, max_target_positions=MAXPOS,
                                          pad_token_id=0, decoder_start_token_id=1))


def clip():
    t = _t()
    return t.CLIPModel(t.CLIPConfig(
        text_config=dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, max_position_embeddings=MAXPOS, projection_dim=16),
        vision_config=dict(image_size=32, patch_size=8, hidden_size=32, intermediate_size=64,
                           num_hidden_layers=2, num_attention_heads=4, projection_dim=16),
        projection_dim=16))


class _UNet(nn.Module):
    """UNet2DModel at a fixed timestep (``torch.tensor([t])`` inside diffusers)."""

    def __init__(self):
        super().__init__()
        import diffusers
        _seed()
        self.unet = diffusers.UNet2DModel(sample_size=16, in_channels=3, out_channels=3, layers_per_block=1,
                                          block_out_channels=(8, 16), norm_num_groups=4,
                                          down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                                          up_block_types=("AttnUpBlock2D", "UpBlock2D"),
                                          attention_head_dim=8)

    def forward(self, sample):
        return self.unet(sample, 10).sample


def unet2d():
    return _UNet()


def autoencoder_kl():
    import diffusers
    _seed()
    return diffusers.AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, norm_num_groups=4,
                                   block_out_channels=(8, 16), layers_per_block=1,
                                   down_block_types=("DownEncoderBlock2D",) * 2,
                                   up_block_types=("UpDecoderBlock2D",) * 2)


IDS = ("input_ids: i64[B, T]",)
IDS_MASK = ("input_ids: i64[B, T]", "attention_mask: i64[B, T] in 0..1")
_TGRID = {"B": [1, 2, 3], "T": [1, 2, 5, MAXPOS + 1]}
_IMG = ("pixel_values: f32[B, 3, 32, 32]",)
_CONV = ("pixel_values: f32[B, 3, H, W]",)
_CONV_DIMS = {"H": 32, "W": 40}
_CONV_GRID = {"B": [1, 2, 3], "H": [1, 7, 24, 32], "W": [16, 30, 40]}


def _dec(name, build, **kw):
    return [ZooCase(name, build, IDS, grid=_TGRID, cache_flag=True, **kw),
            ZooCase(name + "+mask", build, IDS_MASK, grid=_TGRID, cache_flag=True, **kw)]


def _enc(name, build, mask=True, **kw):
    out = [ZooCase(name, build, IDS, grid=_TGRID, **kw)]
    if mask:
        out.append(ZooCase(name + "+mask", build, IDS_MASK, grid=_TGRID, **kw))
    return out


CASES = [
    *_dec("llama", llama), *_dec("mistral", mistral), *_dec("qwen2", qwen2), *_dec("qwen3", qwen3),
    *_dec("phi", phi), *_dec("phi3", phi3), *_dec("gemma", gemma), *_dec("gpt_neox", gpt_neox),
    *_dec("gptj", gptj), *_dec("falcon", falcon), *_dec("opt", opt), *_dec("bloom", bloom),
    *_dec("gpt2", gpt2), *_dec("gpt_bigcode", gpt_bigcode),
    *_enc("bert", bert), *_enc("roberta", roberta), *_enc("deberta_v2", deberta_v2),
    *_enc("distilbert", distilbert), *_enc("albert", albert, mask=False), *_enc("electra", electra, mask=False),
    ZooCase("t5", t5, ("input_ids: i64[B, S]", "decoder_input_ids: i64[B, T]"),
            grid={"B": [1, 2, 3], "S": [1, 3, 9], "T": [1, 4, 6]}, cache_flag=True),
    ZooCase("bart", bart, ("input_ids: i64[B, S]", "decoder_input_ids: i64[B, T]"),
            grid={"B": [1, 2, 3], "S": [1, 3, 5, MAXPOS + 1], "T": [1, 4, MAXPOS + 1]}, cache_flag=True),
    ZooCase("vit", vit, _IMG, grid={"B": [1, 2, 3, 4]}),
    ZooCase("deit", deit, _IMG, grid={"B": [1, 2, 3, 4]}),
    ZooCase("swin", swin, _CONV, dims=_CONV_DIMS, grid={"B": [1, 2, 3, 4], "H": [7, 32], "W": [16, 40, 48]},
            stateful=True),
    ZooCase("convnext", convnext, _CONV, dims=_CONV_DIMS, grid=_CONV_GRID),
    ZooCase("resnet", resnet, _CONV, dims=_CONV_DIMS, grid=_CONV_GRID),
    ZooCase("mobilenet_v2", mobilenet_v2, _CONV, dims=_CONV_DIMS, grid=_CONV_GRID),
    ZooCase("segformer", segformer, _CONV, dims=_CONV_DIMS, grid=_CONV_GRID),
    ZooCase("wav2vec2", wav2vec2, ("input_values: f32[B, L]",), dims={"L": 400},
            grid={"B": [1, 2, 3], "L": [9, 10, 60, 401]}),
    ZooCase("whisper", whisper, ("input_features: f32[B, 8, 32]", "decoder_input_ids: i64[B, T]"),
            grid={"B": [1, 2, 3], "T": [1, 3, 5, MAXPOS + 1]}, cache_flag=True),
    ZooCase("clip", clip, ("input_ids: i64[N, T]", "pixel_values: f32[B, 3, 32, 32]"),
            grid={"N": [1, 2, 3], "T": [1, 5, MAXPOS + 1], "B": [1, 2, 3]}),
    ZooCase("unet2d", unet2d, ("sample: f32[B, 3, H, W]",), dims={"H": 16, "W": 24},
            grid={"B": [1, 2], "H": [4, 6, 8, 12], "W": [8, 10]}),
    ZooCase("autoencoder_kl", autoencoder_kl, ("sample: f32[B, 3, H, W]",), dims={"H": 16, "W": 24},
            grid={"B": [1, 2], "H": [3, 8, 12], "W": [8, 9]}),
]


def model_classes(cases=CASES) -> set:
    """The distinct model classes the cases cover (``+mask`` variants are one class)."""
    return {c.name.split("+")[0] for c in cases}
