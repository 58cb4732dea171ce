"""compiler.half_gemm: training graphs' half-precision matmuls on one Triton GEMM, against torch.

Without CUDA the cases run on CPU under TRITON_INTERPRET=1 in one subprocess (this file run
as a script; the interpreter is chosen when triton is imported); with CUDA in-process.
Sizes are small where the interpreter runs: it is slow.
"""

import pytest
import torch

from tests import interpreted

pytestmark = pytest.mark.triton
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
HALF = (torch.float16, torch.bfloat16)
TOL = {torch.float16: (2e-2, 1e-2), torch.bfloat16: (1.5e-1, 2e-2)}


def _ref(a, b, bias):
    """fp64 reference: every implementation rounds differently, none is the truth."""
    out = a.double() @ b.double()
    return out + bias.double() if bias is not None else out


def _check(out, a, b, bias):
    """``out`` at least as close to the exact product as torch's own kernel, within rounding."""
    want = _ref(a, b, bias)
    assert out.dtype == a.dtype and out.shape == want.shape, (out.dtype, out.shape, want.shape)
    err = (out.double() - want).abs().max().item() if want.numel() else 0.0
    torch_out = torch.addmm(bias, a, b) if bias is not None else torch.mm(a, b)
    torch_err = (torch_out.double() - want).abs().max().item() if want.numel() else 0.0
    atol, rtol = TOL[a.dtype]
    scale = want.abs().max().item() if want.numel() else 0.0
    assert err <= max(2 * torch_err, atol + rtol * scale), (a.dtype, tuple(a.shape), tuple(b.shape), err, torch_err)


def _operand(rows, cols, transposed, dt, g):
    """A ``rows x cols`` operand stored row-major, or column-major (a transposed view)."""
    if transposed:
        return torch.randn(cols, rows, generator=g).to(DEVICE, dt).t()
    return torch.randn(rows, cols, generator=g).to(DEVICE, dt)


def case_kernel_matches_torch_in_every_layout():
    """Both operands row- and column-major, with and without a bias, at sizes 1, primes, K not a
    multiple of the K block (the masked tail), K below one block, M and N past one tile."""
    from compiler import half_gemm as hg
    g = torch.Generator().manual_seed(0)
    shapes = [(1, 1, 1), (7, 33, 13), (1, 128, 64), (131, 67, 130), (257, 128, 67), (64, 64, 192)]
    for dt in HALF:
        for m, n, k in shapes:
            for a_t in (False, True):
                for b_t in (False, True):
                    a, b = _operand(m, k, a_t, dt, g), _operand(k, n, b_t, dt, g)
                    assert hg.layout(a) is not None and hg.layout(b) is not None
                    for bias in (None, torch.randn(n, generator=g).to(DEVICE, dt)):
                        before = hg.CALLS["kernel"]
                        _check(hg.matmul(a, b, bias), a, b, bias)
                        assert hg.CALLS["kernel"] == before + 1, "the kernel did not take a half-precision call"
    return "ok"


def case_training_forms_run_on_the_kernel():
    """The three calls a training plan makes: ``F.linear`` (the forward), ``mm`` against the
    weight (the input gradient) and ``mm`` of a transposed gradient (the weight gradient, its
    contraction over the tokens), and ``addmm``; each equal to torch's within rounding."""
    from compiler import half_gemm as hg
    g = torch.Generator().manual_seed(1)
    for dt in HALF:
        for m in (1, 5, 131):
            x = torch.randn(m, 48, generator=g).to(DEVICE, dt)
            w = torch.randn(40, 48, generator=g).to(DEVICE, dt)
            b = torch.randn(40, generator=g).to(DEVICE, dt)
            gy = torch.randn(m, 40, generator=g).to(DEVICE, dt)
            before = hg.CALLS["kernel"]
            _check(hg.linear(x, w, b), x, w.t(), b)
            _check(hg.mm(gy, w), gy, w, None)
            _check(hg.mm(gy.t(), x), gy.t(), x, None)
            _check(hg.addmm(b, x, w.t()), x, w.t(), b)
            assert hg.CALLS["kernel"] == before + 4
    return "ok"


