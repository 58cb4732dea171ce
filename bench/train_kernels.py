"""One training step's kernels, named by graph: symshape's plan (kernels and ATen calls, in
order) per compiled graph, and torch.profiler's device time per kernel and per ATen op.

symshape's scheduler names kernels ``kernelN`` per graph, so a step's forward and backward
kernels share names; here the ``g``-th graph compiled numbers its kernels from ``1000 * g``
(forward ``kernel1xxx``, backward ``kernel2xxx``), so a kernel's time reads against the plan.

Usage::

    python bench/train_kernels.py --model llama --mode symshape --length 587

Example::

    >>> _rename_from(2000)([])
    []
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import train_compare as tc  # noqa: E402
from bench.train_profile import _step, fixed_length_ms  # noqa: E402

PROGRAMS: list = []


def _rename_from(base):
    """A post-pass for the scheduler's steps: kernels renamed ``kernel{base + i}``."""
    def rename(steps):
        from compiler.ir import Kernel
        for i, s in enumerate(steps):
            if isinstance(s, Kernel):
                s.name = f"kernel{base + i}"
        return steps
    return rename


def _instrument():
    """Number each compiled graph's kernels apart and keep (graph, compiled) pairs."""
    from compiler import training, variant
    sched, orig = variant.schedule, training._compile_aten_graph
    count = [0]

    def schedule(lp):
        count[0] += 1
        return _rename_from(1000 * count[0])(sched(lp))

    def compile_graph(gm, ex, *, target, graph, stats):
        r = orig(gm, ex, target=target, graph=graph, stats=stats)
        PROGRAMS.append((graph, r))
        return r
    variant.schedule = schedule
    training._compile_aten_graph = compile_graph


def print_plan():
    """Each compiled graph's steps: kernels (rows, reductions, stores) and ATen calls."""
    from compiler.ir import Kernel
    for graph, r in PROGRAMS:
        comp = getattr(r, "compiled", None)
        print(f"===== {graph} graph: {'FALLBACK (ATen graph)' if comp is None else ''}")
        if comp is None:
            continue
        for s in comp.variants[0].steps:
            if isinstance(s, Kernel):
                st = [(b.name, tuple(b.shape), str(b.dtype)[6:]) for b, *_ in s.row_stores + s.inner_stores]
                print(f"  {s.name:12s} outer={s.outer} reds={len(s.reductions)} reads={sorted(s.reads)} stores={st}")
            else:
                out = s.out.name if hasattr(s.out, "name") else getattr(s.out, "value", s.out)
                shape = tuple(s.out.shape) if hasattr(s.out, "shape") else ""
                print(f"  EXTERN {getattr(s.target, '__name__', s.target)} -> {out} {shape}")


def profile(fn, b, opt, device, dtype, steps):
    """Per kernel and per ATen op device ms per step, and the chronological kernels of one step."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            _step(fn, b, opt, device, dtype)
        tc._sync(device)
    by_name, seq = defaultdict(float), []
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            us = e.device_time if hasattr(e, "device_time") else e.cuda_time
            by_name[e.name[:110]] += us / 1e3 / steps
            seq.append((e.time_range.start, e.name[:110], us))
    print(f"busy ms per step {sum(by_name.values()):.2f}")
    print("per kernel, ms per step")
    for n, ms in sorted(by_name.items(), key=lambda kv: -kv[1])[:60]:
        print(f"  {ms:8.3f}  {n}")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=45, max_name_column_width=60))
    seq.sort()
    per = len(seq) // steps
    print(f"one step's kernels in order ({per}), us")
    for _, n, us in seq[-per:]:
        print(f"  {us:8.1f}  {n}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--model", default="llama")
    ap.add_argument("--mode", default="symshape")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--length", type=int, default=587)
    ap.add_argument("--steps", type=int, default=3)
    a = ap.parse_args(argv)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[a.dtype]
    mode = a.mode
    if mode.endswith("_nocudnn") and a.device == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(False)
    mode = mode.removesuffix("_nocudnn")
    if mode == "symshape":
        _instrument()
    model, batch = tc.build(a.model, a.device, 1100)
    g = torch.Generator().manual_seed(0)
    fn = tc._compiled(mode, model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    t0 = time.perf_counter()
    for L in (928, 458, 105):
        _step(fn, batch(L, g), opt, a.device, dtype)
    tc._sync(a.device)
    print(f"{a.model} {a.dtype} {a.mode} warm-up {time.perf_counter() - t0:.1f}s")
    new = [batch(L, g) for L in range(a.length - 1, a.length - 21, -1)]
    t0 = time.perf_counter()
    for bb in new:
        _step(fn, bb, opt, a.device, dtype)
    tc._sync(a.device)
    print(f"new lengths: {(time.perf_counter() - t0) / len(new) * 1e3:.2f} ms/step")
    b = batch(a.length, g)
    print(f"fixed length {a.length}: {fixed_length_ms(fn, b, opt, a.device, dtype, 10):.2f} ms/step")
    if a.device == "cuda":
        print(f"peak MiB {torch.cuda.max_memory_allocated() / 2**20:.0f}")
        profile(fn, b, opt, a.device, dtype, a.steps)
    print_plan()


if __name__ == "__main__":
    main()
