"""Real transformers models on the GPU: eager, Inductor (dynamic, static), compiler.compile, backend="symshape".

Eight Hugging Face models with tiny-but-realistic configs (d >= 768): Llama,
Qwen2 (GQA), Mistral (sliding window), Gemma, GPT-2, BERT with an attention
mask, ViT at symbolic H/W, the Whisper encoder; fp16 and bf16; B x T sweeps up
to T = 4096 with odd sizes.  Every mode of a model runs in one process on the
same inputs.  Per point: ms per call (``triton.testing.do_bench`` median on
CUDA), the first call's ms at that size (compile at the first size; at a later
size the first-call stall), the error against an fp32 eager reference
(``max|out - ref| / max|ref|``) and, for language models, the share of
positions whose argmax equals the reference's.  Per mode: dynamo graphs and
symshape traces over the sweep (1 trace and 0 recompiles is the target).  Then
speedups and geomeans.  ``--decode`` adds the decode table of
:mod:`bench.gpu_decode` (ms per token with a growing KV cache).

Usage::

    python bench/gpu_models.py --quick --decode          # one device call (< 8 min)
    python bench/gpu_models.py                           # every model, both dtypes, the full sweep
    python bench/gpu_models.py --only llama,bert --dtypes bf16
    python bench/gpu_models.py --device cpu --smoke      # tiny configs on the CPU (no Inductor)
    python bench/gpu_models.py --size-oblivious          # dynamo captures B = 1 with the other sizes

Example (the suite)::

    >>> [c.name for c in CASES]
    ['llama', 'qwen2', 'mistral', 'gemma', 'gpt2', 'bert', 'vit', 'whisper']
    >>> CASES[5].points(quick=True, smoke=False)
    [(4, 128), (2, 999)]
"""
from __future__ import annotations

import argparse
import copy
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable

# Every compiler starts cold, as a user's first run does: fresh Triton and Inductor caches (a
# kernel another run built, or a launcher it compiled, would be found on disk and its build not
# timed).  A cache dir set in the environment is kept.
_TMP = tempfile.mkdtemp(prefix="gpu_models_")
os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(_TMP, "triton"))
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_TMP, "inductor"))

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import compiler  # noqa: E402

compiler.register()  # backend="symshape" from this source tree, installed or not
from bench.gpu_compare import _dynamo_graphs, _geo, _rel_err  # noqa: E402
from compiler.codegen.triton_build import WAITS  # noqa: E402
from compiler.codegen.preload import PRELOADS  # noqa: E402

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
MODES = ["eager", "inductor_dyn", "inductor_static", "symshape", "backend"]
#: Asked for by name only (``--modes``): the backend with ``options={"cuda_graphs": True}`` (a CUDA
#: graph per size bucket, :mod:`compiler.cuda_graphs`; graph memory is reported per model), and
#: ``compiler.compile(..., cuda_graphs=True)`` the same way (``symshape`` is the default, graphs where the
#: cost model says they pay; ``symshape_nographs`` is ``cuda_graphs=False``).
EXTRA_MODES = ["backend_graphs", "symshape_graphs", "symshape_nographs"]


class LMLogits(nn.Module):
    """A causal LM's logits from ``input_ids`` (no cache)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, ids):
        return self.m(input_ids=ids, use_cache=False).logits


class MaskedEncoder(nn.Module):
    """BERT's last hidden state from ``input_ids`` and a 0/1 ``attention_mask``."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, ids, mask):
        return self.m(input_ids=ids, attention_mask=mask).last_hidden_state


class PixelEncoder(nn.Module):
    """ViT's last hidden state at any image size (position embeddings interpolated)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, px):
        return self.m(pixel_values=px, interpolate_pos_encoding=True).last_hidden_state


class AudioEncoder(nn.Module):
    """Whisper's encoder: log-mel features -> last hidden state."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, feats):
        return self.m(input_features=feats).last_hidden_state


