"""Programs shared by the compiler tests and bench/compiler_bench.py."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLPBlock(nn.Module):
    """LayerNorm -> Linear -> GELU -> Linear, residual."""

    def __init__(self, d=32, hidden=64, approximate="none"):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)
        self.approximate = approximate

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x)), approximate=self.approximate))


class Attention(nn.Module):
    """Single-head causal softmax attention with explicit matmuls and a mask."""

    def __init__(self, d=32):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.d = d

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C))
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf"))
        att = torch.softmax(att, dim=-1)
        return self.proj(att @ v)


def pointwise_zoo(x, y):
    a = torch.where(x > 0, torch.sigmoid(x), torch.tanh(y)) + F.silu(y)
    b = torch.clamp(a, -0.5, 0.75).abs() * torch.maximum(x, y) - torch.minimum(x, 0.5 * y)
    c = torch.sqrt(x.abs() + 1) * torch.rsqrt(y * y + 1) + torch.exp(-x.abs()).log1p()
    d = (x.to(torch.float64) * 3).to(torch.float32) + F.gelu(y, approximate="tanh") + torch.relu(x) ** 2
    e = (x > y).to(torch.float32) + x.masked_fill(y < 0, 2.0) + torch.log(y.abs() + 1) / 3
    return a + b + c + d + e


def reductions(x):
    s = x.sum(-1) + x.mean(-1) + x.amax(-1)
    m = x.sum(1, keepdim=True) - x.amin(dim=(1, 2), keepdim=True)
    return s, torch.log_softmax(x, -1), torch.softmax(x, dim=0), x + m, x.mean(), x.var(-1)


def views(x):
    B, T, C = x.shape
    y = x.permute(0, 2, 1).reshape(B * C, T)
    z = x.reshape(B, T, 2, C // 2).transpose(1, 2).reshape(B, 2, T * (C // 2))
    w = x[:, 1:, ::2] * 2 + x[:, 0:1, 1::2].expand(B, T - 1, C // 2)
    return y.sin(), z + 1, w, x.select(2, 3) - x.unsqueeze(0)[0, :, :, -1], x.flatten()[3:].cos()
