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
    assert b"v_expf" in blob
    lp = lower(shapes.trace(lambda x: torch.erf(x) * 2, "x: f32[B, T]"))
    src, _ = CPP.generate(lp, schedule(lp))
    with open(cpp_codegen.build(src)._name, "rb") as fh:
        assert b"v_erff" in fh.read()


def test_gelu_erf_is_eagers_vectorized_formula_and_plain_erf_is_glibcs():
    """GELU's erf is spelled as eager's GELU kernel computes it (ATen's vectorized erf): values
    stay within 2 ulp-ish of eager's GELU; a plain ``torch.erf`` keeps glibc's erf (accurate near 0,
    where the GELU formula's absolute error would be a large relative one)."""
    gelu = lambda x: torch.nn.functional.gelu(x)  # noqa: E731
    plain = lambda x: torch.erf(x * 0.5)  # noqa: E731
    for fn, want, other in [(gelu, "gelu_erf(", "std::erf("), (plain, "std::erf(", "gelu_erf(")]:
        lp = lower(shapes.trace(fn, "x: f32[N]"))
        src, _ = CPP.generate(lp, schedule(lp))
        body = src[src.index("static void k_"):]
        assert want in body and other not in body
    x = torch.cat([torch.randn(4099) * 5, torch.tensor([0.0, -0.0, 1e-30, -1e-30, 30.0, -30.0, float("nan")])])
    got, ref = compiler.compile(gelu, "x: f32[N]")(x), gelu(x)
    torch.testing.assert_close(got, ref, atol=2e-6, rtol=4e-7, equal_nan=True)
    small = torch.tensor([1e-6, -3e-7, 1e-3, 0.25])
    torch.testing.assert_close(compiler.compile(plain, "x: f32[N]")(small), plain(small), atol=0, rtol=3e-7)


def _stored_then_summed(x, w):
    # A backward's pointwise gradient (stored: a matmul reads it) and its bias gradient.
    h = torch.tanh(x) * x + x * x * 0.5
    return torch.mm(h.view(-1, h.shape[-1]), w), h.sum((0, 1))


def test_column_sum_of_a_stored_value_reads_it():
    """The bias gradient of a value that is stored anyway (its matmul reads it) loads the stored
    rows rather than recomputing the value's pointwise chain; values equal eager at 1 and primes."""
    from compiler.codegen.cpp_loops import column_reduction
    from compiler.ir import Kernel, Load, Op, walk
    specs = ("x: f32[1, T, 64]", "w: f32[64, 8]")
    kernels = [s for s in schedule(lower(shapes.trace(_stored_then_summed, *specs))) if isinstance(s, Kernel)]
    col = [k for k in kernels if column_reduction(k)]
    assert len(col) == 1
    body = col[0].reductions[0][2]
    assert not any(isinstance(n, Op) and n.op.value == "tanh" for n in walk(body))
    assert sum(isinstance(n, Load) for n in walk(body)) == 1
    f = compiler.compile(_stored_then_summed, *specs)
    w = torch.randn(64, 8)
    for T in (1, 7, 13):
        x = torch.randn(1, T, 64)
        for out, ref in zip(f(x, w), _stored_then_summed(x, w)):
            torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-5)


def _log_softmax_grad(x, m, lse, g):
    # A backward's log-softmax recomputed from the forward's saved max and logsumexp, read by two ops.
    ls = x - m - lse
    return g - torch.exp(ls) * g.sum(-1, keepdim=True), (ls * g).sum(-1)


def test_value_with_one_full_load_is_not_stored_for_sharing():
    """``x - max - lse`` reads one full-size tensor and two values per row: recomputed where it is
    read (cheap) rather than stored as a [T, V] buffer; values equal eager at 1 and primes."""
    from compiler.lowered import StoreItem
    specs = ("x: f32[T, 32]", "m: f32[T, 1]", "lse: f32[T, 1]", "g: f32[T, 32]")
    lp = lower(shapes.trace(_log_softmax_grad, *specs))
    rows = [i.buffer.name for i in lp.items if isinstance(i, StoreItem) and len(i.buffer.shape) == 2
            and i.buffer.shape[-1] == 32]
    assert len(rows) == 1, rows  # the output only
    f = compiler.compile(_log_softmax_grad, *specs)
    for T in (1, 5, 17):
        x, g = torch.randn(T, 32), torch.randn(T, 32)
        m = x.amax(-1, keepdim=True)
        lse = torch.log(torch.exp(x - m).sum(-1, keepdim=True))
        for out, ref in zip(f(x, m, lse, g), _log_softmax_grad(x, m, lse, g)):
            torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


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
    kernels = src[src.index("static void k_"):]
    assert "sym_floordiv(" not in kernels and "sym_mod(" not in kernels
    report = validate_env(tp.env)
    assert report.ok and not report.unknown, str(report)


