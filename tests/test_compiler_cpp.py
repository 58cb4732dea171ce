"""The C++ path of compiler.compile: results equal eager at many sizes, one
compiled artifact per guard set, ATen fallback for ops it does not lower."""
import os

import torch
import pytest

import compiler
from compiler.codegen import cpp as cpp_codegen
from compiler.ir import Kernel
from compiler.lowered import ExternItem
from shapes.errors import GuardViolation
from tests.compiler_programs import Attention, MLPBlock, pointwise_zoo, reductions, views


def _close(out, ref, atol=1e-5, rtol=1e-4):
    out = out if isinstance(out, (tuple, list)) else [out]
    ref = ref if isinstance(ref, (tuple, list)) else [ref]
    assert len(out) == len(ref)
    for o, r in zip(out, ref):
        assert o.shape == r.shape and o.dtype == r.dtype, (o.shape, r.shape, o.dtype, r.dtype)
        assert torch.allclose(o, r, atol=atol, rtol=rtol, equal_nan=True), (o - r).abs().max()


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_mlp_layernorm_gelu_many_sizes_one_variant(approximate):
    torch.manual_seed(0)
    m = MLPBlock(approximate=approximate).eval()
    f = compiler.compile(m, "x: f32[B, T, 32]")
    builds = cpp_codegen.BUILD_COUNT["gcc"]
    for B, T in [(2, 3), (4, 17), (3, 64), (7, 2)]:
        x = torch.randn(B, T, 32)
        with torch.no_grad():
            _close(f(x), m(x))
    assert f.stats["variants"] == 1 and f.stats["traces"] == 1
    assert cpp_codegen.BUILD_COUNT["gcc"] == builds  # no rebuild for new sizes
    v = f.variants[0]
    kernels = [s for s in v.steps if isinstance(s, Kernel)]
    # LayerNorm (2 reductions + normalize) is one kernel; GELU and the residual fuse
    # into the kernels around the two matmuls (which stay ATen externs).
    assert len(kernels) == 3 and any(len(k.reductions) == 2 for k in kernels)
    assert sum(isinstance(s, ExternItem) and "addmm" in str(s.target) for s in v.steps) == 2


def test_attention_block_matches_eager():
    torch.manual_seed(0)
    a = Attention().eval()
    f = compiler.compile(a, "x: f32[B, T, 32]")
    for B, T in [(2, 5), (3, 9), (2, 31)]:
        x = torch.randn(B, T, 32)
        with torch.no_grad():
            _close(f(x), a(x))
    assert f.stats["variants"] == 1


def test_pointwise_ops_fuse_into_one_kernel():
    f = compiler.compile(pointwise_zoo, "x: f32[B, T]", "y: f32[B, T]")
    for B, T in [(3, 7), (5, 40)]:
        x, y = torch.randn(B, T), torch.randn(B, T)
        _close(f(x, y), pointwise_zoo(x, y))
    steps = f.variants[0].steps
    assert len(steps) == 1 and isinstance(steps[0], Kernel) and not steps[0].reductions


def test_reductions_over_any_dims():
    f = compiler.compile(reductions, "x: f32[B, T, C]")
    for shape in [(3, 7, 6), (2, 5, 33)]:
        x = torch.randn(*shape)
        _close(f(x), reductions(x))


def test_views_as_index_remaps():
    f = compiler.compile(views, "x: f32[B, T, 8]")
    for shape in [(3, 7, 8), (2, 4, 8)]:
        x = torch.randn(*shape)
        _close(f(x), views(x))
    assert not any(isinstance(s, ExternItem) for s in f.variants[0].steps)


def test_unsupported_op_falls_back_to_aten():
    def prog(x):
        y = torch.cumsum(torch.relu(x), dim=1)  # not lowered: an ATen extern
        return torch.softmax(y * 0.1, -1) + x.flip(0)

    f = compiler.compile(prog, "x: f32[B, T]")
    for B, T in [(3, 5), (6, 19)]:
        x = torch.randn(B, T)
        _close(f(x), prog(x))
    names = [str(s.target) for s in f.variants[0].steps if isinstance(s, ExternItem)]
    assert any("cumsum" in n for n in names) and any("flip" in n for n in names)


def test_float64_and_int_inputs():
    def prog(x, i):
        return (x * i).sum(-1), (i > 2).sum(-1), torch.exp(x).amax(0)

    f = compiler.compile(prog, "x: f64[N, K]", "i: i64[N, K]")
    x, i = torch.randn(4, 9, dtype=torch.float64), torch.randint(0, 5, (4, 9))
    _close(f(x, i), prog(x, i), atol=1e-12, rtol=1e-12)


