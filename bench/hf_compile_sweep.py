"""transformers' registry through the compiler: ``compiler.compile`` (C++ kernels) against eager.

:mod:`bench.hf_sweep` checks the tracer's answers (shapes, guards, ``.run``) on every
architecture; this runs the *compiled* program, whose kernels, fusions and rewrites the tracer's
check never reaches.  Each architecture is built from the same tiny config and inputs as there,
compiled once with every size symbolic, and called at the same three sizes; each call's output
is compared with eager's (shape, then values within fp32 tolerance).

Outcomes per size: ``= eager``, ``refused`` (the program's guards refuse the size, as a typed
error), ``WRONG SHAPE``, ``MISMATCH``, ``ACCEPTED where eager fails`` and ``run error`` (the
last four are defects of ours until shown otherwise).  Per architecture: ``ok``, ``WRONG``,
``compile: <error type>`` (compile raised), or why it was not tried (:mod:`bench.hf_sweep`'s
build outcomes).

``--train`` checks training instead: ``torch.compile(backend="symshape", dynamic=True)`` on the
same program, a loss (a fixed random projection of its float outputs) and its backward at each size; the
loss and every parameter's gradient against eager's (each within 1e-3 of its largest magnitude, or
of a thousandth of the model's largest gradient where that is larger).
A size whose graph ran as its ATen graph (a ``TrainingFallback`` warning) says so.

Usage::

    python bench/hf_compile_sweep.py --only llama,bert,vit
    python bench/hf_compile_sweep.py --sample 40 --seed 0 --timeout 240 --out table.txt
    python bench/hf_compile_sweep.py --train --sample 30 --seed 1
    SYMSHAPE_TRAIN_GRAPHS=emulate python bench/hf_compile_sweep.py --train --repeat 3   # replay rules, CPU
    python bench/hf_compile_sweep.py --diffusers [--train]     # bench/diffusers_sweep.py's cases

Example (the outcome of one architecture from its sizes' outcomes)::

    >>> verdict(["= eager", "refused", "= eager"]), verdict(["= eager", "MISMATCH"])
    ('ok', 'WRONG')
    >>> verdict(["run error (timeout)", "= eager"])
    'timeout'

"""
from __future__ import annotations

import argparse
import copy
import gc
import os
import random
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch.utils import _pytree as pytree

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import compiler  # noqa: E402
import shapes  # noqa: E402
from bench import hf_sweep as hs  # noqa: E402
from validation.dinfer.limits import TraceTimeout, time_limit  # noqa: E402

#: Outcomes of a size that are defects of ours until shown otherwise.
DEFECTS = ("WRONG SHAPE", "MISMATCH", "ACCEPTED where eager fails", "run error")


@dataclass(kw_only=True)
class CompileRow:
    """One architecture's outcome through the compiler."""

    model_type: str
    model: str = ""
    status: str = ""
    compile_s: Optional[float] = None
    sizes: list = field(default_factory=list)  # (point, eager, compiled) per size
    note: str = ""


def verdict(outcomes) -> str:
    """``WRONG`` where any size's outcome is a defect (:data:`DEFECTS`), ``timeout`` where a size
    ran past the time limit (a compile that slow is reported, not counted as a wrong answer),
    else ``ok``."""
    if any(o.split(" (")[0] in DEFECTS and "(timeout)" not in o for o in outcomes):
        return "WRONG"
    return "timeout" if any("(timeout)" in o for o in outcomes) else "ok"


def _first_line(e: BaseException, n: int = 140) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:n] if text else ''}"


def _check(prog, compiled, x) -> tuple:
    """``(eager, compiled)`` outcomes on inputs ``x``."""
    try:
        with torch.no_grad():
            torch.manual_seed(2)
            ref = prog(*x)
        eager = "runs"
    except Exception as e:  # noqa: BLE001 -- eager's own failure is an outcome
        ref, eager = None, f"fails ({type(e).__name__})"
    try:
        with torch.no_grad():
            torch.manual_seed(2)
            got = compiled(*x)
    except shapes.GuardViolation:
        return eager, "refused"
    except Exception as e:  # noqa: BLE001 -- the program's call is the outcome
        if ref is None:
            return eager, "refused"  # both refuse
        return eager, f"run error ({_first_line(e, 100)})"
    if ref is None:
        return eager, "ACCEPTED where eager fails"
    got_leaves, got_tree = pytree.tree_flatten(got)
    ref_leaves, ref_tree = pytree.tree_flatten(ref)
    shapes_of = [tuple(t.shape) if isinstance(t, torch.Tensor) else t for t in got_leaves]
    want = [tuple(t.shape) if isinstance(t, torch.Tensor) else t for t in ref_leaves]
    if got_tree != ref_tree or shapes_of != want:
        return eager, f"WRONG SHAPE ({shapes_of} vs {want})"[:160]
    if not hs._close(got, ref):
        err = max(((a.double() - b.double()).abs().max().item() for a, b in zip(got_leaves, ref_leaves)
                   if isinstance(a, torch.Tensor) and a.numel()), default=float("nan"))
        return eager, f"MISMATCH (max abs err {err:.2e})"
    return eager, "= eager"