def test_a_split_merged_by_a_divisor_that_is_a_sum_recombines_and_validates():
    """A ViT's tokens are ``P + 1`` per image (patches and the class token): flattening
    ``[B, P + 1, 768]`` indexes ``768*(P+1)*(r // (P+1)) + 768*(r % (P+1))``, expanded into
    three terms.  The engine sums the ``//`` terms and recombines them into ``768*r`` (a linear,
    coalescable index); a sum that is not ``k*b`` stays as it is.  Translation validation proves it."""
    from compiler.exprs import IndexFacts
    from compiler.ir import loop_var
    from shapes import ShapeEnv
    from shapes.functions import FloorDiv, PyMod
    from validation.translation import validate_env

    env = ShapeEnv()
    H = env.create_symbol("H", 14)
    r, x0 = loop_var("r"), loop_var("x0")
    P = FloorDiv(H, 16) ** 2 + H * H
    n = P + 1
    facts = IndexFacts(env)
    assert facts.simplify_index(x0 + 768 * P * FloorDiv(r, n) + 768 * FloorDiv(r, n) + 768 * PyMod(r, n)) == 768 * r + x0
    kept = facts.simplify_index(768 * P * FloorDiv(r, n) + 768 * PyMod(r, n))  # 768*(r // n) missing
    assert kept.has(FloorDiv) and kept.has(PyMod), kept
    report = validate_env(env)
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


@pytest.mark.parametrize("case", ["sum0", "fused", "row_scale", "half", "batch_of_one", "over_batch_of_one"])
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
        # A batch of one (training a GPT-2 on one sequence): the rows [1, C], an extent-1 dim.
        "batch_of_one": (lambda g: g.sum(1, keepdim=True), ["g: f32[1, T, 72]"], lambda T: [torch.randn(1, T, 72)]),
        # Summed over (batch, T) with the batch 1: no ``r % T`` in the index.
        "over_batch_of_one": (lambda g: (g * g).sum((0, 1)), ["g: f32[1, T, 72]"], lambda T: [torch.randn(1, T, 72)]),
    }[case]
    c = compiler.compile(f, *specs)
    assert [column_reduction(k) for k in c.variants[0].kernels] == [True]
    for T in (1, 7, 33, 100):
        args = make(T)
        torch.testing.assert_close(c(*args), f(*args), atol=1e-3, rtol=1e-3)


def _rotary(q, k, pos, inv_freq):
    # HF Llama's rotary embedding: cos/sin of [B, T, D] positions, read by every head of q and k.
    freqs = pos[:, :, None].float() * inv_freq[None, None, :]
    emb = torch.cat([freqs, freqs], -1)
    cos, sin = emb.cos()[:, None], emb.sin()[:, None]

    def rot(x):
        h = x.shape[-1] // 2
        return torch.cat([-x[..., h:], x[..., :h]], -1)
    return q * cos + rot(q) * sin, k * cos + rot(k) * sin


ROTARY_SPECS = ("q: f32[B, 4, T, 64]", "k: f32[B, 4, T, 64]", "pos: i64[B, T]", "inv_freq: f32[32]")


