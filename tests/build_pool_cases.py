"""Scenarios for tests/test_build_pool.py, each run in a fresh process (``python -m
tests.build_pool_cases NAME``) with its own Triton cache: Triton chooses the interpreter
when it is imported, and a process's exit is part of what is tested.

Kernels are compiled for an H100 (``GPUTarget("cuda", 90, 32)``) with Triton's bundled
ptxas: no GPU is needed.  The parent's own loads go through the same compile-only driver the
workers use.
"""
import json
import os
import sys
import time

TARGET = ("cuda", 90, 32)

KERNEL = '''import triton
import triton.language as tl


@triton.jit(do_not_specialize=["n"])
def add(x, y, o, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(o + i, tl.load(x + i, mask=m) * 2 + tl.load(y + i, mask=m), mask=m)
'''


def _cache_files() -> int:
    return sum(len(fs) for _, _, fs in os.walk(os.environ["TRITON_CACHE_DIR"]))


def _preloads_done():
    import time
    from compiler.codegen import preload
    # A build's done-callback queues its load just after the pool sees the build finish.
    time.sleep(0.5)
    assert preload.drain(120), "preloads still running after 120 s"


def _compile_only():
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver
    from compiler.codegen.build_worker import CompileOnlyDriver
    driver.set_active(CompileOnlyDriver(GPUTarget(*TARGET)))


def _kernel_file() -> str:
    path = os.path.join(os.environ["TRITON_CACHE_DIR"], "..", "tk_add.py")
    with open(path, "w") as f:
        f.write(KERNEL)
    return os.path.abspath(path)


def _payload(path, block):
    return (path, "symshape_tk_add", "add", [("dtype", "float32")] * 3 + [3],
            {"grid": (1,), "BLOCK": block, "num_warps": 4})


def program_builds():
    """A program's variants built in workers, the current sizes' first; the parent then
    loads every one from the cache (no compile of its own) and a launch's plan waits."""
    import torch
    import compiler
    from compiler.codegen import build_pool, triton_build

    def prog(x, y):
        return x * 2 + y

    f = compiler.compile(prog, "x: f32[B, N]", "y: f32[N]", target="triton")
    launchers = [ln for _, ln in f.variants[0].launchers.values()]
    (ln,) = launchers
    current = (3, 32)  # B=3, N=32: N divisible by 16
    pool = build_pool.BuildPool(TARGET, workers=2)
    n = triton_build.submit_builds(pool, launchers, current)
    first = ln.class_at(current)
    got = {"submitted": n, "classes": len(ln.classes()), "aligned": ln.aligned,
           # The workers are still starting (they import Triton): the queue is as submitted.
           "first_is_queued_first": bool(pool._queue) and pool._queue[0] is pool._jobs[ln.pending[first][0][1]]}
    pool.drain()
    _preloads_done()  # the preload thread's loads (real driver on CUDA) are not the parent compiling
    got["failed"] = build_pool.STATS["failed"]
    got["errors"] = build_pool.STATS["errors"]
    before = _cache_files()
    _compile_only()
    plan = ln.plan(current)  # waits for the class of these sizes (already built) and forgets it
    got["pending_after_plan"] = [str(k) for k in ln.pending]
    got["forgot_current"] = first not in ln.pending
    loaded = []
    for sc, block in ln.classes():
        k = ln.kernel_for(sc).warmup(*ln.dtypes, *[3] * len(ln.names), grid=(1,), BLOCK=block, num_warps=4)
        loaded.append("cubin" in k.asm)
    got["loaded_cubins"] = loaded
    got["new_cache_files"] = _cache_files() - before
    got["plan_block"] = plan[3]
    pool.close()
    print("RESULT " + json.dumps(got))


