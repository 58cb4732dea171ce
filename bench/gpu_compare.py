"""Six fp16 workloads on the GPU: eager, Inductor (dynamic and static), symshape's compiler and backend.

Every mode of a workload runs in one process on the same inputs.  Per size:
the median of ``triton.testing.do_bench`` in ms, and the error against an
fp32 eager reference (``max|out - ref| / max|ref|``).  Per mode: compile
time (first calls, summed over the compiles a sweep needs), traces and
recompiles across the sweep, and the per-call time at a tiny size (host
overhead: nothing on the GPU takes long there).  The last table gives
speedups and geomeans.

Usage (on a CUDA machine)::

    python bench/gpu_compare.py                      # all six workloads
    python bench/gpu_compare.py --quick              # fewer sizes
    python bench/gpu_compare.py --only mlp,attn      # some workloads
    python bench/gpu_compare.py --profile prof.txt   # + a kernel list of symshape at one size

Example (a workload's sizes)::

    >>> [w.name for w in WORKLOADS]
    ['mlp', 'ln_residual', 'softmax_bias', 'attn', 'rmsnorm_swiglu', 'gpt2']
"""
from __future__ import annotations

import argparse
import copy
import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import compiler  # noqa: E402


class MLP(nn.Module):
    """Linear -> GELU -> Linear (2048 -> 8192 -> 2048)."""

    def __init__(self, d=2048, h=8192):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class LNResidual(nn.Module):
    """LayerNorm(x + r) * 1.5 + 0.1."""

    def __init__(self, d=4096):
        super().__init__()
        self.ln = nn.LayerNorm(d)

    def forward(self, x, r):
        return self.ln(x + r) * 1.5 + 0.1


def softmax_bias(x, bias):
    """softmax(x * 0.125 + bias) over rows."""
    return torch.softmax(x * 0.125 + bias, dim=-1)


