"""Where one training step's time goes: kernels by kind, launches, host time, per mode.

Builds a model of :mod:`bench.train_compare` (same sizes), compiles it in each
``--modes`` mode, warms it up at three lengths, then profiles ``--steps`` steps
at one more length with ``torch.profiler`` and prints, side by side per mode:
wall ms per step at new lengths (one step each; three groups one after the other,
and the CUDA segments allocated per new-length step) and at a fixed length,
wall ms per step, device busy ms per step (the sum of kernel times), host ms not
covered by kernels (wall - busy), kernel launches per step, and busy ms by kernel
kind (matmul libraries, symshape/Inductor Triton kernels, C++ kernels, other ATen
kernels), then each mode's top kernels.

Usage::

    python bench/train_profile.py --model gpt2 --dtype bf16 --modes eager,symshape

Example::

    >>> kernel_kind("sm90_xmma_gemm_bf16bf16_bf16f32")
    'matmul'
    >>> kernel_kind("triton_poi_fused_add_0")
    'inductor'
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

_MATMUL = ("gemm", "cutlass", "xmma", "sm90_", "sm80_", "cublas", "matmul", "mm_", "addmm", "bmm", "flash",
           "fmha", "attention", "cudnn")


def kernel_kind(name: str) -> str:
    """A kernel's kind from its name: ``matmul`` (cuBLAS, CUTLASS, attention), ``inductor``
    (``triton_*``), ``symshape`` (its scheduler names kernels ``kernelN``) or ``aten``.

    >>> kernel_kind("kernel12"), kernel_kind("void at::native::reduce_kernel<128>")
    ('symshape', 'aten')
    """
    low = name.lower()
    if any(k in low for k in _MATMUL):
        return "matmul"
    if low.startswith("triton"):
        return "inductor"
    if low.startswith("kernel") and low[6:].isdigit():
        return "symshape"
    return "aten"


def _step(fn, b, opt, device, dtype):
    with torch.autocast(device_type=device, dtype=dtype, enabled=dtype != torch.float32):
        loss = fn(**b).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def _segments(device) -> int:
    """CUDA segments the caching allocator got from the driver so far (``cudaMalloc`` calls)."""
    return torch.cuda.memory_stats().get("num_device_alloc", 0) if device == "cuda" else 0


def _busy_ms(prof, steps) -> float:
    """Device busy ms per step: the sum of the CUDA kernel times ``prof`` recorded."""
    return sum((e.device_time if hasattr(e, "device_time") else e.cuda_time) for e in prof.events()
               if e.device_type == torch.autograd.DeviceType.CUDA) / 1e3 / steps


def new_vs_fixed(fn, batch, g, opt, device, dtype, length, steps, host_profile=False, offset=0, stride=1) -> dict:
    """What a new length costs: wall ms per step at one fixed ``length`` (after a first step
    there) and at ``4 * steps`` lengths never seen before (one step each); on CUDA, device busy
    ms per step at other new lengths (torch.profiler); with ``host_profile``, cProfile's top
    host functions (own time) over more new-length steps.  New lengths are ``length - 1 - offset``
    downwards in steps of ``stride`` (one offset per mode: no two modes meet one shape)."""
    import cProfile
    import io
    import pstats
    n = 4 * steps
    # Never the warm-up lengths (above length or 105), nor another mode's (per-shape caches such as
    # cuBLAS's heuristics are process-wide: a shape met before costs less).
    fresh = iter(range(length - 1 - offset, 0, -stride))
    fixed = fixed_length_ms(fn, batch(length, g), opt, device, dtype, n)

    def run_new(count):
        for bb in [batch(next(fresh), g) for _ in range(count)]:
            _step(fn, bb, opt, device, dtype)
        tc._sync(device)

    # Three groups of new lengths, one after the other: a per-shape cost that decays (kernel
    # variants loaded at their first launch) against one paid at every new shape.
    groups, segs = [], 0
    for _ in range(3):
        s0 = _segments(device)
        t = time.perf_counter()
        run_new(n)
        groups.append((time.perf_counter() - t) / n * 1e3)
        segs += _segments(device) - s0
    newl = groups[0]
    busy_new = float("nan")
    if device == "cuda":
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            run_new(steps)
        busy_new = _busy_ms(prof, steps)
    text = ""
    if host_profile:
        prof = cProfile.Profile()
        prof.enable()
        run_new(n)
        prof.disable()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(30)
        pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(45)
        text = out.getvalue()
    return dict(new_ms=newl, new2_ms=groups[1], new3_ms=groups[2], segs_per_new=segs / (3 * n), fixed_ms=fixed,
                busy_new=busy_new, host_profile=text)


def fixed_length_ms(fn, b, opt, device, dtype, steps) -> float:
    """Wall ms per training step on batch ``b`` repeated ``steps`` times, after one step at its
    length that is not timed (a first call at a shape pays its own costs)."""
    _step(fn, b, opt, device, dtype)
    tc._sync(device)
    t = time.perf_counter()
    for _ in range(steps):
        _step(fn, b, opt, device, dtype)
    tc._sync(device)
    return (time.perf_counter() - t) / steps * 1e3


def profile_mode(mode, name, dtype, device, warm, length, steps, offset=0, stride=1, top=18) -> dict:
    """Profile ``steps`` steps of ``mode`` at ``length`` after warm-up steps at ``warm`` lengths;
    ``top``: how many kernels (by time) to keep, each with its launches per step."""
    if mode.endswith("_nocudnn"):  # cuDNN's SDPA off, as in train_compare
        with cudnn_sdp_off():
            return profile_mode(mode.removesuffix("_nocudnn"), name, dtype, device, warm, length, steps,
                                offset, stride, top)
    model, batch = tc.build(name, device, max(warm + [length]) + 1)
    g = torch.Generator().manual_seed(0)
    fn = tc._compiled(mode, model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    t0 = time.perf_counter()
    for L in warm:
        _step(fn, batch(L, g), opt, device, dtype)
    tc._sync(device)
    warm_s = time.perf_counter() - t0
    new = new_vs_fixed(fn, batch, g, opt, device, dtype, length, steps, host_profile=mode == "symshape",
                       offset=offset, stride=stride)
    b = batch(length, g)
    wall = fixed_length_ms(fn, b, opt, device, dtype, steps)
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device == "cuda" else [])
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(steps):
            _step(fn, b, opt, device, dtype)
        tc._sync(device)
    by_kind, by_name, count, launches = defaultdict(float), defaultdict(float), defaultdict(int), 0
    for e in prof.events():
        if device == "cuda" and e.device_type == torch.autograd.DeviceType.CUDA:
            us = e.device_time if hasattr(e, "device_time") else e.cuda_time
            by_kind[kernel_kind(e.name)] += us / 1e3 / steps
            by_name[e.name[:90]] += us / 1e3 / steps
            count[e.name[:90]] += 1
            launches += 1
        elif device == "cpu" and e.device_type == torch.autograd.DeviceType.CPU and e.name.startswith("aten::"):
            by_name[e.name] += e.self_cpu_time_total / 1e3 / steps
            count[e.name] += 1
    busy = sum(by_kind.values())
    return dict(**new, wall=wall, busy=busy, host=wall - busy, launches=launches / steps, by_kind=dict(by_kind),
                top=[(n, ms, count[n] / steps) for n, ms in sorted(by_name.items(), key=lambda kv: -kv[1])[:top]],
                warm_s=warm_s)


class cudnn_sdp_off:
    """cuDNN's SDPA off within (the ``_nocudnn`` modes of :mod:`bench.train_compare`), restored after."""

    def __enter__(self):
        self.was = torch.backends.cuda.cudnn_sdp_enabled()
        torch.backends.cuda.enable_cudnn_sdp(False)

    def __exit__(self, *exc):
        torch.backends.cuda.enable_cudnn_sdp(self.was)


