"""The generated straight-line run per variant, and the per-shape binding cache."""
import pytest
import torch

import compiler
from shapes.errors import SpecError
from tests.compiler_programs import MLPBlock


def test_wrapper_is_straight_line_and_matches_eager():
    torch.manual_seed(0)
    m = MLPBlock().eval()
    f = compiler.compile(m, "x: f32[B, T, 32]")
    src = f.variants[0].source
    assert src.startswith("def run(") and "for " not in src and "while " not in src
    with torch.no_grad():
        for B, T in [(2, 3), (3, 7), (2, 3)]:
            x = torch.randn(B, T, 32)
            torch.testing.assert_close(f(x), m(x), atol=1e-5, rtol=1e-4)


def test_parameters_changed_after_compile_are_seen():
    torch.manual_seed(0)
    m = MLPBlock().eval()
    f = compiler.compile(m, "x: f32[B, T, 32]")
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        f(x)
        m.fc1.weight.mul_(2)  # in place
        torch.testing.assert_close(f(x), m(x), atol=1e-5, rtol=1e-4)
        m.fc2.weight = torch.nn.Parameter(torch.randn_like(m.fc2.weight))  # replaced
        m.norm.bias = torch.nn.Parameter(torch.randn_like(m.norm.bias))
        torch.testing.assert_close(f(x), m(x), atol=1e-5, rtol=1e-4)


