"""cuBLAS vs the skinny-M Triton kernel (compiler/skinny_matmul.py) on GPT-2's linears.

For each dtype, each of GPT-2's four linears (``addmm(bias, x, W.t())`` with W of N x K:
768->2304, 768->768, 768->3072, 3072->768) and M rows in {1, 8, 32, 64, 128}, prints the
GPU time per call of cuBLAS (``torch.addmm``) and of the skinny kernel at the config
``plan()`` picks (fp32: exact fp32 on the CUDA cores) and, for fp32, of ``tl.dot`` tiles
with ``input_precision="ieee"`` (``plan(..., fma=False)``).  Times
are CUDA-graph replays of ``--reps`` calls timed with events (no launch overhead: as in
the compiled programs' recorded graphs), median of ``--samples``.  fp32 runs without TF32.

Usage::

    python bench/skinny_matmul_bench.py            # on a CUDA machine
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
ROWS = [1, 4, 8, 16, 32, 64, 128]


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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--samples", type=int, default=15)
    ap.add_argument("--dtypes", default="float32,float16")
    args = ap.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    print(f"# {torch.cuda.get_device_name(dev)} ({sms} SMs), torch {torch.__version__}, "
          f"GPU us per call (CUDA-graph replay of {args.reps} calls, median of {args.samples})")
    for name in args.dtypes.split(","):
        dt = getattr(torch, name)
        print(f"\n## {name}")
        print(f"{'N x K':>11} {'M':>4} {'cuBLAS':>8} {'skinny':>8} {'speedup':>7}  {'config':<28}{'tl.dot':>8}"
              f"  {'use_skinny':>10}")
        for n, k in SHAPES:
            w = torch.randn(n, k, device=dev, dtype=dt) / k ** 0.5
            bias = torch.randn(n, device=dev, dtype=dt)
            for m in ROWS:
                x = torch.randn(m, k, device=dev, dtype=dt)
                ref = torch.addmm(bias.double(), x.double(), w.double().t())
                cfg = sm.plan(m, n, k, sms, fma=dt == torch.float32)
                out = sm.skinny_matmul(x, w.t(), bias, config=cfg)
                err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
                assert err < (1e-5 if dt == torch.float32 else 1e-2), (n, k, m, err)
                t_blas = graph_time_us(lambda: torch.addmm(bias, x, w.t()), args.reps, args.samples)
                t_sk = graph_time_us(lambda: sm.skinny_matmul(x, w.t(), bias, config=cfg), args.reps, args.samples)
                dot = ""
                if dt == torch.float32:
                    c = sm.plan(m, n, k, sms, fma=False)
                    t_dot = graph_time_us(lambda: sm.skinny_matmul(x, w.t(), bias, config=c), args.reps, args.samples)
                    dot = f"{t_dot:8.2f}"
                print(f"{n:>5}x{k:<5} {m:>4} {t_blas:8.2f} {t_sk:8.2f} {t_blas / t_sk:6.2f}x  {str(cfg):<28}{dot:>8}"
                      f"  {str(sm.use_skinny(m, n, k, dt, 'cuda')):>10}", flush=True)


if __name__ == "__main__":
    main()
