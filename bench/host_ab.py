"""The host-time plan rewrites measured against the plain plan, interleaved in one process.

Small models on the GPU are host-bound, and a host's speed drifts between processes (the
same eager BERT call measured 2.4 ms in one process and 3.0 ms in the next on one H100
machine), so before/after numbers from separate runs say little.  This builds every mode
once per model, then measures them in turn for several rounds (A B A B ...) and prints the
median per mode: ``compile`` / ``backend`` with the rewrites (:data:`compiler.runtime.HOST_REWRITES`),
``compile_plain`` / ``backend_plain`` without, plus eager and Inductor (dynamic, static)
as references, with ratios from the same rounds and the outputs checked against eager.

Usage::

    python bench/host_ab.py --only bert,gpt2,llama            # CUDA: do_bench medians
    python bench/host_ab.py --only bert --smoke --no-inductor  # CPU development run

Example (the median of a round's timings)::

    >>> _median([3.0, 1.0, 2.0])
    2.0
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import compiler  # noqa: E402
import compiler.runtime as rt  # noqa: E402

compiler.register()


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def _build(mode, prog, specs, target):
    """A callable for ``mode``; symshape modes are planned with the rewrites on or off.  No
    ``torch._dynamo.reset()``: every mode stays compiled (dynamo keeps one cache entry per
    backend; each mode compiles its own wrapper module)."""
    rt.HOST_REWRITES["on"] = not mode.endswith("_plain")
    try:
        if mode == "eager":
            return prog
        if mode.startswith("compile"):
            return compiler.compile(prog, *specs, target=target)
        if mode.startswith("backend"):
            return torch.compile(prog, backend="symshape", dynamic=True,
                                 options={"target": target, "host_rewrites": not mode.endswith("_plain")})
        return torch.compile(prog, dynamic=(mode == "inductor_dyn"))
    finally:
        rt.HOST_REWRITES["on"] = True


def _time_ms(fn, args, device):
    if device == "cuda":
        import triton.testing
        return triton.testing.do_bench(lambda: fn(*args), warmup=10, rep=60, return_mode="median")
    t0 = time.perf_counter()
    for _ in range(5):
        fn(*args)
    return (time.perf_counter() - t0) / 5 * 1e3


def run_model(case, dtype, points, modes, device, rounds, small):
    import gpu_models as gm
    torch.manual_seed(0)
    prog = case.make(small).eval().to(device, dtype)
    short = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32"}[dtype]
    specs = tuple(s.replace("{dt}", short) for s in case.specs)
    g = torch.Generator().manual_seed(1)
    inputs = {p: case.inputs(*p, device, dtype, g, small) for p in points}
    target = "triton" if device == "cuda" else "cpp"
    ms = {(m, p): [] for m in modes for p in points}
    errs = {}
    with torch.no_grad():
        refs = {p: prog(*inputs[p]) for p in points}
        fns = {}
        for m in modes:
            # Dynamo caches per code object: each torch.compile mode gets its own wrapper module.
            fns[m] = _build(m, type(prog)(prog.m) if m.startswith(("backend", "inductor")) else prog, specs, target)
            for p in points:
                out = fns[m](*inputs[p])
                errs[(m, p)] = (out.float() - refs[p].float()).abs().max().item()
        for _ in range(rounds):
            for p in points:
                for m in modes:
                    ms[(m, p)].append(_time_ms(fns[m], inputs[p], device))
    return {k: _median(v) for k, v in ms.items()}, errs


def main(argv=None):
    import gpu_models as gm
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="bert,gpt2,llama")
    ap.add_argument("--smoke", action="store_true", help="tiny configs and sizes (CPU)")
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    modes = ["eager", "compile_plain", "compile", "backend_plain", "backend"]
    if not a.no_inductor:
        modes += ["inductor_dyn", "inductor_static"]
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    print(f"{name} torch={torch.__version__}; ms per call, median of {a.rounds} interleaved rounds")
    ratios = {}
    for k, cname in enumerate(a.only.split(",")):
        case = next(c for c in gm.CASES if c.name == cname)
        dtype = torch.float32 if a.smoke else (torch.float16, torch.bfloat16)[k % 2]
        points = case.smoke if a.smoke else case.quick
        t0 = time.perf_counter()
        ms, errs = run_model(case, dtype, points, modes, device, a.rounds, a.smoke)
        print(f"\n{cname} {str(dtype)[6:]} ({time.perf_counter() - t0:.0f}s)")
        print("  " + f"{'B,T':<10}" + "".join(f"{m:>16}" for m in modes))
        for p in points:
            print("  " + f"{str(p):<10}" + "".join(f"{ms[(m, p)]:16.3f}" for m in modes))
            print("  " + f"{'max err':<10}" + "".join(f"{errs[(m, p)]:16.1e}" for m in modes))
            for m in modes:
                ratios.setdefault(m, []).append(ms[(modes[0], p)] / ms[(m, p)])
            for x, y in (("compile", "compile_plain"), ("backend", "backend_plain")):
                ratios.setdefault(f"{x} vs {y}", []).append(ms[(y, p)] / ms[(x, p)])
            if not a.no_inductor:
                for x in ("compile", "backend"):
                    for y in ("inductor_dyn", "inductor_static"):
                        ratios.setdefault(f"{x} vs {y}", []).append(ms[(y, p)] / ms[(x, p)])
    print(f"\nbackend graphs compiled: {compiler.BACKEND_STATS['graphs']} (each backend mode its own)")
    print("\ngeomean speedups (ratio of ms, same rounds)")
    for k, v in ratios.items():
        label = f"{k} vs eager" if " vs " not in k else k
        print(f"  {label:<34} {math.exp(sum(map(math.log, v)) / len(v)):6.2f}x  (lowest {min(v):.2f}x)")


if __name__ == "__main__":
    main()
