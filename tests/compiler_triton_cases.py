"""Triton-path checks, run by tests/test_compiler_triton.py.

On a machine without CUDA they run in a subprocess with TRITON_INTERPRET=1
(the interpreter must be chosen before triton is imported); with CUDA they
run in-process on the GPU.  ``python tests/compiler_triton_cases.py`` prints
one JSON line per case.
"""
import json
import os
import sys
import traceback

import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _close(out, ref, atol=1e-5, rtol=1e-4):
    out = out if isinstance(out, (tuple, list)) else [out]
    ref = ref if isinstance(ref, (tuple, list)) else [ref]
    assert len(out) == len(ref)
    for o, r in zip(out, ref):
        assert o.shape == r.shape and o.dtype == r.dtype and o.device == r.device, (o.shape, r.shape)
        assert torch.allclose(o, r, atol=atol, rtol=rtol, equal_nan=True), (o - r).abs().max().item()


def _sizes(model, spec, sizes, d=32):
    import compiler
    f = compiler.compile(model, spec, target="triton")
    with torch.no_grad():
        for B, T in sizes:
            x = torch.randn(B, T, d, device=DEVICE)
            _close(f(x), model(x))
    assert f.stats["variants"] == 1, f.stats
    return f


def case_mlp_layernorm_gelu():
    from tests.compiler_programs import MLPBlock
    for approx in ("none", "tanh"):
        torch.manual_seed(0)
        f = _sizes(MLPBlock(approximate=approx).to(DEVICE).eval(), "x: f32[B, T, 32]", [(2, 3), (3, 7), (2, 19)])
    from compiler.ir import Kernel
    assert any(isinstance(s, Kernel) and len(s.reductions) == 2 for s in f.variants[0].steps)


def case_attention_softmax():
    from tests.compiler_programs import Attention
    torch.manual_seed(0)
    _sizes(Attention().to(DEVICE).eval(), "x: f32[B, T, 32]", [(2, 5), (3, 11)])


def case_pointwise_zoo():
    import compiler
    from tests.compiler_programs import pointwise_zoo
    f = compiler.compile(pointwise_zoo, "x: f32[B, T]", "y: f32[B, T]", target="triton")
    for B, T in [(3, 7), (4, 300)]:
        x, y = torch.randn(B, T, device=DEVICE), torch.randn(B, T, device=DEVICE)
        _close(f(x, y), pointwise_zoo(x, y))


def case_reductions_long_rows():
    import compiler
    from tests.compiler_programs import reductions
    f = compiler.compile(reductions, "x: f32[B, T, C]", target="triton")
    for shape in [(3, 7, 6), (2, 3, 2500)]:  # 2500 > one block: the row loop runs 3 times
        x = torch.randn(*shape, device=DEVICE)
        _close(f(x), reductions(x), atol=1e-4)
    assert f.stats["variants"] == 1


def case_views():
    import compiler
    from tests.compiler_programs import views
    f = compiler.compile(views, "x: f32[B, T, 8]", target="triton")
    for shape in [(3, 7, 8), (2, 4, 8)]:
        x = torch.randn(*shape, device=DEVICE)
        _close(f(x), views(x))


def case_fallback_and_dtypes():
    import compiler

    def prog(x, i):
        y = torch.cumsum(torch.relu(x), dim=1)  # an ATen extern between kernels
        return torch.softmax(y * 0.1, -1) + (x * i).to(torch.float64).sum(-1, keepdim=True), (i > 2).sum(-1)

    f = compiler.compile(prog, "x: f32[N, K]", "i: i64[N, K]", target="triton")
    for n, k in [(3, 5), (5, 17)]:
        x, i = torch.randn(n, k, device=DEVICE), torch.randint(0, 5, (n, k), device=DEVICE)
        _close(f(x, i), prog(x, i))


def case_torch_compile_backend():
    os.environ["SYMSHAPE_TARGET"] = "triton"
    import compiler
    from tests.compiler_programs import MLPBlock
    torch._dynamo.reset()
    m = MLPBlock().to(DEVICE).eval()
    graphs = compiler.BACKEND_STATS["graphs"]
    f = torch.compile(m, backend="symshape", dynamic=True)
    with torch.no_grad():
        for B, T in [(2, 5), (3, 9), (2, 17)]:
            x = torch.randn(B, T, 32, device=DEVICE)
            _close(f(x), m(x))
    assert compiler.BACKEND_STATS["graphs"] - graphs == 1
    os.environ.pop("SYMSHAPE_TARGET")


CASES = [n for n in dir() if n.startswith("case_")]


def run_all(names=CASES):
    results = {}
    for n in names:
        try:
            globals()[n]()
            results[n] = "ok"
        except Exception:
            results[n] = traceback.format_exc()[-3000:]
    return results


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    print("RESULTS " + json.dumps(run_all(sys.argv[1:] or CASES)))