class CausalSelfAttention(nn.Module):
    """Multi-head causal attention written out by hand: QK^T * s, a tril mask, softmax, V."""

    def __init__(self, d=768, heads=12):
        super().__init__()
        self.qkv, self.proj, self.h = nn.Linear(d, 3 * d), nn.Linear(d, d), heads

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)
        q = q.view(B, T, self.h, C // self.h).transpose(1, 2)
        k = k.view(B, T, self.h, C // self.h).transpose(1, 2)
        v = v.view(B, T, self.h, C // self.h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.h))
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(B, T, C))


class RMSNormSwiGLU(nn.Module):
    """RMSNorm, then SwiGLU 4096 -> 11008 -> 4096."""

    def __init__(self, d=4096, h=11008):
        super().__init__()
        self.w = nn.Parameter(torch.ones(d))
        self.gate, self.up, self.down = nn.Linear(d, h, bias=False), nn.Linear(d, h, bias=False), \
            nn.Linear(h, d, bias=False)

    def forward(self, x):
        n = x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * self.w
        return self.down(F.silu(self.gate(n)) * self.up(n))


class GPT2Block(nn.Module):
    def __init__(self, d=768, heads=12):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2(nn.Module):
    """GPT-2's transformer stack (2 layers, d=768) on hidden states."""

    def __init__(self, layers=2, d=768):
        super().__init__()
        self.blocks = nn.ModuleList(GPT2Block(d) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.ln_f(x)


@dataclass
class Workload:
    """One program, its specs, a size sweep, the tiny size, and how to make inputs at a size."""

    name: str
    make: Callable  # () -> program (module or function)
    specs: tuple
    sizes: list
    tiny: int
    inputs: Callable  # (n, device, dtype) -> list of tensors
    small_graph: bool  # a 3-5-op graph: the per-call overhead target applies


def _r(*shape, device, dtype):
    return torch.randn(*shape, device=device, dtype=torch.float32).to(dtype)


WORKLOADS = [
    Workload("mlp", MLP, ("x: f16[N, 2048]",), [129, 512, 1000, 2048, 4097, 8192], 2,
             lambda n, dv, dt: [_r(n, 2048, device=dv, dtype=dt)], True),
    Workload("ln_residual", LNResidual, ("x: f16[N, 4096]", "r: f16[N, 4096]"), [1000, 4096, 8191, 16384, 32768], 2,
             lambda n, dv, dt: [_r(n, 4096, device=dv, dtype=dt), _r(n, 4096, device=dv, dtype=dt)], True),
    Workload("softmax_bias", lambda: softmax_bias, ("x: f16[R, N]", "bias: f16[N]"), [127, 1024, 2000, 4096, 8191],
             2, lambda n, dv, dt: [_r(4096, n, device=dv, dtype=dt), _r(n, device=dv, dtype=dt)], True),
    Workload("attn", CausalSelfAttention, ("x: f16[4, T, 768]",), [129, 256, 500, 777, 1024, 2047], 2,
             lambda n, dv, dt: [_r(4, n, 768, device=dv, dtype=dt)], False),
    Workload("rmsnorm_swiglu", RMSNormSwiGLU, ("x: f16[N, 4096]",), [129, 512, 1000, 2048], 2,
             lambda n, dv, dt: [_r(n, 4096, device=dv, dtype=dt)], False),
    Workload("gpt2", GPT2, ("x: f16[4, T, 768]",), [129, 256, 500, 1024], 2,
             lambda n, dv, dt: [_r(4, n, 768, device=dv, dtype=dt)], False),
]

MODES = ["eager", "inductor_dyn", "inductor_static", "symshape", "backend"]


def _as_module(prog, dtype, device):
    if isinstance(prog, nn.Module):
        return prog.to(device, dtype).eval()
    return prog


def _rel_err(out, ref) -> float:
    out = out.float()
    if not torch.isfinite(out).all():
        return float("nan")
    return ((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def _bench(fn, args) -> float:
    import triton.testing
    return triton.testing.do_bench(lambda: fn(*args), warmup=25, rep=100, return_mode="median")


def _dynamo_graphs() -> int:
    from torch._dynamo.utils import counters
    return int(counters["stats"]["unique_graphs"])


class Runner:
    """One mode of a workload: compile on first use, count compiles and traces."""

    def __init__(self, mode, prog, w: Workload):
        self.mode, self.prog, self.w = mode, prog, w
        self.compile_s = 0.0
        self.fn = None
        self.traces0 = compiler.STATS["traces"]
        self.graphs0 = _dynamo_graphs()

    def __call__(self, *args):
        if self.fn is None:
            t0 = time.perf_counter()
            if self.mode == "eager":
                self.fn = self.prog
            elif self.mode == "inductor_dyn":
                self.fn = torch.compile(self.prog, dynamic=True)
            elif self.mode == "inductor_static":
                self.fn = torch.compile(self.prog, dynamic=False)
            elif self.mode == "symshape":
                self.fn = compiler.compile(self.prog, *self.w.specs, target="triton")
            else:
                self.fn = torch.compile(self.prog, backend="symshape", dynamic=True)
            self.compile_s += time.perf_counter() - t0
        if self.mode == "eager":
            return self.fn(*args)
        # A first call at a size may compile: time it (the first call of each size is timed).
        before = (_dynamo_graphs(), compiler.STATS["traces"])
        t0 = time.perf_counter()
        out = self.fn(*args)
        torch.cuda.synchronize()
        if (_dynamo_graphs(), compiler.STATS["traces"]) != before:
            self.compile_s += time.perf_counter() - t0
        return out

    def counts(self):
        """(dynamo graphs compiled, symshape traces) since this runner was made."""
        return _dynamo_graphs() - self.graphs0, compiler.STATS["traces"] - self.traces0


def run_workload(w: Workload, sizes, device, dtype, modes, log):
    torch.manual_seed(0)
    base = w.make()
    prog = _as_module(base, dtype, device)
    ref_prog = _as_module(copy.deepcopy(base), torch.float32, device) if isinstance(base, nn.Module) else base
    res = {m: {"ms": {}, "err": {}} for m in modes}
    inputs = {n: w.inputs(n, device, dtype) for n in sizes + [w.tiny]}
    with torch.no_grad():
        refs = {n: ref_prog(*[t.float() for t in inputs[n]]).float() for n in sizes}
        for m in modes:
            torch._dynamo.reset()
            run = Runner(m, prog, w)
            for n in [sizes[0], w.tiny] + sizes[1:]:  # the tiny size early: its compile counts too
                try:
                    out = run(*inputs[n])
                    if n in refs:
                        res[m]["err"][n] = _rel_err(out, refs[n])
                        res[m]["ms"][n] = _bench(run.fn, inputs[n])
                    else:
                        res[m]["tiny_us"] = _bench(run.fn, inputs[n]) * 1e3
                except Exception as e:  # a mode that fails at a size is reported, not fatal
                    res[m]["ms"][n] = float("nan")
                    res[m]["fail"] = f"{type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}"
                    print(f"  {w.name} {m} n={n}: {res[m]['fail']}", file=log, flush=True)
                print(f"  {w.name:<15} {m:<16} n={n:<6} ms={res[m]['ms'].get(n, float('nan')):.4f} "
                      f"err={res[m]['err'].get(n, float('nan')):.1e}", file=log, flush=True)
            res[m]["compile_s"] = run.compile_s
            res[m]["graphs"], res[m]["traces"] = run.counts()
            if m == "symshape" and run.fn is not None:
                res[m]["variants"] = run.fn.stats["variants"]
    return res


def profile_symshape(w: Workload, n, device, dtype, path):
    """Kernel list (CUDA time) of eager and compiler.compile at size ``n``, appended to ``path``."""
    from torch.profiler import ProfilerActivity, profile
    torch.manual_seed(0)
    prog = _as_module(w.make(), dtype, device)
    args = w.inputs(n, device, dtype)
    with torch.no_grad(), open(path, "a") as f:
        for label, fn in (("eager", prog), ("symshape", compiler.compile(prog, *w.specs, target="triton"))):
            for _ in range(3):
                fn(*args)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
                for _ in range(5):
                    fn(*args)
                torch.cuda.synchronize()
            f.write(f"\n==== {w.name} n={n} {label} (5 calls) ====\n")
            f.write(p.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=70))


def host_profile(w: Workload, n, device, dtype, calls=300):
    """cProfile of ``calls`` compiler.compile calls at size ``n``: where the host time goes."""
    import cProfile
    import io
    import pstats
    torch.manual_seed(0)
    prog = _as_module(w.make(), dtype, device)
    args = w.inputs(n, device, dtype)
    f = compiler.compile(prog, *w.specs, target="triton")
    with torch.no_grad():
        for _ in range(5):
            f(*args)
        torch.cuda.synchronize()
        pr = cProfile.Profile()
        t0 = time.perf_counter()
        pr.enable()
        for _ in range(calls):
            f(*args)
        pr.disable()
        torch.cuda.synchronize()
    out = io.StringIO()
    pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(18)
    print(f"\n==== host profile {w.name} n={n}: {(time.perf_counter() - t0) / calls * 1e6:.1f} us/call ====")
    print("\n".join(ln for ln in out.getvalue().splitlines() if ln.strip())[:6000])


def _geo(xs):
    xs = [x for x in xs if x == x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def report(all_res, modes):
    lines = []
    hdr = f"{'workload':<15} {'n':>6} " + " ".join(f"{m:>15}" for m in modes) + "   sym/ind_st  bk/ind_st"
    lines += ["ms per call (do_bench median)", hdr, "-" * len(hdr)]
    ratios = {m: [] for m in modes}
    per_w = {}
    for name, res in all_res.items():
        per_w[name] = {m: [] for m in modes}
        for n in sorted(res["eager"]["ms"]):
            ms = {m: res[m]["ms"].get(n, float("nan")) for m in modes}
            for m in modes:
                r = ms["inductor_static"] / ms[m] if "inductor_static" in ms else float("nan")
                ratios[m].append(r)
                per_w[name][m].append(r)
            tail = ""
            if "inductor_static" in modes:
                tail = (f"   {ms['inductor_static'] / ms.get('symshape', float('nan')):>9.2f}x"
                        f" {ms['inductor_static'] / ms.get('backend', float('nan')):>9.2f}x")
            lines.append(f"{name:<15} {n:>6} " + " ".join(f"{ms[m]:>15.4f}" for m in modes) + tail)
    lines += ["", "per workload: speedup vs Inductor static (geomean), compile s, graphs/traces, tiny-size us, max err"]
    for name, res in all_res.items():
        lines.append(f"{name}:")
        for m in modes:
            r = res[m]
            tr = f"graphs={r.get('graphs', 0)} traces={r.get('traces', 0)}" + (
                f" variants={r['variants']}" if "variants" in r else "")
            err = max(r["err"].values(), default=float("nan"))
            lines.append(f"  {m:<16} {_geo(per_w[name][m]):>6.2f}x  compile {r.get('compile_s', 0):>7.2f}s  {tr:<32} "
                         f"tiny {r.get('tiny_us', float('nan')):>8.1f}us  err {err:.1e}"
                         + (f"  FAIL {r['fail']}" if "fail" in r else ""))
    lines += ["", "geomean over all points: vs Inductor static / vs eager"]
    for m in modes:
        ve = _geo([a / b for a, b in zip(ratios[m], ratios["eager"])]) if "eager" in modes else float("nan")
        lines.append(f"  {m:<16} {_geo(ratios[m]):>6.2f}x  {ve:>6.2f}x")
    if {"eager", "inductor_dyn", "inductor_static"} <= set(modes):
        lines += ["", "acceptance (issue #14), per symshape mode"]
        small = {w.name for w in WORKLOADS if w.small_graph}
        for m in [m for m in ("symshape", "backend") if m in modes]:
            want = 1.0 if m == "symshape" else 0.95
            g = _geo(ratios[m])
            lines.append(f"  {m}: geomean vs Inductor static {g:.2f}x (target >= {want}) "
                         f"{'MET' if g >= want else 'MISSED'}")
            for name, res in all_res.items():
                vs_dyn = _geo([a / b for a, b in zip(per_w[name][m], per_w[name]["inductor_dyn"])])
                cdyn, cm = res["inductor_dyn"].get("compile_s", 0), res[m].get("compile_s", 0)
                over = res[m].get("tiny_us", float("nan")) - res["eager"].get("tiny_us", float("nan"))
                sweeps = res[m].get("traces", 0) <= 1 and res[m].get("variants", 1) <= 1 and \
                    res[m].get("graphs", 0) <= (1 if m == "backend" else 0)
                lines.append(f"    {name:<15} vs ind_dyn {vs_dyn:>5.2f}x {'ok' if vs_dyn >= 1 else 'LOW'}  "
                             f"compile {cm:.2f}s = 1/{cdyn / cm if cm else float('inf'):.1f} of ind_dyn "
                             f"{'ok' if cm * 5 <= cdyn else 'SLOW'}  one trace, no recompile "
                             f"{'ok' if sweeps else 'NO'}"
                             + (f"  tiny overhead {over:+.1f}us {'ok' if over <= 10 else 'HIGH'}"
                                if name in small else ""))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="three sizes per workload")
    ap.add_argument("--only", default="", help="comma-separated workload names")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--profile", default="", help="append torch.profiler kernel tables to this file")
    ap.add_argument("--log", default="", help="per-point progress log (default stderr)")
    ap.add_argument("--host-profile", action="store_true", help="only cProfile compiler.compile at the tiny size")
    a = ap.parse_args(argv)
    device, dtype = "cuda", torch.float16
    modes = a.modes.split(",")
    log = open(a.log, "a") if a.log else sys.stderr
    print(f"{torch.cuda.get_device_name()} torch={torch.__version__} triton="
          f"{__import__('triton').__version__} dtype=f16")
    chosen = [w for w in WORKLOADS if not a.only or w.name in a.only.split(",")]
    if a.host_profile:
        for w in chosen:
            host_profile(w, w.tiny, device, dtype)
        return
    all_res = {}
    for w in chosen:
        sizes = [w.sizes[0], w.sizes[len(w.sizes) // 2], w.sizes[-1]] if a.quick else w.sizes
        t0 = time.perf_counter()
        all_res[w.name] = run_workload(w, sizes, device, dtype, modes, log)
        print(f"[{w.name} done in {time.perf_counter() - t0:.0f}s]", flush=True)
        if a.profile:
            profile_symshape(w, sizes[len(sizes) // 2], device, dtype, a.profile)
    print(report(all_res, modes))


if __name__ == "__main__":
    main()
