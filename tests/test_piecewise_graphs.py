"""Piecewise CUDA graphs: the steps that never see an unpaddable dim run as graphs, the others as they are.

On the CPU the segments run without recording (the split, the inputs and the
outputs are what is tested); on CUDA graphs are recorded and replayed.
"""
import pytest
import sympy
import torch
import torch.nn as nn

import compiler
from compiler.piecewise import PiecewiseRun
from compiler.wrapper import KernelStep
from tests.attention_models import greedy_tokens_eager_and_backend, tiny_llama_lm


class CacheStep(nn.Module):
    """A decoder-like step: project, append to a cache of length S, attend over it, an MLP."""

    def __init__(self, d=32):
        super().__init__()
        self.q, self.k = nn.Linear(d, d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.norm = nn.LayerNorm(d)

    def forward(self, x, cache):
        h = self.norm(x)
        cache = torch.cat([cache, self.k(h)], dim=1)
        att = torch.softmax(self.q(h) @ cache.transpose(1, 2), dim=-1) @ cache
        y = x + att
        return y + self.mlp(self.norm(y)), cache


def _run(device, capture):
    torch.manual_seed(0)
    m = CacheStep().to(device).eval()
    target = "triton" if device == "cuda" else "cpp"
    f = compiler.compile(m, "x: f32[1, 1, 32]", "cache: f32[1, S, 32]", dims={"S": (2, 4096)}, target=target,
                         cuda_graphs=True)
    f.capture = capture
    x = torch.randn(1, 1, 32, device=device)
    cache = torch.randn(1, 2, 32, device=device)
    with torch.no_grad():
        for _ in range(40):  # S grows by one each call, as a KV cache does
            want, want_cache = m(x, cache)
            got, got_cache = f(x, cache)
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(got_cache, want_cache)
            x, cache = got[:, -1:].clone(), got_cache
    return f


def test_segments_split_where_the_cache_length_is_seen():
    f = _run("cpu", capture=False)
    (pw,) = [p for p in f.pieces.values() if p is not None]
    graphed = [s for s in pw.segments if s.graphed]
    eager = [s for s in pw.segments if not s.graphed]
    assert graphed and eager and pw.worth_it()
    S = f.compiled.variants[0].tp.env.symbols["S"]
    assert pw.dims == {S}
    # No graphed step touches a buffer whose shape involves S.
    lp = f.compiled.variants[0].lp
    for seg in graphed:
        for name in seg.reads + seg.writes:
            assert S not in lp.buffers[name].shape and all(S not in getattr(d, "free_symbols", ()) for d in
                                                           lp.buffers[name].shape), name
    assert f.stats["calls"] == 40 and len(f.graphs) == 0
    assert "piecewise graphs over ['S']" in f.report()


def test_hf_llama_decode_launches_outside_graphs_only_what_sees_the_cache_length():
    # compiler.piecewise.hoisted: the query's rotary kernel (independent of the cache's cat) joins
    # the graph before the cat; an eager segment is then the cat and attention (and the positions).
    pytest.importorskip("transformers")
    toks = greedy_tokens_eager_and_backend(tiny_llama_lm(), prompt_len=9, steps=6, seed=2)
    assert toks["symshape"] == toks["eager"]
    (pw,) = [p for gp in toks["graphed"] for p in gp.pieces.values() if p is not None]
    lp = pw.v.lp
    exprs = [sympy.sympify(e) for e in pw.v.size_exprs]
    eager = [st for s in pw.segments if not s.graphed for st in s.steps]
    kernels = [st for st in eager if isinstance(st, KernelStep)]
    assert kernels and all(pw._depends(st, lp, exprs, {}) for st in kernels), pw.report()
    assert sum(isinstance(st, KernelStep) for s in pw.segments if not s.graphed for st in s.steps) <= 1 + 2, \
        pw.report()  # the positions, and per layer (2 here) one cat kernel


def test_a_program_that_needs_the_dim_everywhere_keeps_a_graph_per_size():
    f = compiler.compile(lambda x: x.mean(1) * 2, "x: f32[B, T, 8]", cuda_graphs=True)
    for T in (2, 3, 5):
        f(torch.randn(2, T, 8))
    assert not [p for p in f.pieces.values() if p is not None] and len(f.graphs) == 3


def test_hf_llama_greedy_decode_through_the_backend_equals_eager():
    pytest.importorskip("transformers")
    toks = greedy_tokens_eager_and_backend(tiny_llama_lm(), prompt_len=9, steps=12, seed=1)
    reports = "\n".join(gp.report() for gp in toks["graphed"])
    assert toks["symshape"] == toks["eager"], (toks, reports)
    pieces = [p for gp in toks["graphed"] for p in gp.pieces.values() if p is not None]
    assert pieces and all(p.stats["calls"] >= 1 for p in pieces), reports


@pytest.mark.skipif(not torch.cuda.is_available(), reason="records CUDA graphs")
def test_cuda_graphs_recorded_once_for_every_cache_length():
    torch.backends.cuda.matmul.allow_tf32 = False
    f = _run("cuda", capture=None)
    (pw,) = [p for p in f.pieces.values() if p is not None]
    assert len(pw.graphs) == sum(s.graphed for s in pw.segments) and not pw.failed, pw.report()
    assert pw.stats["replays"] >= 30 * len(pw.graphs) and pw.stats["rerecords"] == 0
    assert f.graph_count() == len(pw.graphs) <= 8
    # A graph reads an earlier graph's outputs and the weights where they are: only what an
    # eager step of the call made, and the caller's tensors that move (x here), are copied
    # into it at each replay.
    eager_made = {n for s in pw.segments if not s.graphed for n in s.writes} | set(pw.input_names)
    per_call = sum(r in eager_made for s in pw.segments if s.graphed for r in s.reads)
    assert per_call < sum(len(s.reads) for s in pw.segments if s.graphed)
    assert pw.stats["copies"] <= per_call * pw.stats["calls"], pw.report()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="records CUDA graphs")
