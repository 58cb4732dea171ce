"""Where the host time of a compiled call goes on the GPU machine: per-op costs and profiles.

Prints (``--parts``) ``ops``: the host cost of one Triton launch through
``JITFunction`` and through the compiled kernel's own launcher, and of the ATen
calls a wrapper makes; ``calls``: per mode at the tiny size, the host loop's
time per call, do_bench's, and a cProfile (plus a kernel table for GPT-2);
``breakdown``: the backend's first call split into dynamo's capture, the
backend (trace, lowering, codegen) and the first run (kernel builds);
``compile``: a cProfile of that first call; ``models``: a real Hugging Face model
(Llama fp16 by default, :mod:`bench.gpu_models`'s config) per mode and size: the host
time of one call (GPU idle before it, so nothing waits on the queue), the loop's wall
time per call, the sum of GPU kernel time per call and the kernel launches per call
(torch.profiler), the top host functions of the compiled modes' call path (cProfile),
and each mode's kernel table.

Usage (on a CUDA machine)::

    python bench/gpu_host_probe.py                    # ops, calls, breakdown
    python bench/gpu_host_probe.py --only gpt2,mlp    # some workloads
    python bench/gpu_host_probe.py --parts models --model llama --points 4x128,4x2047

Example (the per-op timer)::

    >>> per_call_us(lambda: None, n=10) >= 0
    True
"""
from __future__ import annotations

import argparse
import cProfile
import io
import math
import os
import pstats
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import compiler  # noqa: E402
import gpu_compare as gc  # noqa: E402


def per_call_us(fn, n=2000) -> float:
    """Mean host microseconds per call of ``fn`` over ``n`` calls (CUDA synchronized at the ends)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6


def op_costs():
    import triton
    import triton.language as tl

    @triton.jit(do_not_specialize=["n"])
    def add1(a, b, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(b + i, tl.load(a + i, mask=i < n) + 1, mask=i < n)

    a = torch.randn(64, device="cuda", dtype=torch.float16)
    b = torch.empty_like(a)
    k = add1[(1,)](a, b, 64, BLOCK=1024, num_warps=4)
    stream = torch.cuda.current_stream().cuda_stream
    rows = [("triton JITFunction launch", lambda: add1[(1,)](a, b, 64, BLOCK=1024, num_warps=4)),
            ("triton CompiledKernel.run", lambda: k.run(1, 1, 1, stream, k.function, k.packed_metadata, None,
                                                       None, None, a, b, 64, 1024)),
            ("cuda raw stream", lambda: torch._C._cuda_getCurrentRawStream(0))]
    x = torch.randn(8, 768, device="cuda", dtype=torch.float16)
    w = torch.randn(2304, 768, device="cuda", dtype=torch.float16)
    bias = torch.randn(2304, device="cuda", dtype=torch.float16)
    wt = w.t()
    rows += [("empty_strided", lambda: torch.empty_strided((8, 768), (768, 1), dtype=torch.float16, device=x.device)),
             ("is_contiguous", lambda: x.is_contiguous()), ("data_ptr", lambda: x.data_ptr()),
             ("Tensor.view", lambda: x.view(2, 4, 768)), ("torch.t", lambda: torch.t(w)),
             ("torch.addmm", lambda: torch.addmm(bias, x, wt)),
             ("F.linear", lambda: torch.nn.functional.linear(x, w, bias)),
             ("t + addmm", lambda: torch.addmm(bias, x, torch.t(w))),
             ("as_strided", lambda: torch.as_strided(x, (2, 4, 768), (3072, 768, 1), 0))]
    b2 = add1[(1,)](a, b, 64, BLOCK=1024, num_warps=4)
    assert b2 is k
    k.run(1, 1, 1, stream, k.function, k.packed_metadata, None, None, None, a, b, 64, 1024)
    torch.cuda.synchronize()
    print("direct launch correct:", torch.equal(b, a + 1))
    for name, fn in rows:
        print(f"  {name:<28} {per_call_us(fn):7.2f} us")


def call_profile(w, mode, calls=300):
    torch.manual_seed(0)
    prog = gc._as_module(w.make(), torch.float16, "cuda")
    args = w.inputs(w.tiny, "cuda", torch.float16)
    torch._dynamo.reset()
    if mode == "eager":
        f = prog
    elif mode == "symshape":
        f = compiler.compile(prog, *w.specs, target="triton")
    elif mode == "inductor_dyn":
        f = torch.compile(prog, dynamic=True)
    else:
        f = torch.compile(prog, backend="symshape", dynamic=True)
    with torch.no_grad():
        for n in (w.sizes[0], w.tiny):
            f(*w.inputs(n, "cuda", torch.float16))
        us = per_call_us(lambda: f(*args), n=calls)
        bench_us = gc._bench(f, args) * 1e3
    print(f"\n==== {w.name} {mode} tiny: {us:.1f} us/call host loop, do_bench {bench_us:.1f} us ====")
    if mode == "inductor_dyn":
        return
    if mode == "symshape" and w.name == "gpt2":
        kernel_table(f, args)
    pr = cProfile.Profile()
    with torch.no_grad():
        pr.enable()
        for _ in range(calls):
            f(*args)
        pr.disable()
    out = io.StringIO()
    pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(14)
    print("\n".join(ln for ln in out.getvalue().splitlines()[6:] if ln.strip()))


def kernel_table(f, args):
    """torch.profiler's table of 5 calls: CPU ops and CUDA kernels, by CUDA time."""
    from torch.profiler import ProfilerActivity, profile
    with torch.no_grad():
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
            for _ in range(5):
                f(*args)
            torch.cuda.synchronize()
    print(p.key_averages().table(sort_by="cuda_time_total", row_limit=22, max_name_column_width=60))


