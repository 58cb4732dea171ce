"""Programs x sizes x dtypes for the compiler's differential tests (shared by the C++ and Triton runs).

Each program is compiled once per dtype with symbolic sizes and compared with
eager at every size; half types are loaded and stored as such and computed
in float32 (rounded after every op, as eager rounds).
"""
import torch
import torch.nn.functional as F

#: (B, N): size 1, primes, a multiple of 16 and one past it (Triton's alignment classes),
#: a long row, and a prime row past the persistent-reduction limit (looped rows).
SIZES = [(1, 1), (1, 7), (3, 16), (5, 17), (2, 64), (7, 129), (2, 8209)]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
#: Tolerances per dtype against eager at the same dtype.
TOL = {torch.float32: (1e-5, 1e-5), torch.float16: (2e-2, 1e-2), torch.bfloat16: (1e-1, 4e-2)}


PROGRAMS = {
    "affine": (lambda x, y: x * 2 + 1, 2),
    "gelu": (lambda x, y: F.gelu(x), 1),
    "gelu_tanh": (lambda x, y: F.gelu(x, approximate="tanh") - y, 2),
    "silu_mul": (lambda x, y: F.silu(x) * y, 2),
    "relu_row_bias": (lambda x, y: torch.relu(x + y[0]), 2),
    "softmax": (lambda x, y: torch.softmax(x, -1), 1),
    "softmax_scaled_bias": (lambda x, y: torch.softmax(x * 0.125 + y, -1), 2),
    "layer_norm": (lambda x, y: F.layer_norm(x, (x.shape[-1],)), 1),
    "layer_norm_residual": (lambda x, y: F.layer_norm(x + y, (x.shape[-1],)) * 1.5 + 0.1, 2),
    "row_sum": (lambda x, y: x.sum(-1), 1),
    "row_mean_center": (lambda x, y: x - x.mean(-1, keepdim=True), 1),
    "row_amax": (lambda x, y: x.amax(-1) + y.amin(-1), 2),
    "where": (lambda x, y: torch.where(x > 0, x, y * 0.5), 2),
    "rsqrt": (lambda x, y: torch.rsqrt(x * x + 1), 1),
    "tanh_sigmoid": (lambda x, y: torch.tanh(x) * torch.sigmoid(y), 2),
    "rms_norm": (lambda x, y: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6), 1),
    "transpose_scale": (lambda x, y: x.t() * 3 + y.t(), 2),
    "abs_normalize": (lambda x, y: x / x.abs().sum(-1, keepdim=True).clamp(min=1.0), 1),
}


def inputs(name, B, N, dtype, seed=0):
    g = torch.Generator().manual_seed(seed * 1000 + B * 37 + N)
    n_in = PROGRAMS[name][1]
    return [torch.randn(B, N, generator=g).to(dtype) for _ in range(n_in)]


def specs(name, dtype):
    short = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}[dtype]
    n_in = PROGRAMS[name][1]
    return [f"{a}: {short}[B, N]" for a in "xy"[:n_in]]


def program(name):
    fn, n_in = PROGRAMS[name]
    if n_in == 1:
        return lambda x: fn(x, None)
    return fn


def run_case(name, dtype, target, device="cpu", sizes=SIZES):
    """Compile once, compare with eager at every size; returns the compiled program's stats."""
    import compiler
    f = compiler.compile(program(name), *specs(name, dtype), target=target)
    rtol, atol = TOL[dtype]
    for B, N in sizes:
        xs = [t.to(device) for t in inputs(name, B, N, dtype)]
        got = f(*xs)
        want = program(name)(*xs)
        assert got.dtype == want.dtype and got.shape == want.shape, (name, dtype, B, N, got.shape, want.shape)
        torch.testing.assert_close(got.float().cpu(), want.float().cpu(), rtol=rtol, atol=atol,
                                   msg=lambda m: f"{name} {dtype} B={B} N={N} ({target}): {m}")
    return f.stats


def fused_kernels(name, dtype, target) -> int:
    """How many ops of the program run inside generated kernels (not as ATen calls)."""
    import compiler
    f = compiler.compile(program(name), *specs(name, dtype), target=target)
    v = f.variants[0]
    return 0 if v.eager else len(v.kernels)


def check_all_triton(sizes=SIZES):
    """Every program and dtype through Triton; prints one line per failure and a total."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    bad = 0
    for name in PROGRAMS:
        for dtype in DTYPES:
            try:
                stats = run_case(name, dtype, "triton", device, sizes)
                assert stats["traces"] == 1, stats
            except Exception as e:
                bad += 1
                print(f"FAIL {name} {dtype}: {type(e).__name__}: {str(e)[:400]}")
    print(f"checked {len(PROGRAMS) * len(DTYPES)} cases, {bad} failed")