def test_moved_weights_are_seen():
    torch.manual_seed(0)
    m = CacheStep().cuda().eval()
    f = compiler.compile(m, "x: f32[1, 1, 32]", "cache: f32[1, S, 32]", target="triton", cuda_graphs=True)
    x, cache = torch.randn(1, 1, 32, device="cuda"), torch.randn(1, 3, 32, device="cuda")
    with torch.no_grad():
        for _ in range(3):
            f(x, cache)
        m.mlp[0].weight.data = m.mlp[0].weight.data * 2  # a new tensor: graphs must not read the old one
        for _ in range(3):
            torch.testing.assert_close(f(x, cache)[0], m(x, cache)[0], atol=1e-4, rtol=1e-4)


def test_piecewise_run_directly():
    f = compiler.compile(lambda x, c: (torch.cat([c, x * 2], 0), (x + 1).sum()), "x: f32[1, 8]", "c: f32[S, 8]")
    v = f.variants[0]
    pw = PiecewiseRun(v, {v.tp.env.symbols["S"]}, capture=False)
    for S in (2, 5, 9):
        x, c = torch.randn(1, 8), torch.randn(S, 8)
        out = pw((x, c), f.bind((x, c)))
        torch.testing.assert_close(out[0], torch.cat([c, x * 2], 0))
        torch.testing.assert_close(out[1], (x + 1).sum())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="profiles CUDA kernels")
