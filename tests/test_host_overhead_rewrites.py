"""Plan rewrites that cut a run's ATen calls (compiler.view_folding, compiler.shared_masks):
fewer steps, the same values as eager at every size (1 and primes included)."""
import json
import os
import subprocess
import sys

import pytest
import torch

import compiler
from compiler.shared_masks import sdpa_shared_mask
from compiler.view_folding import fold_views
from compiler.wrapper import BufSlot, ExternStep

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
F = torch.nn.functional


def _views(x, w):
    a = x.view(x.shape[0] * x.shape[1], -1) @ w      # the same view three times
    b = x.view(x.shape[0] * x.shape[1], -1) @ w.t()
    c = x.view(x.shape[0] * x.shape[1], -1).sin()
    y = (a + b + c).view(x.shape[0], x.shape[1], -1).view(x.shape[0], x.shape[1], 2, -1)  # a reshape chain
    y = y[:, :].unsqueeze(2).squeeze(2)              # a full slice, squeeze(unsqueeze)
    return y.transpose(1, 2).contiguous().view(x.shape[0], -1) * 2


def test_folded_views_match_eager_and_leave_no_repeat_or_chain():
    f = compiler.compile(_views, "x: f32[B, T, 8]", "w: f32[8, 8]", target="cpp")
    w = torch.randn(8, 8)
    for b, t in [(1, 1), (2, 3), (3, 7), (5, 13)]:
        x = torch.randn(b, t, 8)
        torch.testing.assert_close(f(x, w), _views(x, w))
    plan = f.variants[-1].plan
    ext = [s for s in plan if isinstance(s, ExternStep)]
    keys = [(s.target, repr(s.args)) for s in ext if getattr(s.target, "__name__", "") == "view_as_traced"]
    assert len(keys) == len(set(keys)), "a repeated view is still made twice"
    made_by_reshape = {s.out for s in ext if getattr(s.target, "__name__", "") == "view_as_traced"}
    reads = {}
    for s in plan:
        for a in (s.args if isinstance(s, ExternStep) else ()):
            if isinstance(a, BufSlot):
                reads[a.name] = reads.get(a.name, 0) + 1
    chained = [s.out for s in ext if getattr(s.target, "__name__", "") == "view_as_traced"
               and isinstance(s.args[0], BufSlot) and s.args[0].name in made_by_reshape and reads[s.args[0].name] == 1]
    assert not chained, f"reshape chains left: {chained}"
    names = {getattr(s.target, "__name__", str(s.target)) for s in ext}
    assert not any(n.startswith("aten.slice") or n.startswith("aten.squeeze") for n in map(str, names)), names


def test_plans_with_an_in_place_step_are_left_as_they_are():
    def view_as_traced(x, size):
        return x.reshape(size)
    plan = [ExternStep(view_as_traced, (BufSlot("x"), [4]), {}, "a"),
            ExternStep(view_as_traced, (BufSlot("x"), [4]), {}, "b"),
            ExternStep(torch.ops.aten.add_.Tensor, (BufSlot("a"), BufSlot("x")), {}, "c")]
    assert fold_views(plan, [BufSlot("b"), BufSlot("c")]) == plan