def step_args(description, model="gpt2", steps=3):
    """The parser this script and :mod:`bench.train_host` share: device, model, dtype, modes,
    length and steps (``--dtype`` read as ``a.torch_dtype``)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--model", default=model)
    ap.add_argument("--dtype", default="bf16", choices=("fp32", "bf16"))
    ap.add_argument("--modes", default="eager,symshape")
    ap.add_argument("--length", type=int, default=587)
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--top", type=int, default=18, help="ops or kernels listed per mode (by time per step)")
    return ap


def main(argv=None):
    a = step_args(__doc__.split("\n")[0]).parse_args(argv)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[a.dtype]
    import compiler
    res = {}
    modes = a.modes.split(",")
    for k, m in enumerate(modes):
        fb0 = compiler.BACKEND_STATS.get("eager_train_graphs", 0)
        res[m] = profile_mode(m, a.model, dtype, a.device, [928, 458, 105], a.length, a.steps, k, len(modes), a.top)
        res[m]["fallbacks"] = compiler.BACKEND_STATS.get("eager_train_graphs", 0) - fb0
    kinds = sorted({k for r in res.values() for k in r["by_kind"]})
    print(f"{a.model} {a.dtype} {a.device} length {a.length} "
          f"({torch.cuda.get_device_name() if a.device == 'cuda' else 'CPU'}, torch {torch.__version__})")
    print(f"{'':<14}" + "".join(f"{m:>12}" for m in res))
    for key in ("new_ms", "new2_ms", "new3_ms", "segs_per_new", "fixed_ms", "busy_new", "wall", "busy", "host", "launches", "fallbacks", "warm_s"):
        print(f"{key + (' ms' if key in ('wall', 'busy', 'host', 'busy_new') else ''):<14}"
              + "".join(f"{r[key]:>12.2f}" for r in res.values()))
    for k in kinds:
        print(f"{'  ' + k + ' ms':<14}" + "".join(f"{r['by_kind'].get(k, 0.0):>12.2f}" for r in res.values()))
    for m, r in res.items():
        print(f"\ntop kernels, {m} (ms per step, launches per step)")
        for n, ms, per in r["top"]:
            print(f"  {ms:8.3f} {per:5.1f}x  [{kernel_kind(n)}] {n}")
    for m, r in res.items():
        if r["host_profile"]:
            print(f"\nhost profile, {m}, steps at new lengths (cProfile, wall includes its overhead)")
            print(r["host_profile"])


if __name__ == "__main__":
    main()
