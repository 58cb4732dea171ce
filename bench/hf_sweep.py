"""Every architecture in transformers' registry: symshape vs torch.export (Dim.AUTO) vs eager.

For each model type transformers registers (``CONFIG_MAPPING_NAMES`` with a
base model in ``MODEL_MAPPING_NAMES``) the sweep builds the base model from a
tiny config derived automatically (hidden sizes, layers, heads, vocab and
image sizes shrunk, sub-configs too), picks its inputs from ``forward``'s
signature (token ids ``[B, T]``; pixels ``[B, C, H, W]``; raw audio ``[B, L]``
or audio features ``[B, F, L]``), and then, with every size symbolic:

* traces it with symshape (``shapes.trace``) and with ``torch.export`` at
  ``Dim.AUTO`` (non-strict), each timed;
* at 3 sizes compares eager with symshape's ``.run`` (guards checked first:
  a size the guards refuse is *refused*, never run) and with the exported
  program.

Outcomes per row: ``ok`` / a failure class.  The acceptance checks printed at
the end: symshape traces every architecture torch.export traces; 0 wrong
shapes; 0 sizes accepted where eager fails; 0 ``.run`` errors where eager
runs; total symshape trace time <= 0.5x torch.export's.

Usage::

    python bench/hf_sweep.py                       # every architecture (long)
    python bench/hf_sweep.py --only llama,bert,vit --timeout 60
    python bench/hf_sweep.py --limit 20 --out bench/results/hf_sweep_2026-11-26.txt
    python bench/hf_sweep.py --shard 0/2 --out /tmp/s0.txt &   # the registry in 2 processes ...
    python bench/hf_sweep.py --shard 1/2 --out /tmp/s1.txt &
    python bench/hf_sweep.py --merge /tmp/s0.txt.jsonl /tmp/s1.txt.jsonl --out table.txt  # ... one table
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import inspect
import io
import json
import os
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from typing import Optional

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import shapes  # noqa: E402
from validation.dinfer.limits import TraceTimeout, time_limit  # noqa: E402

HIDDEN = 32
HEADS = 2
LAYERS = 1
VOCAB = 128
IMAGE = 32
# Config attributes the sweep shrinks (the value each gets); kept when the config lacks them.
_SHRINK = {
    "hidden_size": HIDDEN, "d_model": HIDDEN, "n_embd": HIDDEN, "embed_dim": HIDDEN, "dim": HIDDEN,
    "hidden_dim": 4 * HIDDEN, "intermediate_size": 2 * HIDDEN, "d_ff": 2 * HIDDEN, "n_inner": 2 * HIDDEN,
    "ffn_dim": 2 * HIDDEN, "encoder_ffn_dim": 2 * HIDDEN, "decoder_ffn_dim": 2 * HIDDEN,
    "num_hidden_layers": LAYERS, "num_layers": LAYERS, "n_layer": LAYERS, "n_layers": LAYERS,
    "encoder_layers": LAYERS, "decoder_layers": LAYERS, "num_decoder_layers": LAYERS,
    "num_encoder_layers": LAYERS,
    "num_attention_heads": HEADS, "n_head": HEADS, "n_heads": HEADS, "num_heads": HEADS,
    "encoder_attention_heads": HEADS, "decoder_attention_heads": HEADS,
    "num_key_value_heads": 1, "num_kv_heads": 1, "head_dim": HIDDEN // HEADS, "d_kv": HIDDEN // HEADS,
    "vocab_size": VOCAB, "max_position_embeddings": 64, "n_positions": 64,
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "moe_intermediate_size": HIDDEN,
    "shared_expert_intermediate_size": HIDDEN, "max_source_positions": 32,
    # multi-head latent attention (DeepSeek-style): every head dim and rank shrunk together
    "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": HIDDEN // HEADS, "kv_lora_rank": HIDDEN // 2,
    "q_lora_rank": HIDDEN // 2, "n_group": 1, "topk_group": 1, "num_experts_per_tok": 2,
    "rotary_dim": HIDDEN // HEADS // 2,
}
# The second try, for configs whose sizes are tied in ways the first breaks (rope or latent
# head dims, conv subsampling, per-layer lists): depth, vocabulary and experts only.
_SHRINK_DEPTH = {k: v for k, v in _SHRINK.items()
                 if "layer" in k or k in ("vocab_size", "num_experts", "num_local_experts", "n_routed_experts",
                                          "num_experts_per_tok", "n_group", "topk_group")}
# Parameters a model built by the second try may have (it keeps the default widths).
MAX_PARAMS = 120_000_000


@dataclass
class Row:
    """One architecture's outcome."""

    model_type: str
    model: str = ""
    inputs: str = ""
    config: str = ""  # which shrinking built it: "tiny" or "depth only" (see build)
    status: str = ""  # ok, or the failure class
    symshape: str = ""  # traced / the error type
    export: str = ""
    symshape_s: Optional[float] = None
    export_s: Optional[float] = None
    sizes: list = field(default_factory=list)  # (sizes, eager, symshape, export) per point
    wrong_shapes: int = 0
    accepted_eager_fails: int = 0
    run_errors: int = 0
    mismatches: int = 0
    note: str = ""


