"""The Triton path: kernels equal eager at several sizes with one variant.

Without CUDA the cases run on CPU under TRITON_INTERPRET=1 in one subprocess
(the interpreter is chosen when triton is imported); with CUDA in-process.
Sizes are small: the interpreter is slow.
"""
import os

import pytest
import torch

from tests import interpreted
from tests import compiler_triton_cases as cases

pytestmark = pytest.mark.triton
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def results():
    if torch.cuda.is_available():
        return cases.run_all()
    return interpreted.script_results(os.path.join(interpreted.ROOT, "tests", "compiler_triton_cases.py"))


@pytest.mark.parametrize("case", cases.CASES)
def test_triton_case(results, case):
    assert results[case] == "ok", results[case]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="direct launches need CUDA (the interpreter launches generically)")
def test_direct_launches_go_through_torchs_static_launcher():
    """A bound launch of a kernel torch's static CUDA launcher takes goes through it, at every
    size (1, primes, a size past one block), and the values equal eager's."""
    import compiler
    from compiler.codegen import triton_launch

    def prog(x, y):
        return torch.softmax(x.float() * 2, -1).to(x.dtype) + y.sum(-1, keepdim=True)
    before = set(triton_launch._SHARED.keys())
    f = compiler.compile(prog, "x: f16[N, 64]", "y: f16[N, 64]", target="triton")
    for n in (5, 1, 7, 33, 1031):
        x, y = torch.randn(n, 64, device="cuda", dtype=torch.float16), torch.randn(n, 64, device="cuda",
                                                                                   dtype=torch.float16)
        for _ in range(2):  # the second call launches bound
            torch.testing.assert_close(f(x, y), prog(x, y), atol=2e-3, rtol=2e-3)
    statics = [d[5] for fn, parts in triton_launch._SHARED.items() if fn not in before
               for d in parts.values() if d is not None]
    assert statics and all(s is not None for s in statics), statics


@pytest.mark.skipif(not torch.cuda.is_available(), reason="direct launches need CUDA (the interpreter launches generically)")
def test_a_new_size_launches_direct_through_the_shared_kernel():
    """Sizes are not specialized: after one size, every kernel launch at a new size goes
    straight to the compiled kernel (no generic JIT launch), and the values stay right."""
    import compiler
    from compiler.codegen import triton_launch
    f = compiler.compile(lambda x: torch.softmax(x * 2, -1) + 1, "x: f32[N, 64]", target="triton")
    x = torch.randn(5, 64, device="cuda")
    torch.testing.assert_close(f(x), torch.softmax(x * 2, -1) + 1)
    fns = list(triton_launch._SHARED.keys())
    assert fns, "no compiled kernel was shared after the first size"
    generic = []
    for fn in fns:
        run = fn.run

        def counted(*a, _run=run, **kw):
            generic.append(1)
            return _run(*a, **kw)
        fn.run = counted
    try:
        for n in (6, 7, 33):
            x = torch.randn(n, 64, device="cuda")
            torch.testing.assert_close(f(x), torch.softmax(x * 2, -1) + 1)
    finally:
        for fn in fns:
            del fn.run
    assert not generic, f"{len(generic)} generic launches at new sizes"


def test_a_shared_kernel_binary_is_keyed_by_its_buffers_dtypes(monkeypatch):
    """One kernel source serves float16 and bfloat16 buffers (a load's type is its pointer's) and
    Triton compiles a binary for each: a binding of the source for bfloat16 buffers never launches
    the float16 binary another binding shared (it read every value wrong, a CUDA graph's replays
    of the column-reduction case on an H100).  The JIT function stands in for Triton's, whose
    direct launch needs CUDA; the real case is the CUDA test below."""
    from compiler.codegen import triton_launch

    launched = []

    class Kernel:
        def __init__(self, dtype):
            self.function, self.packed_metadata = f"binary for {dtype}", None

        def run(self, *a):
            launched.append(("direct", a[4]))

    class Jit:
        def run(self, *tensors_args, grid, warmup, **opts):
            launched.append(("generic", tensors_args[0].dtype))
            return Kernel(tensors_args[0].dtype)

    class Runtime:
        launch_enter_hook = launch_exit_hook = None

    monkeypatch.setattr(triton_launch, "_RUNTIME", Runtime)
    monkeypatch.setattr(triton_launch, "_get_device", lambda: 0)
    monkeypatch.setattr(triton_launch, "_get_stream", lambda dev: 0)
    monkeypatch.setattr(triton_launch, "_static_class", lambda: None)
    fn = Jit()
    half, bf16 = torch.zeros(4, dtype=torch.float16), torch.zeros(4, dtype=torch.bfloat16)
    a = triton_launch.bind_launch(fn, (1,), [4], {"BLOCK": 16, "num_warps": 4})
    a([half]), a([half])
    b = triton_launch.bind_launch(fn, (1,), [4], {"BLOCK": 16, "num_warps": 4})  # another program's binding
    b([bf16]), b([bf16])
    c = triton_launch.bind_launch(fn, (2,), [9], {"BLOCK": 16, "num_warps": 4})  # a new size, float16 again
    c([half])
    assert launched == [("generic", torch.float16), ("direct", "binary for torch.float16"),
                        ("generic", torch.bfloat16), ("direct", "binary for torch.bfloat16"),
                        ("direct", "binary for torch.float16")], launched


