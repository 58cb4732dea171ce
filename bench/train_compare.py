"""Training steps with a new sequence length every step: eager, Inductor, symshape's backend.

GPT-2, Llama, BERT (transformers, built from a config: no download) and a ViT
(its image side changes with the length: ``L`` tokens are a ``16*k x 16*k``
image, ``k*k ~ L``) train for ``--steps`` steps, each at a sequence length drawn
at random from ``--min-len..--max-len`` (fixed seed; every mode sees the same
lengths, moved by less than the number of modes so that no two modes meet one
shape: see :func:`mode_lengths`, and the same initial weights).  A step is forward (the model's own
loss), backward, and AdamW outside the compiled region; fp32 and bf16 autocast.

Modes: ``eager``; ``ind_dyn`` (``torch.compile(dynamic=True)``); ``ind_static``
(``dynamic=False``, automatic dynamic shapes off: one compile per length; each of
its lengths runs twice, the second step timed);
``symshape`` (``backend="symshape", dynamic=True``); ``symshape_causal`` (the same with
``options={"causal_masks": True}``: masks proved causal become ``is_causal=True``); ``symshape_groups``,
``symshape_gemm``, ``symshape_warm``, ``symshape_groups_warm`` (symshape with opt-in rewrites on: :data:`VARIANTS`),
``symshape_threads`` (kernel builds in threads, not worker processes: :data:`ENV_VARIANTS`);
any mode with ``_nocudnn``
appended (``eager_nocudnn``, ``ind_dyn_nocudnn``) runs with cuDNN's SDPA disabled,
which plans per shape and so costs a new-length step milliseconds of host time.  Per mode: median step ms
over steps that compiled nothing, compile seconds (the time of steps that
compiled, or in which a launch waited for a kernel build running in a worker
process, less a median step each), dynamo graphs compiled after the first
step (recompiles), symshape fallbacks, peak CUDA memory, and the largest
gradient error against fp32 eager at one fixed length before training
(``max|g - g_ref|`` over the parameters / the largest ``|g_ref|``).  Dropout is 0 so that
gradients compare exactly.

On CUDA the modes run interleaved by default (:func:`run_interleaved`: one step of each in
turn, in one process), ``--isolate`` runs each in a fresh process instead, and ``--pairs ANCHOR``
runs each mode in a fresh process interleaved with ``ANCHOR`` (say ``eager_nocudnn``) there, its
speedups taken against that process's anchor (:func:`speedup`): no two compiled copies of a model
share a process, and the host's drift between processes cancels (on the CPU every worker first sets
malloc's thresholds as symshape's C++ target does, so that no anchor gains from symshape's setting
alone).  ``--per-step`` lists every
step's length and time.

``--budget S`` stops starting new (model, dtype) rows after S seconds: the
table then says which did not run.

Usage::

    python bench/train_compare.py --quick            # CUDA if present, else CPU (small models)
    python bench/train_compare.py --device cpu --quick --out bench/results/train_compare_cpu.txt

Example::

    >>> lengths(3, 64, 1024, seed=0)
    [928, 458, 840]
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import math
import os
import random
import statistics
import sys
import tempfile
import time
import warnings

# Every compiler starts cold, as a user's first run does: fresh Triton and Inductor caches (a
# kernel another run built, or a launcher it compiled, would be found on disk and its build not
# timed).  A cache dir set in the environment is kept.
_TMP = tempfile.mkdtemp(prefix="train_compare_")
os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(_TMP, "triton"))
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_TMP, "inductor"))

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import compiler  # noqa: E402

MODES = ("eager", "ind_dyn", "ind_static", "symshape")


def lengths(n, lo, hi, seed=0) -> list:
    """``n`` sequence lengths drawn uniformly from ``lo..hi`` with a fixed seed."""
    rng = random.Random(seed)
    return [rng.randint(lo, hi) for _ in range(n)]


def mode_lengths(lens, k: int, n: int) -> list:
    """Mode ``k``'s (of ``n``) lengths: each of ``lens`` moved by less than ``n`` to the value
    that is ``k`` modulo ``n`` (``L - L % n + k``), so no two modes share a length (a shape).

    Per-shape caches are process-wide (cuBLAS's heuristics, cuDNN's plans): a mode that meets
    a length another mode already ran pays less than a training run that meets it first.  Each
    mode's lengths are within ``n`` of the shared draw: the same work, new shapes for every mode.

    >>> mode_lengths([928, 458], 0, 3), mode_lengths([928, 458], 2, 3)
    ([927, 456], [929, 458])
    >>> runs = [set(mode_lengths(lengths(50, 64, 1024), k, 5)) for k in range(5)]
    >>> sum(map(len, runs)) == len(set().union(*runs))  # no length met by two modes
    True
    """
    return [L - L % n + k for L in lens]


def _sizes(device):
    if device == "cuda":
        return dict(d=768, layers=2, heads=12, inter=3072, vocab=8192, batch=8)
    return dict(d=64, layers=2, heads=4, inter=128, vocab=512, batch=1)


def build(name, device, max_len):
    """(model, make_batch(L, generator)) for a model name."""
    import transformers as tf
    s = _sizes(device)
    d, n, h, inter, vocab, B = s["d"], s["layers"], s["heads"], s["inter"], s["vocab"], s["batch"]
    torch.manual_seed(0)
    if name == "gpt2":
        m = tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=vocab, n_embd=d, n_layer=n, n_head=h, n_positions=max_len,
                                             resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
        m.config.loss_type = m.loss_type = "ForCausalLM"  # else transformers logs once per call: a graph break in every mode
    elif name == "llama":
        m = tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=vocab, hidden_size=d, intermediate_size=inter,
                                               num_hidden_layers=n, num_attention_heads=h,
                                               num_key_value_heads=max(1, h // 2), max_position_embeddings=max_len))
        m.config.loss_type = m.loss_type = "ForCausalLM"
    elif name == "bert":
        m = tf.BertForMaskedLM(tf.BertConfig(vocab_size=vocab, hidden_size=d, num_hidden_layers=n,
                                             num_attention_heads=h, intermediate_size=inter,
                                             max_position_embeddings=max_len, hidden_dropout_prob=0.0,
                                             attention_probs_dropout_prob=0.0))
        m.config.loss_type = m.loss_type = "ForMaskedLM"
    elif name == "vit":
        m = tf.ViTForImageClassification(tf.ViTConfig(image_size=224, patch_size=16, hidden_size=d,
                                                      num_hidden_layers=n, num_attention_heads=h,
                                                      intermediate_size=inter, num_labels=10,
                                                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                                      problem_type="single_label_classification"))
        m.config.loss_type = m.loss_type = "ForImageClassification"
    else:
        raise ValueError(name)
    m = m.to(device).train()

    def batch(L, g):
        if name == "vit":
            k = max(2, round(math.sqrt(L)))
            x = torch.randn(B, 3, 16 * k, 16 * k, generator=g).to(device)
            return dict(pixel_values=x, labels=torch.randint(0, 10, (B,), generator=g).to(device),
                        interpolate_pos_encoding=True)
        ids = torch.randint(0, vocab, (B, L), generator=g).to(device)
        if name == "bert":
            mask = torch.ones(B, L, dtype=torch.int64)
            mask[0, : L // 4] = 0
            return dict(input_ids=ids, attention_mask=mask.to(device), labels=ids)
        return dict(input_ids=ids, labels=ids)
    return m, batch


def _graphs() -> int:
    from torch._dynamo.utils import counters
    return int(counters["stats"]["unique_graphs"])


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def _parts() -> dict:
    """symshape's compile counters: seconds in its graphs' compiles (``sym_graphs_s``: trace,
    lowering, code generation, kernel builds), of which lowering + scheduling (``lower_s``),
    kernel sources (``codegen_s``), kernel builds (``kernel_build_s``, ``kernel_variants`` built)."""
    return {"sym_graphs_s": compiler.BACKEND_STATS.get("train_graph_s", 0.0),
            "lower_s": compiler.STATS.get("lower_s", 0.0), "codegen_s": compiler.STATS.get("codegen_s", 0.0),
            "kernel_build_s": compiler.STATS.get("warm_s", 0.0), "kernel_variants": compiler.STATS.get("warmed", 0),
            "build_wait_s": _waits(), "linear_groups": compiler.BACKEND_STATS.get("linear_groups", 0),
            "preload_n": _preloads()["n"], "preload_s": _preloads()["s"]}


def _graph_stats() -> dict:
    """CUDA graphs of training steps recorded and replayed so far (:mod:`compiler.train_graphs`)."""
    from compiler.train_graphs import STATS
    return STATS


def _graph_mark() -> tuple:
    """Where :func:`_graph_stats`' counters stand now (for :func:`_graph_counts`)."""
    st = _graph_stats()
    return st["recorded"], st["replays"], len(st["refused"])


