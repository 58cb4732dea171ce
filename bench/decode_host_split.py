"""Host time of one greedy decode step through ``backend="symshape"`` with CUDA graphs, split by part.

``bench/gpu_decode.py`` gives the time per token; this says where the host's part goes
in the real flow (no synchronization between parts): the route (guards of the compiled
program), binding kernels to the new cache length, the eager segments (the cache's
``cat``, attention), the graph replays, and the rest of the runtime (copies into the
graphs, output clones, Python).  Same Llama as ``bench/gpu_decode.py`` (4 layers,
d=1024, fp16) from a 500-token prompt; ``cpu``: a tiny one, the target ``cpp``, no graphs.

Usage::

    python bench/decode_host_split.py            # CUDA
    python bench/decode_host_split.py cpu

Example::

    >>> _median([3.0, 1.0, 2.0])
    2.0
"""
import collections
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _median(xs):
    return statistics.median(xs)


def main(dev):
    import transformers

    import compiler
    from compiler import cuda_graphs, piecewise
    compiler.register()
    small = dev == "cpu"
    if dev == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(False)
    conf = transformers.LlamaConfig(vocab_size=128 if small else 32000, hidden_size=64 if small else 1024,
                                    intermediate_size=128 if small else 2816, num_hidden_layers=4,
                                    num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=8192)
    conf._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(conf).to(dev, torch.float32 if small else torch.float16).eval()
    fn = torch.compile(model, backend="symshape", dynamic=True,
                       options={"cuda_graphs": True, **({"target": "cpp"} if small else {})})
    acc = collections.defaultdict(float)
    each = collections.defaultdict(list)
    def timed(name, f):
        def g(*a, **k):
            t0 = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                acc[name] += time.perf_counter() - t0
                each[name].append(time.perf_counter() - t0)
        return g
    cuda_graphs.GraphedProgram.__call__ = timed("GraphedProgram.__call__", cuda_graphs.GraphedProgram.__call__)
    cuda_graphs.GraphedProgram._route = timed("  _route", cuda_graphs.GraphedProgram._route)
    piecewise.PiecewiseRun.__call__ = timed("  PiecewiseRun.__call__", piecewise.PiecewiseRun.__call__)
    piecewise.bind_launches = timed("    bind_launches", piecewise.bind_launches)
    if not small:  # the Triton kernels outside the graphs, launched at each call's sizes (sized_launches)
        from compiler.codegen import triton as triton_target
        triton_target.SizeClassLauncher.launch_at = timed("      launch_at (plan + launch)",
                                                            triton_target.SizeClassLauncher.launch_at)
    def sync():
        if dev == "cuda": torch.cuda.synchronize()
    with torch.no_grad():
        prompt = torch.randint(0, conf.vocab_size, (1, 500), device=dev)
        cache = transformers.DynamicCache()
        out = fn(input_ids=prompt, past_key_values=cache, use_cache=True)
        tok = out.logits[:, -1].argmax(-1)
        for k in range(12):
            out = fn(input_ids=tok[:, None], past_key_values=cache, use_cache=True); tok = out.logits[:, -1].argmax(-1)
        sync()
        pws = [p for gp in compiler.backend.graphed_programs() for p in gp.pieces.values() if p is not None]
        for pw in pws:
            for seg in pw.segments:
                seg.fn = timed("    eager segment fns" if not seg.graphed else "    graphed segment fns (no graph)", seg.fn)
            # The attention segments run as functions writing into the next graph's buffer (into_graph).
            for k, direct in list(pw.into.items()):
                if direct is not None:
                    pw.into[k] = (direct[0], timed("    attention segments (into graph)", direct[1]))
        def wrap_graphs():
            for pw in pws:
                for rec in pw.graphs.values():
                    if not getattr(rec.graph, "_probe", False):
                        rec.graph.replay = timed("    graph replays", rec.graph.replay); rec.graph._probe = True
        wrap_graphs()
        acc.clear(); each.clear()
        n = 40
        tot = 0.0
        steps = []
        for k in range(n):
            sync(); t0 = time.perf_counter()
            out = fn(input_ids=tok[:, None], past_key_values=cache, use_cache=True)
            dt = time.perf_counter() - t0; tot += dt; steps.append(dt)
            tok = out.logits[:, -1].argmax(-1)
        sync()
        print(f"host us per token (mean of {n}, from S=513): step {tot / n * 1e6:.0f} (median {statistics.median(steps)*1e6:.0f})")
        for k, v in acc.items():
            e = sorted(each[k])
            print(f"  {k:<40} {v / n * 1e6:8.1f}   per call: median {e[len(e)//2]*1e6:.1f} max {e[-1]*1e6:.1f} (calls {len(e)})")
        print("  (GraphedProgram.__call__ minus its parts: copies into graphs, output clones, the runtime's Python;"
              " launch_at runs inside the segment functions)")
        for pw in pws:
            print(pw.report().splitlines()[0])


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cuda")