def split_builds():
    """What the current sizes need is built here (in threads) before returning; the rest in the
    workers, which the parent then loads without compiling."""
    import compiler
    from compiler.codegen import build_pool, triton_build

    def prog(x, y):
        return torch_softmax(x) + y

    f = compiler.compile(prog, "x: f32[B, N]", "y: f32[N]", target="triton")
    launchers = [ln for _, ln in f.variants[0].launchers.values()]
    current = (3, 32)
    _compile_only()
    pool = build_pool.BuildPool(TARGET, workers=2)
    n = triton_build.build_split(pool, launchers, current)
    now = [(ln, ln.class_at(current)) for ln in launchers]
    got = {"n": n, "classes": sum(len(ln.classes()) for ln in launchers), "kernels": len(launchers),
           "now_not_pending": all(k not in ln.pending for ln, k in now),
           "later_pending": sum(len(ln.pending) for ln in launchers),
           "now_in_parent": all(bool(ln.kernel_for(k[0]).device_caches[0][0]) for ln, k in now)}
    pool.drain()
    _preloads_done()  # the preload thread's loads (real driver on CUDA) are not the parent compiling
    before = _cache_files()
    for ln in launchers:
        for key in list(ln.pending):
            triton_build.wait_built(ln.pending, key)
            ln.kernel_for(key[0]).warmup(*ln.dtypes, *[3] * len(ln.names), grid=(1,), BLOCK=key[1],
                                         num_warps=4 if key[1] <= 1024 else 8 if key[1] <= 4096 else 16)
    got["new_cache_files"] = _cache_files() - before
    got["errors"] = triton_build.WARM_ERRORS + build_pool.STATS["errors"]
    pool.close()
    print("RESULT " + json.dumps(got))


def stand_ins():
    """One worker, a program whose softmax row is symbolic: after the current sizes' variant, the
    general one (looped, nothing assumed aligned) is queued next; once it is built, a plan at sizes
    whose own variant is still queued runs it and moves its own build to the front; once that is
    built, the plan runs its own."""
    import compiler
    from compiler.codegen import build_pool, stand_ins, triton_build

    def prog(x):
        return torch_softmax(x * 2) + 1

    f = compiler.compile(prog, "x: f32[B, N]", target="triton")
    (ln,) = [ln for _, ln in f.variants[0].launchers.values()]
    current = (3, 32)
    pool = build_pool.BuildPool(TARGET, workers=1)
    triton_build.submit_builds(pool, [ln], current)
    keys = ln.classes()
    general = stand_ins.general_keys(keys, tiled=False)
    queue = list(pool._queue)  # the worker is still starting: the queue is as submitted
    pos = {k: queue.index(pool._jobs[ln.pending[k][0][1]]) for k in keys}
    got = {"general": [str(k) for k in general], "classes": len(keys),
           "general_right_after_current": sorted(pos[k] for k in general) == list(range(1, 1 + len(general)))
           and pos[ln.class_at(current)] == 0}
    for k in [ln.class_at(current), *general]:
        pool.wait(ln.pending[k][0][1], ln.pending[k][0][2])
    _compile_only()
    later = (2, 8192)  # the last class queued: a persistent row of 8192, N aligned
    own = ln.class_at(later)
    (fn, grid, args, opts), is_own = ln._plan(later)
    job = ln.pending[own][0][1]
    got["own"] = is_own
    got["stood_in"] = [str((sc, opts["BLOCK"])) for sc, k in ln.variants.items() if k is fn and sc != own]
    entry = pool._jobs[job]
    got["own_promoted"] = entry[2] is not build_pool.JobState.QUEUED or pool._queue[0] is entry
    pool.drain()
    (fn, grid, args, opts), is_own = ln._plan(later)
    got["own_after_drain"] = is_own and fn is ln.variants[own[0]] and opts["BLOCK"] == own[1]
    got["errors"] = triton_build.WARM_ERRORS + build_pool.STATS["errors"]
    pool.close()
    print("RESULT " + json.dumps(got))