def test_rotary_cos_sin_computed_once_and_vectorized():
    """cos and sin of the positions are stored once ([B, T, 64]) rather than recomputed for every
    head of q and k; the loops computing them and the rotation (a gather at min/max indices)
    vectorize: the module calls glibc's vector sin and cos, not the scalar sincos that gcc makes
    of sin(x) and cos(x) of one argument.  Values equal eager at sizes 1 and primes."""
    from compiler.ir import Kernel, Op, OpKind, walk
    lp = lower(shapes.trace(_rotary, *ROTARY_SPECS))
    kernels = [s for s in schedule(lp) if isinstance(s, Kernel)]

    def kinds(k):
        return {OpKind(n.op) for _, _, v in k.inner_stores for n in walk(v) if isinstance(n, Op)}
    big = [k for k in kernels if len(k.outer) == 3]  # the kernels writing [B, 4, T, 64]
    assert big and not any(kinds(k) & {OpKind.SIN, OpKind.COS} for k in big)
    assert any({OpKind.SIN, OpKind.COS} <= kinds(k) for k in kernels)
    src, _ = CPP.generate(lp, schedule(lp))
    if platform.machine() in ("x86_64", "AMD64"):
        with open(cpp_codegen.build(src)._name, "rb") as fh:
            blob = fh.read()
        assert b"v_sinf" in blob and b"v_cosf" in blob and b"sincos" not in blob
    f = compiler.compile(_rotary, *ROTARY_SPECS)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, 64, 2).float() / 64))
    for B, T in [(1, 1), (2, 7), (1, 13), (3, 32)]:
        q, k = torch.randn(B, 4, T, 64), torch.randn(B, 4, T, 64)
        pos = torch.arange(T).expand(B, T) + torch.randint(0, 50, (B, 1))
        for out, ref in zip(f(q, k, pos, inv_freq), _rotary(q, k, pos, inv_freq)):
            torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_cube_is_a_product_like_eagers():
    """``x ** 3`` (GELU's tanh form) lowers to ``x * x * x``, the product ATen's kernel computes:
    no pow call in the kernel; the cube equals eager bit for bit, GELU's inner term within
    rounding (gcc contracts its multiply-add)."""
    f = lambda x: torch.pow(x, 3) * 0.044715 + x  # noqa: E731
    lp = lower(shapes.trace(f, "x: f32[N]"))
    src, _ = CPP.generate(lp, schedule(lp))
    assert "std::pow" not in src[src.index("static void k_"):]
    g, cube = compiler.compile(f, "x: f32[N]"), compiler.compile(lambda x: x ** 3, "x: f32[N]")
    for n in (1, 17, 1000):
        x = torch.randn(n) * 3
        assert torch.equal(cube(x), x ** 3)
        torch.testing.assert_close(g(x), f(x), atol=1e-5, rtol=1e-6)


def _qkv(x, wq, wk, wv):
    # Three projections of one norm's output, each through its own reshape (as in HF attention).
    h = torch.nn.functional.layer_norm(x, x.shape[-1:])
    B, T, D = x.shape
    return [torch.mm(h.view(B * T, D), w) for w in (wq, wk, wv)]


def test_reshapes_of_one_value_share_one_stored_buffer():
    """q, k and v read one norm output through three reshapes: it is stored once and each reshape
    replayed on it (not stored three times); results equal eager at sizes 1 and primes."""
    from compiler.lowered import StoreItem
    specs = ("x: f32[B, T, 64]", "wq: f32[64, 64]", "wk: f32[64, 64]", "wv: f32[64, 64]")
    lp = lower(shapes.trace(_qkv, *specs))
    assert len([i for i in lp.items if isinstance(i, StoreItem)]) == 1
    f = compiler.compile(_qkv, *specs)
    w = [torch.randn(64, 64) for _ in range(3)]
    for B, T in [(1, 1), (2, 7), (3, 13)]:
        x = torch.randn(B, T, 64)
        for out, ref in zip(f(x, *w), _qkv(x, *w)):
            torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-5)


def _residual(x, a, b, w):
    # A residual stream: each norm reads the running sum, which also feeds the next sum.
    h = x + a + b
    n1 = torch.nn.functional.layer_norm(h, h.shape[-1:])
    h2 = h + torch.mm(n1.view(-1, h.shape[-1]), w).view(h.shape)
    return torch.nn.functional.layer_norm(h2, h2.shape[-1:])


def test_residual_stream_read_by_several_ops_is_stored_once():
    """``x + a + b`` read by a norm and by the next residual sum is stored once, so the norm's
    passes and the next sum read it instead of recomputing it; values equal eager at 1 and primes."""
    from compiler.lowered import StoreItem
    specs = ("x: f32[B, T, 32]", "a: f32[B, T, 32]", "b: f32[B, T, 32]", "w: f32[32, 32]")
    lp = lower(shapes.trace(_residual, *specs))
    stored = {i.buffer.name for i in lp.items if isinstance(i, StoreItem)}
    assert "add_tensor_1" in stored, stored
    f = compiler.compile(_residual, *specs)
    w = torch.randn(32, 32)
    for B, T in [(1, 1), (2, 5), (1, 17)]:
        x, a, b = (torch.randn(B, T, 32) for _ in range(3))
        torch.testing.assert_close(f(x, a, b, w), _residual(x, a, b, w), atol=1e-4, rtol=1e-5)


def _post_norm(x, a, w):
    # BERT's post-norm block: the norm's output feeds the next matmul and the next residual sum.
    n1 = torch.nn.functional.layer_norm(x + a, x.shape[-1:])
    h = torch.mm(n1.view(-1, x.shape[-1]), w).view(x.shape)
    return torch.nn.functional.layer_norm(n1 + h, x.shape[-1:])


