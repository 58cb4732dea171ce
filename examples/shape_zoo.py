"""Small programs whose validity depends on input sizes, for dinfer.

Each one is valid for some sizes only, or branches on a size.  Try::

    dinfer examples/shape_zoo.py:pad_to_multiple -i "x: f32[B, T]" --dim B=1..8 --dim T=1..64

``CASES`` lists them with specs and dim ranges small enough to check every
point against eager PyTorch (tests/test_dinfer.py, bench/dinfer_bench.py).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def matmul_chain(a, b, c):
    """(a @ b) @ c: inner sizes must agree."""
    return (a @ b) @ c


def view_k(x):
    """Flatten into rows of 4: the number of elements must be a multiple of 4."""
    return x.view(-1, 4)


def size_branch(x):
    """Long inputs are cut to 8 and viewed as 2x4; short ones must pair up."""
    if x.shape[0] > 8:
        return x[:8].view(2, 4)
    return x.view(-1, 2)


def chunk_add(x):
    """Three chunks, first plus last: the last chunk must match or broadcast."""
    a, b, c = x.chunk(3, dim=0)
    return a + c


def split_pairs(x):
    """Split into pieces of 4 and stack two of them: needs exactly two pieces of 4."""
    first, second = x.split(4, dim=-1)
    return torch.stack([first, second])


class ConvPool(nn.Module):
    """conv 3x3 -> max-pool 2 -> conv 3x3: needs a minimum spatial size."""

    def __init__(self, in_channels=3):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 4, 3)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(4, 4, 3)

    def forward(self, x):
        return self.conv2(F.relu(self.pool(self.conv1(x))))


# An instance, for the command line: dinfer examples/shape_zoo.py:conv_pool -i "x: f32[B, 3, H, W]" ...
conv_pool = ConvPool().eval()


def broadcast_add(a, b):
    """a + b for a: [A, B], b: [C]: C must equal B or one of them be 1."""
    return a + b


def pad_to_multiple(x):
    """Pad T up to a multiple of 4, then need at least two blocks of 4."""
    B, T = x.shape
    r = (-T) % 4
    x = F.pad(x, (0, r))
    blocks = x.shape[1] // 4
    torch._check(blocks >= 2, lambda: f"need at least two blocks of 4, got {blocks}")
    return x.view(B, blocks, 4).sum(-1)


def unfold_pairs(x):
    """Windows of 4 with step 2, regrouped in pairs: needs N >= 4 and an even window count."""
    B = x.shape[0]
    w = x.unfold(-1, 4, 2)
    return w.reshape(B, -1, 8)


def nonzero_rows(x):
    """Rows with a positive sum, viewed in pairs: how many there are depends on the data."""
    idx = torch.nonzero(x.sum(-1) > 0).squeeze(-1)
    return x[idx].view(-1, 2 * x.shape[1])


def heads(x):
    """Reshape the channels into 4 heads: C must be a multiple of 4."""
    B, T, C = x.shape
    return x.view(B, T, 4, C // 4).transpose(1, 2)


def pool_stack(x):
    """Two 2x2 max-pools: each spatial size must be at least 4."""
    return F.max_pool2d(F.max_pool2d(x, 2), 2)


def ratio_branch(x):
    """Tall inputs (H at least twice W) are folded into rows of 2*W: H must then be even."""
    H, W = x.shape
    if H // W >= 2:
        return x.view(-1, 2 * W)
    return x @ x.t()


def nonzero_heads(x):
    """Split D into two halves, then keep the rows whose first value is positive (at least one)."""
    N, D = x.shape
    h = x.view(N, 2, D // 2)
    idx = torch.nonzero(x[:, 0] > 0).squeeze(-1)
    torch._check(idx.shape[0] >= 1)
    return h[idx]


def take_k(x, k):
    """The first k rows, k read from a tensor: a data-dependent length, traced as torch.export does."""
    n = k.item()
    return x[:n]


# name, program (a function or a module class), specs, dims: small boxes, every point checked eagerly.
CASES = [
    ("matmul_chain", matmul_chain, ["a: f32[M, K]", "b: f32[J, N]", "c: f32[L, 3]"],
     {"M": (1, 3), "K": (1, 4), "J": (1, 4), "N": (1, 4), "L": (1, 4)}),
    ("view_k", view_k, ["x: f32[N, M]"], {"N": (1, 12), "M": (1, 12)}),
    ("size_branch", size_branch, ["x: f32[N]"], {"N": (1, 24)}),
    ("chunk_add", chunk_add, ["x: f32[N, 2]"], {"N": (1, 24)}),
    ("split_pairs", split_pairs, ["x: f32[B, N]"], {"B": (1, 4), "N": (1, 16)}),
    ("conv_pool", ConvPool, ["x: f32[1, 3, H, W]"], {"H": (1, 14), "W": (1, 14)}),
    ("broadcast_add", broadcast_add, ["a: f32[A, B]", "b: f32[C]"], {"A": (1, 6), "B": (1, 6), "C": (1, 6)}),
    ("pad_to_multiple", pad_to_multiple, ["x: f32[B, T]"], {"B": (1, 4), "T": (1, 24)}),
    ("unfold_pairs", unfold_pairs, ["x: f32[B, N]"], {"B": (1, 4), "N": (1, 24)}),
]

# More programs for the summary ("valid iff ...") and the suggested torch.export spec.
SUMMARY_CASES = CASES + [
    ("heads", heads, ["x: f32[B, T, C]"], {"B": (1, 2), "T": (1, 3), "C": (1, 16)}),
    ("pool_stack", pool_stack, ["x: f32[1, 2, H, W]"], {"H": (1, 12), "W": (1, 12)}),
    ("ratio_branch", ratio_branch, ["x: f32[H, W]"], {"H": (1, 12), "W": (1, 6)}),
    ("nonzero_heads", nonzero_heads, ["x: f32[N, D]"], {"N": (1, 4), "D": (1, 8)}),
    ("take_k", take_k, ["x: f32[N, 2]", "k: i64[]"], {"N": (1, 8)}),
]
