"""Programs whose sizes need min, max, // and %: what tests/test_user_text.py prints."""
import torch
import torch.nn as nn


class ClampedRows(nn.Module):
    """FLOPs ``32*min(8, N)``; bytes with ``max(1, N - 3)`` (sizes from ``torch.sym_min`` / ``sym_max``)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x[: torch.sym_min(x.shape[0], 8)])
        return h * torch.ones(torch.sym_max(x.shape[0] - 3, 1), 1, 1)


class StridedConv(nn.Module):
    """FLOPs and bytes over ``(H - 3) // 2``: a strided convolution, then a pool."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2)
        self.lin = nn.Linear(8, 4)

    def forward(self, x):
        y = torch.nn.functional.max_pool2d(self.conv(x), 2)
        return self.lin(y.mean((2, 3)))


def every_third_in_pairs(x):
    """Valid iff ``((N + 2) // 3) % 2 == 0``; elsewhere torch's error names the size ``(N + 2) // 3``."""
    return x[::3].view(-1, 2)
