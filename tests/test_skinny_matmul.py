"""The skinny-M matmul kernel (compiler/skinny_matmul.py) against torch, and its call-time choice.

Without CUDA the cases run on CPU under TRITON_INTERPRET=1 in one subprocess (this file run
as a script; the interpreter is chosen when triton is imported); with CUDA in-process.
Sizes are small: the interpreter is slow.
"""

import pytest
import torch

from tests import interpreted

pytestmark = pytest.mark.triton
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
TOL = {torch.float32: (2e-5, 1e-5), torch.float16: (2e-2, 1e-2), torch.bfloat16: (1.5e-1, 2e-2)}


def _ref(a, b, bias):
    """fp64 reference: every implementation rounds differently, none is the truth."""
    out = a.double() @ b.double()
    return out + bias.double() if bias is not None else out


def case_kernel_matches_torch():
    from compiler.skinny_matmul import skinny_matmul
    torch.manual_seed(0)
    # (M, N, K, config): M=1, primes, K not a multiple of BLOCK_K, split-K with a short last slice,
    # a tile over M that the rows do not fill.
    # Configs: (BLOCK_M, BLOCK_N, BLOCK_K, split, k_per_split, fma).
    # fp32 tl.dot tiles run at "ieee" and "tf32x3" (the interpreter multiplies both in fp32:
    # there they check the dispatch and the indexing; case_tf32x3_error_near_cublas the accuracy).
    shapes = [(1, 19, 37, None), (13, 67, 131, None), (7, 33, 300, (16, 32, 64, 3, 128, False)),
              (20, 150, 200, (32, 128, 32, 3, 96, False)), (3, 70, 130, (16, 64, 32, 2, 96, False)),
              (7, 33, 300, (4, 64, 16, 3, 112, True)), (40, 50, 96, (32, 32, 64, 2, 64, False)),
              (40, 50, 96, (8, 64, 8, 2, 48, True)), (5, 40, 64, (16, 32, 64, 1, 64, False)),
              (3, 40, 64, (4, 64, 16, 1, 64, True))]
    for dt in DTYPES:
        for m, n, k, cfg in shapes:
            a = torch.randn(m, k, device=DEVICE).to(dt)
            w = torch.randn(n, k, device=DEVICE).to(dt)  # a Linear's weight: b is its transpose (a view)
            bias = torch.randn(n, device=DEVICE).to(dt)
            atol, rtol = TOL[dt]
            precs = ("ieee", "tf32x3") if dt == torch.float32 and not (cfg and cfg[-1]) else (None,)
            for (b, bi), prec in [(pair, p) for pair in [(w.t(), bias), (w.t().contiguous(), None)] for p in precs]:
                out = skinny_matmul(a, b, bi, config=cfg, precision=prec)
                assert out.dtype == dt and out.shape == (m, n)
                # At least as close to the exact result as torch's own kernel, within rounding.
                err = (out.double() - _ref(a, b, bi)).abs().max().item()
                torch_out = torch.addmm(bi, a, b) if bi is not None else torch.mm(a, b)
                torch_err = (torch_out.double() - _ref(a, b, bi)).abs().max().item()
                scale = _ref(a, b, bi).abs().max().item()
                assert err <= max(2 * torch_err, atol + rtol * scale), (dt, prec, m, n, k, cfg, err, torch_err)
    return "ok"


def case_fp32_default_is_tf32x3():
    # Where triton has 3xTF32, fp32 calls without a precision use it (else exact "ieee" tiles).
    from compiler import matmul_kernels, skinny_matmul as sm
    want = "tf32x3" if matmul_kernels.DOT_HAS_TF32X3 else "ieee"
    a, w = torch.randn(5, 96, device=DEVICE), torch.randn(80, 96, device=DEVICE)
    default = sm.skinny_matmul(a, w.t())
    explicit = sm.skinny_matmul(a, w.t(), precision=want)
    assert torch.equal(default, explicit)
    return "ok"


def case_tf32x3_error_near_cublas():
    # On the GPU: GPT-2-sized linears (K = 768 and 3072) in 3xTF32 stay within 4x of cuBLAS's
    # exact-fp32 error against fp64 (plain TF32 would be ~1000x off), at every tile the
    # benchmark tries.  The interpreter multiplies in fp32, so it says nothing there.
    if DEVICE != "cuda":
        return "skip: the interpreter does not emulate tf32x3 (CUDA only)"
    from compiler import matmul_kernels, skinny_matmul as sm
    if not matmul_kernels.DOT_HAS_TF32X3:
        return "skip: this triton has no tf32x3"
    torch.manual_seed(1)
    for m, n, k in [(1, 2304, 768), (16, 768, 3072), (64, 3072, 768)]:
        x = torch.randn(m, k, device=DEVICE)
        w = torch.randn(n, k, device=DEVICE) / k ** 0.5
        bias = torch.randn(n, device=DEVICE)
        ref = _ref(x, w.t(), bias)
        blas = (torch.addmm(bias, x, w.t()).double() - ref).abs().max().item()
        for bn, bk, c in [(64, 32, 2), (128, 64, 1), (64, 64, 4)]:
            cfg = sm.plan(m, n, k, 132, block_n=bn, block_k=bk, ctas_per_sm=c)
            err = (sm.skinny_matmul(x, w.t(), bias, config=cfg, precision="tf32x3").double() - ref).abs().max().item()
            assert err <= 4 * blas, (m, n, k, cfg, err, blas)
            tf32 = (sm.skinny_matmul(x, w.t(), bias, config=cfg, precision="tf32").double() - ref).abs().max().item()
            assert tf32 > 10 * err, (m, n, k, cfg, tf32, err)  # the check can tell TF32 apart
    return "ok"


