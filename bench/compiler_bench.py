"""Eager PyTorch vs symshape's compiler, one compiled artifact across sizes.

For each program it compiles once (timed: trace + lowering + codegen +
build), then runs every size through the same compiled object and checks
the result against eager before timing it.  ``variants`` is the number of
compiled variants after all sizes (1 = no recompilation).

Usage::

    python bench/compiler_bench.py                   # cpp on CPU, triton with CUDA
    python bench/compiler_bench.py --target triton   # on a GPU machine
    python bench/compiler_bench.py --quick           # fewer sizes and repeats
    python bench/compiler_bench.py --dtype f16       # half-precision inputs and weights
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import compiler  # noqa: E402
from tests.compiler_programs import Attention, MLPBlock, pointwise_zoo  # noqa: E402


def softmax_ln(x):
    """Reduction-heavy: softmax, then LayerNorm without affine, then GELU."""
    y = torch.softmax(x * 0.5, dim=-1)
    return F.gelu(F.layer_norm(y + x, x.shape[-1:]))


SHORT = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}


def programs(device, quick, dtype=torch.float32):
    big = [(8, 128), (16, 512), (32, 1024)] if not quick else [(4, 64), (8, 256)]
    d = SHORT[dtype]

    def rand(*shape):
        return torch.randn(*shape, device=device).to(dtype)
    return [
        ("mlp_ln_gelu d=256", MLPBlock(256, 1024).to(device, dtype).eval(), [f"x: {d}[B, T, 256]"],
         lambda B, T: [rand(B, T, 256)], big),
        ("attention d=128", Attention(128).to(device, dtype).eval(), [f"x: {d}[B, T, 128]"],
         lambda B, T: [rand(B, T, 128)], [(s[0], s[1] // 2) for s in big]),
        ("softmax+ln+gelu", softmax_ln, [f"x: {d}[B, T, 1024]"],
         lambda B, T: [rand(B, T, 1024)], [(s[0], s[1] // 4) for s in big]),
        ("pointwise zoo", pointwise_zoo, [f"x: {d}[B, T]", f"y: {d}[B, T]"],
         lambda B, T: [rand(B * 64, T), rand(B * 64, T)], big),
    ]


def timeit(fn, args, device, reps):
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(3):
        fn(*args)
    sync()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(*args)
        sync()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", choices=["cpp", "triton"], default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--dtype", choices=["f32", "f16", "bf16"], default="f32")
    a = ap.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    target = a.target or ("triton" if device == "cuda" else "cpp")
    if target == "cpp" and device == "cuda":
        device = "cpu"
    reps = a.reps or (5 if a.quick else 20)
    print(f"device={device} ({torch.cuda.get_device_name() if device == 'cuda' else f'{torch.get_num_threads()} threads'}) "
          f"target={target} dtype={a.dtype} torch={torch.__version__}")
    dtype = {v: k for k, v in SHORT.items()}[a.dtype]
    hdr = f"{'program':<20} {'sizes (B,T)':<12} {'eager ms':>10} {'symshape ms':>12} {'speedup':>8} {'max err':>9}"
    print(hdr)
    print("-" * len(hdr))
    torch.manual_seed(0)
    with torch.no_grad():
        for name, prog, specs, make, sizes in programs(device, a.quick, dtype):
            t0 = time.perf_counter()
            f = compiler.compile(prog, *specs, target=target)
            first = make(*sizes[0])
            f(*first)
            compile_s = time.perf_counter() - t0
            for B, T in sizes:
                args = make(B, T)
                out, ref = f(*args), prog(*args)
                err = (out.float() - ref.float()).abs().max().item()
                te = timeit(prog, args, device, reps)
                ts = timeit(f, args, device, reps)
                print(f"{name:<20} {f'{B},{T}':<12} {te * 1e3:>10.3f} {ts * 1e3:>12.3f} {te / ts:>7.2f}x {err:>9.1e}")
            v = f.variants[0]
            print(f"{'':<20} compile {compile_s:.2f}s (first call), variants={f.stats['variants']}, "
                  f"kernels={len(v.kernels)}, externs={v.lp.externs}")


if __name__ == "__main__":
    main()
