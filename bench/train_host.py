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


def main(argv=None):
    ap = step_args(__doc__.split("\n")[0], model="vit", steps=10)
    a = ap.parse_args(argv)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[a.dtype]
    import compiler
    compiler.register()
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