# -- tiny configs ------------------------------------------------------------------------
def shrink(cfg, depth: int = 0, sizes: Optional[dict] = None):
    """Shrink ``cfg`` in place: sizes from ``sizes`` (default :data:`_SHRINK`), sub-configs too.

    With :data:`_SHRINK_DEPTH` only the depth, vocabulary and experts shrink.
    """
    sizes = _SHRINK if sizes is None else sizes
    for k, v in sizes.items():
        if hasattr(cfg, k) and isinstance(getattr(cfg, k), int) and not isinstance(getattr(cfg, k), bool):
            with contextlib.suppress(Exception):
                setattr(cfg, k, v)
    if sizes is not _SHRINK:
        return _shrink_tokens_and_subconfigs(cfg, depth, sizes)
    for k in ("image_size", "img_size"):
        if isinstance(getattr(cfg, k, None), int):
            setattr(cfg, k, IMAGE)
    for k in ("hidden_sizes", "depths", "embed_dims", "num_heads_list"):
        v = getattr(cfg, k, None)
        if isinstance(v, (list, tuple)) and v and all(isinstance(x, int) for x in v):
            setattr(cfg, k, [min(x, HIDDEN if k != "depths" else 1) for x in v])
    if isinstance(getattr(cfg, "num_attention_heads", None), list):
        cfg.num_attention_heads = [HEADS] * len(cfg.num_attention_heads)
    return _shrink_tokens_and_subconfigs(cfg, depth, sizes)


def _shrink_tokens_and_subconfigs(cfg, depth, sizes):
    for k in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "sep_token_id",
              "cls_token_id", "mask_token_id", "unk_token_id"):
        v = getattr(cfg, k, None)
        if isinstance(v, int) and v >= VOCAB and hasattr(cfg, "vocab_size"):
            with contextlib.suppress(Exception):
                setattr(cfg, k, VOCAB - 1 - len(k) % 4)
    if depth < 2:
        for k, v in list(vars(cfg).items()):
            if hasattr(v, "to_dict") and hasattr(v, "model_type"):
                shrink(v, depth + 1, sizes)
    return cfg


