"""Programs the server tests and bench/serve_soak.py send: good ones and ones that misbehave."""
import os
import sys

import torch


def rows_of_four(x):
    """Valid iff N % 4 == 0 (and N >= 4)."""
    return x.view(-1, 4)


def grid(x):
    """Two dims: needs W even and H >= 3; output [H - 2, W // 2]."""
    H, W = x.shape
    return x[2:].reshape(H - 2, W // 2, 2).sum(-1)


def raises(x):
    raise ValueError("this program always raises")


def loops_forever(x):
    while True:
        pass


def exits_hard(x):
    os._exit(7)


def exits_politely(x):
    sys.exit(3)


def eats_memory(x):
    blocks = []
    while True:
        blocks.append(bytearray(256 * 1024 * 1024))


def matmul(a, b):
    return torch.relu(a @ b)
