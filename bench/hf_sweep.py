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
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import inspect
import io
import os
import sys
import time
import warnings
from dataclasses import dataclass, field
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
    "q_lora_rank": HIDDEN // 2, "n_group": 1, "topk_group": 1,
}


@dataclass
class Row:
    """One architecture's outcome."""

    model_type: str
    model: str = ""
    inputs: str = ""
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
def shrink(cfg, depth: int = 0):
    """Shrink ``cfg`` in place: sizes from :data:`_SHRINK`, sub-configs too."""
    for k, v in _SHRINK.items():
        if hasattr(cfg, k) and isinstance(getattr(cfg, k), int) and not isinstance(getattr(cfg, k), bool):
            with contextlib.suppress(Exception):
                setattr(cfg, k, v)
    for k in ("image_size", "img_size"):
        if isinstance(getattr(cfg, k, None), int):
            setattr(cfg, k, IMAGE)
    for k in ("hidden_sizes", "depths", "embed_dims", "num_heads_list"):
        v = getattr(cfg, k, None)
        if isinstance(v, (list, tuple)) and v and all(isinstance(x, int) for x in v):
            setattr(cfg, k, [min(x, HIDDEN if k != "depths" else 1) for x in v])
    for k in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "sep_token_id",
              "cls_token_id", "mask_token_id", "unk_token_id"):
        v = getattr(cfg, k, None)
        if isinstance(v, int) and v >= VOCAB and hasattr(cfg, "vocab_size"):
            with contextlib.suppress(Exception):
                setattr(cfg, k, VOCAB - 1 - len(k) % 4)
    if isinstance(getattr(cfg, "num_attention_heads", None), list):
        cfg.num_attention_heads = [HEADS] * len(cfg.num_attention_heads)
    if depth < 2:
        for k, v in list(vars(cfg).items()):
            if hasattr(v, "to_dict") and hasattr(v, "model_type"):
                shrink(v, depth + 1)
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
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and torch.allclose(a, b, atol=1e-4, rtol=1e-4, equal_nan=True)
    return a == b


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


def _sweep(row, cname, mname, timeout):
    ccls, mcls = _cls(cname), _cls(mname)
    if ccls is None or mcls is None:
        row.status = "not importable"
        return
    torch.manual_seed(0)
    try:
        cfg = shrink(ccls())
        model = mcls(cfg).eval()
    except Exception as e:  # noqa: BLE001 -- the config derivation is heuristic
        row.status, row.note = "no tiny config", f"{_err(e)}: {str(e).splitlines()[0][:100] if str(e) else ''}"
        return
    plan = plan_inputs(model, cfg)
    if plan is None:
        row.status = "inputs not derived"
        return
    names, specs, dims, points = plan
    row.inputs = "; ".join(specs)
    prog = Call(model, names)
    ex_inputs = make_inputs(specs, dims)
    try:
        with torch.no_grad(), time_limit(timeout):
            prog(*ex_inputs)
    except Exception as e:  # noqa: BLE001
        row.status, row.note = "eager fails at the example", f"{_err(e)}: {str(e).splitlines()[0][:100] if str(e) else ''}"
        return
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


def _trace_symshape(row, prog, specs, dims, ex_inputs, timeout) -> dict:
    t0 = time.perf_counter()
    try:
        with torch.no_grad(), time_limit(timeout):
            tp = shapes.trace(prog, *specs, dims=dims)
        row.symshape = "traced"
    except TraceTimeout:
        tp, row.symshape = None, "timeout"
    except Exception as e:  # noqa: BLE001
        tp = None
        row.symshape = _err(e)
        row.note = str(e).splitlines()[0][:160] if str(e) else ""
    row.symshape_s = time.perf_counter() - t0
    return {"tp": tp}


def _trace_export(row, prog, specs, dims, ex_inputs, timeout) -> dict:
    from torch.export import Dim, export
    t0 = time.perf_counter()
    try:
        spec = tuple({i: Dim.AUTO for i in range(t.dim())} for t in ex_inputs)
        with torch.no_grad(), warnings.catch_warnings(), time_limit(timeout):
            warnings.simplefilter("ignore")
            ep = export(prog, tuple(ex_inputs), dynamic_shapes=(spec,), strict=False)
        row.export = "traced"
    except TraceTimeout:
        ep, row.export = None, "timeout"
    except Exception as e:  # noqa: BLE001
        ep = None
        row.export = _err(e)
        if not row.note:
            row.note = "export: " + (str(e).strip().splitlines()[0][:160] if str(e).strip() else "")
    row.export_s = time.perf_counter() - t0
    return {"ep": ep}