def architectures():
    """``(model_type, config class, base model class)`` of every registered architecture."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES
    out = []
    for mt, cname in CONFIG_MAPPING_NAMES.items():
        mname = MODEL_MAPPING_NAMES.get(mt)
        if isinstance(mname, (list, tuple)):
            mname = mname[0]
        if not mname:
            continue
        out.append((mt, cname, mname))
    return out


def _cls(name):
    import transformers
    return getattr(transformers, name, None)


# -- inputs ------------------------------------------------------------------------------
class Call(torch.nn.Module):
    """``model(**dict(zip(names, tensors)))``, returning its first tensor output."""

    def __init__(self, model, names):
        super().__init__()
        self.model, self.names = model, list(names)
        # No cache: a decode cache is state the sweep does not compare (and hybrid models' caches
        # refuse a first call without attention layers).
        params = inspect.signature(model.forward).parameters
        self.flags = {"use_cache": False} if "use_cache" in params else {}

    def forward(self, *tensors):
        out = self.model(**dict(zip(self.names, tensors)), **self.flags)
        for key in ("last_hidden_state", "logits", "pooler_output"):
            v = getattr(out, key, None) if not isinstance(out, (tuple, dict)) else None
            if isinstance(v, torch.Tensor):
                return v
        if isinstance(out, dict):
            out = tuple(out.values())
        if isinstance(out, (tuple, list)):
            for v in out:
                if isinstance(v, torch.Tensor):
                    return v
        return out


def plan_inputs(model, cfg):
    """``(names, specs, example dims, 3 check points)`` from ``forward``'s signature, or a reason."""
    params = inspect.signature(model.forward).parameters
    if "input_ids" in params:
        names = ["input_ids"]
        specs = ["input_ids: i64[B, T]"]
        if "decoder_input_ids" in params and getattr(cfg, "is_encoder_decoder", False):
            names.append("decoder_input_ids")
            specs.append("decoder_input_ids: i64[B, S]")
            return names, specs, {"B": 2, "T": 8, "S": 6}, [
                {"B": 2, "T": 8, "S": 6}, {"B": 3, "T": 5, "S": 9}, {"B": 1, "T": 12, "S": 4}]
        return names, specs, {"B": 2, "T": 8}, [{"B": 2, "T": 8}, {"B": 3, "T": 5}, {"B": 1, "T": 12}]
    if "pixel_values" in params:
        c = getattr(cfg, "num_channels", 3)
        s = getattr(cfg, "image_size", IMAGE)
        s = s if isinstance(s, int) else IMAGE
        return ["pixel_values"], [f"pixel_values: f32[B, {c}, H, W]"], {"B": 2, "H": s, "W": s}, [
            {"B": 2, "H": s, "W": s}, {"B": 3, "H": s, "W": s}, {"B": 1, "H": 2 * s, "W": s}]
    if "input_values" in params:
        return ["input_values"], ["input_values: f32[B, L]"], {"B": 2, "L": 1600}, [
            {"B": 2, "L": 1600}, {"B": 3, "L": 2000}, {"B": 1, "L": 1200}]
    if "input_features" in params:
        f = getattr(cfg, "num_mel_bins", None) or getattr(cfg, "feature_size", None) or getattr(cfg, "input_feat_per_channel", 80)
        return ["input_features"], [f"input_features: f32[B, {f}, L]"], {"B": 2, "L": 64}, [
            {"B": 2, "L": 64}, {"B": 3, "L": 48}, {"B": 1, "L": 96}]
    return None


def make_inputs(specs, point, seed=0):
    from shapes.spec import parse_specs
    g = torch.Generator().manual_seed(seed)
    parsed, _ = parse_specs(specs)
    out = []
    for s in parsed:
        shape = [point[d] if isinstance(d, str) else d for d in s.dims]
        if s.dtype == torch.int64:
            out.append(torch.randint(0, 64, shape, generator=g))
        else:
            out.append(torch.randn(shape, generator=g))
    return out


# -- one architecture --------------------------------------------------------------------
def _err(e: BaseException) -> str:
    return type(e).__name__


def _close(a, b) -> bool:
    """Equal structure, and every tensor leaf of equal shape and close values."""
    from torch.utils import _pytree as pytree
    la, sa = pytree.tree_flatten(a)
    lb, sb = pytree.tree_flatten(b)
    if sa != sb:
        return False
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape or not torch.allclose(x, y, atol=1e-4, rtol=1e-4, equal_nan=True):
                return False
        elif isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor) or x != y:
            return False
    return True


def _shapes_agree(tp, got, ref, point) -> bool:
    """The shapes ``.run`` returned, and the traced symbolic shapes at ``point``, are eager's."""
    from torch.utils import _pytree as pytree

    from validation.concrete import evaluate
    got_t = [t for t in pytree.tree_leaves(got) if isinstance(t, torch.Tensor)]
    ref_t = [t for t in pytree.tree_leaves(ref) if isinstance(t, torch.Tensor)]
    if [tuple(t.shape) for t in got_t] != [tuple(t.shape) for t in ref_t]:
        return False
    syms = {tp.env.symbols[n]: v for n, v in point.items() if n in tp.env.symbols}
    traced = [o.shape for o in tp.outputs() if o.shape is not None]
    if len(traced) != len(ref_t):
        return False
    # A size read from data (VITS' waveform length) has no value before the run: its
    # run-time value is what .run's shape above already matched.
    return all(int(evaluate(e, syms)) == n for shape, t in zip(traced, ref_t) for e, n in zip(shape, t.shape)
               if e.free_symbols <= syms.keys())


def sweep_one(mt, cname, mname, timeout: float) -> Row:
    """One architecture's row; ``timeout`` limits each step (the eager call, each trace, each size) apart."""
    row = Row(model_type=mt, model=mname)
    try:
        _sweep(row, cname, mname, timeout)
    except TraceTimeout:
        row.status = row.status or "timeout"
        row.note = f"a step ran over {timeout:g} s"
    except Exception as e:  # noqa: BLE001 -- a process boundary: one row per architecture
        row.status = row.status or f"sweep error: {_err(e)}"
        row.note = str(e).splitlines()[0][:120] if str(e) else ""
    return row


