"""What a boolean attention mask costs SDPA per call on the GPU, and what its float form changes.

A padding mask shared by every layer (BERT's) is passed to each layer's
``scaled_dot_product_attention`` as booleans; ATen turns it into an additive float
mask inside every call (``where`` plus ``scalar_tensor`` fills: launches and host
time per layer).  This prints, per dtype and size: the backend ATen picks for the
boolean and for the float mask (``torch._fused_sdp_choice``), host us per call of
each, the cost of the conversion itself, and whether their outputs agree, including
rows whose keys are all masked (``max |diff|`` over the finite rows; NaN counts).

Usage::

    python bench/sdpa_mask_probe.py

Example (the mask it builds: the second half of the batch padded at the end)::

    >>> padding_mask(2, 4, "cpu")[:, 0, 0].tolist()
    [[True, True, True, True], [True, True, True, False]]
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F


def padding_mask(b: int, t: int, device, empty_row: bool = False) -> torch.Tensor:
    """``[b, 1, t, t]`` bool: keys past 3/4 of ``t`` hidden for the batch's second half
    (``empty_row``: every key of the last batch row hidden)."""
    keep = torch.ones(b, t, dtype=torch.bool)
    keep[b // 2:, (3 * t) // 4:] = False
    if empty_row:
        keep[-1] = False
    return keep[:, None, None, :].expand(b, 1, t, t).to(device)


def host_us(fn, n=300 if torch.cuda.is_available() else 3) -> float:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6


def main():
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"{torch.cuda.get_device_name() if dev == 'cuda' else 'cpu'} torch={torch.__version__}")
    print(f"{'dtype':<9}{'B,H,T,D':<16}{'empty':<7}{'ch bool':>8}{'ch float':>9}{'us bool':>9}{'us float':>9}"
          f"{'us conv':>8}{'maxdiff':>10}{'nan b/f':>10}")
    for dt in (torch.float16, torch.bfloat16, torch.float32):
        for (b, h, t, d) in ((4, 12, 128, 64), (2, 12, 999, 64), (4, 16, 128, 64)):
            for empty in (False, True):
                g = torch.Generator().manual_seed(0)
                q, k, v = (torch.randn(b, h, t, d, generator=g).to(dev, dt) for _ in range(3))
                m = padding_mask(b, t, dev, empty)
                fm = torch.where(m, 0.0, float("-inf")).to(dt)
                cb = int(torch._fused_sdp_choice(q, k, v, m, 0.0, False))
                cf = int(torch._fused_sdp_choice(q, k, v, fm, 0.0, False))
                ob = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
                of = F.scaled_dot_product_attention(q, k, v, attn_mask=fm)
                nb, nf = int(ob.isnan().sum()), int(of.isnan().sum())
                ok = ~(ob.isnan() | of.isnan())
                diff = (ob.float() - of.float())[ok].abs().max().item() if ok.any() else float("nan")
                ub = host_us(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=m))
                uf = host_us(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=fm))
                uc = host_us(lambda: torch.where(m, 0.0, float("-inf")).to(dt))
                print(f"{str(dt)[6:]:<9}{str((b, h, t, d)):<16}{str(empty):<7}{cb:>8}{cf:>9}{ub:9.1f}{uf:9.1f}"
                      f"{uc:8.1f}{diff:10.2e}{f'{nb}/{nf}':>10}")
    print("choices: 0 math, 1 flash, 2 efficient, 3 cudnn")
    print(f"torch._fused_sdp_choice: {host_us(lambda: torch._fused_sdp_choice(q, k, v, fm, 0.0, False)):.2f} us/call")


if __name__ == "__main__":
    main()