def _graph_counts(since: tuple) -> dict:
    """CUDA graphs recorded and replayed since the :func:`_graph_mark` ``since``, and the first
    reasons a recording was refused."""
    st = _graph_stats()
    return {"graphs_recorded": st["recorded"] - since[0], "graphs_replayed": st["replays"] - since[1],
            "graphs_refused": st["refused"][since[2]:][:3]}


def _preloads() -> dict:
    """Variants the loader thread loaded ahead so far, and its seconds (:mod:`compiler.codegen.preload`):
    work beside the steps, on their process's GIL."""
    from compiler.codegen.preload import PRELOADS
    return PRELOADS


def _building() -> tuple:
    """Launches that waited for a kernel build still running in a worker, or took one back from
    the queue and compiled it: a step during which these move paid for a build (counted as
    compile time, not as a step time)."""
    from compiler.codegen.triton_build import WAITS
    return WAITS["n"], WAITS.get("taken", 0)


def _waits() -> float:
    """Seconds launches waited for kernel builds still running in worker processes (not part of
    ``sym_graphs_s``: the waits happen in the first run, after the graph compiled)."""
    from compiler.codegen.triton_build import WAITS
    return WAITS["s"]


def _compiled(mode, model):
    torch._dynamo.reset()
    if mode == "eager":
        return model
    if mode == "ind_dyn":
        return torch.compile(model, dynamic=True)
    if mode == "ind_static":
        return torch.compile(model, dynamic=False)
    assert mode.startswith("symshape"), mode
    compiler.register()  # a source tree that was not pip-installed has no entry point
    return torch.compile(model, backend="symshape", dynamic=True)


def grad_error(model, fn, batch, dtype, device, ref=None) -> float:
    """Largest relative gradient error of ``fn`` against fp32 eager on ``model``'s copy
    (or against ``ref``: :func:`ref_grads` of a model with the same weights)."""
    ref = ref_grads(model, batch) if ref is None else ref
    with torch.autocast(device_type=device, dtype=dtype, enabled=dtype != torch.float32):
        fn(**batch).loss.backward()
    err = 0.0
    params = dict(model.named_parameters())
    # Relative to the largest reference gradient of the model: a parameter whose gradients are
    # all near 0 (BERT's unused position rows) would make a per-parameter ratio meaningless.
    scale = max((g.abs().max().item() for g in ref.values()), default=0.0) or 1.0
    for n, g in ref.items():
        p = params[n]
        if p.grad is None:
            continue
        err = max(err, (p.grad.float() - g).abs().max().item() / scale)
    model.zero_grad(set_to_none=True)
    return err


def ref_grads(model, batch) -> dict:
    """{parameter name: gradient} of one fp32 eager step of a copy of ``model``."""
    ref = copy.deepcopy(model).float()
    ref(**batch).loss.backward()
    return {n: q.grad for n, q in ref.named_parameters() if q.grad is not None}