def _check_point(row, prog, tp, ep, specs, point):
    x = make_inputs(specs, point, seed=1)
    try:
        with torch.no_grad():
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
                    got = tp.run(*x)
                if isinstance(ref, torch.Tensor) and tuple(got.shape) != tuple(ref.shape):
                    sym = "WRONG SHAPE"
                    row.wrong_shapes += 1
                elif not _close(got, ref):
                    sym = "MISMATCH"
                    row.mismatches += 1
                else:
                    sym = "= eager"
                    shape = tp.output_shapes[0] if tp.output_shapes else None
                    if shape is not None and isinstance(ref, torch.Tensor):
                        from validation.concrete import evaluate
                        syms = {tp.env.symbols[n]: v for n, v in point.items() if n in tp.env.symbols}
                        if [int(evaluate(e, syms)) for e in shape] != list(ref.shape):
                            sym = "WRONG SHAPE"
                            row.wrong_shapes += 1
            except shapes.GuardViolation:
                sym = "refused"
            except Exception as e:  # noqa: BLE001
                sym = f"run error ({_err(e)})"
                row.run_errors += 1
    exp = "-"
    if ep is not None:
        try:
            with torch.no_grad():
                got = ep.module()(*x)
            exp = "= eager" if ref is not None and _close(got, ref) else ("runs, eager fails" if ref is None else "MISMATCH")
        except Exception as e:  # noqa: BLE001
            exp = f"refused ({_err(e)})"
    row.sizes.append((point, eager, sym, exp))


# -- report ------------------------------------------------------------------------------
def table(rows) -> str:
    out = io.StringIO()
    w = max([len(r.model_type) for r in rows] + [10])
    out.write(f"{'model_type':<{w}}  {'symshape':<22} {'sym s':>6}  {'export':<22} {'exp s':>6}  status\n")
    for r in rows:
        ss = f"{r.symshape_s:.2f}" if r.symshape_s is not None else "-"
        es = f"{r.export_s:.2f}" if r.export_s is not None else "-"
        out.write(f"{r.model_type:<{w}}  {r.symshape or '-':<22} {ss:>6}  {r.export or '-':<22} {es:>6}  "
                  f"{r.status}{('  ' + r.note) if r.note and r.status != 'ok' else ''}\n")
    return out.getvalue()


def summary(rows) -> str:
    from collections import Counter
    built = [r for r in rows if r.symshape or r.export]
    sym = [r for r in built if r.symshape == "traced"]
    exp = [r for r in built if r.export == "traced"]
    exp_not_sym = [r.model_type for r in exp if r.symshape != "traced"]
    neither = [r for r in built if r.symshape != "traced" and r.export != "traced"]
    both = [r for r in built if r.symshape == "traced" and r.export == "traced"]
    ts = sum(r.symshape_s for r in both)
    te = sum(r.export_s for r in both)
    lines = [
        f"architectures: {len(rows)}; built with a tiny config and run by eager: {len(built)}",
        f"symshape traces {len(sym)}/{len(built)}; torch.export (Dim.AUTO) traces {len(exp)}/{len(built)}",
        f"torch.export traces but symshape does not: {len(exp_not_sym)} {exp_not_sym}",
        f"wrong shapes: {sum(r.wrong_shapes for r in rows)}; sizes accepted where eager fails: "
        f"{sum(r.accepted_eager_fails for r in rows)}; .run errors where eager runs: {sum(r.run_errors for r in rows)}; "
        f"value mismatches: {sum(r.mismatches for r in rows)}",
        f"trace time on the {len(both)} both trace: symshape {ts:.1f} s, torch.export {te:.1f} s "
        f"({ts / te if te else float('nan'):.2f}x)",
        "failure classes:",
    ]
    for k, n in Counter(r.status for r in rows if r.status != "ok").most_common():
        lines.append(f"  {n:4d}  {k}")
    lines.append("neither traces (symshape error / export error):")
    for r in neither:
        lines.append(f"  {r.model_type}: {r.symshape} / {r.export}  {r.note}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated model types")
    ap.add_argument("--limit", type=int, help="at most this many architectures")
    ap.add_argument("--timeout", type=float, default=120.0,
                    help="seconds per step of an architecture (the eager call, each trace, each size)")
    ap.add_argument("--out", help="also write the table and summary to this file")
    ap.add_argument("--shuffle", type=int, metavar="SEED",
                    help="visit the architectures in a random order (a partial run is then a sample)")
    args = ap.parse_args(argv)
    import transformers
    transformers.logging.set_verbosity_error()
    archs = architectures()
    if args.only:
        want = set(args.only.split(","))
        archs = [a for a in archs if a[0] in want]
    if args.shuffle is not None:
        import random
        random.Random(args.shuffle).shuffle(archs)
    if args.limit:
        archs = archs[: args.limit]
    rows = []
    for i, (mt, cname, mname) in enumerate(archs):
        r = sweep_one(mt, cname, mname, args.timeout)
        rows.append(r)
        print(f"[{i + 1}/{len(archs)}] {mt}: {r.status} (symshape {r.symshape or '-'}, export {r.export or '-'})",
              file=sys.stderr, flush=True)
        if args.out:
            _write(args.out, rows, torch.__version__, transformers.__version__, partial=i + 1 < len(archs))
    text = table(rows) + "\n" + summary(rows)
    print(text)
    return 0


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
