"""Symbolic FLOP counting vs torch's FlopCounterMode at many sizes, on GPT2Model.

symshape counts once (trace + formulas) and then evaluates the closed form at
each size; FlopCounterMode runs the model once per size.  Both are timed, and
every size's totals are checked equal (FlopCounterMode on CPU tensors gets
``torch_cpu_mapping()``, since torch has no formula for the fused CPU
attention kernel; on meta tensors it needs none).

With ``--train`` the step is a training step: GPT2LMHeadModel with its
cross-entropy loss, ``loss.backward()``; symshape counts it once with
``count_flops(mode="train")`` (the backward traced through autograd) and
FlopCounterMode runs forward + backward at each size.

Usage::

    python bench/flops_bench.py                 # GPT-2 small config, 20 sizes
    python bench/flops_bench.py --config tiny   # the 2-layer test config
    python bench/flops_bench.py --skip-cpu      # meta-tensor FlopCounterMode only
    python bench/flops_bench.py --train         # training step (forward + backward)

Weights are random (no download); FLOPs do not depend on them.
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import time

import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import shapes  # noqa: E402
from shapes.flops.formulas import torch_cpu_mapping  # noqa: E402


class LMLoss(torch.nn.Module):
    """GPT-2 with its LM head; returns the cross-entropy loss (labels = the inputs)."""

    def __init__(self, cfg):
        super().__init__()
        import transformers
        self.lm = transformers.GPT2LMHeadModel(cfg)

    def forward(self, ids):
        return self.lm(input_ids=ids, labels=ids).loss


def build(config: str, train: bool = False):
    import transformers
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    if config == "tiny":
        cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=1024, vocab_size=100)
    else:  # GPT-2 small: 12 layers, 768 wide, 12 heads, 50257 tokens
        cfg = transformers.GPT2Config()
    if train:
        return LMLoss(cfg).train(), cfg
    return transformers.GPT2Model(cfg).eval(), cfg


def sizes_grid():
    # 20 sizes, small enough that 20 real CPU forwards of GPT-2 small take a minute, not an hour.
    return [{"B": b, "T": t} for b in (2, 4) for t in range(16, 161, 16)]


def run_flop_counter(model, sizes, device, mapping, train=False):
    totals = []
    start = time.perf_counter()
    for s in sizes:
        ids = torch.zeros(s["B"], s["T"], dtype=torch.long, device=device)
        if train:
            with FlopCounterMode(display=False, custom_mapping=mapping) as counter:
                model(ids).backward()
            model.zero_grad(set_to_none=True)
        else:
            with FlopCounterMode(display=False, custom_mapping=mapping) as counter, torch.no_grad():
                model(ids)
        totals.append(counter.get_total_flops())
    return time.perf_counter() - start, totals


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", choices=["gpt2", "tiny"], default="gpt2")
    ap.add_argument("--skip-cpu", action="store_true", help="skip FlopCounterMode on real CPU tensors (slow)")
    ap.add_argument("--train", action="store_true", help="a training step: LM loss, forward + backward")
    args = ap.parse_args(argv)

    torch.set_num_threads(max(1, torch.get_num_threads()))
    model, cfg = build(args.config, args.train)
    sizes = sizes_grid()
    meta_model = copy.deepcopy(model).to("meta")
    # One untimed forward first: transformers imports and sets up its attention
    # and mask helpers lazily, which would otherwise be charged to whichever runs first.
    warm = torch.zeros(2, 16, dtype=torch.long, device="meta")
    if args.train:
        meta_model(warm).backward()
        meta_model.zero_grad(set_to_none=True)
    else:
        with torch.no_grad():
            meta_model(warm)

    start = time.perf_counter()
    report = shapes.count_flops(model, "ids: i64[B, T]", mode="train" if args.train else "forward")
    t_count = time.perf_counter() - start
    start = time.perf_counter()
    ours = [report.evaluate(s) for s in sizes]
    t_eval = time.perf_counter() - start

    rows = [("symshape count_flops, once", t_count, ""),
            (f"  + evaluate at {len(sizes)} sizes", t_eval, ""),
            ("  = symshape total", t_count + t_eval, "")]
    ok = True

    t_meta, meta_totals = run_flop_counter(meta_model, sizes, "meta", None, args.train)
    same = meta_totals == ours
    ok &= same
    with_bw = " + backward" if args.train else ""
    rows.append((f"FlopCounterMode{with_bw}, meta, {len(sizes)} sizes", t_meta, "equal" if same else "DIFFERENT"))

    if not args.skip_cpu:
        t_cpu, cpu_totals = run_flop_counter(model, sizes, "cpu", torch_cpu_mapping(), args.train)
        same = cpu_totals == ours
        ok &= same
        rows.append((f"FlopCounterMode{with_bw}, CPU, {len(sizes)} sizes", t_cpu, "equal" if same else "DIFFERENT"))

    bs = sorted({s["B"] for s in sizes})
    ts = sorted({s["T"] for s in sizes})
    what = "GPT2LMHeadModel + cross-entropy, training step (forward + backward)" if args.train else "GPT2Model"
    print(f"{what} ({args.config}: {cfg.n_layer} layers, n_embd={cfg.n_embd}, {cfg.n_head} heads), "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"sizes: B in {bs} x T in {ts[0]}..{ts[-1]} step {ts[1] - ts[0]} ({len(sizes)} sizes)")
    print(f"closed form: {report.total}")
    if args.train:
        print(f"  forward {report.phase_totals['forward']}, backward {report.phase_totals['backward']}")
    if report.useful != report.total:
        print(f"useful (causal attention at T*(T+1)/2 score entries): {report.useful}")
    print()
    print(f"{'method':<46}{'seconds':>10}  totals vs symshape")
    for name, t, note in rows:
        print(f"{name:<46}{t:>10.3f}  {note}")
    per_size_meta = t_meta / len(sizes)
    print()
    print(f"FlopCounterMode on meta costs {per_size_meta:.3f} s per size: symshape's one count pays off "
          f"from about {max(1, round(t_count / per_size_meta))} sizes on meta tensors"
          + ("" if args.skip_cpu else f", and from {max(1, round(t_count / (t_cpu / len(sizes))))} on CPU tensors"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