#: symshape variants a mode name turns on for its own compiles and steps: ``(module, flag)`` pairs
#: set true (:mod:`compiler.linear_groups`, :mod:`compiler.half_gemm`, :mod:`compiler.cublas_warm`),
#: or ``(module, flag, value)``: ``symshape_nok`` leaves weight gradients' contractions unpadded
#: (:data:`compiler.row_buckets.CONTRACTION`; rows are still rounded up).
VARIANTS = {"symshape_groups": (("linear_groups", "ENABLED"),), "symshape_gemm": (("half_gemm", "ENABLED"),),
            "symshape_warm": (("cublas_warm", "ENABLED"),),
            "symshape_groups_warm": (("linear_groups", "ENABLED"), ("cublas_warm", "ENABLED")),
            "symshape_nok": (("row_buckets", "CONTRACTION", False),),
            "symshape_nobuckets": (("row_buckets", "ENABLED", False),)}

#: symshape variants set through the environment for the mode's compiles and steps:
#: ``symshape_threads`` builds Triton kernel variants in this process's threads, not in worker
#: processes (:mod:`compiler.codegen.triton_build`); ``symshape_nopreload`` leaves built variants to
#: the launch that needs them (no loader thread beside the steps: :mod:`compiler.codegen.preload`);
#: ``symshape_rest`` has the loader sleep 3x each load's length after it; ``symshape_graphs`` replays
#: CUDA graphs of the forward and backward at sizes met before (:mod:`compiler.train_graphs`).
ENV_VARIANTS = {"symshape_threads": {"SYMSHAPE_BUILD_PROCESSES": "0"},
                "symshape_nopreload": {"SYMSHAPE_PRELOAD": "0"},
                "symshape_rest": {"SYMSHAPE_PRELOAD_REST": "3"},
                "symshape_graphs": {"SYMSHAPE_TRAIN_GRAPHS": "1"}}


@contextlib.contextmanager
def variant(mode):
    """The opt-in symshape rewrites of ``mode`` (:data:`VARIANTS`) on while the block runs.

    >>> from compiler import linear_groups
    >>> with variant("symshape_groups_nocudnn"):
    ...     linear_groups.ENABLED
    True
    """
    import importlib
    base = mode.removesuffix("_nocudnn")
    flags = [(importlib.import_module(f"compiler.{f[0]}"), f[1], f[2] if len(f) > 2 else True)
             for f in VARIANTS.get(base, ())]
    saved = [getattr(m, attr) for m, attr, _ in flags]
    env = ENV_VARIANTS.get(base, {})
    saved_env = {k: os.environ.get(k) for k in env}
    for m, attr, value in flags:
        setattr(m, attr, value)
    os.environ.update(env)
    try:
        yield
    finally:
        for (m, attr, _), v in zip(flags, saved):
            setattr(m, attr, v)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_mode(mode, name, dtype, device, lens, check_len, log) -> dict:
    """See :func:`_run_mode`; ``symshape_buckets`` is symshape with its half-precision CUDA matmuls'
    rows rounded up to few buckets (:mod:`compiler.row_buckets`; the default for training graphs),
    ``symshape_nobuckets`` without."""
    if mode in ("symshape_buckets", "symshape_nobuckets"):
        from compiler import row_buckets
        was, row_buckets.ENABLED = row_buckets.ENABLED, mode == "symshape_buckets"
        try:
            return _run_mode_cudnn(mode, name, dtype, device, lens, check_len, log)
        finally:
            row_buckets.ENABLED = was
    with variant(mode):
        return _run_mode_cudnn(mode, name, dtype, device, lens, check_len, log)


def _run_mode_cudnn(mode, name, dtype, device, lens, check_len, log) -> dict:
    """One mode's training run on ``lens``: the row's numbers for :func:`report`.

    A mode ending in ``_nocudnn`` runs its base mode with cuDNN's SDPA disabled
    (cuDNN builds a plan for every new shape: eager and Inductor pay it at every
    new length; symshape's training graphs never pick it)."""
    if mode.endswith("_nocudnn"):
        was = torch.backends.cuda.cudnn_sdp_enabled()
        torch.backends.cuda.enable_cudnn_sdp(False)
        try:
            return _run_mode(mode, name, dtype, device, lens, check_len, log)
        finally:
            torch.backends.cuda.enable_cudnn_sdp(was)
    return _run_mode(mode, name, dtype, device, lens, check_len, log)


def _run_mode(mode, name, dtype, device, lens, check_len, log) -> dict:
    model, batch = build(name, device, max(lens + [check_len]) + 1)
    g = torch.Generator().manual_seed(0)
    check = batch(check_len, g)
    fn = _compiled(mode.removesuffix("_nocudnn"), model)
    res = {"ms": float("nan"), "compile_s": 0.0, "recompiles": 0, "fallbacks": 0, "peak_mib": float("nan"),
           "err": float("nan"), "steps": 0}
    cfg = torch._dynamo.config
    patches = dict(cache_size_limit=256, accumulated_cache_size_limit=1024)
    if mode.startswith("ind_static"):
        patches["automatic_dynamic_shapes"] = False
    fb0 = compiler.BACKEND_STATS.get("eager_train_graphs", 0)
    # Where symshape's compile seconds go: its graphs' compiles (trace, lowering, codegen) of
    # which the Triton/C++ kernel builds (warm_s); the rest of compile_s is dynamo + AOTAutograd.
    parts0, graphs0 = _parts(), _graph_mark()
    with cfg.patch(**patches), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        g0 = _graphs()
        t0 = time.perf_counter()
        res["err"] = grad_error(model, fn, check, dtype, device)
        first_s = time.perf_counter() - t0
        first_graphs = _graphs() - g0
        traces0 = compiler.STATS["traces"]
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        times, compiles = [], []
        for L in lens:
            b = batch(L, g)
            # Inductor static compiles at every new length: it runs each length twice, the second timed.
            for _ in range(2 if mode == "ind_static" else 1):
                before, built = _graphs(), _building()
                _sync(device)
                t = time.perf_counter()
                with torch.autocast(device_type=device, dtype=dtype, enabled=dtype != torch.float32):
                    loss = fn(**b).loss
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                _sync(device)
                dt = time.perf_counter() - t
                (compiles if _graphs() != before or _building() != built else times).append(dt)
            res["steps"] += 1
        med = statistics.median(times) if times else float("nan")
        res["ms"] = med * 1e3
        res["compile_s"] = first_s + sum(c - (med if med == med else 0) for c in compiles)
        res["recompiles"] = _graphs() - g0 - first_graphs
        res["first_graphs"] = first_graphs
        res["retraces"] = compiler.STATS["traces"] - traces0  # symshape variants traced after the first step
        res["fallbacks"] = compiler.BACKEND_STATS.get("eager_train_graphs", 0) - fb0
        if device == "cuda":
            res["peak_mib"] = torch.cuda.max_memory_allocated() / 2 ** 20
            res["mem"] = memory_phases(fn, batch(max(lens), g), opt, dtype)
        if mode.startswith("symshape"):
            res.update({k: v - parts0[k] for k, v in _parts().items()})
            res.update(_graph_counts(graphs0))
    print(f"  {name:<6} {str(dtype)[6:]:<8} {mode:<10} ms={res['ms']:8.2f} compile={res['compile_s']:6.1f}s "
          f"recompiles={res['recompiles']} fallbacks={res['fallbacks']} peak={res['peak_mib']:.0f}MiB "
          f"err={res['err']:.1e}" + (f" {_split(res)}" if "sym_graphs_s" in res else "")
          + (" mem at the longest length MiB: " + ", ".join(f"{k} {v:.0f}" for k, v in res["mem"].items())
             if "mem" in res else ""),
          file=log, flush=True)
    return res


