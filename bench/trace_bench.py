"""Trace time per program, with and without translation validation.

For each program: the median trace time over a few runs, the guards and
runtime asserts recorded, the median trace time with translation validation
on (every engine decision replayed through Z3), the ratio of the two, and
what validation checked.  The target is a ratio of at most 3 on GPT2Model.

Run::

    python bench/trace_bench.py            # MLP, GPT2Model (2 layers), BertModel (small)
    python bench/trace_bench.py --runs 7
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import shapes  # noqa: E402
from examples.mlp import MLP  # noqa: E402


def _quiet_transformers():
    import transformers
    transformers.utils.logging.set_verbosity_error()
    return transformers


def gpt2():
    t = _quiet_transformers()
    cfg = t.GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=128, vocab_size=100)
    return t.GPT2Model(cfg).eval(), ["ids: i64[B, T]"]


def bert():
    t = _quiet_transformers()
    cfg = t.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                       vocab_size=100, max_position_embeddings=128)
    return t.BertModel(cfg).eval(), ["ids: i64[B, T]"]


def mlp():
    return MLP(d=32, hidden=64).eval(), ["x: f32[B, T, 32]"]


PROGRAMS = {"MLP": mlp, "GPT2Model (2 layers)": gpt2, "BertModel (small)": bert}


def _median_time(fn, runs):
    times = []
    out = None
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def bench(runs: int = 5):
    """Rows of (program, t_off, guards, asserts, t_on, ratio, steps checked, z3 queries, validation s)."""
    rows = []
    for name, make in PROGRAMS.items():
        torch.manual_seed(0)
        model, specs = make()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # One untimed run of each: imports and first-call caches are not trace time.
            shapes.trace(model, *specs, translation_validation=False)
            shapes.trace(model, *specs, translation_validation=True)
            t_off, tp = _median_time(lambda: shapes.trace(model, *specs, translation_validation=False), runs)
            t_on, tpv = _median_time(lambda: shapes.trace(model, *specs, translation_validation=True), runs)
        rep = tpv.validation_report
        status = "sound" if rep.ok and not rep.unknown else "UNSOUND" if not rep.ok else "unknown steps"
        rows.append((name, t_off, len(tp.guards), len(tp.runtime_asserts), t_on, t_on / t_off,
                     rep.checked, rep.queries, rep.elapsed_s, status))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="timed runs per program and mode (median reported)")
    args = ap.parse_args(argv)
    rows = bench(args.runs)
    head = ("program", "trace s", "guards", "asserts", "trace+TV s", "ratio", "steps checked", "Z3 queries",
            "TV replay s", "result")
    fmt = "{:<22} {:>8} {:>7} {:>8} {:>11} {:>6} {:>14} {:>11} {:>12}  {}"
    print(f"median of {args.runs} runs; TV = translation validation")
    print(fmt.format(*head))
    for r in rows:
        print(fmt.format(r[0], f"{r[1]:.3f}", r[2], r[3], f"{r[4]:.3f}", f"{r[5]:.2f}x", r[6], r[7],
                         f"{r[8]:.3f}", r[9]))


if __name__ == "__main__":
    main()