@pytest.mark.skipif(not torch.cuda.is_available(), reason="direct launches need CUDA (the interpreter launches generically)")
def test_float16_and_bfloat16_programs_of_one_kernel_source_each_compute_right():
    import compiler
    for spec, dt in (("f16", torch.float16), ("bf16", torch.bfloat16), ("f16", torch.float16)):
        for graphs in (False, True):
            f = compiler.compile(lambda x: x.float(), f"x: {spec}[N]", target="triton", cuda_graphs=graphs)
            for n in (100, 100, 37, 37, 100):
                x = torch.randn(n, device="cuda").to(dt)
                assert torch.equal(f(x), x.float()), (spec, graphs, n)


def test_the_static_launcher_is_taken_only_where_it_can_launch_the_kernel(monkeypatch):
    """torch's static launcher takes a kernel it parses with the call's argument count (scratch
    arguments added); one it refuses (hooks, scratch memory, clusters) or another argument count
    keeps Triton's launcher, and ``SYMSHAPE_STATIC_LAUNCH=0`` keeps it everywhere."""
    from compiler.codegen import triton_launch

    calls = []

    class Static:
        """torch's StaticallyLaunchedCudaKernel, as far as the bound launch reads it."""

        def __init__(self, kernel):
            if kernel.refuse:
                raise NotImplementedError("We don't support launch enter or launch exit hooks")
            self.arg_tys, self.has_global_scratch, self.has_profile_scratch = "OOi", True, False
            self.num_warps, self.shared = 4, 0

            class C:
                @staticmethod
                def _launch_kernel(*a):
                    calls.append(a)
            self.C_impl = C

    class Kernel:
        def __init__(self, refuse=False):
            self.refuse, self.function = refuse, 1234

    monkeypatch.setattr(triton_launch, "_static_class", lambda: Static)
    launch, function, warps, shared, tys, scratch = triton_launch._static_parts(Kernel(), 3)
    assert (function, warps, shared, tys, scratch) == (1234, 4, 0, "OOiO", (None,))
    launch(function, 2, 1, 1, warps, shared, tys, ("x", "y", 7, *scratch), 0)
    assert calls == [(1234, 2, 1, 1, 4, 0, "OOiO", ("x", "y", 7, None), 0)]
    assert triton_launch._static_parts(Kernel(refuse=True), 3) is None
    assert triton_launch._static_parts(Kernel(), 4) is None  # another argument count: Triton's launcher
    monkeypatch.undo()  # the real _static_class, which reads the switch
    monkeypatch.setenv("SYMSHAPE_STATIC_LAUNCH", "0")
    assert triton_launch._static_class() is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="host launchers are built for CUDA kernels only")
def test_host_launchers_are_built_ahead_so_the_first_call_compiles_no_c(tmp_path, monkeypatch):
    """Triton compiles a C launcher per kernel signature at the kernel's first launch (a third
    of a second each, one after another); the compile builds them ahead in its build threads,
    so the launches of the first call, in a Triton cache nothing has used yet, run the host's C
    compiler not once."""
    import threading

    import triton.runtime.build as tbuild

    import compiler
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))

    def prog(x, y, w):  # three signatures: a pointwise kernel, a row reduction, a column sum
        return (x * y).sum(-1), torch.softmax(x + w, -1), (x * w).sum(0)
    f = compiler.compile(prog, "x: f32[N, 48]", "y: f32[N, 48]", "w: f32[48]", target="triton")
    builds = []
    real = tbuild._build

    def build(*a, **kw):
        if threading.current_thread() is threading.main_thread():  # a launch's, not the build threads'
            builds.append(a[0])
        return real(*a, **kw)
    monkeypatch.setattr(tbuild, "_build", build)
    x, y, w = (torch.randn(37, 48, device="cuda"), torch.randn(37, 48, device="cuda"), torch.randn(48, device="cuda"))
    for o, r in zip(f(x, y, w), prog(x, y, w)):
        torch.testing.assert_close(o, r)
    assert builds == [], builds