def preloads():
    """Two workers build every class of a program; the preload thread loads each one as its build
    finishes, from the workers' cache entries (the parent compiles nothing), before any launch:
    every class's JIT function holds its kernel, and a launch plan then finds it there."""
    import compiler
    from compiler.codegen import build_pool, preload, triton_build

    def prog(x, y):
        return torch_softmax(x * 2) + y

    f = compiler.compile(prog, "x: f32[B, N]", "y: f32[N]", target="triton")
    (ln,) = [ln for _, ln in f.variants[0].launchers.values()]
    _compile_only()
    pool = build_pool.BuildPool(TARGET, workers=2)
    n = triton_build.submit_builds(pool, [ln], (3, 32))
    pool.drain()
    drained = preload.drain(timeout=120)
    keys = ln.classes()
    loaded = [bool(ln.variants.get(sc) is not None and ln.variants[sc].device_caches[0][0]) for sc, _ in keys]
    got = {"submitted": n, "classes": len(keys), "drained": drained, "loaded": loaded,
           "preloads": preload.PRELOADS["n"], "preload_errors": preload.PRELOADS["errors"],
           "errors": triton_build.WARM_ERRORS + build_pool.STATS["errors"]}
    pool.close()
    print("RESULT " + json.dumps(got))


def branch_variant_behind():
    """A program that branches on ``B != 1``: compile() traces the B = 1 variant ahead of any call,
    and its builds queue behind the first variant's, none of them first.  One worker, ready (a
    CUDA machine's state when the backend started the pool ahead); compile-only builds, the
    warm-up path on as on CUDA."""
    import compiler
    from compiler.codegen import build_pool, triton_build
    _compile_only()
    triton_build._enabled = lambda: True  # what a CUDA machine answers; the builds below are real
    pool = build_pool.pool_for(TARGET)
    deadline = time.monotonic() + 120
    while pool.ready_workers() < len(pool.workers) and time.monotonic() < deadline:
        time.sleep(0.05)

    def prog(x):
        y = torch_softmax(x * 2)
        if x.shape[0] != 1:
            return y + 1
        return y - 1

    f = compiler.compile(prog, "x: f32[B, N]", target="triton")
    with pool._lock:
        queue = list(pool._queue)
    where = {id(e): i for i, e in enumerate(queue)}

    def positions(v):
        return [where[id(pool._jobs[job])] for _, ln in v.launchers.values() for builds in ln.pending.values()
                for _, job, _ in builds if id(pool._jobs[job]) in where]
    first, ahead = positions(f.variants[0]), positions(f.variants[1]) if len(f.variants) > 1 else []
    got = {"variants": len(f.variants), "workers": len(pool.workers), "first_queued": len(first),
           "ahead_queued": len(ahead), "behind": bool(first) and bool(ahead) and max(first) < min(ahead),
           "errors": triton_build.WARM_ERRORS + build_pool.STATS["errors"]}
    pool.close()
    print("RESULT " + json.dumps(got))


def tiled_builds():
    """Every class of every kernel, tiled ones (a column sum: a kernel and, split, its partials
    kernel) included, built by the workers; the parent's warm-ups then find every binary."""
    import compiler
    from compiler.codegen import build_pool, triton_build

    def prog(x, y):
        return x.sum(0) + y, torch_softmax(x)

    f = compiler.compile(prog, "x: f32[B, N]", "y: f32[N]", target="triton")
    launchers = [ln for _, ln in f.variants[0].launchers.values()]
    current = (3, 32)
    _compile_only()
    pool = build_pool.BuildPool(TARGET, workers=2)
    while pool.ready_workers() < 2:
        time.sleep(0.05)
    n = triton_build.submit_builds(pool, launchers, current)
    got = {"n": n, "classes": sum(len(ln.classes()) for ln in launchers),
           "tiled": sum(ln.split for ln in launchers),
           "split_jobs": sum(len(v) == 2 for ln in launchers for v in ln.pending.values())}
    pool.drain()
    _preloads_done()  # the preload thread's loads (real driver on CUDA) are not the parent compiling
    got["failed"] = build_pool.STATS["failed"]
    before = _cache_files()
    for ln in launchers:
        for key in list(ln.pending):
            triton_build.wait_built(ln.pending, key)
            for job in ln.warm_jobs([key]):
                job()
    got["new_cache_files"] = _cache_files() - before
    got["errors"] = triton_build.WARM_ERRORS + build_pool.STATS["errors"]
    got["waits"] = dict(triton_build.WAITS)
    pool.close()
    print("RESULT " + json.dumps(got))


def torch_softmax(x):
    import torch
    return torch.softmax(x, -1)


