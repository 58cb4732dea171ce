"""Kernel builds at a program's first call: threads (the old path) against worker processes.

For each model of :mod:`bench.gpu_models` the program is compiled once with
builds ahead switched off, then every size class of every Triton kernel is
built from an empty Triton cache, each way in its own process:

- ``threads``: :func:`compiler.codegen.triton_build.warm_threads` (Triton's
  asynchronous compile in a thread pool: everything before the first call);
- ``processes``: :func:`~compiler.codegen.triton_build.build_split` (what
  ``SYMSHAPE_BUILD_PROCESSES=1`` runs; pool start included): the first call's
  variants built in this process's threads (``first call s``), the rest in a
  :class:`~compiler.codegen.build_pool.BuildPool`'s workers in the background
  (``all s``: every variant built).

Without a GPU the kernels are compiled for an H100 (``GPUTarget("cuda", 90, 32)``,
Triton's bundled ptxas) through a compile-only driver, so the comparison runs
on any machine.

Usage::

    python bench/build_bench.py --models gpt2,llama --dtype fp16
    python bench/build_bench.py --models gpt2 --smoke          # tiny configs

Example (the table)::

    >>> print(table([{"model": "gpt2", "variants": 40, "threads": 9.0, "first": 1.5, "all": 3.0, "workers": 16}]))
    model     variants   threads s   processes: first call s   all s   workers   all: x faster
    gpt2            40        9.00                      1.50    3.00        16           3.00x
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def table(rows) -> str:
    out = [f"{'model':8s} {'variants':>9s} {'threads s':>11s} {'processes: first call s':>25s} {'all s':>7s} "
           f"{'workers':>9s} {'all: x faster':>15s}"]
    for r in rows:
        out.append(f"{r['model']:8s} {r['variants']:9d} {r['threads']:11.2f} {r['first']:25.2f} {r['all']:7.2f} "
                   f"{r['workers']:9d} {r['threads'] / r['all']:14.2f}x")
    return "\n".join(out)


def _launchers(model: str, dtype: str, smoke: bool):
    import torch
    import compiler
    from bench import gpu_models
    case = next(c for c in gpu_models.CASES if c.name == model)
    dt = gpu_models.DTYPES[dtype]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    m = case.make(smoke).to(device=device, dtype=dt).eval()
    specs = [s.format(dt=dtype) for s in case.specs]
    dims = case.dims(smoke) if case.dims else None
    f = compiler.compile(m, *specs, target="triton", dims=dims)
    return [ln for v in f.variants for _, ln in v.launchers.values()], f.variants[0]._example_sizes()


def _target():
    import torch
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver
    if torch.cuda.is_available():
        t = driver.active.get_current_target()
        return (t.backend, t.arch, t.warp_size)
    from compiler.codegen.build_worker import CompileOnlyDriver
    driver.set_active(CompileOnlyDriver(GPUTarget("cuda", 90, 32)))
    return ("cuda", 90, 32)


def one(model: str, dtype: str, how: str, smoke: bool) -> dict:
    """Build ``model``'s variants ``how`` ("threads" or "processes") in this process."""
    os.environ["SYMSHAPE_WARM_CLASSES"] = "0"  # the compile below builds nothing ahead
    launchers, current = _launchers(model, dtype, smoke)
    target = _target()
    from compiler.codegen import build_pool, triton_build
    t0 = time.perf_counter()
    if how == "threads":
        n = triton_build.warm_threads(launchers)
        wall = time.perf_counter() - t0
        return {"variants": n, "threads": wall, "errors": triton_build.WARM_ERRORS[-2:]}
    pool = build_pool.BuildPool(target)
    n = triton_build.build_split(pool, launchers, current)
    first = time.perf_counter() - t0
    pool.drain()
    wall = time.perf_counter() - t0
    pool.close()
    return {"variants": n, "first": first, "all": wall, "workers": build_pool.STATS["workers"],
            "failed": build_pool.STATS["failed"], "errors": build_pool.STATS["errors"][-2:]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="gpt2,llama")
    ap.add_argument("--dtype", default="fp16")
    ap.add_argument("--smoke", action="store_true", help="tiny configs")
    ap.add_argument("--one", nargs=2, metavar=("MODEL", "HOW"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one:
        print("RESULT " + json.dumps(one(a.one[0], a.dtype, a.one[1], a.smoke)), flush=True)
        return
    import torch
    import triton
    dev = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU: compiled for sm_90 without one"
    print(f"{dev}; triton {triton.__version__}; {os.cpu_count()} cores; each row from an empty Triton cache")
    rows = []
    for model in a.models.split(","):
        row = {"model": model}
        for how in ("threads", "processes"):
            env = dict(os.environ, TRITON_CACHE_DIR=tempfile.mkdtemp(prefix=f"build_bench_{how}_"))
            env.pop("TRITON_INTERPRET", None)
            r = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", model, how, "--dtype", a.dtype]
                               + (["--smoke"] if a.smoke else []), capture_output=True, text=True, env=env, cwd=ROOT)
            got = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
            if not got:
                print(f"{model} {how} failed:\n{r.stderr[-3000:]}")
                break
            res = json.loads(got[-1][7:])
            if res.get("errors"):
                print(f"{model} {how} errors: {res['errors']}")
            row.update(res)
        else:
            rows.append(row)
    print(table(rows))


if __name__ == "__main__":
    main()
