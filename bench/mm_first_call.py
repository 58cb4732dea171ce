"""Host time of a matmul at a row count never seen before, against a row count repeated.

A training run with a new sequence length at every step calls ``torch.mm`` /
``torch.addmm`` at new row counts ``M = batch * T`` every step.  This bench, run
in a fresh process, times the host side of plain eager calls (what each call
costs before it returns, the device synchronized before it) in GPT-2's shapes
(``d = 768``, ``f = 3072``, vocabulary 8192): the forward ``x @ W (+ b)`` in
Conv1D's layout and in ``F.linear``'s (``x @ W^T``), the backward's
``dy @ W^T`` (input gradient) and ``x^T @ dy`` (weight gradient, the sum over
``M``), the LM head's forward and weight gradient.  Per (dtype, BLAS library,
output allocated or ``out=``, form): median host us of the first call at each of
``--new`` row counts never seen, of the second call at the same row count, and
CUDA segments allocated (``cudaMalloc``) during the first calls.

With ``--buckets R``, row counts are rounded up to a multiple of ``R`` before the
call (the rows a padded matmul would see), so a new length often meets a shape
seen before.

Usage::

    python bench/mm_first_call.py                    # CUDA only
    python bench/mm_first_call.py --dtypes bf16 --libs cublas,cublaslt

Example::

    >>> [f.name for f in FORMS][:2]
    ['fwd_addmm_conv1d', 'fwd_linear']
    >>> fresh_rows(3, seed=0, used=set())
    [7424, 3664, 6720]
"""
from __future__ import annotations

import argparse
import random
import statistics
import time
from dataclasses import dataclass

import torch

D, F, V = 768, 3072, 8192


@dataclass(frozen=True, kw_only=True)
class Form:
    """One matmul form: its name and how to call it on row count ``m`` (buffers from ``make``)."""

    name: str
    call: object  # (bufs, m, out) -> tensor


def _fwd_conv1d(b, m, out):
    return torch.addmm(b["bias_f"], b["x"][:m], b["w_df"], out=None if out is None else out[:m, :F])


def _fwd_linear(b, m, out):
    return torch.nn.functional.linear(b["x"][:m], b["w_fd"], b["bias_f"])


def _dgrad(b, m, out):
    return torch.mm(b["dy"][:m], b["w_df"].t(), out=None if out is None else out[:m, :D])


def _wgrad(b, m, out):
    return torch.mm(b["x"][:m].t(), b["dy"][:m], out=None if out is None else b["dw"])


def _head(b, m, out):
    return torch.mm(b["x"][:m], b["emb"].t(), out=None if out is None else out[:m, :V])


def _head_wgrad(b, m, out):
    return torch.mm(b["dlog"][:m].t(), b["x"][:m], out=None if out is None else b["demb"])


FORMS = [Form(name="fwd_addmm_conv1d", call=_fwd_conv1d), Form(name="fwd_linear", call=_fwd_linear),
         Form(name="dgrad_mm", call=_dgrad), Form(name="wgrad_mm_sumM", call=_wgrad),
         Form(name="head_mm", call=_head), Form(name="head_wgrad_sumM", call=_head_wgrad)]