def _lm(cls_name, conf_name, **kw):
    def make(small):
        import transformers
        conf = getattr(transformers, conf_name)(**kw)
        if small:
            conf = getattr(transformers, conf_name)(**{**kw, **_SMALL_LM})
        conf._attn_implementation = "sdpa"
        return LMLogits(getattr(transformers, cls_name)(conf))
    return make


_SMALL_LM = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, num_hidden_layers=2)
_LM = dict(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_attention_heads=16,
           num_key_value_heads=4, num_hidden_layers=4, max_position_embeddings=8192)


def _gpt2(small):
    import transformers
    conf = transformers.GPT2Config(n_embd=64 if small else 768, n_layer=2 if small else 4,
                                   n_head=4 if small else 12, n_positions=8192, vocab_size=128 if small else 50257)
    conf._attn_implementation = "sdpa"
    return LMLogits(transformers.GPT2LMHeadModel(conf))


def _bert(small):
    import transformers
    conf = transformers.BertConfig(hidden_size=64 if small else 768, num_hidden_layers=2 if small else 4,
                                   num_attention_heads=4 if small else 12, intermediate_size=128 if small else 3072,
                                   max_position_embeddings=8192, vocab_size=128 if small else 30522)
    conf._attn_implementation = "sdpa"
    return MaskedEncoder(transformers.BertModel(conf, add_pooling_layer=False))


def _vit(small):
    import transformers
    conf = transformers.ViTConfig(hidden_size=64 if small else 768, num_hidden_layers=2 if small else 4,
                                  num_attention_heads=4 if small else 12, intermediate_size=128 if small else 3072,
                                  image_size=32 if small else 224, patch_size=8 if small else 16)
    conf._attn_implementation = "sdpa"
    return PixelEncoder(transformers.ViTModel(conf, add_pooling_layer=False))


def _whisper(small):
    import transformers
    conf = transformers.WhisperConfig(d_model=64 if small else 768, encoder_layers=2 if small else 4,
                                      encoder_attention_heads=4 if small else 12,
                                      encoder_ffn_dim=128 if small else 3072, num_mel_bins=80,

                                      max_source_positions=16 if small else 1500)
    conf._attn_implementation = "sdpa"
    from transformers.models.whisper.modeling_whisper import WhisperEncoder
    return AudioEncoder(WhisperEncoder(conf))


def _ids(vocab):
    return lambda b, t, dev, dt, g: [torch.randint(0, vocab, (b, t), generator=g).to(dev)]


