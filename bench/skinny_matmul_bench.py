"""cuBLAS vs the skinny-M Triton kernel (compiler/skinny_matmul.py) on GPT-2's linears.

For each dtype, each of GPT-2's four linears (``addmm(bias, x, W.t())`` with W of N x K:
768->2304, 768->768, 768->3072, 3072->768) and M rows in {1, 8, 32, 64, 128}, prints the
GPU time per call of cuBLAS (``torch.addmm``) and of the skinny kernel at the config
``plan()`` picks, plus the best of a few alternative configs (to check the rule).  Times
are CUDA-graph replays of ``--reps`` calls timed with events (no launch overhead: as in
the compiled programs' recorded graphs), median of ``--samples``.  fp32 runs without TF32.

Usage::

    python bench/skinny_matmul_bench.py            # on a CUDA machine
    python bench/skinny_matmul_bench.py --no-alt   # only the rule's config
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from compiler import skinny_matmul as sm  # noqa: E402

SHAPES = [(2304, 768), (768, 768), (3072, 768), (768, 3072)]  # (N, K)
ROWS = [1, 8, 32, 64, 128]


def graph_time_us(fn, reps, samples) -> float:
    """Median GPU microseconds per ``fn()`` call, over CUDA-graph replays of ``reps`` calls."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(samples):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000 / reps)
    return statistics.median(times)


def alternatives(m, n, k, sms):
    """Configs around the rule's: BLOCK_N 32/64 x about 1/2/4 CTAs per SM."""
    out = []
    for block_n in (32, 64):
        for per_sm in (1, 2, 4):
            block_m = 16 if m <= 16 else 32 if m <= 32 else 64
            tiles = -(-m // block_m) * -(-n // block_n)
            split = min(max(1, -(-per_sm * sms // tiles)), max(1, k // 64))
            kps = -(-(-(-k // split)) // 64) * 64
            out.append((block_m, block_n, 64, -(-k // kps), kps))
    return sorted(set(out))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--samples", type=int, default=15)
    ap.add_argument("--dtypes", default="float32,float16")
    ap.add_argument("--no-alt", action="store_true")
    args = ap.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    print(f"# {torch.cuda.get_device_name(dev)} ({sms} SMs), torch {torch.__version__}, "
          f"GPU us per call (CUDA-graph replay of {args.reps} calls, median of {args.samples})")
    for name in args.dtypes.split(","):
        dt = getattr(torch, name)
        print(f"\n## {name}")
        print(f"{'N x K':>11} {'M':>4} {'cuBLAS':>8} {'skinny':>8} {'speedup':>7}  {'rule config':<22}"
              f"{'best alt':>9}  best alt config")
        for n, k in SHAPES:
            w = torch.randn(n, k, device=dev, dtype=dt) / k ** 0.5
            bias = torch.randn(n, device=dev, dtype=dt)
            for m in ROWS:
                x = torch.randn(m, k, device=dev, dtype=dt)
                ref = torch.addmm(bias.double(), x.double(), w.double().t())
                cfg = sm.plan(m, n, k, sms)
                out = sm.skinny_matmul(x, w.t(), bias, config=cfg)
                err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
                assert err < (1e-5 if dt == torch.float32 else 1e-2), (n, k, m, err)
                t_blas = graph_time_us(lambda: torch.addmm(bias, x, w.t()), args.reps, args.samples)
                t_sk = graph_time_us(lambda: sm.skinny_matmul(x, w.t(), bias, config=cfg), args.reps, args.samples)
                best = ""
                if not args.no_alt:
                    alts = [(graph_time_us(lambda c=c: sm.skinny_matmul(x, w.t(), bias, config=c), args.reps,
                                           args.samples), c) for c in alternatives(m, n, k, sms) if c != cfg]
                    if alts:
                        t, c = min(alts)
                        best = f"{t:9.2f}  {c}"
                print(f"{n:>5}x{k:<5} {m:>4} {t_blas:8.2f} {t_sk:8.2f} {t_blas / t_sk:6.2f}x  {str(cfg):<22}{best}",
                      flush=True)


if __name__ == "__main__":
    main()