def fresh_rows(n, *, seed, used: set, batch=8, lo=64, hi=1024, bucket=1) -> list:
    """``n`` row counts ``batch * T`` (``T`` in ``lo..hi``, rounded up to ``bucket``) not in ``used`` (updated)."""
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        m = -(-batch * rng.randint(lo, hi) // bucket) * bucket
        if m not in used:
            used.add(m)
            out.append(m)
    return out


def _bufs(dtype, mmax):
    g = torch.Generator(device="cuda").manual_seed(0)

    def r(*s):
        return torch.randn(*s, device="cuda", dtype=dtype, generator=g)
    return dict(x=r(mmax, D), dy=r(mmax, F), dlog=r(mmax, V), w_df=r(D, F), w_fd=r(F, D), bias_f=r(F),
                emb=r(V, D), dw=torch.empty(D, F, device="cuda", dtype=dtype),
                demb=torch.empty(V, D, device="cuda", dtype=dtype))


def _host_us(fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    dt = time.perf_counter() - t
    torch.cuda.synchronize()
    return dt * 1e6


def measure(form, bufs, out, rows) -> dict:
    """Median host us of the first and the second call at each row count of ``rows``, and
    the CUDA segments allocated over the first calls."""
    first, second = [], []
    seg0 = torch.cuda.memory_stats().get("num_device_alloc", 0)
    for m in rows:
        first.append(_host_us(lambda: form.call(bufs, m, out)))
        second.append(_host_us(lambda: form.call(bufs, m, out)))
    segs = torch.cuda.memory_stats().get("num_device_alloc", 0) - seg0
    return dict(first=statistics.median(first), second=statistics.median(second), first_max=max(first), segs=segs)


def sequence(dtype, forms, *, groups=3, per=12, bucket=1, seed=100) -> list:
    """A training run's view: per form, ``groups * per`` calls at row counts ``8 * T`` (``T``
    drawn in 64..1024, rounded up to ``bucket`` rows; a row count may repeat, as lengths do),
    one call each; the median host us of each group in order (a cost that decays as kernels
    and shapes are met, or one paid at every new shape)."""
    mmax = 8 * 1024 + 1024
    bufs = _bufs(dtype, mmax)
    rng = random.Random(seed)
    out = []
    for f in forms:
        f.call(bufs, 8 * 1100, None)
        times = []
        for _ in range(groups * per):
            m = -(-8 * rng.randint(64, 1024) // bucket) * bucket
            times.append(_host_us(lambda: f.call(bufs, m, None)))
        out.append((f.name, [statistics.median(times[g * per:(g + 1) * per]) for g in range(groups)]))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtypes", default="bf16,fp32")
    ap.add_argument("--libs", default="cublas,cublaslt")
    ap.add_argument("--new", type=int, default=12, help="new row counts per (config, form)")
    ap.add_argument("--buckets", type=int, default=1)
    ap.add_argument("--sequence", action="store_true", help="bf16 cuBLAS: group medians of one call per drawn "
                    "row count (see sequence), unrounded and rounded up to --buckets")
    a = ap.parse_args(argv)
    if a.sequence:
        forms = [f for f in FORMS if f.name in ("fwd_addmm_conv1d", "fwd_linear", "dgrad_mm", "head_mm", "wgrad_mm_sumM")]
        for k, bucket in enumerate(sorted({1, a.buckets})):
            for name, meds in sequence(torch.bfloat16, forms, bucket=bucket, seed=100 + k):
                print(f"sequence bf16 rows rounded to {bucket:<5} {name:<18} group medians us "
                      + " ".join(f"{x:8.1f}" for x in meds), flush=True)
        return
    dtypes = {"bf16": torch.bfloat16, "fp32": torch.float32}
    mmax = 8 * 1024 + 1024
    used: set = set()
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} cuda {torch.version.cuda} "
          f"host us per call (device synchronized before), {a.new} new row counts M=8*T, T in 64..1024"
          + (f", rounded up to {a.buckets}" if a.buckets > 1 else ""))
    # Warm the process at one unrelated shape: cuBLAS handle, workspace, module loads.
    print(f"{'dtype':<6}{'lib':<10}{'out':<7}{'form':<18}{'first us':>10}{'second us':>11}{'first max':>11}"
          f"{'segs':>6}")
    seed = 0
    for dt in a.dtypes.split(","):
        out = torch.empty(mmax, V, device="cuda", dtype=dtypes[dt])
        bufs = _bufs(dtypes[dt], mmax)
        for lib in a.libs.split(","):
            try:
                torch.backends.cuda.preferred_blas_library(lib)
            except (RuntimeError, AttributeError) as e:
                print(f"{dt:<6}{lib:<10} not available: {e}")
                continue
            for f in FORMS:  # warm every form at one row count outside the draws
                f.call(bufs, 8 * 1100, None)
                f.call(bufs, 8 * 1100, out)
            for use_out in (False, True):
                for f in FORMS:
                    if use_out and f.name == "fwd_linear":
                        continue
                    seed += 1
                    rows = fresh_rows(a.new, seed=seed, used=used, bucket=a.buckets)
                    r = measure(f, bufs, out if use_out else None, rows)
                    print(f"{dt:<6}{lib:<10}{'out=' if use_out else 'alloc':<7}{f.name:<18}{r['first']:>10.1f}"
                          f"{r['second']:>11.1f}{r['first_max']:>11.1f}{r['segs']:>6}", flush=True)
        torch.backends.cuda.preferred_blas_library("cublas")
        del out, bufs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