def _first_line(e: BaseException, n: int = 100) -> str:
    return f"{_err(e)}: {str(e).strip().splitlines()[0][:n] if str(e).strip() else ''}"


def _param_count(mcls, cfg) -> Optional[int]:
    """Parameters of ``mcls(cfg)``, counted on the meta device (None: it does not build there)."""
    try:
        with torch.device("meta"):
            m = mcls(cfg)
    except Exception:  # noqa: BLE001 -- a model that builds only with data is not tried wide
        return None
    return sum(p.numel() for p in m.parameters())


def build(row, ccls, mcls, timeout):
    """``(model, cfg, plan, prog, example inputs)`` from the first config that builds and runs
    in eager at the example (:data:`_SHRINK`, then :data:`_SHRINK_DEPTH` within
    :data:`MAX_PARAMS`), or None with ``row.status`` and ``row.note`` set by the first failure."""
    first = None
    for label, sizes in (("tiny", _SHRINK), ("depth only", _SHRINK_DEPTH)):
        torch.manual_seed(0)
        try:
            cfg = shrink(ccls(), sizes=sizes)
            if sizes is _SHRINK_DEPTH and (_param_count(mcls, cfg) or MAX_PARAMS + 1) > MAX_PARAMS:
                break
            model = mcls(cfg).eval()
        except Exception as e:  # noqa: BLE001 -- the config derivation is heuristic
            first = first or ("no tiny config", _first_line(e))
            continue
        plan = plan_inputs(model, cfg)
        if plan is None:
            first = first or ("inputs not derived", "")
            continue
        names, specs, dims, points = plan
        prog = Call(model, names)
        ex_inputs = make_inputs(specs, dims)
        try:
            with torch.no_grad(), time_limit(timeout):
                prog(*ex_inputs)
        except TraceTimeout:
            raise
        except Exception as e:  # noqa: BLE001
            first = first or ("eager fails at the example", _first_line(e))
            continue
        row.config, row.inputs = label, "; ".join(specs)
        return model, cfg, plan, prog, ex_inputs
    row.status, row.note = first
    return None


def _sweep(row, cname, mname, timeout):
    ccls, mcls = _cls(cname), _cls(mname)
    if ccls is None or mcls is None:
        row.status = "not importable"
        return
    built = build(row, ccls, mcls, timeout)
    if built is None:
        return
    _, _, (names, specs, dims, points), prog, ex_inputs = built
    # Alternate which tracer goes first, so that neither always meets the model cold.
    order = (_trace_symshape, _trace_export) if sum(map(ord, row.model_type)) % 2 else (_trace_export, _trace_symshape)
    found = {}
    for step in order:
        gc.collect()
        found.update(step(row, prog, specs, dims, ex_inputs, timeout))
    tp, ep = found.get("tp"), found.get("ep")
    for point in points:
        with time_limit(timeout):
            _check_point(row, prog, tp, ep, specs, point)
    bad = row.wrong_shapes + row.accepted_eager_fails + row.run_errors + row.mismatches
    if tp is None:
        row.status = f"symshape: {row.symshape}"
    elif bad:
        row.status = "WRONG"
    else:
        row.status = "ok"


def _timed_step(row, tracer: str, fn, timeout):
    """Run ``fn()`` (one tracer) under ``timeout``, timed; set ``row.<tracer>`` to "traced",
    "timeout" or the error's type (its message into the note), ``row.<tracer>_s`` to the
    seconds it took.  Returns what ``fn`` returned, None when it failed."""
    t0 = time.perf_counter()
    try:
        with torch.no_grad(), warnings.catch_warnings(), time_limit(timeout):
            warnings.simplefilter("ignore")
            got = fn()
        status = "traced"
    except TraceTimeout:
        got, status = None, "timeout"
    except Exception as e:  # noqa: BLE001 -- a process boundary: the tracer's failure is the row's outcome
        got, status = None, _err(e)
        msg = str(e).strip().splitlines()[0][:160] if str(e).strip() else ""
        if tracer == "symshape":
            row.note = msg
        elif not row.note:
            row.note = f"{tracer}: {msg}"
    setattr(row, tracer, status)
    setattr(row, f"{tracer}_s", time.perf_counter() - t0)
    return got


def _trace_symshape(row, prog, specs, dims, ex_inputs, timeout) -> dict:
    return {"tp": _timed_step(row, "symshape", lambda: shapes.trace(prog, *specs, dims=dims), timeout)}


