"""Programs for the padding analysis tests: each with specs and which dims pad.

``CASES`` maps a name to ``(make_program, specs, expected)`` where
``expected`` maps a dim name to ``"pads"``, ``"mixes"`` or ``"not_proved"``.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from tests.compiler_programs import Attention, MLPBlock


def tiny_gpt2_config(**kw):
    import transformers
    return transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=128, vocab_size=100,
                                   use_cache=False, attn_implementation="sdpa", **kw)


class GPT2Block(nn.Module):
    """transformers' GPT2Block (SDPA attention, causal without a mask), tiny config."""

    def __init__(self):
        super().__init__()
        from transformers.models.gpt2.modeling_gpt2 import GPT2Block as Block
        self.block = Block(tiny_gpt2_config())

    def forward(self, x):
        out = self.block(x)
        return out[0] if isinstance(out, tuple) else out


class GPT2Model(nn.Module):
    """transformers' full GPT2Model: its mask builder reads position ids through data-dependent indexing."""

    def __init__(self):
        super().__init__()
        import transformers
        self.model = transformers.GPT2Model(tiny_gpt2_config())

    def forward(self, ids):
        return self.model(ids).last_hidden_state


class GPT(nn.Module):
    """A nanoGPT-style GPT-2 (token + position embeddings, causal SDPA blocks, final norm)."""

    def __init__(self, vocab=100, d=64, heads=4, layers=2, positions=128):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(positions, d)
        self.blocks = nn.ModuleList(CausalBlock(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, ids):
        T = ids.shape[1]
        x = self.wte(ids) + self.wpe(torch.arange(T, device=ids.device))
        for b in self.blocks:
            x = b(x)
        return self.ln_f(x)


class CausalBlock(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


def softmax_over_t(x):
    return torch.softmax(x, dim=1)


def mean_over_t(x):
    return x.mean(1) * 2


def reshape_mixing(x):
    B, T, C = x.shape
    return x.reshape(B, C, T) + 1  # reinterprets memory: a padded row lands inside kept ones


def reshape_outer(x):
    B, T, C = x.shape
    return torch.relu(x.reshape(B, T * C))  # T outermost of the merge: kept positions stay a prefix


def cumsum_t(x):
    return x.cumsum(1) * 0.5


def reverse_cumsum_t(x):
    return x.flip(1).cumsum(1).flip(1)


def full_attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def last_token(x):
    return x[:, -1] + 1


def masked_sum(x):
    return (x.sum(-1) * 3).sum(0)  # sums over B, not T


CASES = {
    "mlp": (MLPBlock, ["x: f32[B, T, 32]"], {"B": "pads", "T": "pads"}),
    "layernorm": (lambda: nn.LayerNorm(16), ["x: f32[B, T, 16]"], {"B": "pads", "T": "pads"}),
    "causal_attention": (Attention, ["x: f32[B, T, 32]"], {"B": "pads", "T": "pads"}),
    "gpt2_block": (GPT2Block, ["x: f32[B, T, 64]"], {"B": "pads", "T": "pads"}),
    "gpt": (GPT, ["ids: i64[B, T]"], {"B": "pads", "T": "pads"}),
    "softmax_over_t": (lambda: softmax_over_t, ["x: f32[B, T, 8]"], {"B": "pads", "T": "mixes"}),
    "mean_over_t": (lambda: mean_over_t, ["x: f32[B, T, 8]"], {"B": "pads", "T": "mixes"}),
    "reshape_mixing": (lambda: reshape_mixing, ["x: f32[B, T, 8]"], {"B": "pads", "T": "mixes"}),
    "reshape_outer": (lambda: reshape_outer, ["x: f32[B, T, 8]"], {"B": "pads", "T": "pads"}),
    "cumsum": (lambda: cumsum_t, ["x: f32[B, T, 8]"], {"B": "pads", "T": "pads"}),
    "reverse_cumsum": (lambda: reverse_cumsum_t, ["x: f32[B, T, 8]"], {"B": "pads", "T": "mixes"}),
    "full_attention": (lambda: full_attention, ["q: f32[B, 2, T, 16]", "k: f32[B, 2, T, 16]", "v: f32[B, 2, T, 16]"],
                       {"B": "pads", "T": "mixes"}),
    "last_token": (lambda: last_token, ["x: f32[B, T, 8]"], {"B": "pads", "T": "mixes"}),
    "sum_over_b": (lambda: masked_sum, ["x: f32[B, T, 8]"], {"B": "mixes", "T": "pads"}),
    "gpt2_model": (GPT2Model, ["ids: i64[B, T]"], {"T": "not_proved"}),
}