def case_fp32_is_exact_fp32_not_tf32():
    # 1 + 2**-12 needs 12 mantissa bits: TF32 (10) rounds it to 1; the sum is exact in fp32.
    from compiler.skinny_matmul import skinny_matmul
    a = torch.full((2, 16), 1 + 2 ** -12, device=DEVICE)
    b = torch.ones(16, 16, device=DEVICE)
    out = skinny_matmul(a, b)
    assert (out == 16 + 2 ** -8).all(), out[0, 0].item()
    return "ok"


def case_size_class_picks_kernel_without_retrace():
    # With the measured table (fp32: 16..128 rows), a compiled program picks the kernel per
    # call from the rows: one trace, one variant.
    import compiler
    from compiler import skinny_matmul as sm
    lin = torch.nn.Linear(512, 384).to(DEVICE)  # a weight of 384 x 512 >= MIN_WEIGHT_ELEMS

    def prog(x):
        return torch.relu(lin(x))

    assert sm.ROWS[torch.float32] == (16, 128), "the sizes below assume the H100 table"
    f = compiler.compile(prog, "x: f32[T, 512]", target="triton")  # T = 1 would be a trace of its own
    seen = []
    with torch.no_grad():
        for t in [2, 15, 16, 100, 128, 129, 300]:
            x = torch.randn(t, 512, device=DEVICE)
            before = dict(sm.CALLS)
            out = f(x)
            assert torch.allclose(out, prog(x), atol=1e-4, rtol=1e-4), t
            seen.append("skinny" if sm.CALLS["skinny"] > before["skinny"] else "aten")
    assert seen == ["aten", "aten", "skinny", "skinny", "skinny", "aten", "aten"], seen
    assert f.stats["traces"] == 1 and f.stats["variants"] == 1, f.stats
    assert not sm.use_skinny(32, 384, 512, torch.float16, "cuda")  # half types: cuBLAS won
    assert not sm.use_skinny(32, 16, 16, torch.float32, "cuda")  # a small weight: cuBLAS
    return "ok"


def case_table_enabling_nothing_leaves_aten_calls():
    # No dtype enabled: compiled programs call ATen directly (no per-call choice at all).
    import compiler
    from compiler import skinny_matmul as sm
    saved = dict(sm.ROWS)
    sm.ROWS.update({dt: (0, 0) for dt in saved})
    try:
        lin = torch.nn.Linear(512, 384).to(DEVICE)
        f = compiler.compile(lambda x: lin(x), "x: f32[T, 512]", target="triton")
        before = dict(sm.CALLS)
        with torch.no_grad():
            x = torch.randn(32, 512, device=DEVICE)
            assert torch.allclose(f(x), lin(x), atol=1e-4)
        assert sm.extern_calls() == {} and sm.CALLS == before
    finally:
        sm.ROWS.update(saved)
    targets = {getattr(step, "target", None) for step in f.variants[0].plan}
    # ATen's addmm, or F.linear where the wrapper fused it with the weight's transpose.
    assert targets & {torch.ops.aten.addmm.default, torch.nn.functional.linear}, targets
    assert sm.addmm not in targets and sm.mm not in targets, targets
    return "ok"


def case_only_enabled_dtypes_pay_for_the_choice():
    # With fp32 enabled and the half types not, an fp16 program calls ATen directly (its
    # addmm + t fused into F.linear, no per-call chooser); an fp32 one gets the chooser.
    import compiler
    from compiler import skinny_matmul as sm
    saved = dict(sm.ROWS)
    sm.ROWS.update({torch.float32: (16, 128), torch.float16: (0, 0), torch.bfloat16: (0, 0)})
    try:
        plans = {}
        for dt, spec in ((torch.float16, "x: f16[T, 512]"), (torch.float32, "x: f32[T, 512]")):
            lin = torch.nn.Linear(512, 384).to(DEVICE, dt)
            f = compiler.compile(lambda x: lin(x), spec, target="triton")
            with torch.no_grad():
                x = torch.randn(32, 512, device=DEVICE, dtype=dt)
                rtol, atol = TOL[dt]
                torch.testing.assert_close(f(x), lin(x), rtol=rtol * 10, atol=atol * 10)
            plans[dt] = {getattr(step, "target", None) for step in f.variants[0].plan}
    finally:
        sm.ROWS.update(saved)
    assert sm.addmm not in plans[torch.float16] and sm.mm not in plans[torch.float16], plans
    assert sm.addmm in plans[torch.float32] or sm.mm in plans[torch.float32], plans
    return "ok"


def case_ineligible_calls_run_aten():
    # beta/alpha, a 2-D bias, mixed dtypes and autograd inputs take ATen's path (and its errors).
    from compiler import skinny_matmul as sm
    a, b = torch.randn(4, 512, device=DEVICE), torch.randn(512, 256, device=DEVICE)
    bias2d = torch.randn(4, 256, device=DEVICE)
    before = sm.CALLS["skinny"]
    assert torch.allclose(sm.addmm(bias2d, a, b), torch.addmm(bias2d, a, b), atol=1e-4)
    assert torch.allclose(sm.addmm(bias2d[0], a, b, beta=2), torch.addmm(bias2d[0], a, b, beta=2), atol=1e-4)
    try:
        sm.mm(a, b.double())
        raise AssertionError("mixed dtypes must raise as torch.mm does")
    except RuntimeError:
        pass
    w = b.clone().requires_grad_()
    sm.mm(a, w).sum().backward()
    assert w.grad is not None
    assert sm.CALLS["skinny"] == before
    return "ok"


results, test_skinny_matmul_case = interpreted.case_tests(globals(), __file__)


if __name__ == "__main__":
    interpreted.print_results(interpreted.run_cases(globals()))