def _bert_inputs(vocab):
    def make(b, t, dev, dt, g):
        ids = torch.randint(0, vocab, (b, t), generator=g)
        mask = torch.ones(b, t, dtype=torch.long)
        mask[b // 2:, (3 * t) // 4:] = 0  # the second half of the batch padded at the end
        return [ids.to(dev), mask.to(dev)]
    return make


@dataclass
class Case:
    """One model: how to build it, its input specs (``{dt}``: the dtype), its sweep, and its inputs."""

    name: str
    make: Callable  # (small: bool) -> nn.Module
    specs: tuple
    full: list  # (B, T) points; T is H = W for ViT, and fixed by the config for Whisper
    quick: list
    smoke: list
    inputs: Callable  # (B, T, device, dtype, generator, small) -> list of tensors
    lm: bool = True
    #: ``(small) -> dims`` for ``compiler.compile``: a size the model accepts to trace at where
    #: the automatic example size is refused (Whisper's frame count is fixed by its config).
    dims: Callable = None

    def points(self, quick: bool, smoke: bool) -> list:
        return self.smoke if smoke else self.quick if quick else self.full


_LM_FULL = [(4, 128), (4, 500), (2, 1024), (1, 2047), (1, 4096)]
_LM_QUICK = [(4, 128), (2, 999)]
_LM_SMOKE = [(2, 8), (1, 13)]


def _lm_case(name, make, vocab, **kw):
    return Case(name, make, ("ids: i64[B, T]",), _LM_FULL, _LM_QUICK, _LM_SMOKE,
                lambda b, t, dev, dt, g, small: _ids(128 if small else vocab)(b, t, dev, dt, g), **kw)


CASES = [
    _lm_case("llama", _lm("LlamaForCausalLM", "LlamaConfig", **_LM), 32000),
    _lm_case("qwen2", _lm("Qwen2ForCausalLM", "Qwen2Config", **{**_LM, "num_key_value_heads": 2}), 32000),
    _lm_case("mistral", _lm("MistralForCausalLM", "MistralConfig", **{**_LM, "sliding_window": 512}), 32000),
    _lm_case("gemma", _lm("GemmaForCausalLM", "GemmaConfig", **{**_LM, "num_attention_heads": 8, "head_dim": 128,
                                                                  "num_key_value_heads": 1,
                                                                  "intermediate_size": 4096}), 32000),
    _lm_case("gpt2", _gpt2, 50257),
    Case("bert", _bert, ("ids: i64[B, T]", "mask: i64[B, T] in 0..1"), [(4, 128), (4, 500), (2, 999), (1, 4096)],
         [(4, 128), (2, 999)], [(2, 8), (3, 13)],
         lambda b, t, dev, dt, g, small: _bert_inputs(128 if small else 30522)(b, t, dev, dt, g), lm=False),
    Case("vit", _vit, ("px: {dt}[B, 3, H, W]",), [(8, 224), (4, 320), (2, 479), (1, 640)], [(4, 224), (2, 333)],
         [(2, 32), (1, 45)], lambda b, t, dev, dt, g, small: [torch.randn(b, 3, t, t, generator=g).to(dev, dt)],
         lm=False),
    Case("whisper", _whisper, ("feats: {dt}[B, 80, F]",), [(1, 3000), (4, 3000), (7, 3000)], [(1, 3000), (3, 3000)],
         [(1, 32), (2, 32)], lambda b, t, dev, dt, g, small: [torch.randn(b, 80, t, generator=g).to(dev, dt)],
         lm=False, dims=lambda small: {"F": 32 if small else 3000}),
]


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def bench_ms(fn, args, device) -> float:
    """Median ms per call: ``triton.testing.do_bench`` on CUDA, wall-clock medians on the CPU."""
    if device == "cuda":
        import triton.testing
        return triton.testing.do_bench(lambda: fn(*args), warmup=25, rep=100, return_mode="median")
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2] * 1e3


class Mode:
    """One way to run a model; the first call at each size is timed (compile or first-call stall)."""

    def __init__(self, mode, prog, specs, device, dims=None):
        self.mode, self.prog, self.specs, self.device = mode, prog, specs, device
        t0 = time.perf_counter()
        self.traces0, self.graphs0 = compiler.STATS["traces"], _dynamo_graphs()
        target = "triton" if device == "cuda" else "cpp"
        if mode == "eager":
            self.fn = prog
        elif mode == "inductor_dyn":
            self.fn = torch.compile(prog, dynamic=True)
        elif mode == "inductor_static":
            self.fn = torch.compile(prog, dynamic=False)
        elif mode == "symshape":
            self.fn = compiler.compile(prog, *specs, dims=dims, target=target)
        elif mode == "symshape_nographs":
            self.fn = compiler.compile(prog, *specs, dims=dims, target=target, cuda_graphs=False)
        elif mode == "symshape_graphs":
            self.fn = compiler.compile(prog, *specs, dims=dims, target=target, cuda_graphs=True)
            self.fn.max_graph_bytes = None  # a graph at every point: what graphs save where calls are large
        elif mode == "backend_graphs":
            self.fn = torch.compile(prog, backend="symshape", dynamic=True,
                                    options={"target": target, "cuda_graphs": True})
        else:
            self.fn = torch.compile(prog, backend="symshape", dynamic=True, options={"target": target})
        #: Seconds before the first call (compiler.compile traces and builds here; torch.compile at its call).
        self.setup_ms = (time.perf_counter() - t0) * 1e3
        #: Traces compiler.compile made before any call (the general one, and those ahead for size 1).
        self.traces_at_compile = compiler.STATS["traces"] - self.traces0
        prog_stats = getattr(getattr(self.fn, "compiled", self.fn), "stats", {})
        #: Of those: the first trace again at larger automatic sizes, and sizes the program branches on.
        self.trace_kinds = (prog_stats.get("retraces", 0), prog_stats.get("branch_traces", 0))

    def first_call(self, args):
        """(output, ms of this call, synchronized)."""
        _sync(self.device)
        t0 = time.perf_counter()
        out = self.fn(*args)
        _sync(self.device)
        return out, (time.perf_counter() - t0) * 1e3

    def counts(self):
        """(dynamo graphs compiled, symshape traces) since this mode was made."""
        return _dynamo_graphs() - self.graphs0, compiler.STATS["traces"] - self.traces0


