"""``backend="symshape"`` runs the plan ``compiler.compile`` makes for the same model (issue #28).

Dynamo hands the backend its own graph of a transformers model (traced with
``is_torchdynamo_compiling()`` true: every parameter an input, float attributes as 0-dim
tensors made at each call, the causal mask built explicitly); the compiled plan must still
be compile's -- the same kernels, ATen calls and SDPA calls, the same sizes-only masks
classified the same way -- so that the backend's extra host time per call is dynamo's frame
alone.  Also: a float dynamo passes as a tensor is baked into the kernels, so a changed value
must run dynamo's graph (still equal to eager).
"""
import pytest
import torch

import compiler
from compiler.backend import symshape_backend
from tests.attention_models import Logits, tiny_llama_lm

pytest.importorskip("transformers")


def _plan(cp):
    """(kernel steps, extern targets, mask classes) of the steps a repeated call runs."""
    from compiler.wrapper import KernelStep
    (v, sizes, _, _, _), = cp._bound.values()
    classes = tuple(sizes[len(sizes) - len(v.masks):]) if v.masks else ()
    plan, skip = v.plan_at(classes) if v.masks else (v.plan, frozenset())
    steps = [s for i, s in enumerate(plan) if i not in skip]
    kernels = sum(isinstance(s, KernelStep) for s in steps)
    externs = sorted(str(getattr(s.target, "__name__", s.target)) for s in steps if not isinstance(s, KernelStep))
    return kernels, externs, classes


def compare_plans(target: str, device: str = "cpu") -> tuple:
    """Compile a tiny transformers Llama both ways; both equal eager; returns both plans."""
    torch._dynamo.reset()
    model = Logits(tiny_llama_lm()).to(device)
    ids = torch.randint(0, 128, (2, 7), generator=torch.Generator().manual_seed(0)).to(device)
    got = []

    def backend(gm, example_inputs, **kw):
        got.append(symshape_backend(gm, example_inputs, **kw))
        return got[-1]

    with torch.no_grad():
        ref = model(ids)
        # The plans compared are the compiled programs' own: no CUDA graphs around them.
        f = compiler.compile(model, "ids: i64[B, T]", target=target, cuda_graphs=False)
        b = torch.compile(Logits(model.m), backend=backend, dynamic=True,
                          options={"target": target, "cuda_graphs": False})
        for _ in range(3):  # the third call of a shape runs with its sizes-only masks classified
            out_c, out_b = f(ids), b(ids)
        tol = 1e-4 if device == "cpu" else 1e-3  # fp32 on CUDA: cuBLAS/SDPA kernels differ from the CPU's
        for name, out in (("compile", out_c), ("backend", out_b)):
            assert torch.allclose(out, ref, atol=tol, rtol=tol), (name, (out - ref).abs().max().item())
    assert len(got) == 1
    return _plan(f), _plan(got[0].compiled)


def _check(pc, pb):
    assert pc[0] == pb[0], ("kernels", pc[0], pb[0])
    assert pc[1] == pb[1], ("ATen calls only in compile's / the backend's plan",
                            sorted(set(pc[1]) - set(pb[1])), sorted(set(pb[1]) - set(pc[1])))
    assert pc[2] == pb[2], ("mask classes", pc[2], pb[2])
    kernels, externs, classes = pb
    # The mask transformers builds is classified causal at this size: SDPA runs without it.
    assert classes and all(c.name == "CAUSAL" for c in classes)
    assert sum("sdpa" in e for e in externs) == 2 and kernels > 0


def test_backend_plans_what_compile_plans_for_a_transformers_llama_cpp():
    _check(*compare_plans("cpp"))


def test_backend_plans_what_compile_plans_for_a_transformers_llama_triton():
    """Triton: on CUDA in process, else under ``TRITON_INTERPRET=1`` in a subprocess (the
    variable is read when triton is imported)."""
    if torch.cuda.is_available():
        _check(*compare_plans("triton", "cuda"))
        return
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    code = ("from tests.test_backend_vs_compile import compare_plans, _check\n"
            "_check(*compare_plans('triton'))\nprint('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env, cwd=root)
    assert out.stdout.strip().endswith("ok"), out.stderr[-3000:]


class _Norm(torch.nn.Module):
    """RMSNorm with its epsilon a Python float attribute (dynamo passes it as a 0-dim tensor)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16))
        self.eps = 1e-6

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.w


def test_a_changed_float_attribute_runs_dynamos_graph():
    torch._dynamo.reset()
    m = _Norm().eval()
    f = torch.compile(m, backend="symshape", dynamic=True)
    with torch.no_grad():
        for n in (3, 5, 9):
            x = torch.randn(n, 16) * 1e-2
            assert torch.allclose(f(x), m(x), atol=1e-5, rtol=1e-4)
        m.eps = 1.0  # the kernels baked 1e-6 in: the call must notice and still match eager
        x = torch.randn(4, 16) * 1e-2
        assert torch.allclose(f(x), m(x), atol=1e-5, rtol=1e-4)
        assert not torch.allclose(f(x), _Norm.forward(_with_eps(m, 1e-6), x), atol=1e-5)


def _with_eps(m, eps):
    c = _Norm()
    c.load_state_dict(m.state_dict())
    c.eps = eps
    return c