def test_binding_cache_keeps_checks_per_shape():
    f = compiler.compile(lambda x: torch.softmax(x * 2, -1), "x: f32[B, T]")
    for shape in [(3, 5), (3, 5), (1, 5), (3, 5), (4, 9)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(f(x), torch.softmax(x * 2, -1))
    assert f.stats["variants"] == 1  # size 1 is a size: B = 1 is served by the same variant
    with pytest.raises(SpecError):
        f(torch.randn(3, 5, dtype=torch.float64))  # same shape as a cached call, wrong dtype


def test_intermediates_are_freed_after_their_last_use():
    import weakref

    from compiler.wrapper import BufSlot, ExternStep, straight_line

    refs, alive_at_end = {}, {}

    def plus_one(name):
        def f(t):
            out = t + 1
            refs[name] = weakref.ref(out)
            return out
        return f

    def last(t, keep):
        alive_at_end.update({n: r() is not None for n, r in refs.items()})
        return t * 2 + keep

    plan = [ExternStep(plus_one("y"), (BufSlot("x"),), {}, "y"),
            ExternStep(plus_one("z"), (BufSlot("y"),), {}, "z"),
            ExternStep(plus_one("k"), (BufSlot("x"),), {}, "k"),
            ExternStep(last, (BufSlot("z"), BufSlot("k")), {}, "w")]
    src, fn = straight_line(plan, ["x"], [], [BufSlot("w"), BufSlot("k")])
    w, k = fn([torch.zeros(3)], (), (), [], None)
    assert w.tolist() == [5.0] * 3 and k.tolist() == [1.0] * 3
    # y's last reader ran before the last step: freed there; z and k are still read by it.
    assert alive_at_end == {"y": False, "z": True, "k": True}, src
    assert "del b_y" in src and "del b_k" not in src


def test_dense_flat_kernel_indexes_by_its_linear_index():
    # silu(a) * b over (N, 11008): both inputs and the output are dense in the store's row-major
    # order, so the Triton kernel indexes them by `lin` (no 64-bit div/mod per element); a
    # broadcast operand (the bias, indexed by column) still gets its own index.
    import shapes
    from compiler.codegen.triton import TRITON
    from compiler.lowering import lower
    from compiler.scheduler import schedule

    def prog(a, b, bias):
        return torch.nn.functional.silu(a) * b + bias

    lp = lower(shapes.trace(prog, "a: f16[N, 11008]", "b: f16[N, 11008]", "bias: f16[11008]"))
    src, _ = TRITON.generate(lp, schedule(lp))
    loads = [ln for ln in src.splitlines() if "tl.load(" in ln or "tl.store(" in ln]
    assert sum("+ (lin)" in ln for ln in loads) == 3, loads  # a, b and the output
    assert any("+ (j)" in ln for ln in loads), loads  # the bias, by column


def test_reshapes_of_contiguous_tensors_are_direct_views_equal_to_reshape():
    """A reshape whose input is contiguous at run time is made as a view with the traced shape's
    strides (no dispatcher); a strided input still goes through reshape.  Both equal eager at
    sizes 1, primes and larger, and the view aliases its input as reshape's does."""
    def prog(x, w):
        h = torch.relu(x @ w)                    # contiguous: a direct view
        a = h.reshape(x.shape[0], -1, 4, 2)      # (B, T, 4, 2)
        b = a.transpose(1, 2).reshape(x.shape[0], 4, -1)  # strided: reshape copies
        return a.sum(-1) * 2, b + 1, h.view(-1)
    f = compiler.compile(prog, "x: f32[B, T, 16]", "w: f32[16, 8]")
    src = f.variants[0].source
    assert "REINTERPRET(" in src
    w = torch.randn(16, 8)
    with torch.no_grad():
        for B, T in [(1, 1), (2, 5), (3, 13), (4, 64)]:
            x = torch.randn(B, T, 16)
            got, want = f(x, w), prog(x, w)
            for g, e in zip(got, want):
                assert g.shape == e.shape and g.stride() == e.stride()
                torch.testing.assert_close(g, e)


def test_a_reshaped_parameter_keeps_what_autograd_records():
    """A parameter's view is made by reshape (its requires_grad as eager gives it), not as a direct view."""
    m = torch.nn.Linear(6, 4)

    def prog(x):
        return m.weight.reshape(-1) , x * 2
    f = compiler.compile(prog, "x: f32[N]")
    got, want = f(torch.randn(3)), prog(torch.randn(3))
    assert got[0].requires_grad == want[0].requires_grad
    torch.testing.assert_close(got[0], want[0])


def test_swapped_submodules_moved_buffers_and_reregistered_leaves_are_seen():
    """Parameters and buffers are read from the module at every call: a swapped submodule, a
    buffer replaced the way ``.to()`` replaces it, and a parameter turned into a buffer all give
    eager's values (the generated reader, or nn.Module's own lookup where the reader's fails)."""
    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.block = MLPBlock()
            self.register_buffer("scale", torch.full((32,), 2.0))

        def forward(self, x):
            return self.block(x) * self.scale

    torch.manual_seed(0)
    m = Scaled().eval()
    f = compiler.compile(m, "x: f32[B, T, 32]")
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        torch.testing.assert_close(f(x), m(x), atol=1e-5, rtol=1e-4)
        m.block.fc2 = torch.nn.Linear(64, 32)                      # a submodule swapped
        torch.testing.assert_close(f(x), m(x), atol=1e-5, rtol=1e-4)
        m._buffers["scale"] = torch.full((32,), -3.0)              # as Module._apply replaces a buffer
        torch.testing.assert_close(f(x), m(x), atol=1e-5, rtol=1e-4)
        w = m.block.fc1.weight.detach() * 0.5
        del m.block.fc1.weight
        m.block.fc1.register_buffer("weight", w)                   # the parameter now a buffer
        torch.testing.assert_close(f(x), m(x), atol=1e-5, rtol=1e-4)
        m.block.fc1._buffers["weight"] = None                      # gone: nn.Module's lookup decides
        m.block.fc1.weight = torch.nn.Parameter(w * 3)
        torch.testing.assert_close(f(x), m(x), atol=1e-5, rtol=1e-4)


def test_a_branch_on_size_one_is_traced_at_compile_time_not_at_the_call():
    # transformers' masks ask `if batch_size != position_ids.shape[0]` (position ids of batch 1):
    # a call at B = 1 takes the other Python path.  compile() traces that path before the first
    # call, so no call stops to trace.
    def f(x):
        pos = torch.arange(x.shape[1], dtype=x.dtype)[None]
        if x.shape[0] != pos.shape[0]:
            pos = pos.expand(x.shape[0], -1)
        return x * pos + 1

    c = compiler.compile(f, "x: f32[B, T]")
    assert c.stats["traces"] == 2 and len(c.variants) == 2
    for B, T in [(3, 7), (1, 7), (5, 2), (1, 13)]:
        x = torch.randn(B, T)
        torch.testing.assert_close(c(x), f(x))
    assert c.stats["traces"] == 2  # B = 1 found its variant, traced ahead


def test_a_branch_on_an_exact_image_size_is_traced_at_compile_time():
    # HF's ViT interpolates its position embeddings unless the image has exactly the trained
    # number of patches: the guard (H // 8) * (W // 8) != 16 is solved (H = W = 32) and that
    # path traced before the first call.
    def f(x):
        if (x.shape[-2] // 8) * (x.shape[-1] // 8) != 16:
            return x * 2
        return x + 1

    c = compiler.compile(f, "x: f32[B, H, W]")
    assert c.stats["traces"] == 2 and len(c.variants) == 2
    for shape in [(2, 32, 32), (1, 32, 39), (3, 40, 24), (2, 16, 64)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(c(x), f(x))
    assert c.stats["traces"] == 2  # (2, 16, 64) has 16 patches too: the same variant serves it