def urgent_first():
    """One worker: four jobs queued, then an urgent one; it runs right after the job already
    started."""
    from compiler.codegen import build_pool
    path = _kernel_file()
    pool = build_pool.BuildPool(TARGET, workers=1)
    order = []
    futs = []
    for b in (128, 256, 512, 1024):
        futs.append(pool.submit(("add", b), _payload(path, b)))
        futs[-1].add_done_callback(lambda _, b=b: order.append(b))
    while not any(w.job is not None for w in pool.workers):  # the first job has started
        time.sleep(0.01)
    urgent = pool.submit(("add", 64), _payload(path, 64), urgent=True)
    urgent.add_done_callback(lambda _: order.append(64))
    again = pool.submit(("add", 64), _payload(path, 64))
    pool.drain()
    print("RESULT " + json.dumps({"order": order, "same_future": again is urgent,
                                  "errors": [str(f.exception()) for f in futs + [urgent] if f.exception()]}))


def exit_while_building():
    """Exit with builds queued and running: the process ends cleanly and its workers with it."""
    from compiler.codegen import build_pool
    path = _kernel_file()
    pool = build_pool.pool_for(TARGET)
    for b in (16, 32, 64, 128, 256, 512, 1024, 2048):
        pool.submit(("add", b), _payload(path, b))
    while not any(w.job is not None for w in pool.workers):
        time.sleep(0.01)
    print("RESULT " + json.dumps({"pids": [w.proc.pid for w in pool.workers]}), flush=True)
    sys.exit(0)


def take_back():
    """One worker: a queued job is taken back (its future says so); the running one is not."""
    from compiler.codegen import build_pool
    path = _kernel_file()
    pool = build_pool.BuildPool(TARGET, workers=1)
    futs = {b: pool.submit(("add", b), _payload(path, b)) for b in (128, 256, 512, 1024)}
    while not any(w.job is not None for w in pool.workers):
        time.sleep(0.01)
    running = next(b for b in futs if pool._jobs[("add", b)][2] is build_pool.JobState.RUNNING)
    taken = pool.take(("add", 512))
    got = {"taken": taken, "taken_running": pool.take(("add", running)), "queued_after": len(pool._queue),
           "error": str(futs[512].exception())}
    pool.drain()
    got["others_ok"] = all(f.exception() is None for b, f in futs.items() if b != 512)
    pool.close()
    print("RESULT " + json.dumps(got))


def idle_pool_ends():
    """A pool with nothing to do for its idle time ends its workers; a queued job's waiter is
    answered when a pool closes; the next pool_for starts a new pool."""
    from compiler.codegen import build_pool
    path = _kernel_file()
    pool = build_pool.BuildPool(TARGET, workers=1, idle_s=1.0)
    pids = [w.proc.pid for w in pool.workers]
    first = pool.submit(("add", 128), _payload(path, 128))
    first.exception()
    deadline = time.monotonic() + 30
    while pool.broken is None and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    gone = [not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z" for pid in pids]
    other = build_pool.BuildPool(TARGET, workers=1, idle_s=0)
    queued = [other.submit(("add", b), _payload(path, b)) for b in (256, 512, 1024)]
    other.close()
    answered = [f.done() for f in queued]
    print("RESULT " + json.dumps({"broken": pool.broken, "first_ok": first.exception() is None, "gone": gone,
                                  "answered": answered}))


def worker_dies():
    """A worker killed mid-build fails its job (the waiter gets the reason, never hangs), and
    the last worker's death fails the jobs still queued."""
    from compiler.codegen import build_pool
    path = _kernel_file()
    pool = build_pool.BuildPool(TARGET, workers=1)
    futs = [pool.submit(("add", b), _payload(path, b)) for b in (128, 256, 512)]
    while not any(w.job is not None for w in pool.workers):
        time.sleep(0.01)
    pool.workers[0].proc.kill()
    errs = [pool.wait(("add", b), f) for b, f in zip((128, 256, 512), futs)]
    late = pool.submit(("add", 1024), _payload(path, 1024))
    print("RESULT " + json.dumps({"errors": errs, "broken": pool.broken, "late": str(late.exception())}))


if __name__ == "__main__":
    globals()[sys.argv[1]]()
