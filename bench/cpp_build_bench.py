"""gcc builds of C++ kernel modules: one translation unit against the kernels split over N.

Compiles GPT-2's forward (``--layers`` layers, d=768) for the CPU, keeps the
source of every C++ module it builds, then builds each again from scratch
with :func:`compiler.codegen.cpp_build.compile_module` at 1, 2, 4, ... units
(best of ``--repeat``), printing one row per module.

Usage::

    python bench/cpp_build_bench.py --jobs 1,2,4,8,16

Example (the table)::

    >>> print(table([{"kernels": 19, "chars": 60334, "s": {1: 1.3, 4: 0.5}}], [1, 4]))
    kernels    chars       1 unit s      4 units s
         19    60334           1.30           0.50
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def table(rows, jobs) -> str:
    head = f"{'kernels':>7s} {'chars':>8s} " + " ".join(f"{str(j) + (' unit s' if j == 1 else ' units s'):>14s}"
                                                         for j in jobs)
    out = [head]
    for r in rows:
        out.append(f"{r['kernels']:7d} {r['chars']:8d} " + " ".join(f"{r['s'][j]:14.2f}" for j in jobs))
    return "\n".join(out)


def sources(layers: int) -> list:
    import torch
    import transformers
    import compiler
    from compiler.codegen import cpp
    seen = []
    orig = cpp.CPP.build

    def keep(src):
        seen.append(src)
        return orig(src)

    cpp.CPP.build = keep
    conf = transformers.GPT2Config(n_layer=layers, n_embd=768, n_head=12, vocab_size=8192)
    conf._attn_implementation = "sdpa"
    m = transformers.GPT2LMHeadModel(conf).eval()
    with torch.no_grad():
        compiler.compile(lambda ids: m(ids).logits, "ids: i64[B, T]", target="cpp")
    cpp.CPP.build = orig
    return seen


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", default="1,2,4")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args(argv)
    from compiler.codegen import cpp, cpp_build
    jobs = [int(j) for j in a.jobs.split(",")]
    cpp_build.MIN_JOBS = 2  # measure every split asked for, the small ones too
    rows = []
    for src in sources(a.layers):
        row = {"kernels": src.count(cpp_build.UNIT), "chars": len(src), "s": {}}
        for j in jobs:
            best = float("inf")
            for _ in range(a.repeat):
                d = tempfile.mkdtemp()
                path = os.path.join(d, "m.cpp")
                with open(path, "w") as f:
                    f.write(src)
                t0 = time.perf_counter()
                r = cpp_build.compile_module("g++", cpp.CXXFLAGS, cpp.LDFLAGS, src, path, path[:-4] + ".so", jobs=j)
                best = min(best, time.perf_counter() - t0)
                assert r is None, r.stderr[-2000:]
            row["s"][j] = best
        rows.append(row)
    print(f"{os.cpu_count()} cores; load {os.getloadavg()[0]:.1f}; GPT-2 forward, {a.layers} layers, d=768")
    print(table(rows, jobs))


if __name__ == "__main__":
    main()