def _loss(out):
    """A fixed random projection of the float outputs: their mean square is no loss for a model
    ending in a LayerNorm (about 1 whatever the input, so every gradient upstream is rounding noise)."""
    g = torch.Generator().manual_seed(3)
    leaves = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    return sum((t.float() * torch.randn(t.shape, generator=g)).mean() for t in leaves)


def _rel(a, b, floor: float = 1e-12) -> float:
    """Largest difference of ``a`` from ``b`` over ``b``'s largest magnitude (at least ``floor``)."""
    if not a.numel():
        return 0.0
    return ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(floor)).item()


def _check_train(prog, compiled, x) -> tuple:
    """``(eager, compiled)`` outcomes of a training step on inputs ``x``: the loss and every gradient;
    ``compiled`` is :func:`_compiled_for_training`'s ``(step, module)``."""
    ref_model = prog
    compiled, got_model = compiled
    try:
        torch.manual_seed(2)
        ref_model.zero_grad(set_to_none=True)
        ref = _loss(ref_model(*x))
        ref.backward()
        eager = "runs"
    except Exception as e:  # noqa: BLE001 -- eager's own failure is an outcome
        return f"fails ({type(e).__name__})", "-"
    want = {n: p.grad for n, p in ref_model.named_parameters() if p.grad is not None}
    got_model.zero_grad(set_to_none=True)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            torch.manual_seed(2)
            loss = _loss(compiled(*copy.copy(x)))
            loss.backward()
        except Exception as e:  # noqa: BLE001 -- the compiled step's failure is the outcome
            return eager, f"run error ({_first_line(e, 100)})"
    fell = any(type(w.message).__name__ == "TrainingFallback" for w in seen)
    grads = {n: p.grad for n, p in got_model.named_parameters() if p.grad is not None}
    if set(grads) != set(want):
        return eager, f"MISMATCH (gradients of {sorted(set(want) ^ set(grads))[:3]} missing on one side)"
    # A gradient that is zero in exact arithmetic (a key projection's bias: softmax ignores a shift
    # shared by every key) is rounding noise on both sides: each is measured against the larger of
    # its own magnitude and a thousandth of the model's largest gradient.
    top = max((w.abs().max().item() for w in want.values() if w.numel()), default=0.0)
    worst, where = max([(_rel(loss.detach(), ref.detach()), "the loss")]
                       + [(_rel(grads[n], want[n], floor=1e-3 * top), n) for n in want])
    if worst > 1e-3:
        return eager, f"MISMATCH (largest relative error {worst:.1e}, {where})"
    return eager, "= eager" + (" (TrainingFallback: ATen graph)" if fell else "")


def _compiled_for_training(prog) -> tuple:
    """``(torch.compile(copy of prog, backend="symshape", dynamic=True), the copy)``: the copy's
    parameters hold the compiled step's gradients."""
    model = copy.deepcopy(prog)
    compiler.register()
    return torch.compile(model, backend="symshape", dynamic=True), model


def sweep_one(mt, cname, mname, timeout: float, train: bool = False) -> CompileRow:
    """One architecture: built as :mod:`bench.hf_sweep` builds it, compiled, checked at 3 sizes."""
    row = CompileRow(model_type=mt, model=mname)
    ccls, mcls = hs._cls(cname), hs._cls(mname)
    if ccls is None or mcls is None:
        row.status = "not importable"
        return row
    probe = hs.Row(model_type=mt, model=mname)
    try:
        built = hs.build(probe, ccls, mcls, timeout)
    except TraceTimeout:
        row.status, row.note = "timeout", "building the model"
        return row
    if built is None:
        row.status, row.note = probe.status, probe.note
        return row
    _, _, (_, specs, dims, points), prog, _ = built
    return _compile_and_check(row, prog, specs, dims, [(p, hs.make_inputs(specs, p, seed=1)) for p in points],
                              timeout, train)


def sweep_diffusers(case, timeout: float, train: bool = False) -> CompileRow:
    """One case of :mod:`bench.diffusers_sweep` (its tiny config, inputs and sizes), compiled and checked."""
    from bench import diffusers_sweep as ds
    row = CompileRow(model_type=case.name, model=case.model)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prog = ds.Call(case.build().eval(), case.call)
    except Exception as e:  # noqa: BLE001 -- a process boundary: the case's failure is its row
        row.status, row.note = "not built", _first_line(e)
        return row
    points = [(p, ds.make_inputs(case, p, seed=1)) for p in case.points]
    return _compile_and_check(row, prog, case.specs, dict(case.points[0]), points, timeout, train)