def case_one_binary_per_call_site_at_every_length():
    """A new row count (a new sequence length) reuses the call site's launcher: the kernel's
    constexprs do not depend on the length, so no new binary is built mid-training."""
    from compiler import half_gemm as hg
    g = torch.Generator().manual_seed(2)
    w = torch.randn(40, 48, generator=g).to(DEVICE, torch.bfloat16)
    b = torch.randn(40, generator=g).to(DEVICE, torch.bfloat16)
    x = torch.randn(3, 48, generator=g).to(DEVICE, torch.bfloat16)
    hg.linear(x, w, b)
    hg.mm(torch.randn(3, 40, generator=g).to(DEVICE, torch.bfloat16).t(), x)
    count = len(hg._launchers)
    for m in (1, 2, 17, 128, 129, 300):
        x = torch.randn(m, 48, generator=g).to(DEVICE, torch.bfloat16)
        _check(hg.linear(x, w, b), x, w.t(), b)
        gy = torch.randn(m, 40, generator=g).to(DEVICE, torch.bfloat16)
        hg.mm(gy.t(), x)  # the weight gradient's contraction is the new length
    assert len(hg._launchers) == count, (count, len(hg._launchers))
    return "ok"


def case_other_calls_fall_back_with_torchs_result():
    """fp32, a strided operand that is neither row- nor column-major, a 2-D bias, beta/alpha and
    mixed dtypes take ATen's path (and its errors); autograd inputs keep their history."""
    from compiler import half_gemm as hg
    g = torch.Generator().manual_seed(3)
    a = torch.randn(9, 16, generator=g).to(DEVICE)
    w = torch.randn(16, 8, generator=g).to(DEVICE)
    before = hg.CALLS["kernel"]
    assert torch.allclose(hg.mm(a, w), a @ w)
    ah, wh = a.to(torch.bfloat16), w.to(torch.bfloat16)
    strided = torch.randn(9, 32, generator=g).to(DEVICE, torch.bfloat16)[:, ::2]
    assert hg.layout(strided) is None
    torch.testing.assert_close(hg.mm(strided, wh), strided @ wh)
    bias2 = torch.randn(9, 8, generator=g).to(DEVICE, torch.bfloat16)
    torch.testing.assert_close(hg.addmm(bias2, ah, wh), torch.addmm(bias2, ah, wh))
    torch.testing.assert_close(hg.addmm(bias2[0], ah, wh, beta=0.5), torch.addmm(bias2[0], ah, wh, beta=0.5))
    assert hg.CALLS["kernel"] == before
    try:
        hg.mm(ah, w)
        raise AssertionError("mixed dtypes must raise as torch.mm does")
    except RuntimeError:
        pass
    p = torch.nn.Parameter(wh.clone())
    hg.mm(ah, p).float().sum().backward()
    assert p.grad is not None and hg.CALLS["kernel"] == before
    return "ok"


def case_a_bf16_training_step_runs_its_matmuls_on_the_kernel():
    """A bf16-autocast MLP trained through ``backend="symshape"``: its forward and backward
    matmuls run on the kernel, and its gradients equal eager's within bf16 rounding."""
    import compiler
    from compiler import half_gemm as hg
    compiler.register()
    torch.manual_seed(0)
    torch._dynamo.reset()
    hg.ENABLED = True  # opt-in (SYMSHAPE_TRAIN_GEMM=1): read when the graphs are planned
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.GELU(), torch.nn.Linear(48, 8)).to(DEVICE)
    f = torch.compile(model, backend="symshape", dynamic=True)
    before = hg.CALLS["kernel"]
    for n in (5, 13, 1):
        x = torch.randn(n, 32, device=DEVICE)
        with torch.autocast(device_type=DEVICE, dtype=torch.bfloat16):
            f(x).float().pow(2).sum().backward()
        got = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        with torch.autocast(device_type=DEVICE, dtype=torch.bfloat16):
            model(x).float().pow(2).sum().backward()
        for a, b in zip(got, [p.grad for p in model.parameters()]):
            torch.testing.assert_close(a, b, atol=0.1, rtol=0.05)
        model.zero_grad()
    hg.ENABLED = False
    assert hg.CALLS["kernel"] - before >= 3 * 5, hg.CALLS  # 2 forward, 3+ backward matmuls per step
    return "ok"


results, test_half_gemm_case = interpreted.case_tests(globals(), __file__)


def test_layouts_and_configs():
    """Which layouts the kernel takes, and that a call site's tile does not depend on the length."""
    from compiler import half_gemm as hg
    assert hg.layout(torch.empty(1, 5)) == (False, 5) and hg.layout(torch.empty(5, 1)) == (False, 1)
    assert hg.layout(torch.empty(3, 4).t()) == (True, 4)
    assert hg.layout(torch.empty(2, 3, 4)[:, 0]) == (False, 12)
    assert hg.layout(torch.empty(4, 4)[::2, ::2]) is None
    assert {hg.config(m, 3072, a_t=False) for m in (1, 64, 4096, 8192)} == {hg.config(1, 3072, a_t=False)}


if __name__ == "__main__":
    interpreted.print_results(interpreted.run_cases(globals()))