class ModeRun:
    """One mode of one (model, dtype) row, made ready to run steps one at a time, so that
    :func:`run_interleaved` can take the modes in turn: its own model (the same initial
    weights), compiled function and AdamW.  ``setup`` compiles it at ``check_len`` (the
    gradient error step), timed as compile."""

    def __init__(self, mode, name, dtype, device, max_len):
        self.mode, self.name, self.dtype, self.device = mode, name, dtype, device
        self.nocudnn = mode.endswith("_nocudnn")
        self.model, self.batch = build(name, device, max_len)
        base = mode.removesuffix("_nocudnn")
        if base.startswith("symshape"):
            compiler.register()
        # symshape_causal: options make another backend object, so dynamo compiles anew for it.
        self.fn = (self.model if base == "eager" else
                   torch.compile(self.model, dynamic=True) if base == "ind_dyn" else
                   torch.compile(self.model, backend="symshape", dynamic=True,
                                 options={"causal_masks": True} if base == "symshape_causal" else None))
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.times, self.compiles, self.peak_step = [], [], 0
        #: ``(length, ms, compiled, loaded)`` per step, in order (``--per-step`` prints them); ``loaded``:
        #: variants the loader thread loaded during the step (:func:`_preloads`).
        self.trace: list = []
        #: symshape's compile counters (:func:`_parts`) moved by this mode's compiles.
        self.sym_parts: dict = {}
        #: CUDA graphs of training steps recorded and replayed before this mode ran (symshape_graphs).
        self.graphs0 = _graph_mark()
        self.res = {"ms": float("nan"), "compile_s": 0.0, "recompiles": 0, "fallbacks": 0, "peak_mib": float("nan"),
                    "err": float("nan"), "steps": 0}

    def _cudnn(self):
        if self.device == "cuda":
            torch.backends.cuda.enable_cudnn_sdp(not self.nocudnn)

    def setup(self, check, ref):
        with variant(self.mode):
            self._setup(check, ref)

    def _setup(self, check, ref):
        self._cudnn()
        fb0, parts0, g0 = compiler.BACKEND_STATS.get("eager_train_graphs", 0), _parts(), _graphs()
        metrics0 = _dynamo_metrics()
        t0 = time.perf_counter()
        self.res["err"] = grad_error(self.model, self.fn, check, self.dtype, self.device, ref)
        _sync(self.device)
        self.res["compile_s"] = time.perf_counter() - t0
        self.res["dynamo_split"] = _dynamo_metrics(since=metrics0)
        self.res["first_graphs"] = _graphs() - g0
        self.res["fallbacks"] = compiler.BACKEND_STATS.get("eager_train_graphs", 0) - fb0
        if self.mode.startswith("symshape"):
            # Counters only this mode moves: what its compiles were made of.
            self._add_parts(parts0)

    def _add_parts(self, since):
        for k, v in _parts().items():
            self.sym_parts[k] = self.sym_parts.get(k, 0) + v - since[k]

    def step(self, L, g):
        """One timed step at length ``L``; a step in which dynamo compiled is a compile."""
        with variant(self.mode):
            self._step(L, g)

    def _step(self, L, g):
        self._cudnn()
        b = self.batch(L, g)
        before, dev, traces, built = _graphs(), self.device, compiler.STATS["traces"], _building()
        fb = compiler.BACKEND_STATS.get("eager_train_graphs", 0)
        parts = _parts() if self.mode.startswith("symshape") else None
        loads = _preloads()["n"]
        _sync(dev)
        if dev == "cuda":
            torch.cuda.reset_peak_memory_stats()
        start_mem = torch.cuda.memory_allocated() if dev == "cuda" else 0
        t = time.perf_counter()
        with torch.autocast(device_type=dev, dtype=self.dtype, enabled=self.dtype != torch.float32):
            loss = self.fn(**b).loss
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        _sync(dev)
        dt = time.perf_counter() - t
        if dev == "cuda":
            self.peak_step = max(self.peak_step, torch.cuda.max_memory_allocated() - start_mem)
        self.trace.append((L, round(dt * 1e3, 2), _graphs() != before, _preloads()["n"] - loads))
        if _graphs() != before or _building() != built:  # a step that compiled or built kernels
            self.compiles.append(dt)
            self.res["recompiles"] += _graphs() - before
            if parts is not None:  # symshape's counters moved by this step only
                self._add_parts(parts)
        else:
            self.times.append(dt)
        self.res["steps"] += 1
        self.res["retraces"] = self.res.get("retraces", 0) + compiler.STATS["traces"] - traces
        self.res["fallbacks"] += compiler.BACKEND_STATS.get("eager_train_graphs", 0) - fb

    def finish(self, log):
        res = self.res
        med = statistics.median(self.times) if self.times else float("nan")
        res["ms"] = med * 1e3
        res["compile_s"] += sum(c - (med if med == med else 0) for c in self.compiles)
        if self.device == "cuda":
            # Its own weights and AdamW state (every mode's are resident in this process) plus the
            # largest rise of allocated memory within one of its steps.
            own = sum(p.numel() * p.element_size() for p in self.model.parameters())
            own += sum(t.numel() * t.element_size() for st in self.opt.state.values() for t in st.values()
                       if isinstance(t, torch.Tensor) and t.device.type == "cuda")
            res["peak_mib"] = (own + self.peak_step) / 2 ** 20
        res.update(self.sym_parts)
        res.update(_graph_counts(self.graphs0))
        res["trace"] = self.trace
        timers = res.pop("dynamo_split", {})
        split = ", ".join(f"{k} {timers[k]:.1f}" for k in _TIMERS if timers.get(k, 0) >= 0.05)
        print(f"  {self.name:<6} {str(self.dtype)[6:]:<8} {self.mode:<10} ms={res['ms']:8.2f} "
              f"compile={res['compile_s']:6.1f}s recompiles={res['recompiles']} fallbacks={res['fallbacks']} "
              f"peak={res['peak_mib']:.0f}MiB err={res['err']:.1e}" + (f" {_split(res)}" if "sym_graphs_s" in res else "")
              + (f" [first step, torch's compile timers s: {split}]" if split else ""),
              file=log, flush=True)
        return res


