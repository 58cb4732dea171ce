"""A small MLP block used in the README's first command."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, d=64, hidden=256):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        return self.norm(x + self.fc2(F.gelu(self.fc1(x))))


def tokens_to_blocks(x):
    """Splits a token sequence into blocks of 8: needs T % 8 == 0."""
    B, T, C = x.shape
    if T > 16:
        x = x[:, :16]
    return x.reshape(B, -1, 8, C).mean(2)
