"""Soak the shape server: 1,000 mixed requests, misbehaving programs included, against 127.0.0.1 only.

Starts ``symshape serve`` on a free loopback port, sends a fixed, shuffled
mix of requests from a few client threads, and checks that every answer is
JSON (a result, or an error with a message), that the server is still up at
the end, and how fast it answered.  The mix:

* cached: questions asked before (trace, flops, dinfer, classify), answered
  from the server's cache;
* uncached: new questions (a new dim range or new sizes), answered by a
  worker (the program and dinfer results are cached in the worker);
* programs that raise, call ``sys.exit``, call ``os._exit`` and loop forever
  (each stopped at the timeout its request asks for, ``--hang-timeout``),
  and malformed requests.

The reference column is the command line: ``symshape trace`` in a fresh
process, what each question costs without the server.

Usage::

    python bench/serve_soak.py [--requests 1000] [--clients 4] [--hang-timeout 2] [--seed 0]
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from cli.serve.launch import request, running_server  # noqa: E402
PROG = "tests/serve_programs.py"


def _post(url, path, body, timeout):
    return request(url, "POST", path, body, timeout=timeout)


def _mix(n: int, rng: random.Random, hang_timeout: float = 2.0):
    """``n`` (category, endpoint, body) requests; uncached ones are all distinct questions."""
    rows = {"program": f"{PROG}:rows_of_four", "inputs": ["x: f32[N]"]}
    grid = {"program": f"{PROG}:grid", "inputs": ["x: f32[H, W]"], "dims": {"H": "1..24", "W": "1..24"}}
    mlp = {"program": "examples/mlp.py:MLP", "inputs": ["x: f32[B, T, 64]"]}
    cached_pool = [
        ("trace", dict(rows, dims={"N": "1..64"})),
        ("trace", grid),
        ("flops", dict(mlp, points=[{"B": 8, "T": 1024}])),
        ("dinfer", grid),
        ("classify", dict(grid, sizes={"H": 5, "W": 6})),
        ("map", dict(grid, x="W", y="H", cells=24)),
    ]
    bad = {"raises": "raises", "sys_exit": "exits_politely", "os_exit": "exits_hard", "hang": "loops_forever"}
    counts = {"raises": 30, "sys_exit": 20, "os_exit": 20, "hang": 8, "malformed": 22}
    n_uncached = max(0, (n - sum(counts.values())) * 3 // 10)
    n_cached = n - sum(counts.values()) - n_uncached
    out = []
    for i in range(n_cached):
        ep, body = cached_pool[i % len(cached_pool)]
        out.append(("cached", ep, body))
    for i in range(n_uncached):
        k = i % 3
        if k == 0:
            out.append(("uncached", "trace", dict(rows, dims={"N": f"1..{100 + i}"})))
        elif k == 1:
            out.append(("uncached", "classify", dict(grid, sizes={"H": 1 + i % 24, "W": 1 + (i // 24) % 24})))
        else:
            out.append(("uncached", "flops", dict(mlp, points=[{"B": 1 + i, "T": 7}])))
    for cat, name in bad.items():
        for i in range(counts[cat]):
            body = {"program": f"{PROG}:{name}", "inputs": ["x: f32[N]"], "dims": {"N": f"1..{1000 + i}"}}
            if cat == "hang":
                body["timeout"] = hang_timeout  # a client that will not wait the server's full timeout
            out.append((cat, "trace", body))
    for i in range(counts["malformed"]):
        body = [{"program": 5}, {"program": "../../etc/x.py:f", "inputs": ["x: f32[N]"]},
                {"program": f"{PROG}:rows_of_four", "inputs": ["x: f99[N]"]}][i % 3]
        out.append(("malformed", "trace", body))
    cached = out[:n_cached]
    rest = out[n_cached:]
    rng.shuffle(rest)
    # The first round of each cached question is a miss; after that they hit the cache.
    warm = [("warm-up", ep, body) for ep, body in cached_pool]
    mixed = cached[len(cached_pool):] + rest
    rng.shuffle(mixed)
    return warm, mixed


def _pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def _cli_reference(reps: int = 3):
    """Seconds one ``symshape trace`` takes in a fresh process (the cost without a server)."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "cli.main", "trace", f"{PROG}:rows_of_four", "-i", "x: f32[N]"],
                       cwd=ROOT, env=env, check=True, capture_output=True, timeout=300)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=120.0, help="the server's per-request timeout (s)")
    ap.add_argument("--hang-timeout", type=float, default=2.0,
                    help="the timeout the requests naming a program that loops forever ask for (s)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--deadline", type=float, default=900.0, help="give up after this many seconds in all")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-reference", action="store_true", help="skip timing the command-line reference")
    args = ap.parse_args(argv)
    if not 100 <= args.requests <= 5000:
        ap.error("--requests must be within 100..5000")
    warm, mixed = _mix(args.requests, random.Random(args.seed), args.hang_timeout)
    t_start = time.perf_counter()
    results = []
    lock = threading.Lock()
    with running_server(ROOT, timeout=args.timeout, workers=args.workers, memory_mb=1024) as url:
        startup = time.perf_counter() - t_start
        deadline = time.monotonic() + args.deadline

        def send(item):
            cat, ep, body = item
            if time.monotonic() > deadline:
                with lock:
                    results.append((cat, ep, None, None, 0.0, "skipped: past the deadline"))
                return
            try:
                st, data, dt = _post(url, f"/api/{ep}", body, timeout=args.timeout * 4 + 60)
                problem = None
                if data is None:
                    problem = "answer is not JSON"
                elif st >= 400 and not (isinstance(data.get("error"), dict) and data["error"].get("message")):
                    problem = "error without a message"
                elif st < 400 and "result" not in data:
                    problem = "success without a result"
            except OSError as e:
                st, data, dt, problem = None, None, 0.0, f"no answer: {e}"
            with lock:
                results.append((cat, ep, st, data, dt, problem))

        for item in warm:
            send(item)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.clients) as ex:
            list(ex.map(send, mixed))
        wall = time.perf_counter() - t0
        try:
            _, health, _ = request(url, "GET", "/api/health", timeout=30)
        except OSError:
            health = None  # the server went down
        alive = bool(health and health.get("ok"))
        health = health or {}

    problems = [r for r in results if r[5]]
    by_cat = {}
    for cat, ep, st, data, dt, problem in results:
        by_cat.setdefault(cat, []).append((st, data, dt, problem))
    expected = {"cached": {200}, "uncached": {200}, "warm-up": {200}, "raises": {422}, "sys_exit": {422},
                "os_exit": {422}, "hang": {504}, "malformed": {400, 404, 422}}
    print(f"symshape serve soak: {len(results)} requests ({len(mixed)} mixed + {len(warm)} warm-up), "
          f"{args.clients} clients, {args.workers} workers, per-request timeout {args.timeout:g} s, "
          f"server start {startup:.1f} s")
    print(f"{'category':<10} {'n':>5} {'statuses':<16} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9}  cached hits")
    for cat in ("cached", "uncached", "warm-up", "raises", "sys_exit", "os_exit", "hang", "malformed"):
        rows = by_cat.get(cat, [])
        if not rows:
            continue
        lat = [r[2] * 1000 for r in rows if r[0] is not None]
        sts = sorted({r[0] for r in rows}, key=lambda s: (s is None, s))
        hits = sum(1 for r in rows if isinstance(r[1], dict) and r[1].get("cached"))
        bad_status = [s for s in sts if s not in expected[cat]]
        print(f"{cat:<10} {len(rows):>5} {','.join(map(str, sts)):<16} {_pct(lat, 50):>9.1f} {_pct(lat, 99):>9.1f} "
              f"{max(lat or [float('nan')]):>9.1f}  {hits}" + (f"  UNEXPECTED {bad_status}" if bad_status else ""))
    print(f"throughput: {len(mixed) / wall:.1f} requests/s over the mixed phase ({wall:.1f} s wall)")
    print(f"worker stats: {health.get('worker_stats')}; cache: {health.get('cache')}")
    if not args.no_reference:
        ref = _cli_reference()
        c50 = _pct([r[2] for r in by_cat.get('cached', []) if r[0]], 50)
        u50 = _pct([r[2] for r in by_cat.get('uncached', []) if r[0]], 50)
        print(f"{'question':<34} {'server':>12} {'CLI (fresh process)':>22}")
        print(f"{'asked before (cache), p50':<34} {c50 * 1000:>9.1f} ms {ref * 1000:>19.0f} ms")
        print(f"{'new question (worker), p50':<34} {u50 * 1000:>9.1f} ms {ref * 1000:>19.0f} ms")
    unexpected = [r for r in results if r[2] is not None and r[2] not in expected[r[0]]]
    ok = alive and not problems and not unexpected and len(results) == len(mixed) + len(warm)
    print(f"server {'stayed up' if alive else 'WENT DOWN'}; {len(problems)} answer(s) not JSON or missing; "
          f"{len(unexpected)} unexpected status(es) -> {'PASS' if ok else 'FAIL'}")
    for r in (problems + unexpected)[:10]:
        print(f"  {r[0]} {r[1]}: status {r[2]}: {r[5] or (r[3] or {}).get('error')}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
