"""Programs the engine's tests (and other test modules) trace.

Each is small, deterministic, and exercises one family of shape behaviour.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, d=32, hidden=64):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        return self.norm(x + self.fc2(F.gelu(self.fc1(x))))


class CausalSelfAttention(nn.Module):
    """Hand-written causal attention that views into heads."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.heads = heads

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        hd = C // self.heads
        q = q.view(B, T, self.heads, hd).transpose(1, 2)
        k = k.view(B, T, self.heads, hd).transpose(1, 2)
        v = v.view(B, T, self.heads, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / hd ** 0.5)
        mask = torch.tril(torch.ones(T, T, device=x.device, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class SDPABlock(nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.heads = heads

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.reshape(B, T, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y.transpose(1, 2).reshape(B, T, C)


class ConvPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, kernel_size=3)

    def forward(self, x):
        return F.max_pool2d(F.relu(self.conv(x)), 2)


def cat_last(a, b):
    return torch.cat([a, b], dim=1)


def broadcast_outer(a, b):
    return a + b


def flatten_heads(x):
    B = x.shape[0]
    return x.reshape(B, -1).flatten().view(-1, 4)


def branch_on_size(x):
    if x.shape[0] > 16:
        return x.sum(0)
    return x.mean(0)


def view_by_8(x):
    return x.view(-1, 8)


def matmul(a, b):
    return a @ b


def add_same(a, b):
    return a + b


def nonzero_slice(x, mask):
    n = mask.nonzero().shape[0]
    return x[:n]


def nonzero_split(x, mask):
    n = mask.nonzero().shape[0]
    return x.split(n)


def nonzero_slice_checked(x, mask):
    n = mask.nonzero().shape[0]
    torch._check(n <= x.shape[0])
    return x[:n] * 2


def nonzero_branch(x, mask):
    n = mask.nonzero().shape[0]
    if n > 2:
        return x
    return -x


def raises_on_small(x):
    if x.shape[0] < 4:
        raise ValueError("need at least 4 rows")
    return x * 2


def tiny_gpt2():
    """transformers' GPT2Model from a small config (no download)."""
    import transformers
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=128, vocab_size=100)
    return transformers.GPT2Model(cfg).eval()


def tiny_bert():
    """transformers' BertModel from a small config (no download)."""
    import transformers
    torch.manual_seed(0)
    cfg = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                  intermediate_size=128, vocab_size=100, max_position_embeddings=128)
    return transformers.BertModel(cfg).eval()
