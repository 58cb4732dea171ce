"""Greedy decoding with a growing KV cache: ms per token at cache lengths S, per way of running the model.

A Hugging Face Llama (4 layers, d=1024, 16 heads / 4 KV heads, vocab 32000,
fp16, SDPA) decodes greedily: a prefill of S tokens, then one token at a time
with a ``DynamicCache`` (S grows every step).  Ways of running it, each in its
own process (a crash is a row, not the end of the bench; memory starts clean):

* ``eager``;
* ``inductor_dyn``: ``torch.compile(model, dynamic=True)``;
* ``inductor_ro``: ``mode="reduce-overhead"`` with ``DynamicCache``; ``inductor_ro_static``: with
  ``StaticCache`` (failures recorded);
* ``symshape``: ``torch.compile(model, backend="symshape", dynamic=True)``;
* ``symshape_graphs``: the same with ``options={"cuda_graphs": True}``;
* ``symshape_graphs_atensdpa`` (any symshape way + ``_atensdpa``): decode attention through ATen's
  SDPA, not :mod:`compiler.codegen.decode_attention`'s kernel (``SYMSHAPE_DECODE_KERNEL=0``): before/after;
* ``..._nocudnn``: with cuDNN's SDPA disabled in that process (it plans per shape: ms of host
  time at every new cache length on torch 2.11; symshape's programs never call it).

Per S: the median ms per token over the timed steps (synchronized each step,
as ``generate`` is).  Per way: dynamo graphs (recompiles), CUDA graphs
recorded, peak GPU memory over the model's weights, memory still held after
the run, the KV cache's bytes at the largest S, and whether its tokens equal
eager's.

Usage::

    python bench/gpu_decode.py                        # S in 128, 512, 2048 on CUDA
    python bench/gpu_decode.py --profile /tmp/prof    # + torch.profiler tables of the symshape ways
    python bench/gpu_decode.py --device cpu --smoke   # tiny Llama on the CPU (eager and symshape)

Example::

    >>> _kv_bytes(layers=4, kv_heads=4, head_dim=64, length=2048, itemsize=2) / 2**20
    8.0
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

METHODS = ["eager", "eager_nocudnn", "symshape", "symshape_graphs", "inductor_dyn_nocudnn", "inductor_dyn",
           "inductor_ro", "inductor_ro_static"]


def _kv_bytes(layers, kv_heads, head_dim, length, itemsize) -> int:
    return 2 * layers * kv_heads * head_dim * length * itemsize


def make_model(smoke: bool, device):
    import transformers
    if smoke:
        conf = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
        dtype = torch.float32
    else:
        conf = transformers.LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                                        num_hidden_layers=4, num_attention_heads=16, num_key_value_heads=4,
                                        max_position_embeddings=8192)
        dtype = torch.float16
    conf._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(conf).to(device, dtype).eval()
    return model, conf, dtype


def _gap(logits) -> float:
    """The top-1 minus top-2 logit: how near a tie this step's greedy choice was."""
    top = logits.float().topk(2).values
    return float(top[0] - top[1])


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def _fn(method, model, device):
    target = "triton" if device == "cuda" else "cpp"
    if method == "eager":
        return model
    if method == "inductor_dyn":
        return torch.compile(model, dynamic=True)
    if method.startswith("inductor_ro"):
        compiled = torch.compile(model, mode="reduce-overhead", dynamic=True)

        def step(**kw):
            torch.compiler.cudagraph_mark_step_begin()
            return compiled(**kw)
        return step
    opts = {"target": target}
    if method == "symshape_graphs":
        opts["cuda_graphs"] = True
    return torch.compile(model, backend="symshape", dynamic=True, options=opts)


def _cache(method, conf, length, device, dtype):
    import transformers
    if method == "inductor_ro_static":
        return transformers.StaticCache(config=conf, max_cache_len=length)
    return transformers.DynamicCache()