def test_post_norm_output_read_twice_is_stored_not_recomputed():
    """A norm's output read by a matmul and by the next residual sum is stored once by the norm's
    kernel; the next norm reads it rather than recomputing the first norm's reductions."""
    from compiler.ir import Kernel
    specs = ("x: f32[B, T, 32]", "a: f32[B, T, 32]", "w: f32[32, 32]")
    lp = lower(shapes.trace(_post_norm, *specs))
    kernels = [s for s in schedule(lp) if isinstance(s, Kernel)]
    assert [len(k.reductions) for k in kernels] == [2, 2], [len(k.reductions) for k in kernels]
    f = compiler.compile(_post_norm, *specs)
    w = torch.randn(32, 32)
    for B, T in [(1, 1), (2, 5), (1, 17)]:
        x, a = torch.randn(B, T, 32), torch.randn(B, T, 32)
        torch.testing.assert_close(f(x, a, w), _post_norm(x, a, w), atol=1e-4, rtol=1e-5)


def _heads_cat(x, y):
    # A backward's cat of per-head gradients: [H, T, 16] halves read back as [T, H * 16] rows.
    T = x.shape[1]
    return torch.cat([x.transpose(0, 1).reshape(T, 64), y.transpose(0, 1).reshape(T, 64)], -1) * 2


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_half_gathers_vectorize_and_read_the_right_half(dtype):
    """Half values loaded at a non-affine index (a cat of head-transposed halves) go through the
    aligned 32-bit word that holds them (gcc 12 has no 16-bit gather): the row loop vectorizes,
    and values equal eager at sizes 1 and primes, also for inputs starting at an odd element
    (2 bytes off a 4-byte boundary)."""
    specs = (f"x: {dtype}[4, T, 16]", f"y: {dtype}[4, T, 16]")
    lp = lower(shapes.trace(_heads_cat, *specs))
    src, _ = CPP.generate(lp, schedule(lp))
    assert "gather16(b" in src  # a use in a kernel (the prelude defines it in every module)
    f = compiler.compile(_heads_cat, *specs)
    dt = torch.bfloat16 if dtype == "bf16" else torch.float16
    for T in (1, 7, 13, 32):
        base = torch.randn(2 * 4 * T * 16 + 1).to(dt)
        x, y = base[1:4 * T * 16 + 1].view(4, T, 16), base[4 * T * 16 + 1:].view(4, T, 16)  # odd offsets
        assert x.data_ptr() % 4 == 2
        assert torch.equal(f(x, y), _heads_cat(x, y))


def _seams(x, y, z):
    # Seams at constant columns: a cat's, and rotate_half's (as in a rotary embedding).
    return torch.cat([x, y], -1) * 2, torch.cat([-z[..., 20:], z[..., :20]], -1) + 1


def test_rows_with_seams_loop_once_per_piece():
    """A row that a cat splits at a constant column (``j < c``) loops once per piece (bounds
    clipped to the row, also in the aligned size class); values equal eager at sizes 1 and primes."""
    from compiler.ir import Kernel
    specs = ("x: f32[T, 32]", "y: f32[T, N]", "z: f32[T, 40]")
    lp = lower(shapes.trace(_seams, *specs))
    steps = schedule(lp)
    src, _ = CPP.generate(lp, steps)
    assert "std::min<int64_t>(32, " in src and "std::min<int64_t>(20, " in src
    assert all(isinstance(s, Kernel) for s in steps)
    f = compiler.compile(_seams, *specs)
    for T, N in [(1, 1), (3, 7), (2, 40), (5, 41), (1, 64)]:
        x, y, z = torch.randn(T, 32), torch.randn(T, N), torch.randn(T, 40)
        for out, ref in zip(f(x, y, z), _seams(x, y, z)):
            torch.testing.assert_close(out, ref)


def _rotary_bf16_head16(x, cos, sin):
    # Llama's rotary embedding: x * cos + rotate_half(x) * sin, head dim 16 (halves at column 8).
    half = torch.cat([-x[..., 8:], x[..., :8]], -1)
    return x * cos + half * sin