def compile_breakdown(w):
    """The backend's first call after compiler.compile warmed the process (the bench's order):
    dynamo's capture, the backend (trace, lowering, codegen), the first run (kernel builds)."""
    torch.manual_seed(0)
    prog = gc._as_module(w.make(), torch.float16, "cuda")
    args = w.inputs(w.sizes[0], "cuda", torch.float16)
    with torch.no_grad():
        # Dynamo's one-time start-up (imports, config) is not this graph's capture: warm it.
        torch.compile(lambda t: t * 2 + 1, backend="eager", dynamic=True)(args[0])
        t0 = time.perf_counter()
        compiler.compile(prog, *w.specs, target="triton")(*args)
        torch.cuda.synchronize()
        t_sym = time.perf_counter() - t0
        torch._dynamo.reset()
        before = dict(compiler.BACKEND_STATS)
        f = torch.compile(prog, backend="symshape", dynamic=True)
        t0 = time.perf_counter()
        f(*args)
        torch.cuda.synchronize()
        total = time.perf_counter() - t0
    bk = compiler.BACKEND_STATS["compile_s"] - before["compile_s"]
    first = compiler.BACKEND_STATS["first_call_s"] - before["first_call_s"]
    print(f"\n==== {w.name} compile: compiler.compile {t_sym:.2f}s; backend first call {total:.2f}s = "
          f"dynamo {total - bk - first:.2f}s + backend {bk:.2f}s + first run {first:.2f}s ====")


def compile_profile(w):
    torch.manual_seed(0)
    torch._dynamo.reset()
    prog = gc._as_module(w.make(), torch.float16, "cuda")
    args = w.inputs(w.sizes[0], "cuda", torch.float16)
    f = torch.compile(prog, backend="symshape", dynamic=True)
    pr = cProfile.Profile()
    t0 = time.perf_counter()
    with torch.no_grad():
        pr.enable()
        f(*args)
        torch.cuda.synchronize()
        pr.disable()
    out = io.StringIO()
    pstats.Stats(pr, stream=out).sort_stats("cumtime").print_stats(300)
    keep = ("compile_frame", "call_user_compiler", "symshape_backend", "runtime.py", "tracer.py:", "build_guards",
            "make_launchers", "kernel_for", "triton/compiler/compiler.py", "jit.py", "_do_compile", "lower(",
            "schedule(", "Variant", "wrapper.py", "fuse_causal")
    print(f"\n==== {w.name} backend first call {time.perf_counter() - t0:.2f}s ====")
    for ln in out.getvalue().splitlines():
        if any(k in ln for k in keep):
            print(ln[:160])