def _argmax_agree(out, ref) -> float:
    return (out.float().argmax(-1) == ref.argmax(-1)).float().mean().item()


def run_case(case: Case, dtype, points, device, modes, small, log, rounds: int = 3) -> dict:
    """Every mode at every point of one model: ``{mode: {point: record}}`` plus per-mode counts.

    Each mode first meets every point (first-call ms, error, argmax), then the ms per call are
    taken in ``rounds`` interleaved rounds (every mode at every point per round, the order reversed
    every other round) and their median kept: the GPU machine's host speed drifts by up to 1.7x
    within a minute (bench/results/gpu_models_order_h100_s10_2026-11-27.txt), so modes timed one
    after another in blocks compared the drift, not the modes.  Every mode compiles its own wrapper
    module around the same model (dynamo keeps an entry per wrapper), so none is reset in between."""
    torch.manual_seed(0)
    base = case.make(small).eval()
    prog = copy.deepcopy(base).to(device, dtype)
    ref_prog = base.to(device, torch.float32)
    short = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32"}[dtype]
    specs = tuple(s.replace("{dt}", short) for s in case.specs)
    g = torch.Generator().manual_seed(1)
    inputs = {p: case.inputs(*p, device, dtype, g, small) for p in points}
    res: dict = {}
    runs: dict = {}
    eager_outs: dict = {}
    torch._dynamo.reset()
    with torch.no_grad():
        refs = {p: ref_prog(*[t.float() if t.is_floating_point() else t for t in inputs[p]]).float()
                for p in points}
        del ref_prog
        for m in modes:
            rec = res[m] = {"points": {}}
            try:
                run = Mode(m, type(prog)(prog.m), specs, device, dims=case.dims(small) if case.dims else None)
            except Exception as e:  # noqa: BLE001 - a mode that cannot start is reported, not fatal
                rec["fail"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
                continue
            for p in points:
                pt = rec["points"][p] = {"ms_rounds": []}
                try:
                    waits = dict(WAITS)
                    out, pt["first_ms"] = run.first_call(inputs[p])
                    # Of a first call's ms, how many it waited for kernel builds from the workers,
                    # and how many variants it took back from the queue to compile itself (their
                    # compile time is in first_ms, not in the wait): the first-call stall's parts.
                    pt["build_wait_ms"] = (WAITS["s"] - waits["s"]) * 1e3
                    pt["builds_taken"] = WAITS["taken"] - waits["taken"]
                    pt["stand_ins"] = WAITS["stand_ins"] - waits["stand_ins"]
                    if p == points[0]:
                        pt["first_ms"] += run.setup_ms
                    pt["err"] = _rel_err(out, refs[p])
                    # #28's "logits within Inductor's own error vs eager": the same-dtype eager run is
                    # the reference here (the first mode, when "eager" is listed first).
                    if m == "eager":
                        eager_outs[p] = out.detach().clone()
                    elif p in eager_outs:
                        pt["err_eager"] = _rel_err(out, eager_outs[p].float())
                    pt["agree"] = _argmax_agree(out, refs[p]) if case.lm else float("nan")
                    del out
                except Exception as e:  # noqa: BLE001 - reported per point
                    rec["fail"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
                    pt["ms"] = float("nan")
            rec["graphs"], rec["traces"] = run.counts()
            rec["traces_at_compile"] = run.traces_at_compile
            rec["trace_kinds"] = run.trace_kinds
            runs[m] = run
        before = (_dynamo_graphs(), compiler.STATS["traces"])
        for r in range(rounds):
            for m in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
                for p in points:
                    pt = res[m]["points"][p]
                    if "err" not in pt:
                        continue
                    try:
                        pt["ms_rounds"].append(bench_ms(runs[m].fn, inputs[p], device))
                    except Exception as e:  # noqa: BLE001 - reported per point
                        res[m]["fail"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
        # The error at a later call, once a shape has repeated: the first call may run another
        # attention kernel than later ones (cuDNN's plans per shape: compiler.repeated_shapes), so
        # the first call's error against eager says which kernel ran first, not how close the
        # program's steady results are.  Eager's own first output is the reference for both.
        for m, run in runs.items():
            if m == "eager":
                continue
            for p in points:
                pt = res[m]["points"][p]
                if "err" in pt and p in eager_outs:
                    try:
                        with torch.no_grad():
                            pt["err_eager_steady"] = _rel_err(run.fn(*inputs[p]), eager_outs[p].float())
                    except Exception as e:  # noqa: BLE001 - reported per point
                        res[m]["fail"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
        for m, run in runs.items():
            for p in points:
                pt = res[m]["points"][p]
                if pt.get("ms_rounds"):
                    pt["ms"] = sorted(pt["ms_rounds"])[len(pt["ms_rounds"]) // 2]
                pt.setdefault("ms", float("nan"))
                print(f"  {case.name:<8} {short:<4} {m:<16} B,T={p} first={pt.get('first_ms', float('nan')):9.1f}ms "
                      f"(build wait {pt.get('build_wait_ms', float('nan')):.0f}ms, {pt.get('builds_taken', 0)} taken, "
                      f"{pt.get('stand_ins', 0)} stand-ins) "
                      f"ms={pt['ms']:8.3f} ({' '.join(f'{x:.3f}' for x in pt['ms_rounds'])}) "
                      f"err={pt.get('err', float('nan')):.1e}"
                      + (f" FAIL {res[m]['fail']}" if "fail" in res[m] and "err" not in pt else ""), file=log, flush=True)
            if m in ("backend_graphs", "symshape_graphs") or isinstance(run.fn, compiler.GraphedProgram):
                from compiler.backend import graphed_programs
                gps = graphed_programs() if m == "backend_graphs" else [run.fn]
                res[m]["cuda_graphs"] = sum(gp.graph_count() for gp in gps)
                res[m]["graph_mib"] = sum(gp.graph_bytes() for gp in gps) / 2 ** 20
                res[m]["decisions"] = [f"{k}: {v.text()}" for gp in gps for (_, k), v in
                                       getattr(gp, "decisions", {}).items()]
                if getattr(run.fn, "blocker", None):
                    res[m]["decisions"].append(f"no graphs: {run.fn.blocker}")
        # Compiles while timing would be recompiles the counts above miss.
        res["_timing_compiles"] = (_dynamo_graphs() - before[0], compiler.STATS["traces"] - before[1])
        del runs
    torch._dynamo.reset()
    return res


def _fmt(x, spec):
    return format(x, spec) if x == x else "-"


def report(results: dict, modes) -> str:
    """The tables: ms per point, speedups, first calls, errors, counts, geomeans, acceptance."""
    L = []
    has = set(modes)
    L.append("ms per call (median of interleaved rounds, each a do_bench median on CUDA); x = speedup over eager; first = the first call at that size in ms "
             "(at the first point: compile included, compiler.compile's trace and build too)")
    for (name, dname), res in results.items():
        L.append(f"\n{name} {dname}")
        hdr = f"  {'B,T':<12}" + "".join(f"{m:>18}" for m in modes)
        L.append(hdr)
        pts = list(res["eager"]["points"]) if "eager" in res else []
        for p in pts:
            ms = {m: res[m]["points"].get(p, {}).get("ms", float("nan")) for m in modes}
            eager = ms.get("eager", float("nan"))
            cells = [f"{_fmt(ms[m], '.3f')}" + (f" {eager / ms[m]:.2f}x" if m != "eager" and ms[m] == ms[m]
                                                 else "") for m in modes]
            L.append(f"  {str(p):<12}" + "".join(f"{c:>18}" for c in cells))
            first = [_fmt(res[m]["points"].get(p, {}).get("first_ms", float("nan")), '.0f') for m in modes]
            L.append(f"  {'  first ms':<12}" + "".join(f"{c:>18}" for c in first))
            parts = [res[m]["points"].get(p, {}) for m in modes]
            if any(q.get("build_wait_ms", 0) > 0.5 or q.get("builds_taken") or q.get("stand_ins") for q in parts):
                L.append(f"  {'  build wait':<12}" + "".join(
                    f"{(_fmt(q.get('build_wait_ms', float('nan')), '.0f') + ' ms/' + str(q.get('builds_taken', '-')) + '/' + str(q.get('stand_ins', '-'))) if m in ('symshape', 'backend') else '':>18}"
                    for m, q in zip(modes, parts))
                    + "   (ms waited for worker builds / variants compiled at the call / launches of a stand-in variant)")
            err = [_fmt(res[m]["points"].get(p, {}).get("err", float("nan")), '.1e') + "/" +
                   _fmt(res[m]["points"].get(p, {}).get("agree", float("nan")), '.3f') for m in modes]
            L.append(f"  {'  err/argmax':<12}" + "".join(f"{c:>18}" for c in err))
            vs = [_fmt(res[m]["points"].get(p, {}).get("err_eager", float("nan")), '.1e') if m != "eager" else "-"
                  for m in modes]
            L.append(f"  {'  err~eager':<12}" + "".join(f"{c:>18}" for c in vs))
            later = [_fmt(res[m]["points"].get(p, {}).get("err_eager_steady", float("nan")), '.1e')
                     if m != "eager" else "-" for m in modes]
            L.append(f"  {'  later~eager':<12}" + "".join(f"{c:>18}" for c in later))
        L.append("  graphs/traces " + "  ".join(f"{m}={res[m].get('graphs', '-')}/{res[m].get('traces', '-')}"
                                               for m in modes if m != "eager")
                 + (f"  (symshape traces before its first call: {res['symshape']['traces_at_compile']}; of them "
                    f"{res['symshape']['trace_kinds'][0]} again at larger example sizes and "
                    f"{res['symshape']['trace_kinds'][1]} at sizes the program branches on)"
                    if "traces_at_compile" in res.get("symshape", {}) else ""))
        tc = res.get("_timing_compiles", (0, 0))
        if any(tc):
            L.append(f"  while timing: {tc[0]} dynamo graphs and {tc[1]} symshape traces compiled (recompiles)")
        for gm in ("backend_graphs", "symshape_graphs", "symshape"):
            if "cuda_graphs" in res.get(gm, {}):
                L.append(f"  {gm}: {res[gm]['cuda_graphs']} CUDA graphs recorded, holding "
                         f"{res[gm]['graph_mib']:.1f} MiB")
                L += [f"    {d}" for d in res[gm].get("decisions", [])]
        for m in modes:
            if "fail" in res.get(m, {}):
                L.append(f"  {m} FAILED: {res[m]['fail']}")
    L.append("\ngeomean speedups over all points (ratio of ms)")
    pairs = [("symshape", "inductor_static"), ("symshape", "inductor_dyn"), ("backend", "inductor_dyn"),
             ("backend", "inductor_static"), ("symshape", "eager"), ("backend", "eager"),
             ("symshape_graphs", "inductor_static"), ("symshape_graphs", "inductor_dyn"),
             ("symshape_graphs", "symshape"), ("symshape_graphs", "eager"), ("symshape", "symshape_nographs"),
             ("symshape_nographs", "inductor_static"), ("backend_graphs", "inductor_dyn"), ("backend_graphs", "backend"), ("backend_graphs", "eager"),
             ("inductor_dyn", "eager"), ("inductor_static", "eager")]
    for a, b in pairs:
        if {a, b} <= has:
            xs = [r[b]["points"][p].get("ms", float("nan")) / r[a]["points"][p].get("ms", float("nan"))
                  for r in results.values() for p in r["eager"]["points"] if p in r[a]["points"]
                  and p in r[b]["points"]]
            low = min((x for x in xs if x == x), default=float("nan"))
            L.append(f"  {a:<16} vs {b:<16} {_geo(xs):6.2f}x  (lowest point {low:.2f}x, {len(xs)} points)")
    if {"eager", "symshape", "backend"} & has:
        L.append("\nacceptance (#28)")
        for m in ("symshape", "backend", "backend_graphs", "symshape_graphs"):
            if m not in has or "eager" not in has:
                continue
            below = [(n, d, p) for (n, d), r in results.items() for p, pt in r[m]["points"].items()
                     if not (pt.get("ms", math.inf) <= r["eager"]["points"][p].get("ms", 0) / 0.95)]
            firsts = [pt.get("first_ms", math.inf) for r in results.values() for p, pt in
                      list(r[m]["points"].items())[1:]]
            recomp = [(n, d, r[m].get("traces"), r[m].get("graphs")) for (n, d), r in results.items()
                      if r[m].get("traces", 0) > 1 or (m.startswith("backend") and r[m].get("graphs", 0) > 1)]
            at_calls = [(n, d, r[m]["traces"] - r[m]["traces_at_compile"]) for (n, d), r in results.items()
                        if "traces_at_compile" in r[m] and r[m]["traces"] > r[m]["traces_at_compile"]]
            L.append(f"  {m}: points below 0.95x eager: {len(below)} {below[:6]}")
            L.append(f"  {m}: first call at a later size: max {_fmt(max(firsts, default=float('nan')), '.0f')} ms "
                     f"(target <= 50)")
            L.append(f"  {m}: models with >1 trace or graph: {recomp}")
            ref = next((r for r in ("inductor_dyn", "inductor_static") if r in has), None)
            if ref is not None:
                # Logits within Inductor's own error against eager (same dtype), point by point: at
                # the first call, and at a later one (the shape repeated).
                for field, when in (("err_eager", ""), ("err_eager_steady", "at a later call (the shape repeated), ")):
                    worse, n_cmp = _worse_points(results, m, ref, field)
                    L.append(f"  {m}: {when}points whose error against eager exceeds {ref}'s: {len(worse)} of "
                             f"{n_cmp} {worse[:4]}")
            if m == "symshape":
                L.append(f"  {m}: models traced again at a call (after compile): {at_calls}")
    return "\n".join(L)


def _worse_points(results, mode, ref, field) -> tuple:
    """``([(model, dtype, point, "ours>ref")], points compared)``: where ``mode``'s error ``field``
    exceeds ``ref``'s at the same point."""
    worse = [(n, d, p, f"{pt[field]:.1e}>{r[ref]['points'][p][field]:.1e}")
             for (n, d), r in results.items() for p, pt in r[mode]["points"].items()
             if field in pt and field in r[ref]["points"].get(p, {}) and pt[field] > r[ref]["points"][p][field]]
    return worse, sum(field in pt for r in results.values() for pt in r[mode]["points"].values())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--quick", action="store_true", help="2 points per model, one dtype each (one device call)")
    ap.add_argument("--smoke", action="store_true", help="tiny configs and sizes (CPU development)")
    ap.add_argument("--only", default="", help="comma-separated model names")
    ap.add_argument("--dtypes", default="", help="fp16,bf16 (default: both; --quick alternates per model)")
    ap.add_argument("--modes", default="", help=f"comma-separated, of {','.join(MODES + EXTRA_MODES)}")
    ap.add_argument("--budget-s", type=float, default=0, help="start no new model after this many seconds")
    ap.add_argument("--decode", action="store_true", help="then the decode table (bench/gpu_decode.py)")
    ap.add_argument("--log", default="", help="per-point progress log (default stderr)")
    ap.add_argument("--rounds", type=int, default=0, help="interleaved timing rounds (default 3 on CUDA, 1 on the CPU)")
    ap.add_argument("--size-oblivious", action="store_true",
                    help="torch's backed_size_oblivious on for every torch.compile mode (Inductor's and the "
                         "backend's): dynamo captures B = 1 with the other sizes instead of a second graph")
    a = ap.parse_args(argv)
    if a.size_oblivious:
        from torch.fx.experimental import _config as fx_config
        fx_config.backed_size_oblivious = True
    device = a.device
    small = a.smoke
    modes = a.modes.split(",") if a.modes else (MODES if device == "cuda" else ["eager", "symshape", "backend"])
    log = open(a.log, "a") if a.log else sys.stderr
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    import transformers
    print(f"{name} torch={torch.__version__} transformers={transformers.__version__} "
          f"{'smoke (tiny configs)' if small else 'quick' if a.quick else 'full'}"
          f"{' backed_size_oblivious' if a.size_oblivious else ''}", flush=True)
    t_start = time.perf_counter()
    results, skipped = {}, []
    chosen = [c for c in CASES if not a.only or c.name in a.only.split(",")]
    for k, case in enumerate(chosen):
        if a.dtypes:
            dts = a.dtypes.split(",")
        elif small:
            dts = ["fp32"] if device == "cpu" else ["fp16"]
        else:
            dts = [("fp16", "bf16")[k % 2]] if a.quick else ["fp16", "bf16"]
        for dn in dts:
            if a.budget_s and time.perf_counter() - t_start > a.budget_s:
                skipped.append(f"{case.name} {dn} (time budget)")
                continue
            t0 = time.perf_counter()
            try:
                # Every mode's wrapper compiles the model's one forward code object, and dynamo keeps
                # at most recompile_limit (8) entries per code object: Inductor static's entry per
                # point used them up, and later modes' new graphs (the backend's at B=1) silently
                # ran eager.  Room for all of them, as train_compare has.
                with torch._dynamo.config.patch(cache_size_limit=256, accumulated_cache_size_limit=1024):
                    results[(case.name, dn)] = run_case(case, DTYPES[dn], case.points(a.quick, small), device,
                                                        modes, small, log,
                                                        rounds=a.rounds or (3 if device == "cuda" else 1))
            except Exception as e:  # noqa: BLE001 - a model that cannot be built or run is reported, not fatal
                skipped.append(f"{case.name} {dn} failed: {type(e).__name__}: {str(e)[:160]}")
            print(f"[{case.name} {dn} done in {time.perf_counter() - t0:.0f}s]", flush=True)
            if (case.name, dn) in results and len(chosen) * len(dts) > 1:
                # Each model's table as it finishes: a run cut by a device call's time limit keeps them.
                print(report({(case.name, dn): results[(case.name, dn)]}, modes), flush=True)
    print(report(results, modes))
    from compiler.codegen import build_pool
    from compiler.codegen.triton_build import MODE, WARM_ERRORS
    pool = build_pool.STATS
    how = (f"in {pool['workers']} worker processes: {pool['done']} built, {pool['failed']} failed, "
           f"{pool['worker_s']:.1f} worker-s; calls waited {WAITS['s']:.1f} s for {WAITS['n']} of them, "
           f"launched a stand-in {WAITS['stand_ins']} times; {PRELOADS['n']} variants loaded ahead in "
           f"{PRELOADS['s']:.1f} s (SYMSHAPE_PRELOAD={os.environ.get('SYMSHAPE_PRELOAD', '1')}"
           + (f", errors: {PRELOADS['errors'][-2:]}" if PRELOADS["errors"] else "") + ")"
           if MODE["mode"] == "processes" else f"in threads ({MODE['reason']})")
    print(f"\nkernel variants compiled ahead at first calls: {compiler.STATS['warmed']}, submitting took "
          f"{compiler.STATS['warm_s']:.1f} s, {how}" + (f"; warm-up errors: {WARM_ERRORS[-3:]}" if WARM_ERRORS else ""))
    if skipped:
        print("\nnot run: " + "; ".join(skipped))
    if a.decode:
        from bench import gpu_decode
        gpu_decode.main(["--device", device] + (["--smoke"] if small else []))


if __name__ == "__main__":
    main()