#: Rounds over an architecture's sizes (``--repeat``).
REPEAT = [1]


def _compile_and_check(row, prog, specs, dims, points, timeout, train) -> CompileRow:
    t0 = time.perf_counter()
    try:
        with torch.no_grad(), warnings.catch_warnings(), time_limit(timeout):
            warnings.simplefilter("ignore")
            compiled = (_compiled_for_training(prog) if train
                        else compiler.compile(prog, *specs, dims=dims, target="cpp"))
    except TraceTimeout:
        row.status, row.note = "compile: timeout", f"over {timeout:g} s"
        return row
    except Exception as e:  # noqa: BLE001 -- a process boundary: the compile's failure is the row's outcome
        row.status, row.note = f"compile: {type(e).__name__}", _first_line(e)
        return row
    row.compile_s = time.perf_counter() - t0
    for point, x in points * REPEAT[0]:
        try:
            with warnings.catch_warnings(), time_limit(timeout):
                warnings.simplefilter("ignore")
                row.sizes.append((point, *(_check_train if train else _check)(prog, compiled, x)))
        except TraceTimeout:
            row.sizes.append((point, "-", f"run error (timeout): over {timeout:g} s"))
    row.status = verdict([c for _, _, c in row.sizes])
    return row


def select(archs, only, sample, seed, limit):
    if only:
        want = set(only.split(","))
        return [a for a in archs if a[0] in want]
    if sample:
        archs = random.Random(seed).sample(archs, min(sample, len(archs)))
    return archs[:limit] if limit else archs


def report(rows) -> str:
    lines = []
    for r in rows:
        cs = f"{r.compile_s:6.1f}s" if r.compile_s is not None else "      -"
        lines.append(f"{r.model_type:28s} {r.status:30s} {cs}  {r.note[:100]}")
        for point, eager, got in r.sizes:
            lines.append(f"    {point}: eager {eager} | compiled {got}")
    tried = [r for r in rows if r.compile_s is not None]
    wrong = [r for r in rows if r.status == "WRONG"]
    failed = [r for r in rows if r.status.startswith("compile:")]
    same = sum(1 for r in tried for _, _, c in r.sizes if c == "= eager")
    lines += ["", f"{len(rows)} architectures: {len(tried)} compiled, {len(failed)} compile failures, "
                  f"{len(rows) - len(tried) - len(failed)} not built (see bench/hf_sweep.py's outcomes)",
              f"sizes run: {sum(len(r.sizes) for r in tried)}, equal to eager {same}; "
              f"architectures with a defect (wrong shape, mismatch, accepted where eager fails, run error): "
              f"{len(wrong)} {[r.model_type for r in wrong]}"]
    slow = [r.model_type for r in rows if r.status == "timeout"]
    if slow:
        lines.append(f"a size ran past the time limit (not counted as a defect): {slow}")
    if tried:
        lines.append(f"compile s: median {sorted(r.compile_s for r in tried)[len(tried) // 2]:.1f}")
    from compiler.train_graphs import STATS
    if STATS["recorded"] or STATS["refused"]:
        lines.append(f"training graphs (compiler/train_graphs.py): {STATS['recorded']} recorded, {STATS['replays']} "
                     f"replays, {STATS['plain']} plain calls; refusals {len(STATS['refused'])}: "
                     f"{sorted(set(STATS['refused']))[:8]}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated model types")
    ap.add_argument("--sample", type=int, help="this many architectures drawn at random (--seed)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--limit", type=int)
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds per step (build, compile, each size)")
    ap.add_argument("--out", help="also write the report to this file")
    ap.add_argument("--train", action="store_true", help="a training step through backend='symshape' instead")
    ap.add_argument("--diffusers", action="store_true", help="bench/diffusers_sweep.py's cases instead of transformers'")
    ap.add_argument("--repeat", type=int, default=1,
                    help="call the sizes this many rounds (with SYMSHAPE_TRAIN_GRAPHS set, training steps at "
                         "sizes met before replay graphs: compiler/train_graphs.py)")
    args = ap.parse_args(argv)
    REPEAT[0] = max(1, args.repeat)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if args.diffusers:
        from bench import diffusers_sweep as ds
        jobs = [(c.name, lambda c=c: sweep_diffusers(c, args.timeout, train=args.train))
                for c in ds.CASES if not args.only or c.name in args.only.split(",")]
    else:
        jobs = [(mt, lambda a=(mt, cn, mn): sweep_one(*a, args.timeout, train=args.train))
                for mt, cn, mn in select(hs.architectures(), args.only, args.sample, args.seed, args.limit)]
    print(f"torch {torch.__version__}; {len(jobs)} programs", flush=True)
    rows = []
    for name, job in jobs:
        gc.collect()
        torch._dynamo.reset()
        row = job()
        rows.append(row)
        print(f"  {name:28s} {row.status:30s} {row.note[:90]}", flush=True)
    text = report(rows)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
