"""A ViT's patch embedding at new image sizes: ``F.conv2d`` (cuDNN) against the same convolution
as one matmul over the image's patches, forward and weight gradient, per image size.

A patch embedding is a convolution whose kernel equals its stride (ViT: 16 x 16, stride 16).
cuDNN picks and builds an execution plan for every new input shape, forward and backward; a
training loop over images of varying size meets a new shape at many steps.  Written as a
matmul, the same work is a permuted copy and one GEMM per direction.

Prints, per image side: the first call's wall ms (forward + backward, synchronized) and the
steady-state ms (median of 20) of each form, and their largest difference.

Usage::

    python bench/patch_conv_first_calls.py [--batch 8] [--dtype bf16]

Example::

    >>> x, w = torch.randn(2, 3, 32, 48), torch.randn(5, 3, 16, 16)
    >>> torch.allclose(patch_matmul(x, w, None), torch.nn.functional.conv2d(x, w, stride=16), atol=1e-4)
    True
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F


def patch_matmul(x, w, b):
    """``F.conv2d(x, w, b, stride=w.shape[-2:])`` as a matmul over non-overlapping patches."""
    n, c, h, wd = x.shape
    d, _, p, q = w.shape
    nh, nw = h // p, wd // q
    patches = x[:, :, : nh * p, : nw * q].reshape(n, c, nh, p, nw, q).permute(0, 2, 4, 1, 3, 5)
    rows = patches.reshape(n * nh * nw, c * p * q)
    out = rows @ w.reshape(d, c * p * q).t()
    if b is not None:
        out = out + b
    return out.reshape(n, nh, nw, d).permute(0, 3, 1, 2)


def _step(fn, x, w, b):
    out = fn(x, w, b)
    out.float().square().mean().backward()
    return out


def _timed(fn, x, w, b, device) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    _step(fn, x, w, b)
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[a.dtype]
    dev = a.device
    torch.manual_seed(0)
    w = torch.randn(768, 3, 16, 16, device=dev, dtype=dtype, requires_grad=True)
    b = torch.randn(768, device=dev, dtype=dtype, requires_grad=True)
    conv = lambda x, w, b: F.conv2d(x, w, b, stride=16)  # noqa: E731
    warm = torch.randn(a.batch, 3, 64, 64, device=dev, dtype=dtype)
    for fn in (conv, patch_matmul):
        _step(fn, warm, w, b)
    name = torch.cuda.get_device_name() if dev == "cuda" else "cpu"
    print(f"{name} torch={torch.__version__} batch={a.batch} {a.dtype}; ms: first call at the size (fwd+bwd), then steady median of 20")
    print(f"{'side':>5} {'conv first':>11} {'mm first':>9} {'conv ms':>8} {'mm ms':>7} {'max diff':>9}")
    firsts = {"conv": [], "mm": []}
    for k in range(8, 33, 2):
        side = 16 * k
        x = torch.randn(a.batch, 3, side, side, device=dev, dtype=dtype)
        row = {}
        for key, fn in (("conv", conv), ("mm", patch_matmul)):
            first = _timed(fn, x, w, b, dev)
            steady = statistics.median(_timed(fn, x, w, b, dev) for _ in range(20))
            row[key] = (first, steady)
            firsts[key].append(first)
        diff = (conv(x, w, b).float() - patch_matmul(x, w, b).float()).abs().max().item()
        print(f"{side:>5} {row['conv'][0]:>11.2f} {row['mm'][0]:>9.2f} {row['conv'][1]:>8.3f} {row['mm'][1]:>7.3f} {diff:>9.2e}")
    print(f"median first call ms: conv {statistics.median(firsts['conv']):.2f}  mm {statistics.median(firsts['mm']):.2f}")


if __name__ == "__main__":
    main()