def test_attention_over_a_growing_cache_runs_no_cudnn_kernel():
    # cuDNN's SDPA plans per shape (ms of host time at every new KV length): compiled programs avoid it.
    from torch.profiler import ProfilerActivity, profile

    def attend(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    f = compiler.compile(attend, "q: f16[1, 8, 1, 64]", "k: f16[1, 8, S, 64]", "v: f16[1, 8, S, 64]",
                         target="triton")
    q = torch.randn(1, 8, 1, 64, device="cuda", dtype=torch.float16)
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for S in range(100, 110):
            k = torch.randn(1, 8, S, 64, device="cuda", dtype=torch.float16)
            torch.testing.assert_close(f(q, k, k), attend(q, k, k), atol=2e-3, rtol=2e-3)
        torch.cuda.synchronize()
    names = [e.key for e in p.key_averages()]
    assert not [n for n in names if "cudnn" in n.lower() and "attention" in n.lower()], names


def test_sizes_over_the_graph_memory_cap_run_without_a_graph():
    from compiler.cuda_graphs import GraphedProgram
    c = compiler.compile(lambda x: torch.relu(x) * 2, "x: f32[B, T]", target="cpp")
    f = GraphedProgram(c, capture=False, max_graph_bytes=48 * 1024, buckets={"T": [8, 4096]})
    small, big = torch.randn(2, 5), torch.randn(2, 3000)  # input + output: 64 KiB at T=4096, over 48
    torch.testing.assert_close(f(small), torch.relu(small) * 2)
    torch.testing.assert_close(f(big), torch.relu(big) * 2)
    assert [k for _, k in f.graphs] == [(2, 8)] and f.stats["ungraphed_calls"] == 1


def test_dims_that_change_with_the_cache_length_join_the_split(monkeypatch):
    """A prompt as long as the head dim (16 here) makes dynamo trace the decode step with each
    layer's cache length its own symbol, one unpaddable and the others paddable, all equal at
    every call.  Keyed on the paddable ones, the graphs would be recorded once per token and
    never replayed (measured on the H100: 0 replays in 199 calls); they join the split."""
    pytest.importorskip("transformers")
    import transformers.masking_utils as mu
    monkeypatch.setattr(mu, "is_torchdynamo_exporting", lambda: True, raising=False)  # torch < 2.14's mask
    toks = greedy_tokens_eager_and_backend(tiny_llama_lm(), prompt_len=16, steps=8, seed=4)
    assert toks["symshape"] == toks["eager"]
    pieces = [(gp, p) for gp in toks["graphed"] for p in gp.pieces.values() if p is not None]
    assert pieces
    for gp, pw in pieces:
        # Every dim of the step is a cache length here: the graphs are keyed on none of them.
        assert pw.dims == set(pw.v.lp.symbols), gp.report()
        assert sum(s.graphed for s in pw.segments) >= 3, gp.report()


def sized_launch_case(device, steps) -> str:
    """The Triton kernels that see the cache length (the segments outside the graphs) launch
    at each call's sizes through launches made once (compiler.piecewise.sized_launches): no
    binding per size is made, and the results equal eager's at every length.  Returns "ok"
    or what went wrong (run in a TRITON_INTERPRET=1 subprocess without CUDA)."""
    torch.manual_seed(0)
    m = CacheStep().to(device).eval()
    f = compiler.compile(m, "x: f32[1, 1, 32]", "cache: f32[1, S, 32]", dims={"S": (2, 4096)}, target="triton",
                         cuda_graphs=True)
    x, cache = torch.randn(1, 1, 32, device=device), torch.randn(1, 2, 32, device=device)
    with torch.no_grad():
        for _ in range(steps):
            want, want_cache = m(x, cache)
            got, got_cache = f(x, cache)
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(got_cache, want_cache)
            x, cache = got[:, -1:].clone(), got_cache
    pws = [p for p in f.pieces.values() if p is not None]
    if not pws:
        return "no piecewise run"
    pw = pws[0]
    outside = [(n, s) for n, s in enumerate(pw.segments) if not s.graphed
               and any(isinstance(st, KernelStep) for st in s.steps)]
    if not outside:
        return "no kernel outside the graphs"
    if any(pw.sized[n] is None for n, _ in outside):
        return "a segment outside the graphs binds per call"
    # Graphed segments' kernels too (they run without a graph at first, and without CUDA always).
    bound = sum(len(st.launch.bound) for s in pw.segments for st in s.steps if isinstance(st, KernelStep))
    return "ok" if bound == 0 else f"{bound} launches bound per size"


def test_kernels_that_see_the_cache_length_launch_without_a_binding_per_size():
    if torch.cuda.is_available():
        assert sized_launch_case("cuda", 40) == "ok"
        return
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    code = "from tests.test_piecewise_graphs import sized_launch_case; print('RESULT', sized_launch_case('cpu', 6))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=root, timeout=600)
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, f"the case did not run:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    assert line[-1] == "RESULT ok", line[-1]


def test_a_decode_keeps_few_routes():
    # Every token is a new signature: its route is kept among at most 64 (a route per token
    # kept 4096 objects alive, which made Python's full garbage collections frequent).
    f = _run("cpu", capture=False)  # 40 calls, S = 2..41
    assert any(p is not None for p in f.pieces.values())
    x = torch.randn(1, 1, 32)
    with torch.no_grad():
        for S in range(42, 142):
            f(x, torch.randn(1, S, 32))
    assert 0 < len(f._routes) <= 64