def _masked_rows(b, t):
    keep = torch.ones(b, t, dtype=torch.bool)
    keep[b // 2:, (3 * t) // 4:] = False
    keep[-1] = False  # a row with every key hidden
    return keep[:, None, None, :].expand(b, 1, t, t)


def test_sdpa_shared_mask_is_sdpa_with_the_boolean_mask():
    for dt in (torch.float32, torch.bfloat16):
        q, k, v = (torch.randn(3, 2, 7, 8, dtype=dt) for _ in range(3))
        m = _masked_rows(3, 7)
        cache = {}
        for _ in range(2):  # the second call reads the run's cache
            assert torch.equal(sdpa_shared_mask(cache, q, k, v, m, scale=0.3), F.scaled_dot_product_attention(
                q, k, v, m, scale=0.3))


_PROGRAM = '''
import json, torch, compiler
F = torch.nn.functional

def two_layers(x, keep, w):
    m = keep[:, None, None, :].expand(keep.shape[0], 1, keep.shape[1], keep.shape[1]) > 0
    h = x
    for _ in range(2):
        q = (h @ w).view(h.shape[0], h.shape[1], 2, 8).transpose(1, 2)
        h = F.scaled_dot_product_attention(q, q, q, attn_mask=m).transpose(1, 2).reshape(h.shape)
    return h

dev = "cuda" if torch.cuda.is_available() else "cpu"
dt = torch.float16 if dev == "cuda" else torch.float32
specs = ("x: %s[B, T, 16]", "keep: i64[B, T] in 0..1", "w: %s[16, 16]")
f = compiler.compile(two_layers, *specs, target="triton")
compiler.runtime.HOST_REWRITES["on"] = False
plain = compiler.compile(two_layers, *specs, target="triton")  # the same program without the rewrites
compiler.runtime.HOST_REWRITES["on"] = True
out = {}
for b, t in [(1, 1), (2, 5), (3, 13), (4, 64)]:
    x, w = torch.randn(b, t, 16, device=dev, dtype=dt), torch.randn(16, 16, device=dev, dtype=dt) / 4
    keep = torch.ones(b, t, dtype=torch.long)
    keep[b // 2:, (3 * t) // 4:] = 0
    keep[-1] = 0
    keep = keep.to(dev)
    got = f(x, keep, w)
    # The Triton target runs SDPA without cuDNN (compiler.codegen.triton.sdpa_without_cudnn):
    # eager's reference runs the same way (cuDNN's boolean masks fill a finite value, so a
    # row with every key hidden attends to all of them there, and to none elsewhere).
    if dev == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(False)
    ref = two_layers(x, keep, w)
    if dev == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(True)
    p = plain(x, keep, w)  # the same kernels on the same values: bitwise the same
    out[f"{b}x{t} as plain"] = bool(torch.equal(got.isnan(), p.isnan()) and torch.equal(got.nan_to_num(), p.nan_to_num()))
    out[f"{b}x{t}"] = bool(torch.equal(got.isnan(), ref.isnan()) and torch.allclose(
        got.nan_to_num(), ref.nan_to_num(), atol=1e-2 if dev == "cuda" else 1e-5, rtol=1e-2 if dev == "cuda" else 1e-5))
out["shared"] = sum(getattr(getattr(s, "target", None), "__name__", "") == "sdpa_shared_mask" for s in f.variants[-1].plan)
out["plain shared"] = sum(getattr(getattr(s, "target", None), "__name__", "") == "sdpa_shared_mask" for s in plain.variants[-1].plan)
print("RESULTS " + json.dumps(out))
'''


def test_a_mask_shared_by_two_layers_is_converted_once_and_matches_eager():
    src = _PROGRAM % (("f16", "f16") if torch.cuda.is_available() else ("f32", "f32"))
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if not torch.cuda.is_available():
        env["TRITON_INTERPRET"] = "1"
    r = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULTS ")]
    assert line, r.stdout[-2000:] + r.stderr[-4000:]
    res = json.loads(line[-1][len("RESULTS "):])
    assert res.pop("shared") == 2 and res.pop("plain shared") == 0
    assert all(res.values()), res


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the memory-efficient kernel needs CUDA")
def test_on_cuda_the_shared_form_is_bitwise_eager_with_fully_masked_rows():
    for dt in (torch.float16, torch.bfloat16, torch.float32):
        q, k, v = (torch.randn(4, 12, 99, 64, device="cuda", dtype=dt).transpose(1, 2).transpose(1, 2)
                   for _ in range(3))
        m = _masked_rows(4, 99).cuda()
        cache = {}
        from compiler.codegen.triton import sdpa_without_cudnn
        ref = sdpa_without_cudnn(q, k, v, m)
        for _ in range(2):
            assert torch.equal(sdpa_shared_mask(cache, q, k, v, m), ref)
        assert cache, "the additive form was not made (the memory-efficient kernel not chosen?)"


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm, self.up, self.down = torch.nn.LayerNorm(16), torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)

    def forward(self, x):
        return (x + self.down(F.gelu(self.up(self.norm(x))))).square().mean()


def test_cpp_training_step_allocates_and_launches_without_the_dispatcher():
    """A C++ training step's kernel buffers come from the CPU allocator directly (no
    ``aten::empty_strided`` per buffer) and its launches are bound once per shape; the
    gradients still equal eager's at sizes 1, a prime and a power of two."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    from torch.profiler import ProfilerActivity, profile

    from compiler.training import compile_aten_graph, decompositions
    from compiler.wrapper import KernelStep

    runs = []

    def graph_compiler(graph):
        def comp(gm, ex):
            runs.append(compile_aten_graph(gm, ex, target="cpp", graph=graph, stats={}))
            return runs[-1]
        return comp

    backend = aot_autograd(fw_compiler=graph_compiler("forward"), bw_compiler=graph_compiler("backward"),
                           partition_fn=min_cut_rematerialization_partition, decompositions=decompositions())
    torch._dynamo.reset()
    model = _Block()
    step = torch.compile(model, backend=backend, dynamic=True)
    for n in (1, 7, 16):
        x = torch.randn(2, n, 16)
        step(x).backward()
        got = [p.grad.clone() for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        model(x).backward()
        for g, p in zip(got, model.parameters()):
            torch.testing.assert_close(g, p.grad)
        model.zero_grad(set_to_none=True)
    programs = [r.compiled for r in runs if hasattr(r, "compiled")]
    # Forward and backward compiled (dynamo specializes size 1: a pair for it, a pair for the rest).
    assert len(programs) in (2, 4) and not any(c.variants[0].eager for c in programs)
    allocs = sum(len(s.allocs) for c in programs for s in c.variants[0].plan if isinstance(s, KernelStep))
    assert allocs >= 4
    x = torch.randn(2, 7, 16)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step(x).backward()
    made = sum(e.count for e in prof.key_averages() if e.key == "aten::empty_strided")
    assert made < allocs, f"{made} aten::empty_strided calls for {allocs} kernel buffers"
    kernels = [s for c in programs for s in c.variants[0].plan if isinstance(s, KernelStep)]
    assert kernels and all(hasattr(s.launch, "bind") for s in kernels)
