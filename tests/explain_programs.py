"""Small programs for the guard-explanation tests (besides tests/programs.py).

Each line that raises a record is unique in this file, so tests can pin it.
"""
import torch
import torch.nn.functional as F


def branch_and_view(x):
    if x.shape[0] > 4:
        x = x * 2
    return x.view(x.shape[0], -1, 8)


def branch_checked(x):
    torch._check(x.shape[0] > 16)
    if x.shape[0] > 16:
        return x * 2
    return x + 1


def reduce_rows(x):
    return x.sum(0)


def conv_only(x, w):
    return F.conv2d(x, w)


def size_as_int(x):
    n = int(x.shape[0])
    return x.reshape(n, -1)


def several(x, y):
    if x.shape[0] > 4:
        x = x * 2
    z = x.view(x.shape[0], -1, 8)
    return z.sum(0), y.sum(0)