def _trace_export(row, prog, specs, dims, ex_inputs, timeout) -> dict:
    from torch.export import Dim, export
    spec = tuple({i: Dim.AUTO for i in range(t.dim())} for t in ex_inputs)
    return {"ep": _timed_step(row, "export", lambda: export(prog, tuple(ex_inputs), dynamic_shapes=(spec,),
                                                            strict=False), timeout)}


def _check_point(row, prog, tp, ep, specs, point):
    x = make_inputs(specs, point, seed=1)
    try:
        with torch.no_grad():
            torch.manual_seed(2)  # each run from one RNG state: models that sample (VITS) compare too
            ref = prog(*x)
        eager = "runs"
    except Exception as e:  # noqa: BLE001
        ref, eager = None, f"fails ({_err(e)})"
    sym = "-"
    if tp is not None:
        if tp.failing_guards(point):
            sym = "refused"
        elif ref is None:
            sym = "ACCEPTED where eager fails"
            row.accepted_eager_fails += 1
        else:
            try:
                with torch.no_grad():
                    torch.manual_seed(2)
                    got = tp.run(*x)
                if not _shapes_agree(tp, got, ref, point):
                    sym = "WRONG SHAPE"
                    row.wrong_shapes += 1
                elif not _close(got, ref):
                    sym = "MISMATCH"
                    row.mismatches += 1
                else:
                    sym = "= eager"
            except shapes.GuardViolation:
                sym = "refused"
            except Exception as e:  # noqa: BLE001
                sym = f"run error ({_err(e)})"
                row.run_errors += 1
    exp = "-"
    if ep is not None:
        try:
            with torch.no_grad():
                torch.manual_seed(2)
                got = ep.module()(*x)
            exp = "= eager" if ref is not None and _close(got, ref) else ("runs, eager fails" if ref is None else "MISMATCH")
        except Exception as e:  # noqa: BLE001
            exp = f"refused ({_err(e)})"
    row.sizes.append((point, eager, sym, exp))


# -- report ------------------------------------------------------------------------------
def table(rows) -> str:
    out = io.StringIO()
    w = max([len(r.model_type) for r in rows] + [10])
    out.write(f"{'model_type':<{w}}  {'config':<10} {'symshape':<22} {'sym s':>6}  {'export':<22} {'exp s':>6} "
              f"{'ratio':>6}  status\n")
    for r in rows:
        ss = f"{r.symshape_s:.2f}" if r.symshape_s is not None else "-"
        es = f"{r.export_s:.2f}" if r.export_s is not None else "-"
        ratio = f"{r.symshape_s / r.export_s:.2f}" if _both_traced(r) and r.export_s else "-"
        out.write(f"{r.model_type:<{w}}  {r.config or '-':<10} {r.symshape or '-':<22} {ss:>6}  "
                  f"{r.export or '-':<22} {es:>6} {ratio:>6}  "
                  f"{r.status}{('  ' + r.note) if r.note and r.status != 'ok' else ''}\n")
    return out.getvalue()


def _both_traced(r) -> bool:
    return r.symshape == "traced" and r.export == "traced"


