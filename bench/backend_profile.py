"""Host time per call of ``compiler.compile``, ``backend="symshape"`` and Inductor dynamic on one model, side by side.

Issue #28: on the H100 the backend runs symshape's plans ~1 ms slower per call than
``compiler.compile`` on the same 4-layer models, where dynamo's frame alone should cost
~0.3 ms.  Per model (bench/gpu_models.py's cases, fp16, its first quick point; tiny configs
on the CPU) this prints, for each mode in one process, interleaved over 3 rounds (the
middle one by do_bench): ``do_bench`` ms, host us per call without a sync, wall us per
call, and a torch.profiler summary (self CPU and GPU kernel us per call, and with
``TABLES=1`` (default) the ops with the most self CPU and GPU time).

Usage::

    python bench/backend_profile.py bert,gpt2 symshape,backend,inductor_dyn
    TABLES=0 python bench/backend_profile.py llama symshape,backend
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import gpu_models as G  # noqa: E402

dev = "cuda" if torch.cuda.is_available() else "cpu"
small = dev == "cpu"
only = sys.argv[1].split(",") if len(sys.argv) > 1 else ["bert", "gpt2"]
modes = sys.argv[2].split(",") if len(sys.argv) > 2 else ["symshape", "backend", "inductor_dyn"]
tables = os.environ.get("TABLES", "1") == "1"
for case in [c for c in G.CASES if c.name in only]:  # noqa: C901
    dt = torch.float16
    torch.manual_seed(0)
    prog = case.make(small).eval().to(dev, dt)
    specs = tuple(s.replace("{dt}", "f16") for s in case.specs)
    g = torch.Generator().manual_seed(1)
    p = case.points(True, small)[0]
    args = case.inputs(*p, dev, dt, g, small)
    runs = {}
    with torch.no_grad():
        for m in modes:
            torch._dynamo.reset() if m == "inductor_dyn" else None
            r = G.Mode(m, prog, specs, dev, dims=case.dims(small) if case.dims else None)
            for _ in range(5):
                r.fn(*args)
            runs[m] = r
        if dev == "cuda":
            torch.cuda.synchronize()
        res = {}
        for rnd in range(3):
            for m, r in runs.items():
                ms = G.bench_ms(r.fn, args, dev)
                if dev == "cuda": torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(100):
                    r.fn(*args)
                host = (time.perf_counter() - t0) * 1e4
                if dev == "cuda": torch.cuda.synchronize()
                wall = (time.perf_counter() - t0) * 1e4
                res.setdefault(m, []).append((ms, host, wall))
        print(f"\n== {case.name} fp16 {p} on {dev}")
        for m, v in res.items():
            v = sorted(v)[1]
            print(f"  {m:<14} do_bench {v[0]:.3f} ms   host {v[1]:.0f} us/call (no sync)   wall {v[2]:.0f} us/call")
        for m, r in runs.items():
            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == "cuda" else [])
            with profile(activities=acts) as prof:
                for _ in range(20):
                    r.fn(*args)
                if dev == "cuda": torch.cuda.synchronize()
            ka = prof.key_averages()
            gpu = sum(getattr(e, "self_device_time_total", 0) for e in ka) / 20
            cpu = sum(e.self_cpu_time_total for e in ka) / 20
            print(f"\n  -- {m}: profiler self CPU {cpu:.0f} us/call, GPU kernels {gpu:.0f} us/call")
            if tables:
                print(ka.table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=60))
                if dev == "cuda":
                    print(ka.table(sort_by="self_cuda_time_total", row_limit=10, max_name_column_width=60))
