"""cuBLAS vs the skinny-M Triton kernel (compiler/skinny_matmul.py) on GPT-2's linears.

For each dtype, each of GPT-2's four linears (``addmm(bias, x, W.t())`` with W of N x K:
768->2304, 768->768, 768->3072, 3072->768) and M rows in {1, 8, 16, 32, 64, 128}, prints the
GPU time per call of cuBLAS (``torch.addmm``), of the skinny kernel at the config ``plan()``
picks (fp32: ``tl.dot`` tiles with ``input_precision="tf32x3"``, 3xTF32 on tensor cores)
and the best of the alternative tiles (BLOCK_N 64/128 x BLOCK_K 32/64 x 1/2/4 CTAs per SM),
and the max relative error (max |out - ref| / max |ref|, ref in fp64) of cuBLAS and of the
skinny kernel.  Then, per alternative tile, the geometric-mean speedup over the four shapes
at each M (to set ``plan()``'s defaults and ``ROWS``).  Times are CUDA-graph replays of
``--reps`` calls timed with events (no launch overhead: as in the compiled programs'
recorded graphs), median of ``--samples``.  fp32 runs without TF32 (cuBLAS: exact SGEMM).

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
ROWS = [1, 8, 16, 32, 64, 128]


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
    ap.add_argument("--dtypes", default="float32")
    args = ap.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    print(f"# {torch.cuda.get_device_name(dev)} ({sms} SMs), torch {torch.__version__}, triton {triton_version()}, "
          f"GPU us per call (CUDA-graph replay of {args.reps} calls, median of {args.samples})")
    alts = [(bn, bk, c) for bn in (64, 128) for bk in (32, 64) for c in (1, 2, 4)]
    for name in args.dtypes.split(","):
        dt = getattr(torch, name)
        prec = "tf32x3" if dt == torch.float32 else None
        print(f"\n## {name} (skinny precision {prec})")
        print(f"{'N x K':>11} {'M':>4} {'cuBLAS':>8} {'skinny':>8} {'speedup':>7}  {'rule config':<27}"
              f"{'best alt':>8} {'speedup':>7}  {'(BN, BK, CTA/SM)':<17}{'err cuBLAS':>11}{'err skinny':>11}")
        speed = {}  # (m, alt) -> [cuBLAS time / alt time over shapes]
        torch.manual_seed(0)
        for n, k in SHAPES:
            w = torch.randn(n, k, device=dev, dtype=dt) / k ** 0.5
            bias = torch.randn(n, device=dev, dtype=dt)
            for m in ROWS:
                x = torch.randn(m, k, device=dev, dtype=dt)
                ref = torch.addmm(bias.double(), x.double(), w.double().t())

                def rel_err(out):
                    return ((out.double() - ref).abs().max() / ref.abs().max()).item()

                cfg = sm.plan(m, n, k, sms)
                err_blas = rel_err(torch.addmm(bias, x, w.t()))
                err_sk = max(rel_err(sm.skinny_matmul(x, w.t(), bias, config=sm.plan(m, n, k, sms, block_n=bn,
                                                                                      block_k=bk, ctas_per_sm=c),
                                                      precision=prec)) for bn, bk, c in alts)
                t_blas = graph_time_us(lambda: torch.addmm(bias, x, w.t()), args.reps, args.samples)
                t_sk = graph_time_us(lambda: sm.skinny_matmul(x, w.t(), bias, config=cfg, precision=prec),
                                     args.reps, args.samples)
                best = None
                for alt in alts:
                    c = sm.plan(m, n, k, sms, block_n=alt[0], block_k=alt[1], ctas_per_sm=alt[2])
                    t = graph_time_us(lambda: sm.skinny_matmul(x, w.t(), bias, config=c, precision=prec),
                                      args.reps, args.samples)
                    speed.setdefault((m, alt), []).append(t_blas / t)
                    if best is None or t < best[0]:
                        best = (t, alt)
                print(f"{n:>5}x{k:<5} {m:>4} {t_blas:8.2f} {t_sk:8.2f} {t_blas / t_sk:6.2f}x  {str(cfg):<27}"
                      f"{best[0]:8.2f} {t_blas / best[0]:6.2f}x  {str(best[1]):<17}{err_blas:11.2e}{err_sk:11.2e}",
                      flush=True)
        print(f"\n# geometric-mean speedup over the {len(SHAPES)} shapes per alternative tile (BN, BK, CTA/SM)")
        print(f"{'M':>4}  " + "".join(f"{str(a):>15}" for a in alts))
        for m in ROWS:
            print(f"{m:>4}  " + "".join(f"{statistics.geometric_mean(speed[(m, a)]):14.2f}x" for a in alts))


def triton_version() -> str:
    import triton
    return triton.__version__


if __name__ == "__main__":
    main()
