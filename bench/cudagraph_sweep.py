"""GPT-2 (2 layers, d=768) over every sequence length T in 1..512, in random order.

Compares per-call latency (host wall time of one call, synchronized) of:

* eager PyTorch;
* Inductor ``torch.compile(mode="reduce-overhead", dynamic=True)`` (CUDA graph trees: a graph per size);
* symshape ``compiler.compile(..., cuda_graphs=True)``: T padded to the engine's buckets where the
  padding analysis proves it safe, one graph per bucket;
* the same with ``graph_kernels="aten"``: the graphs record the traced graph's ATen ops;
* symshape without CUDA graphs (the same kernels, launched one by one).

"GPU MiB" is the memory the CUDA caching allocator still reserves after the sweep and
``empty_cache()``, over its reserve before compiling: graph pools and live tensors.

Each method runs in its own process (same seed: same inputs and orders) and first runs one sweep over all T (compilation and graph recording: reported as
"first sweep s"), then ``--passes`` timed sweeps in fresh random orders.  Outputs are checked
against eager at several T before timing.  The model is a nanoGPT-style GPT-2 (token and
position embeddings, causal SDPA, GELU MLP, final LayerNorm; no LM head) from
``tests/padding_programs.py``.

Usage::

    python bench/cudagraph_sweep.py                       # on a CUDA machine
    python bench/cudagraph_sweep.py --tf32                # float32 matmuls on tensor cores
    python bench/cudagraph_sweep.py --device cpu --quick  # smoke test: tiny model, T in 1..24, no Inductor
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import compiler  # noqa: E402
from tests.padding_programs import GPT  # noqa: E402


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def sweep(fn, inputs, order, sync):
    """Per-call seconds for each T in ``order``."""
    times = {}
    for T in order:
        x = inputs[T]
        t0 = time.perf_counter()
        fn(x)
        sync()
        times[T] = time.perf_counter() - t0
    return times


def inductor_graphs():
    """CUDA graphs Inductor's graph trees recorded (nodes of every tree)."""
    try:
        from torch._inductor import cudagraph_trees as ct
        mgr = ct.get_manager(torch.cuda.current_device(), create_if_none_exists=False)
    except Exception:  # noqa: BLE001 - private API: report unknown rather than fail the bench
        return None
    if mgr is None:
        return 0
    stack = [n for nodes in mgr.roots.values() for n in nodes]
    count = 0
    while stack:
        n = stack.pop()
        count += 1
        stack += [c for cs in n.children.values() for c in cs]
    return count


