"""Programs a person would write, for what people read (tests/test_for_people.py).

* :class:`SmallCNN`: a Linear after the convolutions fixes H and W (``28 <= H <= 31``).
* :class:`CausalAttention`: attention with a causal mask buffer sliced to ``T`` (``T <= 64``).
* :func:`pad_then_chunk`: pad ``T`` to a multiple of 8, then split it in chunks: runs for every size.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class SmallCNN(nn.Module):
    """conv 3x3 (padding 1), pool 4, then a Linear over 8*7*7 features: H // 4 == 7 and W // 4 == 7."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 7 * 7, 10)

    def forward(self, img):
        h = F.max_pool2d(F.relu(self.conv(img)), 4)
        return self.fc(h.flatten(1))


class CausalAttention(nn.Module):
    """One attention head over a causal mask buffer of 64 positions (T <= 64)."""

    def __init__(self, d: int = 32, max_t: int = 64):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.register_buffer("mask", torch.tril(torch.ones(max_t, max_t, dtype=torch.bool)))

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(x).split(D, dim=-1)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask[:T, :T])
        return self.proj(y)


def pad_then_chunk(x):
    """Pad T up to a multiple of 8, then four chunks along T: every size runs."""
    T = x.shape[1]
    x = F.pad(x, (0, 0, 0, (-T) % 8))
    return torch.cat([c.sum(1, keepdim=True) for c in x.chunk(4, dim=1)], dim=1)