def test_half_rows_split_at_a_seam_load_each_piece_without_gathers():
    """Inside one piece of a row split at a seam (rotate_half's ``j < 8``) the seam's min/max
    has one winner, so a bf16 load's index ``min(j, 7) + 8`` is the affine ``j + 8``: a plain
    vector load, not ``gather16`` (Llama's rotary kernels on the CPU took 75-155 us per call at
    T = 257, head dim 16, with gathers; the C++ kernels of a training step 1.83 -> 1.05 ms).
    Values equal eager at sizes 1 and primes, also for inputs at an odd element offset."""
    specs = ("x: bf16[H, T, 16]", "cos: bf16[T, 16]", "sin: bf16[T, 16]")
    lp = lower(shapes.trace(_rotary_bf16_head16, *specs))
    src, _ = CPP.generate(lp, schedule(lp))
    assert "std::min<int64_t>(8, " in src and "gather16(b" not in src
    f = compiler.compile(_rotary_bf16_head16, *specs)
    for H, T in [(1, 1), (4, 7), (3, 13), (2, 32)]:
        base = torch.randn(H * T * 16 + 1).bfloat16()
        x = base[1:].view(H, T, 16)  # 2 bytes off a 4-byte boundary
        cos, sin = torch.randn(T, 16).bfloat16(), torch.randn(T, 16).bfloat16()
        assert torch.equal(f(x, cos, sin), _rotary_bf16_head16(x, cos, sin))


def _bias_grad_and_transpose(g, w):
    # A backward's bias gradient next to a transposed operand with the same rows (C).
    return g.sum((0, 1)), (w.t() * 2).contiguous()


def test_column_sum_keeps_its_column_form_beside_other_stores_with_its_rows():
    """A store with the same rows as a column sum (``[C]`` of a ``[1, T, C]`` gradient) is not
    fused into the sum's kernel when that would make the sum walk its rows with a stride: the
    sum stays in column form; values equal eager at sizes 1 and primes."""
    from compiler.codegen.cpp_loops import column_reduction
    from compiler.ir import Kernel
    specs = ("g: f32[1, T, 64]", "w: f32[K, 64]")
    kernels = [s for s in schedule(lower(shapes.trace(_bias_grad_and_transpose, *specs))) if isinstance(s, Kernel)]
    assert any(column_reduction(k) for k in kernels) and len(kernels) == 2
    f = compiler.compile(_bias_grad_and_transpose, *specs)
    for T, K in [(1, 1), (7, 3), (13, 32)]:
        g, w = torch.randn(1, T, 64), torch.randn(K, 64)
        for out, ref in zip(f(g, w), _bias_grad_and_transpose(g, w)):
            torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-5)


def _group_grad(g):
    # GQA's repeat_kv backward: a head group's gradients summed over the group dim (2 heads).
    B, H, T, D = g.shape
    return g.view(B, H // 2, 2, T, D).sum(2) * 2


def test_sum_over_a_small_static_dim_is_adds_not_a_reduction():
    """A sum over 2 static elements per output (GQA's group sum) lowers to adds: its kernel has
    no reduction (a reduction of 2 per element ran ~30x slower on the GPU); values equal eager
    at sizes 1 and primes."""
    from compiler.ir import Kernel
    spec = "g: f32[B, 4, T, 8]"
    kernels = [s for s in schedule(lower(shapes.trace(_group_grad, spec))) if isinstance(s, Kernel)]
    assert [len(k.reductions) for k in kernels] == [0]
    f = compiler.compile(_group_grad, spec)
    for B, T in [(1, 1), (2, 5), (1, 17)]:
        g = torch.randn(B, 4, T, 8)
        torch.testing.assert_close(f(g), _group_grad(g), atol=1e-5, rtol=1e-5)


def _log_softmax_twice(x, t):
    # A loss backward's log-softmax of bf16 logits, recomputed: read by two ops (its exp and a gather-like product).
    z = x.float()
    m = z.amax(-1, keepdim=True)
    ls = z - m - torch.log(torch.exp(z - m).sum(-1, keepdim=True))
    return torch.exp(ls) * t + ls * 2


def test_a_function_of_one_tensor_read_twice_is_recomputed_not_stored():
    """A log-softmax (one load of its size and row reductions) read by two ops is inlined: no
    fp32 copy of the (rows, vocabulary) logits is stored (two such copies were +512 MiB at a GPT-2
    backward's peak); a residual sum of two tensors still is (see the test above)."""
    from compiler.lowered import StoreItem
    specs = ("x: bf16[N, 64]", "t: f32[N, 64]")
    lp = lower(shapes.trace(_log_softmax_twice, *specs))
    stored = [i.buffer for i in lp.items if isinstance(i, StoreItem)]
    assert len(stored) == 1 and stored[0].dtype == torch.float32, stored  # the output only
    f = compiler.compile(_log_softmax_twice, *specs)
    for n in (1, 7):
        x, t = torch.randn(n, 64).bfloat16(), torch.randn(n, 64)
        torch.testing.assert_close(f(x, t), _log_softmax_twice(x, t), atol=1e-4, rtol=1e-4)