def test_guard_failure_recompiles_once_per_branch():
    def prog(x):
        if x.shape[0] > 8:
            return x.sum(-1)
        return x.amax(-1)

    f = compiler.compile(prog, "x: f32[N, 4]", dims={"N": 4})
    for n in (3, 5, 8):
        x = torch.randn(n, 4)
        _close(f(x), prog(x))
    assert f.stats["variants"] == 1
    for n in (9, 20, 4):
        x = torch.randn(n, 4)
        _close(f(x), prog(x))
    assert f.stats["variants"] == 2


def test_non_contiguous_input_and_output_layout():
    f = compiler.compile(lambda x: (x.t() * 2).exp(), "x: f32[A, B]")
    base = torch.randn(6, 5)
    x = base.t()  # non-contiguous real input
    _close(f(x), (x.t() * 2).exp())
    # Buffers take the layout eager gives for inputs like the traced (contiguous) ones.
    xc = x.contiguous()
    assert f(xc).stride() == (xc.t() * 2).exp().stride() == (1, 6)


def test_size_mismatch_is_an_error():
    f = compiler.compile(lambda x, y: x + y, "x: f32[N]", "y: f32[N]")
    with pytest.raises(compiler.runtime.GuardViolation):
        f(torch.randn(3), torch.randn(4))


def test_expression_dims_in_specs_are_checked_and_solved():
    # "x: f32[B, 2*T]": T is read off y, x's size is checked against 2*T; alone (g), T is solved.
    f = compiler.compile(lambda x, y: x[:, ::2] + y, "x: f32[B, 2*T]", "y: f32[B, T]")
    for B, T in [(3, 4), (5, 7), (2, 1)]:
        x, y = torch.randn(B, 2 * T), torch.randn(B, T)
        _close(f(x, y), x[:, ::2] + y)
    with pytest.raises(GuardViolation, match=r"x.shape\[1\] is 13 .* 2\*T = 14"):
        f(torch.randn(5, 13), torch.randn(5, 7))
    g = compiler.compile(lambda x: x.view(x.shape[0], 2, -1).sum(1), "x: f32[B, 2*T]")
    for B, T in [(3, 5), (4, 8)]:
        x = torch.randn(B, 2 * T)
        _close(g(x), x.view(B, 2, -1).sum(1))
        assert g.bind((x,)) == (B, T)
    with pytest.raises(GuardViolation, match="no size T makes 2\\*T equal 9"):
        g(torch.randn(3, 9))


def test_sizes_past_eagers_storage_limit_are_refused():
    # Eager raises "Storage size calculation overflowed" for N >= 2**21 (N**3 bytes > int64):
    # the compiled program must refuse those sizes by the limit, not run or crash.
    fn = lambda x: x.repeat(x.shape[0], x.shape[0])  # noqa: E731
    with pytest.raises(RuntimeError, match="Storage size calculation overflowed"):
        fn(torch.ones(2**21, dtype=torch.uint8))
    f = compiler.compile(fn, "x: u8[N]")
    x = torch.arange(6, dtype=torch.uint8)
    assert torch.equal(f(x), fn(x))
    with pytest.raises(GuardViolation, match=r"size limit of eager PyTorch N\*\*3 <= 9223372036854775807") as info:
        f(torch.ones(2**21, dtype=torch.uint8))
    assert info.value.guard in f.variants[0].tp.limits


def test_sizes_zero_and_one_run_like_eager():
    # A variant specialized to T = 0 has index remaps that divide by 0: it runs with ATen
    # (nothing to compute), never a ZeroDivisionError from the compiler.
    torch.manual_seed(0)
    m = MLPBlock().eval()
    f = compiler.compile(m, "x: f32[B, T, 32]")
    for B, T in [(2, 3), (0, 3), (3, 0), (1, 1), (0, 0), (4, 5)]:
        x = torch.randn(B, T, 32)
        with torch.no_grad():
            _close(f(x), m(x))


