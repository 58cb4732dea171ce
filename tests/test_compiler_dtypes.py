"""Differential tests of the compiler in float32, float16 and bfloat16 against eager.

18 programs x 7 sizes (1, primes, 16 and 17, 129, 8209 past the persistent-row
limit) x 3 dtypes through the C++
path in process, and through Triton in one fresh interpreter (CUDA when
present, else ``TRITON_INTERPRET=1``).  One trace serves every size with
its size-1 dims too.
"""
import os
import subprocess
import sys

import pytest
import torch

from tests.compiler_dtype_cases import DTYPES, PROGRAMS, fused_kernels, run_case


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_cpp_matches_eager(name, dtype):
    stats = run_case(name, dtype, "cpp")
    # Size 1 is a size: one trace serves every size, B = N = 1 included (no broadcasting
    # question in these programs depends on a size being 1).
    assert stats["traces"] == stats["variants"] == 1, stats


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_half_types_run_in_kernels_not_aten(dtype):
    # Half-precision pointwise and reduction work is fused, not handed to ATen.
    for name in ("gelu", "softmax", "layer_norm_residual", "rms_norm"):
        assert fused_kernels(name, dtype, "cpp") >= 1, name


def test_float16_rounds_after_every_op_like_eager():
    # 2048 + 1 - 2048 is 0 in float16 (2049 is not representable) but 1 in float32:
    # a kernel that kept the intermediate in float32 would differ from eager.
    import compiler
    f = compiler.compile(lambda x: (x + 1) - 2048, "x: f16[N]")
    x = torch.full((5,), 2048.0, dtype=torch.float16)
    assert torch.equal(f(x), (x + 1) - 2048)


def test_bfloat16_rounds_after_every_op_like_eager():
    # The C++ kernels keep a bfloat16 value in a float register (rounded, see cpp.rbf): 256 + 1 is
    # 256 in bfloat16 (ties to even), so (x + 1) - 256 is 0 as in eager, not 1; the bits of every
    # result equal eager's, NaN, infinities, subnormals and the largest finite value included.
    import compiler
    f = compiler.compile(lambda x: ((x + 1) - 256) * 3 + x * x, "x: bf16[N]")
    special = [256.0, float("nan"), float("inf"), -float("inf"), 1e-39, -3e-40, 3.3895e38, 0.0, -0.0, 1.0 / 3]
    x = torch.cat([torch.tensor(special).bfloat16(), torch.randn(1000).bfloat16() * 100])
    got, want = f(x), ((x + 1) - 256) * 3 + x * x
    assert torch.equal(got.view(torch.int16)[~want.isnan()], want.view(torch.int16)[~want.isnan()])
    assert torch.equal(got.isnan(), want.isnan())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_composite_ops_compute_in_float32_and_round_once_like_eager(dtype):
    # ATen's layer norm, softmax, log-softmax, GELU, SiLU and mean kernels take a half-precision
    # input in float32 and round only their results.  Lowered op by op in the half type (every
    # step rounded), layer norm's output was 4.7e-3 (relative) off eager's in bf16, and BERT's
    # logits twice as far from the float32 reference as eager's.
    import torch.nn.functional as F
    import compiler
    g = torch.Generator().manual_seed(0)
    w, b = torch.randn(48, generator=g) * 0.1 + 1, torch.randn(48, generator=g) * 0.1
    progs = {
        "layer_norm": lambda x: F.layer_norm(x, (48,), w.to(x.dtype), b.to(x.dtype), 1e-12),
        "softmax": lambda x: torch.softmax(x * 3, -1),
        "log_softmax": lambda x: torch.log_softmax(x, -1),
        "gelu": F.gelu,
        "silu": F.silu,
        "mean": lambda x: x.mean(-1, keepdim=True) + x.mean((0, 1)),
        "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    }
    short = "f16" if dtype is torch.float16 else "bf16"
    ulp = torch.finfo(dtype).eps
    for name, fn in progs.items():
        f = compiler.compile(fn, f"x: {short}[B, T, 48]", target="cpp")
        for B, T in ((2, 7), (3, 13), (1, 1)):
            x = (torch.randn(B, T, 48, generator=g) * 3).to(dtype)
            got, want = f(x).float(), fn(x).float()
            if name == "log_softmax":
                # ATen's CPU kernel takes x - (max + log(sum)), its CUDA kernel and this one
                # (x - max) - log(sum): compared with the float32 answer, never farther than eager.
                ref = fn(x.float())
                assert (got - ref).abs().max() <= (want - ref).abs().max() * 1.05 + ulp * 1e-2, (name, B, T)
                continue
            # Bits equal eager's but for a last-place difference here and there (float32 sums in
            # another order, libm's exp and tanh against ATen's vectorized ones).
            # ATen picks its vector math by the CPU's ISA: on the H100 host (AVX-512) 5.4% of float16
            # GELU elements differed in the last place, against under 5% here.
            differ = (got != want).float().mean().item()
            assert differ <= 0.08, (name, B, T, differ)  # op by op in the half type: 20-70%
            torch.testing.assert_close(got, want, rtol=ulp, atol=ulp * 1e-2 * want.abs().max().item(), msg=name)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_python_scalars_enter_half_ops_as_eager_reads_them(dtype):
    # ATen's mul and div read a Python number's original value in float32 (x * 0.1 multiplies by
    # 0.1f); add and sub convert it to the tensor's dtype first.  Bits equal eager's for each
    # (rounded to bf16 first, 0.1 is 0.10009765625 and x * 0.1 differed in ~15% of elements).
    import compiler
    progs = {"mul": lambda x: x * 0.1, "div": lambda x: x / 0.3, "mul_int": lambda x: x * 4097,
             "add": lambda x: x + 0.3, "rsub": lambda x: 0.3 - x, "chain": lambda x: (x * (1 / 3)).exp() - 0.1}
    x = torch.randn(2000, generator=torch.Generator().manual_seed(0)).to(dtype) * 10
    for name, fn in progs.items():
        f = compiler.compile(fn, f"x: {'f16' if dtype is torch.float16 else 'bf16'}[N]", target="cpp")
        got, want = f(x), fn(x)
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), (name, (got != want).sum())


@pytest.mark.triton
def test_triton_matches_eager():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if not torch.cuda.is_available():
        env["TRITON_INTERPRET"] = "1"
    r = subprocess.run([sys.executable, "-c", "from tests.compiler_dtype_cases import check_all_triton; "
                        "check_all_triton()"], capture_output=True, text=True, env=env, cwd=root, timeout=1500)
    total = len(PROGRAMS) * len(DTYPES)
    assert f"checked {total} cases, 0 failed" in r.stdout, r.stdout[-4000:] + r.stderr[-3000:]
