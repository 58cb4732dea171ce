"""What a training step costs at sizes met before, at new sizes, and at those sizes again, per mode.

:mod:`bench.train_compare` reports the median step over random lengths, which mixes three
costs: a step at a size the process has met before, a step at a new size (cuBLAS heuristics,
cuDNN plans, symshape's per-shape sizes and launch bindings), and the second step at a size
first met recently.  This bench separates them, one mode after another in one process, every
step synchronized and timed alone (so these are wall times of lone steps, not a pipeline's):

* ``repeated``: ``--seen`` sizes cycled three times after three warm-up rounds;
* ``new``: ``--new`` sizes, one step each, never met before;
* ``again``: the same ``--new`` sizes a second time.

Sizes are the models' :func:`bench.train_compare.build` lengths (a ViT's ``k`` is its image
side / 16, length ``k * k``).  ``--profile`` adds cProfile's top host functions over the new
sizes for symshape modes (``--profile-at repeated``: over the repeated sizes), by own and by
cumulative time.  ``--settle`` waits, after the warm-up rounds, until kernel builds and the
loader thread (:mod:`compiler.codegen.preload`) are done, so that the timed steps run beside no
background work.  ``SYMSHAPE_MM_ROW_BUCKETS=0`` in the environment turns
:mod:`compiler.row_buckets` off (A/B of session 30: ViT bf16 on the H100, repeated 11.9 ->
7.7 ms, eager 7.4).

Usage::

    python bench/train_size_costs.py --model vit --modes eager,symshape

Example::

    >>> lengths("vit", [10, 11])
    [100, 121]
"""
from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import os
import pstats
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import train_compare as tc  # noqa: E402
from bench.train_profile import _step  # noqa: E402


def lengths(model: str, sizes: list) -> list:
    """The :func:`bench.train_compare.build` lengths of ``sizes`` (a ViT's image side / 16)."""
    return [k * k for k in sizes] if model == "vit" else list(sizes)


def timed_steps(fn, batch, g, opt, device, dtype, lens) -> list:
    """Wall ms of one synchronized step at each length of ``lens``, in order."""
    out = []
    for L in lens:
        b = batch(L, g)
        tc._sync(device)
        t = time.perf_counter()
        _step(fn, b, opt, device, dtype)
        tc._sync(device)
        out.append((time.perf_counter() - t) * 1e3)
    return out


@contextlib.contextmanager
def _profiled(prof):
    """``prof`` enabled inside the block (nothing when it is None)."""
    if prof is not None:
        prof.enable()
    try:
        yield
    finally:
        if prof is not None:
            prof.disable()


def _settle() -> tuple:
    """Wait until every kernel build handed to workers so far has finished and the loader thread
    has loaded them (:mod:`compiler.codegen.preload`); ``(seconds waited, loads that were queued)``."""
    from compiler.codegen import build_pool, preload
    t, queued = time.perf_counter(), preload.queued()
    pool = build_pool.current_pool()
    if pool is not None:
        pool.drain()
    preload.drain(timeout=120.0)
    return time.perf_counter() - t, queued


def run(mode, a) -> str:
    """One mode's line: median ms at repeated, new and again sizes (and the new sizes' steps)."""
    model, batch = tc.build(a.model, a.device, 4100)
    g = torch.Generator().manual_seed(0)
    fn = tc._compiled(mode, model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    seen, new = lengths(a.model, a.seen), lengths(a.model, a.new)
    timed_steps(fn, batch, g, opt, a.device, a.dtype, seen * 3)
    settled = _settle() if a.settle and mode.startswith("symshape") else None
    prof = cProfile.Profile() if a.profile and mode.startswith("symshape") else None
    with _profiled(prof if a.profile_at == "repeated" else None):
        rep = timed_steps(fn, batch, g, opt, a.device, a.dtype, seen * 3)
    with _profiled(prof if a.profile_at == "new" else None):
        first = timed_steps(fn, batch, g, opt, a.device, a.dtype, new)
    again = timed_steps(fn, batch, g, opt, a.device, a.dtype, new)
    line = (f"{mode:16s} {statistics.median(rep):9.2f} {statistics.median(first):9.2f} "
            f"{statistics.median(again):9.2f}   new: {[round(x, 1) for x in first]}"
            + ("" if settled is None else f"   (settled {settled[0]:.2f} s: builds waited, {settled[1]} loads queued)"))
    if prof is not None:
        s = io.StringIO()
        for key in ("tottime", "cumulative"):
            pstats.Stats(prof, stream=s).sort_stats(key).print_stats(a.top)
        line += "\n" + s.getvalue()
    return line


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="vit")
    ap.add_argument("--modes", default="eager,symshape")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bf16", choices=("fp32", "bf16"))
    ap.add_argument("--seen", type=int, nargs="+", default=[10, 11, 12, 13])
    ap.add_argument("--new", type=int, nargs="+", default=list(range(15, 24)))
    ap.add_argument("--profile", action="store_true", help="cProfile symshape modes' steps (host functions)")
    ap.add_argument("--profile-at", default="new", choices=("new", "repeated"), help="which steps --profile covers")
    ap.add_argument("--top", type=int, default=25, help="functions listed per cProfile ordering")
    ap.add_argument("--settle", action="store_true",
                    help="symshape modes: after the warm-up rounds, wait for kernel builds and the loader thread "
                         "(steps beside no background work)")
    a = ap.parse_args(argv)
    a.dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    if a.device == "cpu":
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    else:
        torch.backends.cuda.enable_cudnn_sdp(False)  # as train_compare's _nocudnn modes: no plan per shape
    print(f"{a.model} {a.dtype} {a.device} ({torch.cuda.get_device_name() if a.device == 'cuda' else 'CPU'}, "
          f"torch {torch.__version__}); seen {a.seen}, new {a.new}; ms per synchronized step (median)")
    print(f"{'mode':16s} {'repeated':>9s} {'new':>9s} {'again':>9s}")
    for mode in a.modes.split(","):
        with tc.variant(mode):
            print(run(mode, a), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