#: torch's compile timers shown per mode: the whole frame, the attempt dynamo restarted (floats
#: specialized), its bytecode tracing, the backend call (AOTAutograd and the backend's compiles
#: within it), AOTAutograd's joint trace and min-cut, Inductor's forward and backward compiles.
_TIMERS = ("_compile.compile_inner", "compile_attempt_0", "bytecode_tracing", "OutputGraph.call_user_compiler",
           "aot_trace_joint_graph", "min_cut_rematerialization_partition", "compile_fx.<locals>.fw_compiler_base",
           "compile_fx.<locals>.bw_compiler", "async_compile.wait")


def _dynamo_metrics(since=None) -> dict:
    """torch's compile-phase timers (``torch._dynamo.utils.compilation_time_metrics``: dynamo's
    bytecode tracing, AOTAutograd's phases, Inductor's, the backend call): ``{phase: count}`` as a
    mark, or with ``since`` (a mark) ``{phase: seconds since}`` (nested phases overlap)."""
    from torch._dynamo.utils import compilation_time_metrics as m
    if since is None:
        return {k: len(v) for k, v in m.items()}
    return {k: sum(v[since.get(k, 0):]) for k, v in m.items() if len(v) > since.get(k, 0)}


def run_interleaved(modes, name, dtype, device, lens_by_mode, check_len, log) -> dict:
    """Every mode of one (model, dtype) row in this process, one step each in turn (the order
    reversed every other step): the GPU machine's host speed drifts by up to 1.7x within a
    minute, so modes run one after another in blocks (or in processes started minutes apart)
    compared the drift.  Each mode compiles at its first (gradient error) step; ``ind_static``
    is not interleaved (its entries would share dynamo's cache with ``ind_dyn``'s).
    Returns ``{mode: row}`` as :func:`run_mode`."""
    torch._dynamo.reset()
    was = torch.backends.cuda.cudnn_sdp_enabled()
    runs, res = {}, {}
    n = max(map(len, lens_by_mode.values()))
    cfg = torch._dynamo.config
    with cfg.patch(cache_size_limit=256, accumulated_cache_size_limit=1024), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            # The fp32 reference once (every mode's model has the same initial weights); it also
            # pays this process's first CUDA work (cuBLAS handles, kernel loads) before any mode's
            # compile is timed.
            max_len = max(max(v) for v in lens_by_mode.values()) if lens_by_mode else check_len
            model, batch = build(name, device, max(max_len, check_len) + 1)
            ref = ref_grads(model, batch(check_len, torch.Generator().manual_seed(0)))
            del model
            for m in modes:
                try:
                    run = ModeRun(m, name, dtype, device, max(max_len, check_len) + 1)
                    run.setup(run.batch(check_len, torch.Generator().manual_seed(0)), ref)
                    runs[m] = run
                except Exception as e:  # noqa: BLE001 -- a mode that fails is a row of the table
                    res[m] = _failed(f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}")
                    print(f"  {name} {str(dtype)[6:]} {m}: FAIL {res[m]['fail']}", file=log, flush=True)
            gens = {m: torch.Generator().manual_seed(1) for m in runs}
            for i in range(n):
                order = list(runs) if i % 2 == 0 else list(runs)[::-1]
                for m in order:
                    if m in res or i >= len(lens_by_mode[m]):
                        continue
                    try:
                        runs[m].step(lens_by_mode[m][i], gens[m])
                    except Exception as e:  # noqa: BLE001
                        res[m] = _failed(f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}")
                        print(f"  {name} {str(dtype)[6:]} {m}: FAIL {res[m]['fail']}", file=log, flush=True)
            for m, run in runs.items():
                if m not in res:
                    res[m] = run.finish(log)
        finally:
            if device == "cuda":
                torch.backends.cuda.enable_cudnn_sdp(was)
    del runs
    torch._dynamo.reset()
    return {m: res[m] for m in modes if m in res}


def memory_phases(fn, b, opt, dtype) -> dict:
    """CUDA memory of one more step (after the timed ones), in MiB: allocated before it (weights,
    AdamW state), the forward's peak above that, what the forward leaves for the backward (saved
    activations, the loss, logits), and the backward's peak above the start."""
    mib = 2 ** 20
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    with torch.autocast(device_type="cuda", dtype=dtype, enabled=dtype != torch.float32):
        loss = fn(**b).loss
    torch.cuda.synchronize()
    fwd_peak, saved = torch.cuda.max_memory_allocated(), torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    loss.backward()
    torch.cuda.synchronize()
    bwd_peak = torch.cuda.max_memory_allocated()
    opt.zero_grad(set_to_none=True)
    return {"base": base / mib, "fwd_peak": (fwd_peak - base) / mib, "saved": (saved - base) / mib,
            "bwd_peak": (bwd_peak - base) / mib}


