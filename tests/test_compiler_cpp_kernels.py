"""The C++ kernels themselves: size-class variants chosen per call, vectorized
math, NaN semantics of vector reductions, and the on-disk build cache."""
import os
import platform
import subprocess
import sys
import textwrap

import pytest
import torch

import compiler
import shapes
from compiler.codegen import cpp as cpp_codegen
from compiler.codegen.cpp import CPP
from compiler.lowering import lower
from compiler.scheduler import schedule

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _softmax_ln(x):
    y = torch.softmax(x * 0.5, dim=-1)
    return torch.nn.functional.gelu(torch.nn.functional.layer_norm(y + x, x.shape[-1:]))


def test_size_class_change_selects_another_variant_without_retrace():
    f = compiler.compile(_softmax_ln, "x: f32[B, T]")
    builds = cpp_codegen.BUILD_COUNT["gcc"]
    launch = f.variants[0].launchers["kernel0"][1]
    assert set(launch.variant_calls) == {"a16", "any"}
    seen = []
    torch.manual_seed(0)
    for B, T in [(3, 32), (2, 33), (5, 16), (4, 7), (2, 5), (2, 1024)]:
        before = dict(launch.variant_calls)
        x = torch.randn(B, T)
        torch.testing.assert_close(f(x), _softmax_ln(x), atol=2e-6, rtol=1e-5)
        used = [t for t in before if launch.variant_calls[t] == before[t] + 1]
        assert len(used) == 1
        seen.append(used[0])
    # T a multiple of 16 runs the aligned variant, any other T the general one.
    assert seen == ["a16", "any", "a16", "any", "any", "a16"]
    assert f.stats["traces"] == 1 and f.stats["variants"] == 1
    assert cpp_codegen.BUILD_COUNT["gcc"] == builds