def run_method(method, smoke, device, lengths, warm, steps, profile_dir) -> dict:
    """Decode at each S with one way of running the model; the row for the table."""
    from bench.cudagraph_sweep import inductor_graphs
    from bench.gpu_compare import _dynamo_graphs
    import compiler
    from compiler.backend import graphed_programs
    compiler.register()
    aten_sdpa = method.endswith("_atensdpa")  # the parent set SYMSHAPE_DECODE_KERNEL=0 for this child
    method = method[:-len("_atensdpa")] if aten_sdpa else method
    if method.endswith("_nocudnn"):
        torch.backends.cuda.enable_cudnn_sdp(False)
        method = method[:-len("_nocudnn")]
    model, conf, dtype = make_model(smoke, device)
    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    g0 = _dynamo_graphs()
    fn = _fn(method, model, device)
    row = {"method": method + ("_nocudnn" if not torch.backends.cuda.cudnn_sdp_enabled() else "") + (
        "_atensdpa" if aten_sdpa else ""), "ms": {},
           "tokens": {}, "first_s": {}}
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for S in lengths:
            prompt = torch.randint(0, conf.vocab_size, (1, S), generator=gen).to(device)
            cache = _cache(method, conf, S + warm + steps + 1, device, dtype)
            t0 = time.perf_counter()
            routes0 = _route_counts()
            out = fn(input_ids=prompt, past_key_values=cache, use_cache=True)
            tok = out.logits[:, -1].argmax(-1)
            toks, times, host, gaps = [int(tok)], [], [], [_gap(out.logits[0, -1])]
            for k in range(warm + steps):
                _sync(device)
                t1 = time.perf_counter()
                out = fn(input_ids=tok[:, None], past_key_values=cache, use_cache=True)
                t2 = time.perf_counter()  # the host's part: the call returned, its kernels queued
                tok = out.logits[:, -1].argmax(-1)
                _sync(device)
                if k == 0:
                    row["first_s"][S] = time.perf_counter() - t0
                if k >= warm:
                    times.append(time.perf_counter() - t1)
                    host.append(t2 - t1)
                toks.append(int(tok))
                gaps.append(_gap(out.logits[0, -1]))
            # How the calls at this S ran (graphed programs only): whole-call replays, calls with no
            # graph at all, and piecewise segment replays and segments run without their graph.
            # A change of the "auto" policy partway through shows here; host speed drift does not.
            row.setdefault("routes", {})[S] = {k: v - routes0.get(k, 0) for k, v in _route_counts().items()}
            row["ms"][S] = statistics.median(times) * 1e3
            row.setdefault("host_ms", {})[S] = statistics.median(host) * 1e3
            row.setdefault("step_ms", {})[S] = [round(t * 1e3, 3) for t in times]
            row.setdefault("gaps", {})[S] = gaps
            row["tokens"][S] = toks
            # The graphed way at every S (its ms per token varies with S); the others at the largest.
            if profile_dir and (method == "symshape_graphs" or method in ("symshape", "inductor_dyn") and S == lengths[
                    -1]):
                _profile(fn, tok, cache, method, S, device, profile_dir)
            del cache, out
    import compiler.codegen.decode_attention as decode_kernel
    if decode_kernel.DISABLED:
        row["fail"] = f"decode attention kernel off: {decode_kernel.DISABLED}"
    row["dynamo_graphs"] = _dynamo_graphs() - g0
    row["traces"] = compiler.STATS["traces"]
    if method.startswith("inductor_ro") and cuda:
        row["cuda_graphs"] = inductor_graphs()
    elif method in ("symshape_graphs", "symshape") and graphed_programs():  # "symshape": graphs where they pay
        gps = graphed_programs()
        row["cuda_graphs"] = sum(gp.graph_count() for gp in gps)
        row["graph_mib"] = sum(gp.graph_bytes() for gp in gps) / 2 ** 20
        row["piecewise"] = [p.report().splitlines()[0] for gp in gps for p in gp.pieces.values() if p is not None]
        if profile_dir:
            with open(os.path.join(profile_dir, "decode_symshape_graphs_report.txt"), "w") as f:
                f.write("\n".join(gp.report() for gp in gps))
    kv = _kv_bytes(conf.num_hidden_layers, conf.num_key_value_heads, conf.hidden_size // conf.num_attention_heads,
                   max(lengths) + warm + steps + 1, torch.finfo(dtype).bits // 8)
    row["kv_mib"] = kv / 2 ** 20
    if cuda:
        row["peak_mib"] = (torch.cuda.max_memory_allocated() - base) / 2 ** 20
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        row["held_mib"] = (torch.cuda.memory_reserved() - base) / 2 ** 20
    return row


def _route_counts() -> dict:
    """Counters of every live graphed program the backend made: whole-call replays, ungraphed
    calls, piecewise replays and piecewise segments run without their graph."""
    from compiler.backend import graphed_programs
    out = {"replays": 0, "ungraphed": 0, "piece_replays": 0, "piece_eager": 0}
    for gp in graphed_programs():
        out["replays"] += gp.stats.get("replays", 0)
        out["ungraphed"] += gp.stats.get("ungraphed_calls", 0)
        for pw in gp.pieces.values():
            if pw is not None:
                out["piece_replays"] += pw.stats["replays"]
                out["piece_eager"] += pw.stats["eager_segments"]
    return out


def _profile(fn, tok, cache, method, S, device, profile_dir):
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=acts) as p:
        for _ in range(10):
            out = fn(input_ids=tok[:, None], past_key_values=cache, use_cache=True)
            tok = out.logits[:, -1].argmax(-1)
        _sync(device)
    os.makedirs(profile_dir, exist_ok=True)
    # The host side of the same steps, by Python function (torch.profiler shows ATen calls only).
    import cProfile
    import io
    import pstats
    pr = cProfile.Profile()
    _sync(device)
    pr.enable()
    for _ in range(20):
        out = fn(input_ids=tok[:, None], past_key_values=cache, use_cache=True)
        tok = out.logits[:, -1].argmax(-1)
    _sync(device)
    pr.disable()
    text = io.StringIO()
    stats = pstats.Stats(pr, stream=text)
    stats.sort_stats("tottime").print_stats(45)
    stats.sort_stats("cumtime").print_stats(45)
    with open(os.path.join(profile_dir, f"decode_{method}_S{S}_cprofile.txt"), "w") as f:
        f.write(f"cProfile of 20 decode steps ({method}, S from {S})\n" + text.getvalue())
    with open(os.path.join(profile_dir, f"decode_{method}_S{S}.txt"), "w") as f:
        sort = "cuda_time_total" if device == "cuda" else "cpu_time_total"
        f.write(p.key_averages().table(sort_by=sort, row_limit=40, max_name_column_width=80))
        f.write("\n\nby self CPU time\n")
        f.write(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=80))