def _split(r) -> str:
    """Where symshape's compile seconds went (see :func:`_parts`)."""
    trace = r["sym_graphs_s"] - r["lower_s"] - r["codegen_s"] - r["kernel_build_s"]
    return (f"[compile: symshape graphs {r['sym_graphs_s']:.1f}s = trace+plan {trace:.1f} + lower {r['lower_s']:.1f} "
            f"+ codegen {r['codegen_s']:.1f} + kernel builds {r['kernel_build_s']:.1f} ({r['kernel_variants']} "
            f"variants); the rest is dynamo + AOTAutograd; first runs waited {r.get('build_wait_s', 0.0):.1f}s "
            f"for builds in workers ({_build_mode()})"
            + (f"; {r['linear_groups']} linear groups" if r.get("linear_groups") else "")
            + (f"; {r['preload_n']} variants loaded ahead in {r['preload_s']:.1f}s beside the steps"
               if r.get("preload_n") else "")
            + (f"; CUDA graphs {r['graphs_recorded']} recorded, {r['graphs_replayed']} replays"
               + (f" (refused: {'; '.join(r['graphs_refused'])})" if r.get("graphs_refused") else "")
               if r.get("graphs_recorded") or r.get("graphs_refused") else "") + "]")


def _build_mode() -> str:
    from compiler.codegen.triton_build import MODE
    return "threads: " + str(MODE["reason"]) if MODE["mode"] == "threads" else str(MODE["mode"])


def _geo(xs):
    xs = [x for x in xs if x == x and x > 0 and x != float("inf")]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def speedup(res, ref, mode) -> float:
    """``ref``'s step time over ``mode``'s in one row.  Where ``mode`` ran beside an anchor in its own
    process (``--pairs``), against that anchor's time in the same process; two paired modes compare by
    the ratio of their ratios to their anchors (host speed drifts between processes; within one, the
    anchor moves with it).

    >>> speedup({"eager": {"ms": 10.0}, "symshape": {"ms": 8.0, "anchor": "eager", "anchor_ms": 12.0}}, "eager", "symshape")
    1.5
    >>> speedup({"ind_dyn": {"ms": 9.0, "anchor": "eager", "anchor_ms": 9.0},
    ...          "symshape": {"ms": 8.0, "anchor": "eager", "anchor_ms": 12.0}}, "ind_dyn", "symshape")
    1.5
    """
    r, x = res.get(ref), res.get(mode)
    if r is None or x is None:
        return float("nan")
    if "anchor_ms" in x and x.get("anchor") == ref:
        return x["anchor_ms"] / x["ms"]
    if "anchor_ms" in x and "anchor_ms" in r and x.get("anchor") == r.get("anchor"):
        return (x["anchor_ms"] / x["ms"]) / (r["anchor_ms"] / r["ms"])
    return r["ms"] / x["ms"]


def report(rows, modes, device, n_lens, per_step=False) -> str:
    lines = [f"step ms (median over steps that compiled nothing; {n_lens} random lengths)"]
    w = {m: max(12, len(m) + 2) for m in modes}
    hdr = f"{'model':<7}{'dtype':<9}" + "".join(f"{m:>{w[m]}}" for m in modes) + "   sym/eager  sym/ind_dyn"
    lines += [hdr, "-" * len(hdr)]
    vs_eager, vs_dyn = [], []
    # The row's columns against the references run: torch's defaults, else cuDNN's SDPA off.
    shown = [next((r for r in (base, base + "_nocudnn") if r in modes), base) for base in ("eager", "ind_dyn")]
    for (name, dt), res in rows.items():
        ms = {m: res[m]["ms"] if m in res else float("nan") for m in modes}
        vs_eager.append(speedup(res, "eager", "symshape"))
        vs_dyn.append(speedup(res, "ind_dyn", "symshape"))
        a, b = (speedup(res, ref, "symshape") for ref in shown)
        lines.append(f"{name:<7}{dt:<9}" + "".join(f"{ms[m]:>{w[m]}.2f}" for m in modes) + f"   {a:>8.2f}x  {b:>9.2f}x")
    if shown != ["eager", "ind_dyn"]:
        lines.append(f"(sym/eager: against {shown[0]}; sym/ind_dyn: against {shown[1]})")
    lines += ["", "per mode: compile s, recompiles after the first step (graphs at first step), symshape retraces "
              "after the first step, fallbacks, "
              "peak MiB, max grad err vs fp32 eager"]
    for (name, dt), res in rows.items():
        for m in modes:
            if m not in res:
                lines.append(f"  {name:<6} {dt:<8} {m:<10} not run")
                continue
            r = res[m]
            lines.append(f"  {name:<6} {dt:<8} {m:<10} compile {r['compile_s']:>7.1f}s  recompiles {r['recompiles']:>3} "
                         f"({r.get('first_graphs', 0)})  retraces {r.get('retraces', 0)}  fallbacks {r['fallbacks']}  peak {r['peak_mib']:>8.0f}  "
                         f"err {r['err']:.1e}" + (f"  FAIL {r['fail']}" if "fail" in r else "")
                         + (f"  beside {r['anchor']} at {r['anchor_ms']:.2f} ms" if "anchor_ms" in r else "")
                         + (f"  {_split(r)}" if "sym_graphs_s" in r else ""))
            if per_step and r.get("trace"):
                lines.append("      steps L:ms (* compiled, +n: n variants loaded ahead during the step): " + " ".join(
                    f"{L}:{t:.1f}{'*' if c else ''}{f'+{n}' if n else ''}" for L, t, c, n in r["trace"]))
    ge, gd = _geo(vs_eager), _geo(vs_dyn)
    lines += ["", f"geomean symshape speedup: vs eager {ge:.2f}x, vs Inductor dynamic {gd:.2f}x"]
    want_e, want_d = (1.3, 1.0) if device == "cuda" else (1.0, 0.9)
    lines.append(f"acceptance ({device}): vs eager >= {want_e} {'MET' if ge >= want_e else 'MISSED'}; "
                 f"vs Inductor dynamic >= {want_d} {'MET' if gd >= want_d else 'MISSED'}"
                 + (" (torch's defaults: cuDNN SDPA on in eager and Inductor)" if device == "cuda" else ""))
    like = {}
    for ref in ("eager_nocudnn", "ind_dyn_nocudnn"):
        if ref in modes:
            g = like[ref] = _geo([speedup(res, ref, "symshape") for res in rows.values()
                                  if ref in res and "symshape" in res])
            lines.append(f"  geomean symshape speedup vs {ref} (cuDNN SDPA off in that mode): {g:.2f}x")
    if device == "cuda" and like:
        # With a mask and a new length every step, the default rows pay cuDNN's plan builds: the
        # kernels are compared where the references run without cuDNN's SDPA too.
        lines.append("acceptance like for like (cuDNN SDPA off in the references): " + "; ".join(
            f"vs {ref} >= {want} {'MET' if g >= want else 'MISSED'}"
            for (ref, g), want in ((kv, want_e if kv[0].startswith("eager") else want_d) for kv in like.items())))
    for var in (m for m in modes if m.startswith("symshape_")):
        rel = {ref: _geo([speedup(res, ref, var) for res in rows.values() if ref in res and var in res])
               for ref in ("symshape", "eager", "ind_dyn", "eager_nocudnn", "ind_dyn_nocudnn")}
        lines.append(f"  {var}: geomean speedup " + ", ".join(f"vs {k} {v:.2f}x" for k, v in rel.items()))
    if device == "cuda":
        # Against Inductor dynamic with torch's defaults, else with cuDNN's SDPA off (the same compile).
        def ref(res):
            return res.get("ind_dyn") or res.get("ind_dyn_nocudnn")
        mem = [res["symshape"]["peak_mib"] / ref(res)["peak_mib"] for res in rows.values()
               if "symshape" in res and ref(res)]
        comp = [res["symshape"]["compile_s"] / ref(res)["compile_s"] for res in rows.values()
                if "symshape" in res and ref(res) and ref(res)["compile_s"] > 0]
        rec = sum(res["symshape"]["recompiles"] for res in rows.values() if "symshape" in res)
        lines.append(f"  peak memory / Inductor dynamic: max {max(mem, default=float('nan')):.2f} (target <= 1.10); "
                     f"compile / Inductor dynamic: max {max(comp, default=float('nan')):.2f} (target <= 0.33); "
                     f"symshape recompiles {rec} (target 0)")
    return "\n".join(lines)


