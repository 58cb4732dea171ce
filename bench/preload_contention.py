"""What a busy Python thread beside a training step costs the step, and what the loader thread's rules save.

:mod:`compiler.codegen.preload` loads kernel variants in a background thread while the main
thread runs steps.  A load is mostly Python and holds the GIL; the main thread gives the GIL up
at every torch call and, while another thread wants it, waits up to Python's switch interval
to get it back.  This bench times a host-bound training step (a tiny HF model on the CPU, eager,
one torch thread) alone, then beside a thread doing pure-Python work in ``--chunk-ms`` pieces
(what a load is like): with Python's default switch interval, with a short one (``--switch-ms``)
while each piece runs, and with that and a rest after each piece of ``--rest`` times its length.
It prints one row per setting: median step ms, the slowdown, and pieces done per second (the
thread's progress).  The GIL is one resource: a rest spreads the thread's share over more steps
rather than removing it, so which setting a median over steps favours depends on how long the
loading lasts against the run (session 32's reading, CPU only: 5.8 ms alone; seconds per step
beside a thread that never rests, at either switch interval; 7.6 ms with a 3x rest).

Usage::

    python bench/preload_contention.py --model gpt2 --steps 30

Example::

    >>> _row("alone", 6.2, 6.2, 0)
    'alone                                  6.20 ms    1.00x         0 pieces/s'
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import statistics
import sys
import threading
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import train_compare as tc  # noqa: E402
from bench.train_profile import _step  # noqa: E402


def _row(name, ms, base, rate) -> str:
    return f"{name:36s} {ms:6.2f} ms {ms / base:7.2f}x {rate:9.0f} pieces/s"


@contextlib.contextmanager
def _switch_interval(seconds: float):
    """Python's switch interval set to ``seconds`` inside the block, then what it was."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def _piece(chunk_s: float) -> None:
    """Pure-Python work for about ``chunk_s`` seconds (hashing and arithmetic, as a cache load)."""
    end = time.perf_counter() + chunk_s
    while time.perf_counter() < end:
        s = 0
        for i in range(2000):
            s += i * i
        hashlib.sha256(b"x" * 4096).hexdigest()


def beside(steps, chunk_s: float, short: float, rest: float) -> tuple:
    """``(median step ms, pieces per second)`` with a busy thread beside ``steps()`` (three steps
    with Python's default switch interval: each may take seconds)."""
    stop, done = [False], [0]

    def busy():
        while not stop[0]:
            t0 = time.perf_counter()
            if short:
                with _switch_interval(short):
                    _piece(chunk_s)
            else:
                _piece(chunk_s)
            done[0] += 1
            if rest:
                time.sleep(rest * (time.perf_counter() - t0))

    th = threading.Thread(target=busy, daemon=True)
    th.start()
    t0 = time.perf_counter()
    ms = steps() if short else steps(3)
    elapsed = time.perf_counter() - t0
    stop[0] = True
    th.join()
    return ms, done[0] / elapsed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="gpt2")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--chunk-ms", type=float, default=2.0)
    ap.add_argument("--switch-ms", type=float, default=0.1)
    ap.add_argument("--rest", type=float, default=3.0)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    model, batch = tc.build(a.model, "cpu", 4100)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    batches = [batch(L, g) for L in (16, 25)]

    def steps(n=a.steps):
        out = []
        for i in range(n):
            t = time.perf_counter()
            _step(model, batches[i % 2], opt, "cpu", torch.bfloat16)
            out.append((time.perf_counter() - t) * 1e3)
        return statistics.median(out)

    steps()  # warm-up
    base = steps()
    print(f"{a.model} training step on the CPU (eager, 1 torch thread, torch {torch.__version__}); a busy thread "
          f"beside it in {a.chunk_ms:g} ms pieces")
    print(_row("alone", base, base, 0))
    chunk, short = a.chunk_ms / 1e3, a.switch_ms / 1e3
    for name, sw, rest in ((f"busy, switch {sys.getswitchinterval() * 1e3:g} ms, no rest", 0.0, 0.0),
                           (f"busy, switch {a.switch_ms:g} ms, no rest", short, 0.0),
                           (f"busy, switch {a.switch_ms:g} ms, rest {a.rest:g}x", short, a.rest)):
        ms, rate = beside(steps, chunk, sw, rest)
        print(_row(name, ms, base, rate), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