def replay_times(f, sync, reps=50) -> str:
    """Replay-only time of each recorded graph (no input copy, no host work): the GPU time of one call."""
    lines = ["replay only (median of %d), ms:" % reps]
    for (_, key), e in sorted(f.graphs.items(), key=lambda kv: kv[0][1]):
        if e.graph is None:
            continue
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            e.graph.replay()
            sync()
            ts.append(time.perf_counter() - t0)
        lines.append(f"  {key}: {statistics.median(ts) * 1e3:.3f}")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--quick", action="store_true", help="tiny model, T in 1..24, one pass")
    ap.add_argument("--max-t", type=int, default=512)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--methods", default="eager,symshape_graphs,symshape_graphs_aten,symshape,inductor")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tf32", action="store_true", help="float32 matmuls on tensor cores (every method alike)")
    ap.add_argument("--in-process", action="store_true", help="run every method in this process")
    args = ap.parse_args(argv)
    dev = args.device
    cuda = dev == "cuda"
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    if args.quick:
        model, max_t, passes = GPT(vocab=100, d=64, heads=4, layers=2, positions=64), 24, 1
    else:
        model, max_t, passes = GPT(vocab=50257, d=768, heads=12, layers=2, positions=1024), args.max_t, args.passes
    model = model.to(dev).eval()
    vocab = model.wte.num_embeddings
    rng = random.Random(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    inputs = {T: torch.randint(0, vocab, (1, T), generator=gen).to(dev) for T in range(1, max_t + 1)}
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    check_ts = sorted({1, 2, 7, min(64, max_t), min(65, max_t), max_t // 2 + 3, max_t})
    with torch.no_grad():
        ref = {T: model(inputs[T]).double() for T in check_ts}

    methods = args.methods.split(",")
    if not cuda and "inductor" in methods:
        methods.remove("inductor")  # reduce-overhead records CUDA graphs: nothing to compare on the CPU
    if len(methods) > 1 and not args.in_process:
        # One process per method: each starts from the same clean GPU memory and dynamo state.
        rows = []
        for name in methods:
            cmd = [sys.executable, os.path.abspath(__file__)] + [a for a in (argv or sys.argv[1:])] + [
                "--methods", name, "--in-process"]
            r = subprocess.run(cmd, capture_output=True, text=True)
            for line in r.stdout.splitlines():
                if line.startswith("ROW\t"):
                    rows.append(json.loads(line[4:]))
                elif not (line.startswith(("GPT-2", "method")) or (line and set(line) == {"-"}) or (
                        line.split() and line.split()[0] in methods and len(line.split()) == 10)):
                    print(line, flush=True)  # the child's own table is printed once, combined, below
            if r.returncode != 0:
                print(f"[{name}] failed (exit {r.returncode}):\n{r.stderr[-3000:]}", flush=True)
        print_table(rows, args, dev, max_t, passes)
        return
    rows, reports = [], {}
    for name in methods:
        torch._dynamo.reset()
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
            base, base_reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
        target = "triton" if cuda else "cpp"
        holder = {}
        if name == "eager":
            fn = model
        elif name == "inductor":
            compiled = torch.compile(model, mode="reduce-overhead", dynamic=True)

            def fn(x, compiled=compiled):
                torch.compiler.cudagraph_mark_step_begin()
                return compiled(x)
        else:
            holder["f"] = compiler.compile(model, "ids: i64[1, T]", dims={"T": (1, max_t)}, target=target,
                                           cuda_graphs=name.startswith("symshape_graphs"),
                                           graph_kernels="aten" if name.endswith("_aten") else "compiled")
            fn = holder["f"]
        order = list(range(1, max_t + 1))
        rng.shuffle(order)
        t0 = time.perf_counter()
        with torch.no_grad():
            sweep(fn, inputs, order, sync)
        first = time.perf_counter() - t0
        err = 0.0
        with torch.no_grad():
            for T in check_ts:
                out = fn(inputs[T]).double()
                sync()
                err = max(err, float((out - ref[T]).norm() / ref[T].norm()))
        times: dict = {T: [] for T in order}
        for _ in range(passes):
            rng.shuffle(order)
            with torch.no_grad():
                for T, s in sweep(fn, inputs, order, sync).items():
                    times[T].append(s)
        per_t = {T: statistics.median(v) for T, v in times.items()}
        all_calls = [s for v in times.values() for s in v]
        small = [s for T, v in times.items() if T <= 64 for s in v]
        large = [s for T, v in times.items() if T > 64 for s in v]
        if name == "inductor":
            graphs = inductor_graphs()
        elif name.startswith("symshape_graphs"):
            graphs = len(holder["f"].graphs)
            reports[name] = holder["f"].report() + replay_times(holder["f"], sync)
        else:
            graphs = 0
        if cuda:
            # Held = what the allocator keeps reserved once its free cache is returned: graph pools
            # (Inductor's trees account their outputs as freed, so allocated bytes miss them) and live tensors.
            gc.collect()
            torch.cuda.empty_cache()
            allocated = (torch.cuda.memory_allocated() - base) / 2 ** 20
            held = (torch.cuda.memory_reserved() - base_reserved) / 2 ** 20
        else:
            allocated = held = float("nan")
        rows.append((name, statistics.median(all_calls) * 1e3, percentile(all_calls, 99) * 1e3,
                     statistics.median(small) * 1e3, statistics.median(large) * 1e3 if large else float("nan"),
                     graphs, held, first, err))
        r = rows[-1]
        print(f"[{name}] median {r[1]:.3f} ms, p99 {r[2]:.3f}, T<=64 {r[3]:.3f}, T>64 {r[4]:.3f}, graphs {graphs}, "
              f"held {held:.0f} MiB (allocated {allocated:.0f}), first sweep {first:.1f} s, rel err {err:.1e}", flush=True)
        holder.clear()
        fn = compiled = None

    for name, text in reports.items():
        print(f"\n--- {name} report ---\n{text}")
    for r in rows:
        print("ROW\t" + json.dumps([None if isinstance(x, float) and math.isnan(x) else x for x in r]))
    print_table(rows, args, dev, max_t, passes)


def print_table(rows, args, dev, max_t, passes):
    cuda = dev == "cuda"
    nan = float("nan")
    rows = [[nan if x is None else x for x in r] for r in rows]
    eager_small = next((r[3] for r in rows if r[0] == "eager"), None)
    print(f"\nGPT-2 ({'tiny' if args.quick else '2 layers, d=768, 12 heads'}) on {dev}"
          f"{' (' + torch.cuda.get_device_name() + ')' if cuda else ''}, torch {torch.__version__}, "
          f"B=1, every T in 1..{max_t} in random order, {passes} timed pass(es), float32 matmuls "
          f"{'in TF32' if args.tf32 else 'in full float32 (no TF32)'}; latency per call in ms")
    head = (f"{'method':<21}{'median':>8}{'p99':>8}{'med T<=64':>11}{'med T>64':>10}{'x eager<=64':>12}"
            f"{'graphs':>8}{'GPU MiB':>9}{'1st sweep s':>12}{'rel err':>9}")
    print(head)
    print("-" * len(head))
    for name, med, p99, sm, lg, graphs, held, first, err in rows:
        speed = f"{eager_small / sm:.2f}x" if eager_small else "-"
        g = "?" if graphs is None else str(graphs)
        print(f"{name:<21}{med:>8.3f}{p99:>8.3f}{sm:>11.3f}{lg:>10.3f}{speed:>12}{g:>8}{held:>9.0f}{first:>12.1f}"
              f"{err:>9.1e}")


if __name__ == "__main__":
    main()