@pytest.mark.parametrize("T", [16, 37])
def test_vector_max_min_keep_nan_and_inf(T):
    f = compiler.compile(lambda x: (x.amax(-1), x.amin(-1), x.sum(-1)), "x: f32[B, T]")
    x = torch.randn(6, T)
    x[1, T // 2] = float("nan")
    x[2, -1] = float("nan")
    x[3, 0] = float("inf")
    x[4, :] = -float("inf")
    x[5, :] = float("nan")
    for out, ref in zip(f(x), (x.amax(-1), x.amin(-1), x.sum(-1))):
        torch.testing.assert_close(out, ref, equal_nan=True, atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="libmvec is glibc's x86-64 vector math")
def test_transcendentals_call_vector_math():
    lp = lower(shapes.trace(_softmax_ln, "x: f32[B, T]"))
    src, _ = CPP.generate(lp, schedule(lp))
    so = cpp_codegen.build(src)._name
    with open(so, "rb") as fh:
        blob = fh.read()
    # glibc vector variants are named _ZGV<isa><mask><lanes>v_<name>.
    assert b"v_expf" in blob and b"v_erff" in blob


def test_second_process_with_same_program_compiles_nothing(tmp_path):
    script = textwrap.dedent("""
        import torch, compiler
        from compiler.codegen import cpp as cpp_codegen
        f = compiler.compile(lambda x: torch.softmax(x, -1) * torch.sigmoid(x), "x: f32[B, T]")
        x = torch.randn(3, 40)
        assert torch.allclose(f(x), torch.softmax(x, -1) * torch.sigmoid(x), atol=1e-6)
        print(cpp_codegen.BUILD_COUNT["gcc"])
    """)
    env = {**os.environ, "SYMSHAPE_CACHE": str(tmp_path), "PYTHONPATH": ROOT}
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
            for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
    assert [int(r.stdout.split()[-1]) for r in runs] == [1, 0]


def test_index_simplification_is_logged_and_validated():
    """A dim split by a view and merged again indexes linearly; the engine made that rewrite (logged,
    with the loop indices as axioms) and translation validation proves every step of it."""
    import sympy

    from compiler.ir import loop_var
    from compiler.lowering import lower
    from compiler.scheduler import schedule
    from validation.translation import validate_env

    def split_merge(x):
        y = x.reshape(x.shape[0] * x.shape[1], 16) * 2
        return y.reshape(x.shape[0], x.shape[1], 16).transpose(0, 1).contiguous() + 1

    tp = shapes.trace(split_merge, "x: f32[A, B, 16]")
    before = len(tp.env.log)
    lp = lower(tp)
    src, _ = cpp_codegen.CPP.generate(lp, schedule(lp))
    steps = tp.env.log[before:]
    assert any(e.kind == "rewrite" and e.rule == "div_mod_recombine" for e in steps)
    axioms = {e.after for e in steps if e.kind == "axiom"}
    assert {sympy.Ge(loop_var(v), 0, evaluate=False) for v in ("x0", "x1", "j")} <= axioms
    kernels = src[src.index("kernel0__"):]
    assert "sym_floordiv(" not in kernels and "sym_mod(" not in kernels
    report = validate_env(tp.env)
    assert report.ok and not report.unknown, str(report)


def test_transposed_store_loops_in_memory_order():
    """A pointwise value stored transposed (a batched ``transpose(1, 2)`` a matmul reads): the
    kernel's rows run over the buffer's outer memory dim, so its inner loop writes (and reads
    ``x``) along stride 1; values equal eager at every size.  A matrix's ``t(act)`` (a weight
    gradient's operand) is not stored transposed at all: the value is stored in its own layout
    and the matmul reads a transposed view of it (compiler.lowering: ``_matrix_transpose``)."""
    from compiler.ir import Kernel
    f = lambda x, w: torch.bmm((torch.tanh(x) * 0.5).transpose(1, 2), w)  # noqa: E731
    tp = shapes.trace(f, "x: f32[B, T, 64]", "w: f32[B, T, 8]")
    lp = lower(tp)
    kernels = [s for s in schedule(lp) if isinstance(s, Kernel)]
    stores = [(k, b) for k in kernels for b, *_ in k.inner_stores]
    assert stores and all(tuple(b.strides)[-1] == 1 for _, b in stores), [(b.shape, b.strides) for _, b in stores]
    got = [tuple(map(str, lp.buffers[b.name].strides)) for _, b in stores]
    assert got == [("64*T", "1", "64")], got  # the buffer itself is transposed
    g = compiler.compile(f, "x: f32[B, T, 64]", "w: f32[B, T, 8]")
    for t in (1, 7, 33):
        x, w = torch.randn(2, t, 64), torch.randn(2, t, 8)
        torch.testing.assert_close(g(x, w), f(x, w), atol=1e-5, rtol=1e-5)
    f2 = lambda x, w: torch.mm((torch.tanh(x) * 0.5).t(), w)  # noqa: E731
    lp2 = lower(shapes.trace(f2, "x: f32[T, 64]", "w: f32[T, 8]"))
    stores2 = [b for k in schedule(lp2) if isinstance(k, Kernel) for b, *_ in k.inner_stores]
    assert [tuple(lp2.buffers[b.name].strides) for b in stores2] == [(64, 1)]  # stored as computed; t() is a view
    g2 = compiler.compile(f2, "x: f32[T, 64]", "w: f32[T, 8]")
    for t in (1, 7, 33):
        x, w = torch.randn(t, 64), torch.randn(t, 8)
        torch.testing.assert_close(g2(x, w), f2(x, w), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("case", ["sum0", "fused", "row_scale", "half"])
def test_column_reductions_sum_down_columns_with_stride_1(case):
    """Sums over the row dim of ``[T, C]`` values (bias and LayerNorm weight gradients) run
    rows outer, a block of columns inner: the kernel takes the column form, and the sums
    equal eager at every size (1 and a prime included)."""
    from compiler.codegen.cpp import column_reduction
    f, specs, make = {
        "sum0": (lambda g: g.sum(0), ["g: f32[T, 64]"], lambda T: [torch.randn(T, 64)]),
        "fused": (lambda g, x: (g * torch.tanh(x)).sum(0) * 2 + 1, ["g: f32[T, 96]", "x: f32[T, 96]"],
                  lambda T: [torch.randn(T, 96), torch.randn(T, 96)]),
        "row_scale": (lambda g, m: (g * m[:, None]).sum(0), ["g: f32[T, 70]", "m: f32[T]"],
                      lambda T: [torch.randn(T, 70), torch.randn(T)]),
        "half": (lambda g: g.bfloat16().sum(0), ["g: f32[T, 130]"], lambda T: [torch.randn(T, 130)]),
    }[case]
    c = compiler.compile(f, *specs)
    assert [column_reduction(k) for k in c.variants[0].kernels] == [True]
    for T in (1, 7, 33, 100):
        args = make(T)
        torch.testing.assert_close(c(*args), f(*args), atol=1e-3, rtol=1e-3)