@pytest.mark.skipif(not torch.cuda.is_available(), reason="cuDNN's attention runs on CUDA only")
def test_cudnn_attention_only_at_a_shape_met_twice_before(monkeypatch):
    """cuDNN plans its attention per shape (milliseconds of host time at each new one), so a
    compiled program keeps it off at a shape's first two calls and lets ATen choose as eager
    does from the third on, in both SDPA paths (one call; a boolean mask shared by two calls);
    values equal eager's at every call, and a new shape starts over."""
    import compiler
    from compiler import shared_masks
    from compiler.codegen import triton as tt

    seen = []
    real = tt._sdpa

    def spy(*a, **kw):
        seen.append(torch.backends.cuda.cudnn_sdp_enabled())
        return real(*a, **kw)
    monkeypatch.setattr(tt, "_sdpa", spy)
    monkeypatch.setattr(shared_masks, "_sdpa", spy)

    def attn(q, k, v, m):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m)

    def two(q, k, v, pad):
        m = (pad > 0)[:, None, None, :].expand(-1, 1, q.shape[2], -1)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m)
        return torch.nn.functional.scaled_dot_product_attention(a * 2, k, v, attn_mask=m)
    specs = ("q: f16[B, 4, T, 64]", "k: f16[B, 4, T, 64]", "v: f16[B, 4, T, 64]")
    # Without CUDA graphs: a capture keeps cuDNN off at every call (its plans are per shape).
    f = compiler.compile(attn, *specs, "m: bool[B, 1, T, T]", target="triton", cuda_graphs=False)
    g = compiler.compile(two, *specs, "pad: f16[B, T]", target="triton", cuda_graphs=False)
    for prog, ref, per_call in ((f, attn, 1), (g, two, 2)):
        seen.clear()
        for T in (37, 37, 37, 37, 53):
            q, k, v = (torch.randn(2, 4, T, 64, device="cuda", dtype=torch.float16) for _ in range(3))
            m = torch.rand(2, 1, T, T, device="cuda") > 0.2 if prog is f else torch.randn(2, T, device="cuda").half()
            m[..., 0] = True if prog is f else 1.0  # no fully masked row (cuDNN's fill differs there)
            torch.testing.assert_close(prog(q, k, v, m), ref(q, k, v, m), atol=2e-3, rtol=2e-3)
        want = [False, False, True, True, False]
        assert seen == [w for w in want for _ in range(per_call)], (ref.__name__, seen)
    assert torch.backends.cuda.cudnn_sdp_enabled()


def test_a_variants_source_is_generated_once_for_its_build_its_load_and_its_launch(monkeypatch):
    """Submitting a class's build, loading it ahead (the preload thread) and a launch meeting it
    each need the variant's module: its source (sympy work, ~90 ms for a persistent row kernel on
    the GPU host) is generated once per class, and every path imports that one file."""
    import compiler
    from compiler.codegen.triton import TRITON

    def prog(x, y):
        return torch.softmax(x * 2, -1) + y

    f = compiler.compile(prog, "x: f32[B, N]", "y: f32[N]", target="triton")
    (ln,) = [ln for _, ln in f.variants[0].launchers.values()]
    made = []
    real = TRITON.variant_source
    monkeypatch.setattr(TRITON, "variant_source", lambda *a, **k: made.append(a[2]) or real(*a, **k))
    classes = ln.classes()
    assert any(sc.persistent for sc, _ in classes) and any(not sc.persistent for sc, _ in classes)
    payloads = ln.build_payloads()  # what a worker is handed: the file of each class
    for sc, _ in classes:
        ln.kernel_for(sc)  # the preload thread's and a launch's path
    assert len(made) == len(set(made)), f"{len(made)} sources generated for {len(set(made))} classes"
    for (sc, _), (path, mod, name, *_rest) in payloads:
        assert ln.variant_file(sc) == (path, mod)  # the file the worker built is the one loaded
        assert ln.kernel_for(sc).fn.__module__ == mod or sc.suffix == ""


def test_a_variant_whose_file_was_removed_is_written_again():
    """A class's module file removed since its source was generated (a cache directory emptied
    while the program lives) is written again at its load, not a failed import at a launch."""
    import compiler

    def prog(x, y):
        return torch.softmax(x * 2, -1) + y

    f = compiler.compile(prog, "x: f32[B, N]", "y: f32[N]", target="triton")
    (ln,) = [ln for _, ln in f.variants[0].launchers.values()]
    sc = next(sc for sc, _ in ln.classes() if sc.persistent)
    path, _ = ln.variant_file(sc)
    os.remove(path)
    assert ln.kernel_for(sc) is not None and os.path.exists(path)