def test_cpp_program_refuses_tensors_off_the_cpu():
    """C++ kernels read host memory: a tensor on another device is refused with a typed error
    naming the input (on a CUDA machine a CUDA tensor crashed the process before), also after
    the same shape was bound for CPU tensors."""
    from shapes.devices import DeviceMismatch
    f = compiler.compile(lambda x: x * 2.0 + 1.0, "x: f32[B, 8]", target="cpp")
    x = torch.randn(3, 8)
    assert torch.equal(f(x), x * 2.0 + 1.0)
    other = torch.device("cuda") if torch.cuda.is_available() else torch.device("meta")
    with pytest.raises(DeviceMismatch, match=r"input x is on .*target='triton'"):
        f(torch.empty(3, 8, device=other))


_DEVICE_PROGRAM = """
import torch, compiler
def prog(x):
    r = torch.arange(x.shape[1], device=x.device).to(x.dtype)
    return (x + r) * (2.0 if x.device.type == "cpu" else -1.0)
f = compiler.compile(prog, "x: f32[B, T]", target="triton", device="cuda")
assert [str(v.tp.device) for v in f.variants] == ["cuda:0"]
x = torch.randn(3, 5)
assert torch.equal(f(x), prog(x)), (f(x), prog(x))
assert [str(v.tp.device) for v in f.variants] == ["cuda:0", "cpu"] and f.stats["traces"] == 2
y = torch.randn(4, 7)
assert torch.equal(f(y), prog(y)) and f.stats["traces"] == 2
print("DEVICES OK")
"""


@pytest.mark.triton
def test_a_variant_serves_only_the_device_it_was_traced_for():
    """A trace records where the program makes tensors and which device branches it took:
    a variant traced for CUDA must not serve CPU tensors (on the H100 a CPU trace's
    ``arange(device=cpu)`` reached a Triton kernel with CUDA inputs).  The CPU call gets
    its own trace, with the CPU branch and CPU-made tensors (Triton under the interpreter)."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", _DEVICE_PROGRAM], capture_output=True, text=True, env=env, cwd=root,
                       timeout=600)
    assert "DEVICES OK" in r.stdout, r.stderr[-3000:]


def test_cpp_target_traces_for_the_cpu_only():
    from shapes.errors import SpecError
    with pytest.raises(SpecError, match="target='triton'"):
        compiler.compile(lambda x: x + 1, "x: f32[N]", target="cpp", device="cuda")


def test_default_trace_device_follows_the_target():
    from compiler.runtime import default_device
    assert default_device("cpp") == torch.device("cpu")
    f = compiler.compile(lambda x: x + torch.ones(x.shape[0], 1, device=x.device), "x: f32[B, 4]", target="cpp")
    assert f.variants[0].tp.device == torch.device("cpu")
    x = torch.randn(2, 4)
    assert torch.equal(f(x), x + 1) and f.stats["traces"] == 1


def _gather_columns(x, m):
    return x.gather(1, m)


def test_declared_value_ranges_are_checked_at_every_call_not_only_a_shapes_first():
    # The trace relies on `in 0..3` (gather's index bounds); a cached shape must not skip the check.
    cp = compiler.compile(_gather_columns, "x: f32[B, N]", "m: i64[B, K] in 0..3")
    x, m = torch.randn(2, 4), torch.tensor([[0, 3], [1, 2]])
    assert torch.equal(cp(x, m), _gather_columns(x, m))
    assert torch.equal(cp(x, m), _gather_columns(x, m))  # the shape is cached now
    with pytest.raises(GuardViolation, match="input m holds 4, outside the values 0..3"):
        cp(x, torch.tensor([[0, 4], [1, 2]]))
    with pytest.raises(GuardViolation, match="holds -1"):
        cp(x, torch.tensor([[0, -1], [1, 2]]))


def _deep_chain(x):
    y = x.sin()
    for _ in range(24):
        y = torch.tanh(y * y + y)  # each value read twice by the next
    return y


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_deep_chain_reading_each_value_twice_compiles_to_one_kernel(dtype):
    # Lowering inlines a value at each of its uses, so the kernel's expression holds equal copies
    # along 2**24 paths; codegen compared such copies node by node and never finished.
    f = compiler.compile(_deep_chain, f"x: {'f32' if dtype == torch.float32 else 'bf16'}[N]")
    for n in (1, 37, 64):
        x = torch.randn(n, dtype=dtype)
        out, ref = f(x), _deep_chain(x)
        assert out.dtype == dtype and out.shape == ref.shape
        assert torch.allclose(out.float(), ref.float(), atol=1e-5 if dtype == torch.float32 else 2e-2)
    assert sum(isinstance(s, Kernel) for s in f.variants[0].steps) == 1