def host_us(fn, n=30) -> float:
    """Median host microseconds of one call started with the GPU idle (no wait on a full queue)."""
    times = []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return sorted(times)[n // 2] * 1e6


def gpu_kernels(fn, calls=5):
    """(kernel us per call, launches per call, profiler) over ``calls`` calls: device-side events only."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    ks = [e for e in p.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    total = sum(e.device_time for e in ks) if ks and hasattr(ks[0], "device_time") else \
        sum(e.cuda_time for e in ks)
    return total / calls, len(ks) / calls, p


def _model_fn(mode, prog, specs):
    if mode == "eager":
        return prog
    if mode == "symshape":
        return compiler.compile(prog, *specs, target="triton")
    if mode == "backend":
        return torch.compile(prog, backend="symshape", dynamic=True)
    return torch.compile(prog, dynamic=(mode == "inductor_dyn"))


def model_profile(name, dtype_name, points, modes, calls=200):
    """Per mode and point: host us per call, loop wall us per call, GPU kernel us and launches per call;
    cProfile of the compiled modes' call path and every mode's kernel table."""
    import gpu_models as gm
    case = next(c for c in gm.CASES if c.name == name)
    dtype = gm.DTYPES[dtype_name]
    torch.manual_seed(0)
    prog = case.make(False).eval().to("cuda", dtype)
    short = {torch.float16: "f16", torch.bfloat16: "bf16"}[dtype]
    specs = tuple(s.replace("{dt}", short) for s in case.specs)
    g = torch.Generator().manual_seed(1)
    inputs = {p: case.inputs(*p, "cuda", dtype, g, False) for p in points}
    rows = []
    for mode in modes:
        torch._dynamo.reset()
        try:
            _profile_mode(name, dtype_name, mode, prog, specs, points, inputs, rows, calls)
        except Exception as e:  # noqa: BLE001 - a mode that fails is a row of the report, not the end of it
            print(f"\n#### {name} {dtype_name} {mode} FAILED: {type(e).__name__}: {str(e)[:300]}")
            rows.append((mode, "FAILED", math.nan, math.nan, math.nan, math.nan, math.nan))
    print(f"\n{torch.cuda.get_device_name()} {name} {dtype_name}: us per call")
    print(f"  {'mode':<16} {'B,T':<11} {'host':>8} {'loop':>8} {'do_bench':>9} {'GPU kern':>9} {'launches':>9} "
          f"{'host/launch':>12}")
    for mode, p, h, wall, bench, gpu, launches in rows:
        print(f"  {mode:<16} {str(p):<11} {h:8.0f} {wall:8.0f} {bench:9.0f} {gpu:9.0f} {launches:9.0f} "
              f"{h / max(launches, 1):12.2f}")


def _profile_mode(name, dtype_name, mode, prog, specs, points, inputs, rows, calls):
    """One mode of :func:`model_profile`: a row per point into ``rows``, tables printed."""
    t0 = time.perf_counter()
    f = _model_fn(mode, prog, specs)
    with torch.no_grad():
        for p in points:
            f(*inputs[p])
        torch.cuda.synchronize()
        print(f"\n#### {name} {dtype_name} {mode}: built and first calls in {time.perf_counter() - t0:.1f}s")
        for p in points:
            call = (lambda a=inputs[p]: f(*a))
            for _ in range(3):
                call()
            h = host_us(call)
            wall = per_call_us(call, n=calls)
            bench = gc._bench(f, inputs[p]) * 1e3
            gpu, launches, prof = gpu_kernels(call)
            rows.append((mode, p, h, wall, bench, gpu, launches))
            print(f"==== {name} {mode} {p}: host {h:.0f} us/call (GPU idle before), loop {wall:.0f} us/call, "
                  f"do_bench {bench:.0f} us, GPU kernels {gpu:.0f} us/call, {launches:.0f} launches/call ====")
            print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=18, max_name_column_width=70))
            if mode in ("symshape", "backend"):
                pr = cProfile.Profile()
                pr.enable()
                for _ in range(50):
                    call()
                pr.disable()
                torch.cuda.synchronize()
                out = io.StringIO()
                pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(25)
                print(f"cProfile of 50 calls ({mode} {p}), by own time:")
                print("\n".join(ln for ln in out.getvalue().splitlines()[6:] if ln.strip()))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="gpt2,ln_residual,mlp")
    ap.add_argument("--parts", default="ops,calls,breakdown", help="of ops,calls,breakdown,compile,models")
    ap.add_argument("--model", default="llama", help="models part: a bench/gpu_models.py case")
    ap.add_argument("--dtype", default="fp16", help="models part: fp16 or bf16")
    ap.add_argument("--points", default="4x128,4x2047", help="models part: BxT points")
    ap.add_argument("--modes", default="eager,symshape,backend,inductor_static,inductor_dyn")
    a = ap.parse_args(argv)
    parts = a.parts.split(",")
    print(f"{torch.cuda.get_device_name()} torch={torch.__version__} triton={__import__('triton').__version__}")
    if "ops" in parts:
        op_costs()
    if "models" in parts:
        pts = [tuple(int(x) for x in p.split("x")) for p in a.points.split(",")]
        model_profile(a.model, a.dtype, pts, a.modes.split(","))
    chosen = [w for w in gc.WORKLOADS if w.name in a.only.split(",")]
    for w in chosen:
        if "compile" in parts and w.name == "gpt2":
            compile_profile(w)
        if "breakdown" in parts:
            compile_breakdown(w)
        if "calls" in parts:
            for mode in ("eager", "symshape", "backend", "inductor_dyn"):
                call_profile(w, mode)


if __name__ == "__main__":
    main()