def _failed(why: str) -> dict:
    return {"ms": float("nan"), "compile_s": float("nan"), "recompiles": -1, "fallbacks": -1,
            "peak_mib": float("nan"), "err": float("nan"), "fail": why}


def _worker(a) -> None:
    """``--worker MODE``: one mode of one (model, dtype) row in this process; prints ``RESULT {json}``."""
    import json
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    lens = [int(x) for x in a.lens.split(",")]
    if a.device == "cpu":
        # symshape's C++ target raises malloc's thresholds for the whole process (compiler.codegen.cpu_heap)
        # when it compiles: eager beside it gets faster too (GPT-2 bf16: 58 -> 36 ms).  Set in every
        # worker first, the anchors of all processes run alike and a ratio to one compares compilers only.
        from compiler.codegen import cpu_heap
        cpu_heap.keep_heap_blocks()
    try:
        if a.anchor:  # --pairs: the mode and its anchor in turn, in this process
            by_mode = {a.anchor: [int(x) for x in a.anchor_lens.split(",")], a.worker: lens}
            res = run_interleaved([a.anchor, a.worker], a.models, dtypes[a.dtypes], a.device, by_mode, 127, sys.stdout)
        else:
            res = run_mode(a.worker, a.models, dtypes[a.dtypes], a.device, lens, 127, sys.stdout)
    except Exception as e:  # noqa: BLE001 -- a process boundary: the parent's table says why
        res = _failed(f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}")
    print("RESULT " + json.dumps(res), flush=True)


