"""Programs the CLI tests name as ``tests/cli_programs.py:NAME``."""
from collections import namedtuple


Stats = namedtuple("Stats", "values count")


def windowed(x, n, scale=1.0, causal=False, mode="sum"):
    """Non-tensor arguments of each kind; returns a dict, a size and a tensor in a tuple."""
    y = x * scale
    if causal:
        y = y.tril()
    if mode != "sum":
        y = -y
    return {"logits": y[:, :n], "len": x.shape[1] * 2}, x.shape[0]


def interleave(x, y):
    """x: [B, 2*T] pairs up with y: [B, T]."""
    return x.view(x.shape[0], -1, 2).sum(-1) + y


def odd_pairs(x):
    """x: [B, 2*T + 1]: drop the first column, pair up the rest."""
    pairs = x[:, 1:].view(x.shape[0], -1, 2)
    return Stats(pairs, x.shape[1] // 2)


def reversed_rows(x, y):
    """Rows of x at the running sums of 0..N-1: index values symshape cannot bound (cumsum)."""
    import torch
    return x.index_select(0, torch.arange(y.shape[0]).cumsum(0))
