"""Real transformers models on the CPU (fp32): eager, Inductor static and dynamic, symshape.

The models are tests/attention_models.py's (Llama, Qwen2 (GQA), Mistral with a sliding
window, Gemma, GPT-2, BERT with an attention mask, ViT, the Whisper encoder) at a bench
size (d = 256, 4 heads of 64, 2 layers; ``--small`` keeps the tests' d = 32).  For each
model and (B, T) point, in one process on the same inputs:

* eager;
* Inductor static: ``torch.compile(dynamic=False)``, compiled afresh per point;
* Inductor dynamic: ``torch.compile(dynamic=True)`` once; recompiles counted;
* ``compiler.compile(target="cpp")`` once, every point on the same object;
* ``torch.compile(backend="symshape", dynamic=True)`` once.

ms per point (fastest of ``--reps`` calls after warm-up, the modes called in turn: the machine
is shared, see :func:`interleaved_ms`), max error of the first output against eager, speedups,
geomeans.  Caches start cold in a temporary folder.  The machine's
load average is printed: on a shared machine compare columns within one run only.

Usage::

    python bench/cpu_models.py --threads 2                 # every model, 2 points each
    python bench/cpu_models.py --threads 2 --only llama --reps 20
    python bench/cpu_models.py --threads 2 --modes eager,ind_static,compile --points "4,128"   # quick
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import time

_TMP = tempfile.mkdtemp(prefix="cpu_models_")
os.environ.setdefault("SYMSHAPE_CACHE", os.path.join(_TMP, "symshape"))
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_TMP, "inductor"))
if "--threads" in sys.argv[:-1]:  # before torch and the kernels' OpenMP runtime start their thread pools
    os.environ["OMP_NUM_THREADS"] = sys.argv[sys.argv.index("--threads") + 1]

import torch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import compiler  # noqa: E402
from bench.cpu_compare import geomean, graphs, rep_times  # noqa: E402,F401 - one timing helper for both CPU benches
from tests import attention_models as AM  # noqa: E402
from tests import zoo_models as Z  # noqa: E402

MODES = ["eager", "ind_static", "ind_dyn", "compile", "backend"]


def _bench_configs():
    """The models at d = 256 (4 heads of 64, 2 layers, FFN 1024, vocab 1000)."""
    t = Z._t()
    dec = dict(vocab_size=1000, hidden_size=256, intermediate_size=1024, num_hidden_layers=2,
               num_attention_heads=4, max_position_embeddings=1024)
    enc = dict(vocab_size=1000, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
               intermediate_size=1024, max_position_embeddings=1024)
    return {
        "llama": lambda: t.LlamaModel(t.LlamaConfig(**dec, num_key_value_heads=4)),
        "qwen2": lambda: t.Qwen2Model(t.Qwen2Config(**dec, num_key_value_heads=2)),
        "mistral_sw": lambda: t.MistralModel(t.MistralConfig(**dec, num_key_value_heads=2, sliding_window=64)),
        "gemma": lambda: t.GemmaModel(t.GemmaConfig(**dec, num_key_value_heads=1, head_dim=64)),
        "gpt2": lambda: t.GPT2Model(t.GPT2Config(vocab_size=1000, n_embd=256, n_layer=2, n_head=4,
                                                 n_positions=1024)),
        "bert+mask": lambda: t.BertModel(t.BertConfig(**enc)),
        "vit": lambda: t.ViTModel(t.ViTConfig(image_size=64, patch_size=8, hidden_size=256, num_hidden_layers=2,
                                              num_attention_heads=4, intermediate_size=1024)),
        "whisper_encoder": lambda: t.WhisperModel(t.WhisperConfig(
            vocab_size=1000, d_model=256, encoder_layers=2, decoder_layers=1, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=1024, decoder_ffn_dim=1024, num_mel_bins=80,
            max_source_positions=750, pad_token_id=0, decoder_start_token_id=1)).get_encoder(),
    }


def cases(small: bool):
    """(PlanCase, points) per model; points are (B, T) (T unused for fixed-size inputs)."""
    out = []
    builds = {} if small else _bench_configs()
    for c in AM.CASES:
        specs = c.specs
        if not small and c.name == "vit":
            specs = ("pixel_values: f32[B, 3, 64, 64]",)
        if not small and c.name == "whisper_encoder":
            specs = ("input_features: f32[B, 80, 1500]",)
        case = AM.PlanCase(c.name, builds.get(c.name, c.build), specs)
        has_t = any("T]" in s for s in specs)
        points = [(2, 61), (4, 250)] if has_t else [(2, 0), (4, 0)]
        if small:
            points = [(2, 7), (3, 13)] if has_t else [(2, 0), (3, 0)]
        out.append((case, points))
    return out


def err_of(out, ref):
    return (AM.last_hidden(out).float() - AM.last_hidden(ref).float()).abs().max().item()


def interleaved_ms(fns: dict, args, reps) -> dict:
    """{mode: fastest of ``reps`` calls in ms}, the modes called in turn (round robin) after two
    warm-up rounds: the machine is shared, and its slow spells (seconds long, 10x) then hit
    every mode alike rather than whichever mode ran during one.

    >>> sorted(interleaved_ms({"a": lambda: None, "b": lambda: None}, (), 2))
    ['a', 'b']
    """
    for _ in range(2):
        for fn in fns.values():
            fn(*args)
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(reps):
        for mode, fn in fns.items():
            t0 = time.perf_counter()
            fn(*args)
            best[mode] = min(best[mode], time.perf_counter() - t0)
    return {mode: t * 1e3 for mode, t in best.items()}


def compiled_modes(m, case, inputs, modes, notes) -> list:
    """Per point, {mode: callable}: every mode compiled (and run once) before any is timed.

    Each Inductor mode compiles its own copy of the module (dynamo keeps one cache per
    ``forward`` code object: a copy's guards keep its entries apart), Inductor static one copy
    per point; ``compiler.compile`` and the backend serve every point with one object."""
    per_point = [dict() for _ in inputs]
    for mode in modes:
        try:
            if mode == "eager":
                fns = [m] * len(inputs)
            elif mode == "ind_static":
                fns = [torch.compile(copy.deepcopy(m), dynamic=False) for _ in inputs]
                for g, x in zip(fns, inputs):
                    g(*x)
            elif mode == "ind_dyn":
                g0 = graphs()
                g = torch.compile(copy.deepcopy(m), dynamic=True)
                for x in inputs:
                    g(*x)
                notes.append(f"ind_dyn graphs {graphs() - g0}")
                fns = [g] * len(inputs)
            elif mode == "compile":
                t0 = time.perf_counter()
                f = compiler.compile(m, *case.specs, target="cpp")
                f(*inputs[0])
                notes.append(f"compile first call {time.perf_counter() - t0:.1f}s")
                fns = [f] * len(inputs)
            else:
                g0 = graphs()
                g = torch.compile(copy.deepcopy(m), backend="symshape", dynamic=True)
                for x in inputs:
                    g(*x)
                notes.append(f"backend graphs {graphs() - g0}")
                fns = [g] * len(inputs)
        except Exception as e:  # noqa: BLE001 - a mode that fails is a column that says so
            notes.append(f"{mode} failed: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}")
            continue
        for d, fn in zip(per_point, fns):
            d[mode] = fn
    return per_point


def run_model(case, points, reps, modes):
    """{mode: [ms per point]}, {mode: [max error per point]}, notes."""
    m = case.module()
    inputs = [case.inputs({"B": B, "T": T}) for B, T in points]
    refs = [m(*x) for x in inputs]
    notes = []
    torch._dynamo.reset()
    per_point = compiled_modes(m, case, inputs, modes, notes)
    nan = float("nan")
    ms = {mode: [nan] * len(points) for mode in modes}
    errs = {mode: [nan] * len(points) for mode in modes}
    for i, (fns, x, ref) in enumerate(zip(per_point, inputs, refs)):
        for mode, t in interleaved_ms(fns, x, reps).items():
            ms[mode][i] = t
            errs[mode][i] = err_of(fns[mode](*x), ref)
    torch._dynamo.reset()
    return ms, errs, notes


def _print_row(row, modes):
    name, pt, ms, errs = row
    nan = float("nan")
    c = ms.get("compile", nan)
    print(f"{name:<16} {pt:<6} " + " ".join(f"{ms[m]:>13.3f}" for m in modes)
          + f" {ms.get('ind_static', nan) / c:>9.2f}x {ms.get('ind_dyn', nan) / c:>7.2f}x"
          + f" {ms.get('ind_dyn', nan) / ms.get('backend', nan):>6.2f}x"
          + f" {errs.get('compile', nan):>8.1e} {errs.get('ind_static', nan):>8.1e}", flush=True)


def _revision() -> str:
    """The checkout's branch and commit (with ``+dirty`` for uncommitted changes), for the header."""
    import subprocess
    try:
        run = lambda *c: subprocess.run(["git", "-C", ROOT, *c], capture_output=True, text=True,  # noqa: E731
                                        timeout=10).stdout.strip()
        return f"{run('rev-parse', '--abbrev-ref', 'HEAD')}@{run('rev-parse', '--short', 'HEAD')}" + \
            ("+dirty" if run("status", "--porcelain", "--untracked-files=no") else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown revision"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--only", default=None, help="models whose name contains one of these (comma-separated)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--small", action="store_true", help="the tests' d = 32 configs (quick)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--points", default=None, help='"B,T;B,T": the points of every model (T ignored without T)')
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    modes = a.modes.split(",")
    torch.manual_seed(0)
    print(f"symshape {_revision()} torch={torch.__version__} threads={torch.get_num_threads()} fp32 reps={a.reps} "
          f"load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    rows = []
    hdr = f"{'model':<16} {'B,T':<6} " + " ".join(f"{m + ' ms':>13}" for m in modes) + \
        f" {'cmp/static':>10} {'cmp/dyn':>8} {'bk/dyn':>7} {'cmp err':>8} {'ind err':>8}"
    print(hdr)
    print("-" * len(hdr), flush=True)
    with torch.no_grad():
        for case, points in cases(a.small):
            if a.only and not any(o in case.name for o in a.only.split(",")):
                continue
            if a.points:
                pts = [tuple(int(v) for v in p.split(",")) for p in a.points.split(";")]
                points = [(B, T if any(p[1] for p in points) else 0) for B, T in pts]
            ms, errs, notes = run_model(case, points, a.reps, modes)
            for i, (B, T) in enumerate(points):
                row = (case.name, f"{B},{T}" if T else f"{B}", {m: ms[m][i] for m in modes},
                       {m: errs[m][i] for m in modes})
                rows.append(row)
                _print_row(row, modes)
            print(f"  {case.name}: " + "; ".join(notes), flush=True)

    def gm(num, den):
        return geomean([r[2].get(num, float("nan")) / r[2].get(den, float("nan")) for r in rows])

    print(f"geomean: compiler.compile vs Inductor static {gm('ind_static', 'compile'):.2f}x, "
          f"vs Inductor dynamic {gm('ind_dyn', 'compile'):.2f}x, vs eager {gm('eager', 'compile'):.2f}x; "
          f"backend vs Inductor dynamic {gm('ind_dyn', 'backend'):.2f}x, vs eager {gm('eager', 'backend'):.2f}x")
    print(f"load average at end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
