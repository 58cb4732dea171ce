"""Where ``backend="symshape"``'s first call at a new size goes (issue #28: <= 50 ms after the first).

One model of ``bench/gpu_models.py`` through ``torch.compile(..., backend="symshape", dynamic=True)``
at a list of sizes, in order; per size: the first call's ms, whether dynamo compiled a graph for
it (and the backend's own seconds in it), how many finished kernel builds were still queued for
the preload thread, and how many it loaded during the call. ``--profile B,T`` prints the main
thread's cProfile of the first call at that size (its callers: source generation, loads,
in-process compiles). Each size is then called ``--repeat`` more times, as a bench's timing
rounds would, before the next size. ``--via compile`` runs ``compiler.compile`` (the case's
specs, as ``gpu_models.py``'s ``symshape`` mode) instead of the backend, whose first calls have
no dynamo recompiles in them: Gemma's intermittent 136-241 ms at (1, 4096) is one of those.

Example (CPU, tiny config)::

    python bench/backend_first_calls.py --model vit --smoke --points 2,32 1,45 --profile 1,45

The session 25 H100 run is in ``bench/results/gpu_vit_first_call_size_oblivious_h100_s25_2026-12-07.txt``.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import threading
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "bench")]

from compiler.backend import BACKEND_STATS  # noqa: E402
from compiler.codegen.preload import PRELOADS, drain, queued  # noqa: E402
from gpu_models import CASES, DTYPES  # noqa: E402


def _point(text: str) -> tuple:
    b, t = text.split(",")
    return int(b), int(t)


class CompileLog:
    """Triton's in-process compiles (its in-memory cache misses), with their specialization.

    Installs ``triton.knobs.runtime.jit_cache_hook`` (called before each compile) and
    ``jit_post_compile_hook`` (after it); ``take()`` returns and clears what was logged since:
    ``(seconds, kernel name and argument types)``, where a ``D`` on an argument's type is
    Triton's divisible-by-16 specialization -- the key to compare with what the build workers
    made ahead. A compile that found its binary in Triton's on-disk cache takes milliseconds.

    >>> log = CompileLog.__new__(CompileLog); log.rows, log.open = [(0.25, "k(x: *bf16D)")], {}
    >>> log.take(), log.rows
    ([(0.25, 'k(x: *bf16D)')], [])
    """

    def __init__(self):
        from triton import knobs
        self.rows, self.open = [], {}
        knobs.runtime.jit_cache_hook = self._before
        knobs.runtime.jit_post_compile_hook = self._after

    def _before(self, *, key, repr, compile=None, **_):  # noqa: A002 - Triton's keywords
        name = repr.split("[", 1)[0]
        spec = compile or {}
        # configs: Triton's attributes per argument (tt.divisibility 16: a pointer or size
        # known aligned); the thread: the main thread's compiles block the call, the preload
        # thread's do not.
        text = (f"{name} [{threading.current_thread().name}] signature={spec.get('signature')} "
                f"attrs={spec.get('configs')} constants={spec.get('constants')}")
        self.open[str(key)] = (time.perf_counter(), text)
        return False

    def _after(self, *, key, **_):
        t0, text = self.open.pop(str(key), (time.perf_counter(), "?"))
        self.rows.append((time.perf_counter() - t0, text))
        return False

    def take(self) -> list:
        rows, self.rows = self.rows, []
        return rows


def _compiled(case, prog, dtype, device, small, via):
    """The model through the backend (``via="backend"``) or ``compiler.compile`` (``"compile"``)."""
    if via == "backend":
        return torch.compile(type(prog)(prog.m), backend="symshape", dynamic=True)
    import compiler
    short = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32"}[dtype]
    specs = tuple(s.replace("{dt}", short) for s in case.specs)
    return compiler.compile(type(prog)(prog.m), *specs, dims=case.dims(small) if case.dims else None,
                            target="triton" if device == "cuda" else "cpp")


def run(model: str, points: list, device: str, dtype, small: bool, profile=None, repeat: int = 20,
        wait_preloads: bool = False, compile_log=None, via: str = "backend") -> list:
    """One row per point: ``{"point", "ms", "graphs", "compile_s", "queued", "loaded", "profile", "compiles"}``.

    ``compile_log`` (a :class:`CompileLog`): each row's ``compiles`` are the in-process Triton
    compiles of its first call.
    """
    case = {c.name: c for c in CASES}[model]
    torch.manual_seed(0)
    prog = case.make(small).eval().to(device, dtype)
    fn = _compiled(case, prog, dtype, device, small, via)
    g = torch.Generator().manual_seed(1)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    rows = []
    with torch.no_grad():
        for p in points:
            x = case.inputs(*p, device, dtype, g, small)
            if wait_preloads:
                drain(120)
            row = {"point": p, "queued": queued(), "profile": None}
            n0, graphs0, comp0 = PRELOADS["n"], BACKEND_STATS["graphs"], BACKEND_STATS["compile_s"]
            prof = cProfile.Profile() if p == profile else None
            if compile_log:
                compile_log.take()
            sync()
            t0 = time.perf_counter()
            if prof:
                prof.enable()
            fn(*x)
            sync()
            if prof:
                prof.disable()
            row["ms"] = (time.perf_counter() - t0) * 1e3
            row.update(loaded=PRELOADS["n"] - n0, graphs=BACKEND_STATS["graphs"] - graphs0,
                       compile_s=BACKEND_STATS["compile_s"] - comp0,
                       compiles=compile_log.take() if compile_log else [])
            if prof:
                out = io.StringIO()
                pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(30)
                pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(15)
                row["profile"] = out.getvalue()
            for _ in range(repeat):
                fn(*x)
            sync()
            rows.append(row)
    return rows


def table(rows) -> str:
    """The rows as a table.

    >>> print(table([{"point": (2, 479), "ms": 674.0, "graphs": 0, "compile_s": 0.0, "queued": 18, "loaded": 3}]))
    point           first ms  dynamo graphs  backend s  builds queued  loaded during
    (2, 479)           674.0              0       0.00             18              3
    """
    lines = [f"{'point':<14} {'first ms':>9}  {'dynamo graphs':>13}  {'backend s':>9}  {'builds queued':>13}  "
             f"{'loaded during':>13}"]
    for r in rows:
        lines.append(f"{str(r['point']):<14} {r['ms']:>9.1f}  {r['graphs']:>13}  {r['compile_s']:>9.2f}  "
                     f"{r['queued']:>13}  {r['loaded']:>13}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="vit", help="a case of bench/gpu_models.py")
    ap.add_argument("--points", nargs="+", type=_point, default=[(8, 224), (4, 320), (2, 479), (1, 640), (3, 401)],
                    help="B,T (T: the case's sequence length or image side), in call order")
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--smoke", action="store_true", help="the case's tiny config (CPU development)")
    ap.add_argument("--profile", type=_point, default=(2, 479), help="B,T whose first call is profiled")
    ap.add_argument("--repeat", type=int, default=20, help="calls at each size after its first")
    ap.add_argument("--wait-preloads", action="store_true",
                    help="let the preload thread finish every queued load before each first call")
    ap.add_argument("--via", default="backend", choices=["backend", "compile"],
                    help="backend=\"symshape\" through torch.compile, or compiler.compile")
    ap.add_argument("--log-compiles", action="store_true",
                    help="list Triton's in-process compiles in each first call, with their specialization")
    a = ap.parse_args(argv)
    log = CompileLog() if a.log_compiles else None
    rows = run(a.model, a.points, a.device, DTYPES[a.dtype], a.smoke, a.profile, a.repeat, a.wait_preloads, log,
               via=a.via)
    name = torch.cuda.get_device_name() if a.device == "cuda" else "cpu"
    how = "compiler.compile" if a.via == "compile" else "backend=\"symshape\", dynamic=True"
    print(f"{a.model} {a.dtype} on {name}, torch {torch.__version__}, {how}")
    print(table(rows))
    for r in rows:
        for sec, text in r["compiles"]:
            print(f"  {r['point']}: in-process Triton compile {sec * 1e3:7.1f} ms  {text[:900]}")
    for r in rows:
        if r["profile"]:
            print(f"\nfirst call at {r['point']}, main thread (cProfile):\n{r['profile'][:9000]}")


if __name__ == "__main__":
    main()
