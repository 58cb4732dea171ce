"""A kernel-build worker process: compiles Triton kernels into Triton's on-disk cache.

Run as a script (``python build_worker.py``) by :mod:`.build_pool`, never
imported by the program: a fresh interpreter that imports only Triton (not
torch, not ``compiler`` and its dependencies), so that it starts in a
quarter of a second.  It never touches the
GPU: a compile-only Triton driver answers the current target (sent by the
parent, which knows its GPU) and device 0, so ``JITFunction.warmup`` runs
Triton's own code path, computes the same cache key the parent will, and
writes the binary where the parent's launch finds it (with, on a Triton that
compiles one per signature, the kernel's host launcher: :func:`_build_launcher`).

Protocol (pickles over the pipes; stdout carries only the protocol, anything
printed goes to stderr):

- parent -> worker: ``("init", (backend, arch, warp_size))``, then jobs
  ``(job_id, module path, module name, function name, args, kwargs)`` where
  an argument ``("dtype", "float32")`` is a pointer to that torch dtype
  (Triton's ``MockTensor``) and anything else is passed as is;
- worker -> parent: ``("ready", pid)``, then ``(job_id, error or None, seconds)``.

Example (what the parent sends for one build)::

    >>> job = (7, "/cache/triton/tk_ab.py", "symshape_tk_ab", "k0_lks1",
    ...        [("dtype", "float32"), 3], {"grid": (1,), "BLOCK": 1024, "num_warps": 4})
    >>> job[3], job[4][1]
    ('k0_lks1', 3)
"""
from __future__ import annotations

import importlib.util
import os
import pickle
import signal
import sys
import time

# Run by path, Python puts this folder first on sys.path, where triton.py (symshape's Triton code
# generator) would shadow the real Triton.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]


class CompileOnlyDriver:
    """A Triton driver that compiles for a fixed target and launches nothing."""

    def __init__(self, target):
        self.target = target

    def get_current_target(self):
        return self.target

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def set_current_device(self, device):
        pass

    def is_active(self):
        return True


_MODULES: dict = {}


def _module(path: str, name: str):
    """The kernel module at ``path`` imported under the parent's module name (Triton's cache
    key holds the function's qualified name, so it must be the same as the parent's)."""
    mod = _MODULES.get(path)
    if mod is None:
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _MODULES[path] = mod
    return mod


class dtype:  # noqa: N801 - named as torch's: Triton's MockTensor.wrap_dtype and specialization read it
    """A torch dtype as a warm-up's pointer argument shows it to Triton (``str``: ``torch.float32``),
    without importing torch (2 s of a worker's start)."""

    __module__ = "torch"

    def __init__(self, name: str):
        self.name = name

    def __str__(self):
        return "torch." + self.name

    __repr__ = __str__


def _args(args) -> list:
    """A job's arguments: ``("dtype", name)`` a pointer to that dtype (Triton's ``MockTensor``).

    >>> [str(a.dtype) if hasattr(a, "dtype") else a for a in _args([("dtype", "float16"), 3])]
    ['torch.float16', 3]
    """
    from triton.runtime.jit import MockTensor
    return [MockTensor(dtype(a[1])) if isinstance(a, tuple) and len(a) == 2 and a[0] == "dtype" else a
            for a in args]


_TINY = '''import triton
import triton.language as tl


@triton.jit
def symshape_prewarm(x, BLOCK: tl.constexpr):
    tl.store(x + tl.arange(0, BLOCK), tl.zeros([BLOCK], dtype=tl.float32))
'''


def _prewarm() -> None:
    """Compile a tiny kernel once: a worker's first build pays for loading Triton's compiler
    (MLIR, LLVM, ptxas) — seconds — and it should not be the first real one."""
    import tempfile

    def build():
        with tempfile.TemporaryDirectory(prefix="symshape_prewarm_") as d:
            path = os.path.join(d, "symshape_prewarm.py")
            with open(path, "w") as f:
                f.write(_TINY)
            _module(path, "symshape_prewarm").symshape_prewarm.warmup(*_args([("dtype", "float32")]), grid=(1,),
                                                                       BLOCK=16)
    _attempt(build)  # only a head start: the real builds report their own errors


_LAUNCHERS: set = set()


def _build_launcher(kernel) -> None:
    """Build the host launcher of a compiled ``kernel`` into Triton's cache, once per signature.

    Triton up to 3.6 compiles a small C module per kernel signature at the kernel's first
    launch (0.3-0.4 s of the host's C compiler each, one after the other in the launching
    thread); built here, in parallel with the other workers, the parent's first launch loads it.
    Later Triton (one generic launcher, no ``make_launcher``) has nothing to build.  Only a
    head start: a failure (no ``libcuda`` to link against) leaves the build to the launch."""
    try:
        from triton.backends.nvidia import driver as nvidia
    except ImportError:
        return
    src, meta = getattr(kernel, "src", None), getattr(kernel, "metadata", None)
    if not hasattr(nvidia, "make_launcher") or src is None or meta is None:
        return
    # What the C source depends on: the signature and which arguments are constants (names,
    # not values: a BLOCK of 256 or 1024 is the same launcher).
    key = (repr(getattr(src, "signature", None)), repr(sorted(map(str, getattr(src, "constants", None) or ()))))
    if key in _LAUNCHERS:
        return
    _LAUNCHERS.add(key)
    _attempt(lambda: nvidia.CudaLauncher(src, meta))


def _attempt(fn):
    """``fn()``'s error as text, or None: a build's failure is the parent's to report, never
    the end of the worker."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - any error Triton raises, reported to the parent
        return f"{type(e).__name__}: {e}"[:2000]
    return None


def main() -> None:
    # Ctrl-C (sent to the whole process group) is the parent's to handle: a worker ended by it
    # would fail its build for nothing.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Background builds yield the cores to the parent (dynamo, AOTAutograd, its own compiles):
    # on the H200 host, with 16 workers at normal priority, GPT-2's first training step spent about
    # 17.4 s outside symshape's graphs and waits against 13.3 s with the thread path (inferred from
    # train_compare's split).  While the parent waits for a build it is idle: nothing is lost.
    # The lowest priority: builds of classes no call needs yet go on while the program runs its
    # first steps (ViT's 250 variants, seconds of work on 16 cores), and a host-bound training
    # step sharing a core with a worker should lose next to nothing to it.
    try:
        os.nice(19)
    except OSError:
        pass
    proto_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a print anywhere (Triton's, a kernel module's) must not corrupt the protocol
    proto_in = sys.stdin.buffer
    first, target = pickle.load(proto_in)
    if first != "init":
        raise SystemExit(f"build worker: expected init, got {first!r}")
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver
    driver.set_active(CompileOnlyDriver(GPUTarget(*target)))
    _prewarm()
    pickle.dump(("ready", os.getpid()), proto_out)
    proto_out.flush()
    while True:
        try:
            job = pickle.load(proto_in)
        except EOFError:  # the parent exited or closed the pool
            return
        job_id, path, modname, fname, args, kwargs = job
        t0 = time.perf_counter()
        built = []
        err = _attempt(lambda: built.append(getattr(_module(path, modname), fname).warmup(*_args(args), **kwargs)))
        if built:
            _build_launcher(built[0])
        pickle.dump((job_id, err, time.perf_counter() - t0), proto_out)
        proto_out.flush()


if __name__ == "__main__":
    main()
