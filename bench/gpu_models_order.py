"""Whether block-timed modes measure the modes or the host: the order bench/gpu_models.py used
before its interleaved rounds, then the same compiled program timed again later in one process.

Per model (bench/gpu_models.py's cases, real configs, CUDA): every mode in gpu_models' former
order (dynamo reset, the mode made, its first call, do_bench at each point), then the
``compiler.compile`` program kept from that pass measured again at the end, after
``gc.collect()``, with the garbage collector off and after ``torch.cuda.empty_cache()``.  Each
line counts the GC collections and the caching allocator's cudaMalloc/cudaFree calls made while
timing, so a slower line with zero of both is the host's own drift
(bench/results/gpu_models_order_h100_s10_2026-11-27.txt: one BERT program at 1.44, 0.96,
1.08 ms).

Usage::

    python bench/gpu_models_order.py bert,llama
"""
import sys, os, time, gc, copy
sys.path.insert(0, os.getcwd()); sys.path.insert(0, os.path.join(os.getcwd(), "bench"))
import torch
import gpu_models as G

def counters():
    """(GC collections, cudaMalloc calls, cudaFree calls, allocation retries, all-stream syncs) so far."""
    st = torch.cuda.memory_stats()
    return (sum(s["collections"] for s in gc.get_stats()), st.get("num_device_alloc", 0), st.get("num_device_free", 0),
            st.get("num_alloc_retries", 0), st.get("num_sync_all_streams", 0))

def measure(label, fn, args):
    """One line: do_bench ms, host us per call over 200 calls, and the counters' change meanwhile."""
    c0 = counters()
    ms = G.bench_ms(fn, args, "cuda")
    torch.cuda.synchronize(); t0 = time.perf_counter()
    for _ in range(200):
        fn(*args)
    host = (time.perf_counter() - t0) / 200 * 1e6
    torch.cuda.synchronize()
    c1 = counters()
    d = [b - a for a, b in zip(c0, c1)]
    print(f"  {label:<34} do_bench {ms:.3f} ms  host {host:.0f} us/call  gc collections {d[0]}  cudaMalloc {d[1]}  cudaFree {d[2]}  retries {d[3]}  gc count {gc.get_count()}", flush=True)

def main(names):
    """The passes above for each model of ``names``."""
    for name in names:
        case = {c.name: c for c in G.CASES}[name]
        dt = torch.float16 if name == "llama" else torch.bfloat16
        short = "f16" if dt == torch.float16 else "bf16"
        torch.manual_seed(0)
        prog = case.make(False).eval().to("cuda", dt)
        specs = tuple(s.replace("{dt}", short) for s in case.specs)
        g = torch.Generator().manual_seed(1)
        pts = [(4, 128), (2, 999)]
        inputs = {p: case.inputs(*p, "cuda", dt, g, False) for p in pts}
        print(f"== {name} {short}", flush=True)
        keep = {}
        with torch.no_grad():
            for m in ("eager", "inductor_dyn", "symshape", "backend"):
                torch._dynamo.reset()
                run = G.Mode(m, prog, specs, "cuda")
                for p in pts:
                    run.first_call(inputs[p])
                    measure(f"{m} {p} (gpu_models order)", run.fn, inputs[p])
                if m in ("symshape",):
                    keep[m] = run
                del run
            r = keep["symshape"]
            for p in pts:
                measure(f"symshape {p} again at the end", r.fn, inputs[p])
            gc.collect()
            for p in pts:
                measure(f"symshape {p} after gc.collect()", r.fn, inputs[p])
            gc.disable()
            for p in pts:
                measure(f"symshape {p} gc disabled", r.fn, inputs[p])
            gc.enable()
            torch.cuda.empty_cache()
            for p in pts:
                measure(f"symshape {p} after empty_cache", r.fn, inputs[p])
        del keep, r
        torch._dynamo.reset(); gc.collect(); torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1].split(",") if len(sys.argv) > 1 else ["bert", "llama"])
