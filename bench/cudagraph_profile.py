"""Where the time and memory of symshape's bucketed CUDA graphs go, on GPT-2 (2 layers, d=768).

Prints, side by side with eager: per-call time split into the host path
(bind/route, input copy, replay launch, output slice and clone) and the replayed
graph's GPU time (CUDA events) per bucket; the GPU time of the model's four
matmul shapes at small row counts (whether finer buckets would pay); a profiler
table of a few graph calls; and the GPU memory each recorded graph keeps, the
shared pool's growth, and the allocator's segments by stream and pool.

Usage::

    python bench/cudagraph_profile.py                   # on a CUDA machine
    python bench/cudagraph_profile.py --fresh-streams   # the old recording: a new side stream per graph
"""
from __future__ import annotations

import argparse
import collections
import os
import random
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import compiler  # noqa: E402
from tests.padding_programs import GPT  # noqa: E402


def med_ms(fn, reps=100):
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def gpu_ms(fn, reps=50):
    """Median GPU time of ``fn`` by CUDA events (one synchronize per rep)."""
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def segments() -> str:
    """The caching allocator's segments, summed by (stream, pool)."""
    by = collections.defaultdict(lambda: [0, 0, 0])
    for seg in torch.cuda.memory_snapshot():
        k = (seg.get("stream"), tuple(seg.get("segment_pool_id", ())) or None)
        by[k][0] += seg["total_size"]
        by[k][1] += seg["allocated_size"]
        by[k][2] += 1
    lines = ["allocator segments by (stream, pool): reserved MiB / allocated MiB / segments"]
    for (stream, pool), (tot, alloc, n) in sorted(by.items(), key=lambda kv: -kv[1][0]):
        lines.append(f"  stream {stream} pool {pool}: {tot / 2**20:.1f} / {alloc / 2**20:.1f} / {n}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--max-t", type=int, default=512)
    ap.add_argument("--tf32", action="store_true")
    ap.add_argument("--fresh-streams", action="store_true", help="record each graph from a new stream")
    ap.add_argument("--no-largest-first", action="store_true")
    args = ap.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    dev = "cuda"
    model = GPT(vocab=50257, d=768, heads=12, layers=2, positions=1024).to(dev).eval()
    gen = torch.Generator().manual_seed(0)
    inputs = {T: torch.randint(0, 50257, (1, T), generator=gen).to(dev) for T in range(1, args.max_t + 1)}
    with torch.no_grad():
        model(inputs[8])
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base_alloc, base_res = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    f = compiler.compile(model, "ids: i64[1, T]", dims={"T": (1, args.max_t)}, target="triton",
                         cuda_graphs=True)
    f.largest_first = not args.no_largest_first
    if args.fresh_streams:
        record = f.recorder.record

        def fresh(run, device):
            f.recorder.stream = torch.cuda.Stream(device)
            return record(run, device)
        f.recorder.record = fresh
    order = list(range(1, args.max_t + 1))
    random.Random(0).shuffle(order)
    t0 = time.perf_counter()
    with torch.no_grad():
        for T in order:
            f(inputs[T])
    torch.cuda.synchronize()
    print(f"first sweep {time.perf_counter() - t0:.1f} s; graphs {len(f.graphs)}; stats {f.stats}")
    print(f.report())
    print(f"held after sweep: allocated +{(torch.cuda.memory_allocated() - base_alloc) / 2**20:.1f} MiB, "
          f"reserved +{(torch.cuda.memory_reserved() - base_res) / 2**20:.1f} MiB")
    torch.cuda.empty_cache()
    print(f"after empty_cache: reserved +{(torch.cuda.memory_reserved() - base_res) / 2**20:.1f} MiB")
    print(segments())
    if args.fresh_streams:
        return

    print("\nper-call parts, ms (median of 100): call+sync | host only (no sync) | replay host | "
          "replay GPU (events) | copy-in host | slice+clone host | eager call+sync")
    with torch.no_grad():
        for T in (1, 5, 24, 40, 64, 100, 300, 512):
            x = inputs[T]
            route = f._routes[next(k for k in f._routes if k[0][0] == x.shape)]
            e = route.entry
            call = med_ms(lambda: (f(x), torch.cuda.synchronize()))

            def host_only():
                f(x)
            hs = []
            for _ in range(100):
                t1 = time.perf_counter()
                host_only()
                hs.append(time.perf_counter() - t1)
                torch.cuda.synchronize()
            host = statistics.median(hs) * 1e3
            rh = []
            for _ in range(100):
                t1 = time.perf_counter()
                e.graph.replay()
                rh.append(time.perf_counter() - t1)
                torch.cuda.synchronize()
            replay_host = statistics.median(rh) * 1e3
            replay_gpu = gpu_ms(e.graph.replay)
            view = route.views[0]
            copy_in = med_ms(lambda: (view if view is not None else e.inputs[0]).copy_(x))
            idx = route.slices[0]
            out_ms = med_ms(lambda: (e.outputs[0][idx] if idx is not None else e.outputs[0]).clone())
            eager = med_ms(lambda: (model(x), torch.cuda.synchronize()))
            torch.cuda.synchronize()
            print(f"  T={T:<4} bucket {e.key[0]:<4} {call:7.3f} {host:7.3f} {replay_host:7.3f} {replay_gpu:7.3f} "
                  f"{copy_in:7.3f} {out_ms:7.3f}   eager {eager:7.3f}")

        print("\nGPU ms of the model's matmuls (F.linear, one layer's four) by rows M:")
        ws = [(768, 2304), (768, 768), (768, 3072), (3072, 768)]
        mats = [(torch.randn(o, i, device=dev), torch.randn(o, device=dev)) for i, o in ws]
        for M in (1, 8, 16, 24, 32, 40, 48, 64, 128, 256, 512):
            xs = [torch.randn(1, M, i, device=dev) for i, _ in ws]
            per = [gpu_ms(lambda a=a, w=w, b=b: F.linear(a, w, b)) for a, (w, b) in zip(xs, mats)]
            print(f"  M={M:<4} " + " ".join(f"{p:.4f}" for p in per) + f"  sum {sum(per):.4f}")

        from torch.profiler import ProfilerActivity, profile
        x = inputs[40]
        for _ in range(5):
            f(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                f(x)
                torch.cuda.synchronize()
        print("\nprofile of 20 graph calls at T=40 (bucket 64), by self CUDA time:")
        print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=14, max_name_column_width=60))
        print("by self CPU time:")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10, max_name_column_width=60))

        fine = compiler.compile(model, "ids: i64[1, T]", dims={"T": (1, args.max_t)}, target="triton",
                                cuda_graphs=True, buckets={"T": [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]})
        for T in (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64):
            fine(inputs[T])
        print("\nreplay GPU ms with finer buckets (T<=64): " + ", ".join(
            f"{e.key[0]}: {gpu_ms(e.graph.replay):.3f}" for (_, k), e in sorted(fine.graphs.items(),
                                                                              key=lambda kv: kv[0][1])))


if __name__ == "__main__":
    main()