def conformance_lines(rows, built, extra=()) -> list:
    """The summary lines a sweep of real models shares (hf_sweep, diffusers_sweep): how many of the
    ``built`` rows each tracer traces, the conformance counts over ``rows``, the ``extra`` lines,
    trace times where both trace, and the failure classes.

    >>> r = Row(model_type="m", model="M", config="tiny", symshape="traced", export="traced", symshape_s=1.0, export_s=2.0)
    >>> conformance_lines([r], [r])[0]
    'symshape traces 1/1; torch.export (Dim.AUTO) traces 1/1'
    """
    from collections import Counter
    sym = [r for r in built if r.symshape == "traced"]
    exp = [r for r in built if r.export == "traced"]
    exp_not_sym = [r.model_type for r in exp if r.symshape != "traced"]
    both = [r for r in built if _both_traced(r)]
    ts, te = sum(r.symshape_s for r in both), sum(r.export_s for r in both)
    ratios = sorted(r.symshape_s / r.export_s for r in both if r.export_s)
    median = ratios[len(ratios) // 2] if ratios else float("nan")
    lines = [
        f"symshape traces {len(sym)}/{len(built)}; torch.export (Dim.AUTO) traces {len(exp)}/{len(built)}",
        f"torch.export traces but symshape does not: {len(exp_not_sym)} {exp_not_sym}",
        f"wrong shapes: {sum(r.wrong_shapes for r in rows)}; sizes accepted where eager fails: "
        f"{sum(r.accepted_eager_fails for r in rows)}; .run errors where eager runs: {sum(r.run_errors for r in rows)}; "
        f"value mismatches: {sum(r.mismatches for r in rows)}",
        *extra,
        f"trace time on the {len(both)} both trace: symshape {ts:.1f} s, torch.export {te:.1f} s "
        f"({ts / te if te else float('nan'):.2f}x); per model (same process, robust to load): median "
        f"{median:.2f}x, symshape slower on {sum(x > 1 for x in ratios)}",
        "failure classes:",
    ]
    for k, n in Counter(r.status for r in rows if r.status != "ok").most_common():
        lines.append(f"  {n:4d}  {k}")
    lines.append("neither traces (symshape error / export error):")
    for r in built:
        if r.symshape != "traced" and r.export != "traced":
            lines.append(f"  {r.model_type}: {r.symshape} / {r.export}  {r.note}")
    return lines


def summary(rows) -> str:
    built = [r for r in rows if r.symshape or r.export]
    head = (f"architectures: {len(rows)}; built with a tiny config and run by eager: {len(built)} "
            f"({sum(r.config == 'depth only' for r in built)} with only depth, vocabulary and experts shrunk)")
    return "\n".join([head, *conformance_lines(rows, built)]) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated model types")
    ap.add_argument("--limit", type=int, help="at most this many architectures")
    ap.add_argument("--timeout", type=float, default=120.0,
                    help="seconds per step of an architecture (the eager call, each trace, each size)")
    ap.add_argument("--out", help="also write the table and summary to this file (and its rows to OUT.jsonl)")
    ap.add_argument("--shuffle", type=int, metavar="SEED",
                    help="visit the architectures in a random order (a partial run is then a sample)")
    ap.add_argument("--shard", metavar="K/N", help="only every N-th architecture, from the K-th (0-based)")
    ap.add_argument("--merge", nargs="+", metavar="JSONL",
                    help="sweep nothing: one table and summary from the rows of these runs (--out's .jsonl); "
                         "a later file's row of an architecture replaces an earlier one's")
    args = ap.parse_args(argv)
    import transformers
    transformers.logging.set_verbosity_error()
    if args.merge:
        # A later run of an architecture (a rerun after a fix) replaces an earlier one.
        by_type = {}
        for path in args.merge:
            for line in open(path):
                if line.strip():
                    r = Row(**json.loads(line))
                    by_type[r.model_type] = r
        rows = sorted(by_type.values(), key=lambda r: r.model_type)
        if args.out:
            _write(args.out, rows, torch.__version__, transformers.__version__, partial=False)
        print(table(rows) + "\n" + summary(rows))
        return 0
    rows = []
    archs = select(architectures(), args)
    for i, (mt, cname, mname) in enumerate(archs):
        r = sweep_one(mt, cname, mname, args.timeout)
        rows.append(r)
        print(f"[{i + 1}/{len(archs)}] {mt}: {r.status} (symshape {r.symshape or '-'}, export {r.export or '-'})",
              file=sys.stderr, flush=True)
        if args.out:
            _write(args.out, rows, torch.__version__, transformers.__version__, partial=i + 1 < len(archs))
            with open(args.out + ".jsonl", "a" if i else "w") as f:
                f.write(json.dumps(asdict(r)) + "\n")
    text = table(rows) + "\n" + summary(rows)
    print(text)
    return 0


def select(archs, args) -> list:
    """The architectures ``--only``, ``--shuffle``, ``--shard`` and ``--limit`` pick, in order."""
    if args.only:
        want = set(args.only.split(","))
        archs = [a for a in archs if a[0] in want]
    if args.shuffle is not None:
        import random
        random.Random(args.shuffle).shuffle(archs)
    if args.shard:
        k, n = map(int, args.shard.split("/"))
        archs = archs[k::n]
    if args.limit:
        archs = archs[: args.limit]
    return archs


def _write(path, rows, tv, hv, partial):
    with open(path, "w") as f:
        f.write(f"hf_sweep: torch {tv}, transformers {hv}{' (partial: still running)' if partial else ''}\n\n")
        f.write(table(rows) + "\n" + summary(rows))
        f.write("\nper size (sizes: eager | symshape | torch.export):\n")
        for r in rows:
            for point, eager, sym, exp in r.sizes:
                f.write(f"  {r.model_type} {point}: {eager} | {sym} | {exp}\n")


if __name__ == "__main__":
    sys.exit(main())