def _in_subprocess(a, name, dt, mode, lens, anchor_lens=None) -> dict:
    """One mode run by :func:`_worker` in a fresh Python process (its log lines passed through);
    with ``anchor_lens``, the mode beside ``a.pairs`` (the anchor) in that process: its row gets
    ``anchor`` and ``anchor_ms`` (the anchor's median there) and ``anchor_row`` (the anchor's row)."""
    import json
    import subprocess
    cmd = [sys.executable, os.path.abspath(__file__), "--device", a.device, "--models", name, "--dtypes", dt,
           "--worker", mode, "--lens", ",".join(map(str, lens))]
    if anchor_lens is not None:
        cmd += ["--anchor", a.pairs, "--anchor-lens", ",".join(map(str, anchor_lens))]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    res = None
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[len("RESULT "):])
        elif line.startswith("  "):
            print(line, flush=True)
    if res is None:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1][:160]
        res = _failed(f"worker exited {proc.returncode}: {tail}")
        print(f"  {name} {dt} {mode}: FAIL {res['fail']}", flush=True)
    if anchor_lens is not None:
        pair = res if mode in res or a.pairs in res else {mode: res}
        res = dict(pair.get(mode) or _failed("no row"))
        anchor = pair.get(a.pairs)
        if anchor is not None and "fail" not in anchor:
            res.update(anchor=a.pairs, anchor_ms=anchor["ms"], anchor_row=anchor)
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--min-len", type=int, default=64)
    ap.add_argument("--max-len", type=int, default=1024)
    ap.add_argument("--models", default="gpt2,llama,bert,vit")
    ap.add_argument("--dtypes", default="bf16,fp32")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--budget", type=float, default=float("inf"), help="seconds; no new row starts after it")
    ap.add_argument("--static-steps", type=int, default=None,
                    help="steps Inductor static runs (each new length compiles; default all, --quick 3)")
    ap.add_argument("--static-models", default=None, help="models Inductor static runs for (default: all)")
    ap.add_argument("--mode-models", default="",
                    help="MODE=MODEL+MODEL,...: run MODE for those models only (e.g. ind_dyn_nocudnn=gpt2)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--same-lengths", dest="distinct_lengths", action="store_false",
                    help="every mode runs the very same lengths (default: each its own, see mode_lengths)")
    ap.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                    help="each mode in a fresh process, its steps in one block: per-process first-use costs "
                         "(cuBLAS kernels loaded at their first call, cuDNN plans) charged to no other mode")
    ap.add_argument("--interleave", action=argparse.BooleanOptionalAction, default=None,
                    help="all modes but ind_static in this process, one step each in turn (default on CUDA; "
                         "see run_interleaved); --no-interleave runs each mode's steps in a block")
    ap.add_argument("--pairs", default=None, metavar="ANCHOR",
                    help="each mode but ANCHOR in a fresh process, interleaved with ANCHOR (e.g. eager_nocudnn) "
                         "there; speedups are ratios to that process's ANCHOR (no two compiled copies of a model "
                         "share a process, and host drift between processes cancels)")
    ap.add_argument("--per-step", action="store_true", help="print every step's length and ms per mode")
    ap.add_argument("--anchor", default=None, help=argparse.SUPPRESS)  # the worker's anchor mode (--pairs)
    ap.add_argument("--anchor-lens", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # MODE: run it alone, print RESULT json
    ap.add_argument("--lens", default=None, help=argparse.SUPPRESS)  # the worker's lengths
    a = ap.parse_args(argv)
    if a.pairs is not None:
        if a.pairs not in a.modes.split(","):
            ap.error(f"--pairs {a.pairs}: the anchor must be one of --modes")
        a.interleave, a.isolate = False, False
    if a.interleave is None:
        a.interleave = a.device == "cuda" and not a.isolate
    if a.isolate is None:
        a.isolate = False
    if a.worker is not None:
        return _worker(a)
    # Compiled steps are cheap on a GPU: 50 lengths there even with --quick (Inductor static,
    # which compiles per length, runs --static-steps of them).
    steps = a.steps or (8 if a.quick and a.device == "cpu" else 50)
    lens = lengths(steps, a.min_len, a.max_len)
    static_steps = a.static_steps or (3 if a.quick else steps)
    modes = a.modes.split(",")
    only = {k: v.split("+") for k, v in (x.split("=") for x in a.mode_models.split(",") if x)}
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    t_start = time.perf_counter()
    head = (f"{torch.cuda.get_device_name() if a.device == 'cuda' else 'CPU'} ({os.cpu_count()} cpus) "
            f"torch={torch.__version__} steps={steps} lengths={lens} sizes={_sizes(a.device)}"
            + (f"\nmode k of {len(modes)} runs mode_lengths(lengths, k, {len(modes)}): no shape met by two modes"
               if a.distinct_lengths else "\nevery mode runs the same lengths: later modes find per-shape caches warm")
            + ("\nmodes interleaved: one step of each in turn, in one process (ind_static in a block after them)"
               if a.interleave else "\neach mode in a fresh process (--isolate)" if a.isolate
               else f"\neach mode in a fresh process beside {a.pairs}, one step of each in turn (--pairs); speedups "
                    f"are ratios to that process's {a.pairs} (symshape vs Inductor: the ratio of their ratios); the "
                    f"{a.pairs} column is its run beside the first mode" if a.pairs
               else "\nall modes in one process, each in a block"))
    print(head, flush=True)
    rows = {}
    table = head
    for dt in a.dtypes.split(","):
        for name in a.models.split(","):
            if time.perf_counter() - t_start > a.budget:
                print(f"[budget] {name} {dt}: not run", flush=True)
                continue
            rows[(name, dt)] = res = {}
            if a.interleave:
                inter = [m for m in modes if m != "ind_static" and not (m in only and name not in only[m])]
                by_mode = {m: (mode_lengths(lens, modes.index(m), len(modes)) if a.distinct_lengths else lens)
                           for m in inter}
                res.update(run_interleaved(inter, name, dtypes[dt], a.device, by_mode, 127, sys.stdout))
            for k, m in enumerate(modes):
                if a.interleave and m != "ind_static":
                    continue
                if m == "ind_static" and a.static_models is not None and name not in a.static_models.split(","):
                    continue
                if m in only and name not in only[m]:
                    continue
                run_lens = (mode_lengths(lens, k, len(modes)) if a.distinct_lengths else lens)
                run_lens = run_lens[:static_steps] if m == "ind_static" else run_lens
                if a.pairs is not None:
                    if m == a.pairs:
                        continue
                    anchor_lens = mode_lengths(lens, modes.index(a.pairs), len(modes)) if a.distinct_lengths else lens
                    res[m] = _in_subprocess(a, name, dt, m, run_lens, anchor_lens[:len(run_lens)])
                    if a.pairs not in res and "anchor_row" in res[m]:
                        res[a.pairs] = res[m]["anchor_row"]
                    _write(a, head, rows, modes, steps, static_steps, t_start)
                    continue
                if a.isolate:
                    res[m] = _in_subprocess(a, name, dt, m, run_lens)
                    _write(a, head, rows, modes, steps, static_steps, t_start)  # a run cut short keeps each mode
                    continue
                try:
                    res[m] = run_mode(m, name, dtypes[dt], a.device, run_lens, 127, sys.stdout)
                except Exception as e:  # noqa: BLE001 -- a mode that fails is a row of the table, not the end
                    res[m] = _failed(f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}")
                    print(f"  {name} {dt} {m}: FAIL {res[m]['fail']}", flush=True)
                if a.device == "cuda":
                    torch.cuda.empty_cache()
            # The table so far after every row: a run cut short keeps what it measured.
            table = _write(a, head, rows, modes, steps, static_steps, t_start)
    print(table)


def _write(a, head, rows, modes, steps, static_steps, t_start) -> str:
    """The table of ``rows`` so far, written to ``--out`` when given."""
    table = (head + f"\nInductor static ran the first {static_steps} steps (one compile per length)\n\n"
             + report(rows, modes, a.device, steps, per_step=a.per_step) + f"\n\nwall {time.perf_counter() - t_start:.0f}s")
    if a.out:
        with open(a.out, "w") as f:
            f.write(table + "\n")
    return table


if __name__ == "__main__":
    main()
