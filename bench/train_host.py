"""Where a training step's host time goes, per op, side by side per mode (torch.profiler's CPU self time).

Builds a model of :mod:`bench.train_compare` (same sizes), compiles it per ``--modes`` mode,
warms it up, times ``--steps`` steps at one fixed ``--length`` (wall ms per step), then
profiles as many more with ``torch.profiler`` (CPU activity only: no kernel timing, so the
profiler adds little) and prints one table: each op or region among every mode's top
``--top`` by self CPU time, in microseconds of host time per step for each mode.  On a GPU a
step whose wall time exceeds its kernels' time is host-bound; this says on what (ATen calls,
kernel launches, dynamo's guards and pre-graph bytecode, AOTAutograd's wrappers, the optimizer).

Usage::

    python bench/train_host.py --model vit --dtype bf16 --modes eager_nocudnn,symshape

Example (the table's row order)::

    >>> rank({"a": {"x": 5.0, "y": 1.0}, "b": {"y": 9.0}}, top=1)
    ['y', 'x']
"""
from __future__ import annotations

import os
import sys
from collections import defaultdict

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import train_compare as tc  # noqa: E402
from bench.train_profile import _step, cudnn_sdp_off, fixed_length_ms, step_args  # noqa: E402


def rank(by_mode: dict, top: int) -> list:
    """The union of each mode's ``top`` names by value, ordered by their largest value."""
    names = set()
    for per_op in by_mode.values():
        names.update(sorted(per_op, key=lambda n: -per_op[n])[:top])
    return sorted(names, key=lambda n: -max(per_op.get(n, 0.0) for per_op in by_mode.values()))


def host_profile(mode, name, dtype, device, length, steps) -> dict:
    """``{"wall_ms": ..., "ops": {name: host us per step}}`` for one mode at a fixed length."""
    if mode.endswith("_nocudnn"):
        with cudnn_sdp_off():
            return host_profile(mode.removesuffix("_nocudnn"), name, dtype, device, length, steps)
    model, batch = tc.build(name, device, max(length, 928) + 1)
    g = torch.Generator().manual_seed(0)
    fn = tc._compiled(mode, model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for L in (928, 458, length):  # compile, a second length, then the timed one
        _step(fn, batch(L, g), opt, device, dtype)
    b = batch(length, g)
    wall = fixed_length_ms(fn, b, opt, device, dtype, steps)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            _step(fn, b, opt, device, dtype)
        tc._sync(device)
    ops = defaultdict(float)
    for e in prof.key_averages():
        ops[e.key] += e.self_cpu_time_total / steps
    return {"wall_ms": wall, "ops": dict(ops)}


def new_length_profile(mode, name, dtype, device, n, top) -> dict:
    """Steps at ``n`` lengths none of which ran before (train_compare's random lengths, as a
    training run meets them): ``{"ms": median wall ms, "steps": counted, "text": cProfile's
    top functions by own time over those steps}``.  Steps in which dynamo or symshape compiled
    are left out of both."""
    import cProfile
    import io
    import pstats
    import statistics
    import time

    import compiler
    if mode.endswith("_nocudnn"):
        with cudnn_sdp_off():
            return new_length_profile(mode.removesuffix("_nocudnn"), name, dtype, device, n, top)
    seen = {928, 458}
    lens = [L for L in tc.lengths(4 * n, 64, 1024, seed=1) if not (L in seen or seen.add(L))][:n]
    model, batch = tc.build(name, device, 1025)
    g = torch.Generator().manual_seed(0)
    fn = tc._compiled(mode, model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for L in (928, 458):
        _step(fn, batch(L, g), opt, device, dtype)
    times, profiles = [], []
    for L in lens:
        b = batch(L, g)
        before, traces = tc._graphs(), compiler.STATS["traces"]
        pr = cProfile.Profile()
        tc._sync(device)
        t = time.perf_counter()
        pr.enable()
        _step(fn, b, opt, device, dtype)
        tc._sync(device)
        pr.disable()
        dt = time.perf_counter() - t
        if tc._graphs() == before and compiler.STATS["traces"] == traces:
            times.append(dt * 1e3)
            profiles.append(pr)
    out = io.StringIO()
    if profiles:
        st = pstats.Stats(profiles[0], stream=out)
        for pr in profiles[1:]:
            st.add(pr)
        st.sort_stats("tottime").print_stats(top)
    return {"ms": statistics.median(times) if times else float("nan"), "steps": len(times),
            "text": out.getvalue()}


def main(argv=None):
    ap = step_args(__doc__.split("\n")[0], model="vit", steps=10)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--new-lengths", type=int, default=0,
                    help="then N steps at lengths not met before, per mode: median wall ms and a cProfile")
    a = ap.parse_args(argv)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[a.dtype]
    import compiler
    compiler.register()
    if a.new_lengths:
        for m in a.modes.split(","):
            r = new_length_profile(m, a.model, dtype, a.device, a.new_lengths, a.top)
            print(f"{a.model} {a.dtype} {m}: {r['steps']} steps at new lengths, median {r['ms']:.2f} ms "
                  f"(cProfile on; its own time per function over those steps)\n{r['text']}", flush=True)
        return
    res = {m: host_profile(m, a.model, dtype, a.device, a.length, a.steps) for m in a.modes.split(",")}
    w = max(14, *(len(m) + 2 for m in res))
    print(f"{a.model} {a.dtype} {a.device} length {a.length}, {a.steps} steps "
          f"({torch.cuda.get_device_name() if a.device == 'cuda' else 'CPU'}, torch {torch.__version__})")
    print(f"{'':<58}" + "".join(f"{m:>{w}}" for m in res))
    print(f"{'wall ms per step':<58}" + "".join(f"{r['wall_ms']:>{w}.2f}" for r in res.values()))
    print(f"{'host us per step (profiled self CPU time), all ops':<58}"
          + "".join(f"{sum(r['ops'].values()):>{w}.0f}" for r in res.values()))
    for n in rank({m: r["ops"] for m, r in res.items()}, a.top):
        print(f"  {n[:56]:<56}" + "".join(f"{r['ops'].get(n, 0.0):>{w}.1f}" for r in res.values()))


if __name__ == "__main__":
    main()