def print_table(rows, lengths, device):
    print(f"\ndecode: Llama (4 layers, d=1024, 16/4 heads, fp16) greedy with a growing KV cache, B=1, on "
          f"{torch.cuda.get_device_name() if device == 'cuda' else device}; ms per token (median) at the S the "
          f"timed steps start from")
    eager = next((r for r in rows if r.get("method") == "eager" and "ms" in r), None) or next(
        (r for r in rows if r.get("method") == "eager_nocudnn" and "ms" in r), None)
    dyn = next((r for r in rows if r.get("method") == "inductor_dyn" and "ms" in r), None)
    dyn_nc = next((r for r in rows if r.get("method") == "inductor_dyn_nocudnn" and "ms" in r), None)
    head = f"{'method':<20}" + "".join(f"{'S=' + str(s):>10}" for s in lengths) + \
        f"{'/ind_dyn':>10}{'/dyn_nc':>9}{'graphs':>8}{'dyn gr':>7}{'peak MiB':>10}{'held MiB':>10}{'graph MiB':>10}" \
        f"{'KV MiB':>8}{'1st s':>7}  tokens = eager"
    print(head)
    print("-" * len(head))
    for r in rows:
        if "ms" not in r:
            print(f"{r['method']:<20} FAILED: {r.get('fail', '?')}")
            continue
        ms = [r["ms"].get(s, float("nan")) for s in lengths]
        rel = max(m / dyn["ms"][s] for m, s in zip(ms, lengths)) if dyn else float("nan")
        rel_nc = max(m / dyn_nc["ms"][s] for m, s in zip(ms, lengths)) if dyn_nc else float("nan")
        same = "-"
        if eager:
            agree = [sum(a == b for a, b in zip(r["tokens"][s], eager["tokens"][s])) for s in lengths]
            same = " ".join(f"{a}/{len(eager['tokens'][s])}" for a, s in zip(agree, lengths))
        firsts = max(r["first_s"].values()) if r["first_s"] else float("nan")
        print(f"{r['method']:<20}" + "".join(f"{m:>10.3f}" for m in ms) + f"{rel:>9.2f}x{rel_nc:>8.2f}x"
              f"{str(r.get('cuda_graphs', '-')):>8}{r.get('dynamo_graphs', 0):>7}{r.get('peak_mib', float('nan')):>10.0f}"
              f"{r.get('held_mib', float('nan')):>10.0f}{r.get('graph_mib', float('nan')):>10.1f}"
              f"{r['kv_mib']:>8.1f}{firsts:>7.1f}  {same}")
        if r.get("fail"):
            print(f"{'':<20} (then failed: {r['fail']})")
        for line in r.get("piecewise", []):
            print(f"{'':<20} {line}")
        if "host_ms" in r:
            print(f"{'  host ms':<20}" + "".join(f"{r['host_ms'].get(s, float('nan')):>10.3f}" for s in lengths) +
                  "   (median time until the call returned: the host's part of a token)")
            for s in lengths:
                st = r["step_ms"].get(s, [])
                if st:
                    rc = r.get("routes", {}).get(s)
                    print(f"{'':<20} S={s}: timed steps ms min {min(st):.3f} max {max(st):.3f}: "
                          + " ".join(f"{t:.2f}" for t in st)
                          + (f"  [routes: {rc['replays']} replays, {rc['ungraphed']} ungraphed calls, "
                             f"{rc['piece_replays']} piecewise replays, {rc['piece_eager']} segments ungraphed]"
                             if rc and any(rc.values()) else ""))
        if eager and r is not eager:
            for s in lengths:
                ta, tb = r["tokens"][s], eager["tokens"][s]
                k = next((i for i, (a, b) in enumerate(zip(ta, tb)) if a != b), None)
                if k is not None:
                    print(f"{'':<20} S={s}: first token unlike eager's at step {k}; eager's top-1 minus top-2 "
                          f"logit there {eager['gaps'][s][k]:.4f}, this way's {r['gaps'][s][k]:.4f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--smoke", action="store_true", help="tiny Llama, S in 8, 24")
    ap.add_argument("--lengths", default="")
    ap.add_argument("--methods", default="")
    ap.add_argument("--warm", type=int, default=4)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--profile", default="", help="write torch.profiler tables here")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per method")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    lengths = [int(x) for x in a.lengths.split(",")] if a.lengths else ([8, 24] if a.smoke else [128, 512, 2048])
    methods = a.methods.split(",") if a.methods else (
        METHODS if a.device == "cuda" else ["eager", "symshape", "symshape_graphs"])
    if a.child:
        (method,) = methods
        try:
            row = run_method(method, a.smoke, a.device, lengths, a.warm, a.steps, a.profile)
        except Exception as e:  # noqa: BLE001 - one way's failure is its row, at a process boundary
            row = {"method": method, "fail": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"}
        print("ROW\t" + json.dumps(row), flush=True)
        return
    rows = []
    for m in methods:
        cmd = [sys.executable, os.path.abspath(__file__), "--child", "--methods", m, "--device", a.device,
               "--lengths", ",".join(map(str, lengths)), "--warm", str(a.warm), "--steps", str(a.steps)] + \
            (["--smoke"] if a.smoke else []) + (["--profile", a.profile] if a.profile else [])
        t0 = time.perf_counter()
        try:
            env = dict(os.environ, SYMSHAPE_DECODE_KERNEL="0") if m.endswith("_atensdpa") else None
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout, env=env)
            got = [json.loads(ln[4:]) for ln in r.stdout.splitlines() if ln.startswith("ROW\t")]
            if got:
                row = got[-1]
            else:
                tail = (r.stderr.strip().splitlines() or ["no output"])[-1][:200]
                row = {"method": m, "fail": f"process exit {r.returncode}: {tail}"}
        except subprocess.TimeoutExpired:
            row = {"method": m, "fail": f"timed out after {a.timeout:.0f} s"}
        for S in list(row.get("ms", {})):  # JSON keys are strings
            for k in ("ms", "tokens", "first_s", "host_ms", "step_ms", "gaps", "routes"):
                if k in row:
                    row[k][int(S)] = row[k].pop(S)
        rows.append(row)
        print(f"[{m} done in {time.perf_counter() - t0:.0f}s]" + (f" {row['fail']}" if "fail" in row else ""),
              flush=True)
        print_table(rows, lengths, a.device)  # after every method: a run cut short keeps its rows


if __name__ == "__main__":
    main()
