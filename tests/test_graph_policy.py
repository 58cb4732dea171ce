"""When compile() runs a program through CUDA graphs by default (compiler.graph_policy).

The cost model and the program rules run on the CPU; the recording itself is checked on CUDA.
"""
import pytest
import torch

import compiler
import shapes
from compiler.cuda_graphs import GraphedProgram
from compiler.graph_policy import GPU_OVER_HOST, HOST_S_PER_STEP, CallCost, graph_blocker


def _mlp_trace(dt="f16"):
    return shapes.trace(lambda x, w1, w2: torch.relu(x @ w1) @ w2,
                        f"x: {dt}[B, 256]", f"w1: {dt}[256, 1024]", f"w2: {dt}[1024, 256]")


def test_a_launch_bound_size_gets_a_graph_and_a_gpu_bound_one_does_not():
    cost = CallCost(_mlp_trace(), steps=3)
    small, large = cost.verdict({"B": 16}), cost.verdict({"B": 1 << 22})
    assert small.graph and small.gpu_s < small.host_s
    assert not large.graph and large.gpu_s > GPU_OVER_HOST * large.host_s
    assert small.host_s == pytest.approx(3 * HOST_S_PER_STEP)
    # The estimate grows with the FLOPs the engine counts: 2 matmuls of 256 x 1024 per row.
    per_row = (cost.verdict({"B": 2000}).gpu_s - cost.verdict({"B": 1000}).gpu_s) / 1000
    assert per_row > 2 * 2 * 256 * 1024 / 1e15
    assert "graph: GPU" in small.text() and large.text().startswith("no graph")


def test_float32_matmuls_are_estimated_slower_than_half_precision():
    half, full = CallCost(_mlp_trace("f16"), steps=3), CallCost(_mlp_trace("f32"), steps=3)
    assert full.verdict({"B": 4096}).gpu_s > 3 * half.verdict({"B": 4096}).gpu_s


def test_programs_whose_replays_differ_from_calls_are_named():
    assert graph_blocker(_mlp_trace()) is None
    attn = shapes.trace(lambda q: torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True),
                        "q: f16[B, 4, T, 16]")
    assert graph_blocker(attn) is None  # seeded, but with dropout_p = 0 it draws nothing
    attn_drop = shapes.trace(lambda q: torch.nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=0.1),
                             "q: f16[B, 4, T, 16]")
    assert "random numbers" in graph_blocker(attn_drop)
    drop = torch.nn.Dropout(0.5).train()
    assert "random numbers" in graph_blocker(shapes.trace(drop, "x: f32[B, 8]"))
    assert "view of an input" in graph_blocker(shapes.trace(lambda x: x[:, :2], "x: f32[B, 8]"))
    assert "view of an input" in graph_blocker(shapes.trace(lambda x: x, "x: f32[B, 8]"))


def test_the_default_is_the_compiled_program_itself_without_cuda_or_for_cpp():
    f = compiler.compile(lambda x: x * 2, "x: f32[N]")
    assert type(f).__name__ == "CompiledProgram"
    if not torch.cuda.is_available():
        g = compiler.compile(lambda x: x * 2, "x: f32[N]", target="triton")
        assert type(g).__name__ == "CompiledProgram"
    with pytest.raises(ValueError, match="cuda_graphs must be"):
        compiler.compile(lambda x: x * 2, "x: f32[N]", cuda_graphs="sometimes")


def test_an_auto_program_without_cuda_inputs_runs_its_compiled_kernels_and_reads_through():
    c = compiler.runtime.compile(lambda x: torch.relu(x) + 1, "x: f32[B, T]")
    f = GraphedProgram(c, policy="auto")
    x = torch.randn(3, 5)
    torch.testing.assert_close(f(x), torch.relu(x) + 1)
    assert f.decisions == {} and f.graph_count() == 0 and f.stats["ungraphed_calls"] == 1
    assert f.variants is c.variants and f.names == c.names  # the compiled program's attributes read through
    assert f.stats["traces"] == 1 and f.stats["variants"] == 1 and f.stats["calls"] == 1
    with pytest.raises(ValueError, match="policy must be"):
        GraphedProgram(c, policy="never")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="records CUDA graphs")
def test_on_cuda_compile_graphs_launch_bound_sizes_only_and_equals_eager():
    torch.backends.cuda.matmul.allow_tf32 = False
    w1 = torch.randn(256, 1024, device="cuda", dtype=torch.float16) / 16
    w2 = torch.randn(1024, 256, device="cuda", dtype=torch.float16) / 32

    def mlp(x):
        return torch.relu(x @ w1) @ w2

    f = compiler.compile(mlp, "x: f16[B, 256]", target="triton")
    assert isinstance(f, GraphedProgram) and f.policy == "auto"
    for b in (8, 8, 5, 1 << 18):
        x = torch.randn(b, 256, device="cuda", dtype=torch.float16)
        out = f(x)
        torch.testing.assert_close(out, mlp(x), atol=2e-2, rtol=2e-2)
        y = f(torch.zeros_like(x))
        assert out.abs().sum() > 0 and y.abs().sum() == 0  # outputs are copies a later call does not overwrite
    graphed = {k for (_, k), v in f.decisions.items() if v.graph}
    assert graphed and all(k[0] < (1 << 18) for k in graphed)
    assert any(not v.graph for v in f.decisions.values())  # 262144 rows: GPU-bound, no graph
    assert f.graph_count() >= 1 and f.stats["replays"] >= 3


def test_a_mask_the_graph_must_keep_asks_for_a_clearly_launch_bound_call():
    from compiler.graph_policy import MASKED_GPU_OVER_HOST, masks_kept
    sdpa = torch.nn.functional.scaled_dot_product_attention
    masked = compiler.compile(lambda q, m: sdpa(q, q, q, attn_mask=m), "q: f32[B, 2, T, 8]", "m: bool[B, 1, T, T]")
    plain = compiler.compile(lambda q: sdpa(q, q, q, is_causal=True), "q: f32[B, 2, T, 8]")
    assert masks_kept(masked.variants[0]) and not masks_kept(plain.variants[0])
    cost = CallCost(masked.variants[0].tp, steps=4, masks_kept=True)
    assert cost.factor == MASKED_GPU_OVER_HOST < GPU_OVER_HOST


def test_copying_large_outputs_out_counts_against_a_graph():
    cost = CallCost(shapes.trace(lambda x: x.expand(4096, -1) * 2, "x: f16[1, N]"), steps=1)
    v = cost.verdict({"N": 1 << 16})
    assert v.copy_s == pytest.approx(2 * 4096 * (1 << 16) * 2 / 2.5e12)
    assert "copy-out" in v.text()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="records CUDA graphs")
def test_the_backend_graphs_by_default_and_reads_parameters_in_place():
    from compiler.backend import graphed_programs
    torch.backends.cuda.matmul.allow_tf32 = False
    torch._dynamo.reset()
    m = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)).cuda().half().eval()
    f = torch.compile(m, backend="symshape", dynamic=True)
    before = set(map(id, graphed_programs()))
    with torch.no_grad():
        for b in (8, 8, 5, 8):
            x = torch.randn(b, 64, device="cuda", dtype=torch.float16)
            torch.testing.assert_close(f(x), m(x), atol=2e-2, rtol=2e-2)
        gp = [g for g in graphed_programs() if id(g) not in before]
        assert gp and gp[0].policy == "auto" and gp[0].static_inputs and gp[0].graph_count() >= 1
        assert all(e.static for e in gp[0].graphs.values())  # weights are read where they are
        m[0].weight.mul_(2)  # an optimizer's in-place update: the graph sees it
        torch.testing.assert_close(f(x), m(x), atol=2e-2, rtol=2e-2)
        m[2].weight.data = torch.randn_like(m[2].weight)  # new storage: that call runs without the graph
        torch.testing.assert_close(f(x), m(x), atol=2e-2, rtol=2e-2)
        assert gp[0].stats.get("moved_static_calls", 0) >= 1


def test_a_variant_whose_graph_cannot_be_planned_runs_ungraphed_with_the_reason_kept(monkeypatch):
    import compiler.cuda_graphs as cg

    def refuse(*a, **k):
        raise NotImplementedError("no padding rule for this op")

    c = compiler.runtime.compile(lambda x: torch.relu(x) + 1, "x: f32[B, T]")
    f = GraphedProgram(c, policy="auto", capture=False)
    monkeypatch.setattr(cg, "analyze_padding", refuse)
    assert not f._auto_ready(c.variants[0])
    assert "could not be planned (NotImplementedError: no padding rule" in f.not_graphed[id(c.variants[0])]
    x = torch.randn(2, 3)
    torch.testing.assert_close(f(x), torch.relu(x) + 1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="records CUDA graphs")
def test_auto_graphs_a_size_at_its_second_call_and_a_growing_length_piecewise():
    """A size met once gets no recording (a decode's cache length is new at every token); a size
    met twice gets its graph; a dim that cannot pad (a softmax over the cache) leaves the steps
    that never see it to piecewise graphs, a few for every length."""
    torch.backends.cuda.matmul.allow_tf32 = False
    g = torch.Generator(device="cuda").manual_seed(0)
    ws = [torch.randn(128, 128, device="cuda", dtype=torch.float16, generator=g) / 12 for _ in range(6)]

    def step(x, cache):
        for w in ws[:3]:
            x = torch.nn.functional.gelu(x @ w) + x
        a = torch.softmax((x @ cache.T).float(), -1).to(x.dtype) @ cache  # over the cache length S
        for w in ws[3:]:
            a = torch.nn.functional.gelu(a @ w) + a
        return a

    f = compiler.compile(step, "x: f16[1, 128]", "cache: f16[S, 128]", target="triton")
    assert isinstance(f, GraphedProgram) and f.policy == "auto"
    x = torch.randn(1, 128, device="cuda", dtype=torch.float16, generator=g)
    for S in range(17, 57):
        cache = torch.randn(S, 128, device="cuda", dtype=torch.float16, generator=g)
        torch.testing.assert_close(f(x, cache), step(x, cache), atol=2e-2, rtol=2e-2)
    # 40 lengths, each met once: no graph per length, only the piecewise ones over the steps without S.
    assert f.graphs == {} and f.stats["graphs"] == 0
    assert f.pieces and all(pw is not None for pw in f.pieces.values()), f.pieces
    assert 0 < f.graph_count() <= 8 and f.stats["replays"] == 0

    h = compiler.compile(lambda y: torch.nn.functional.gelu(y @ ws[0]) @ ws[1], "y: f16[B, 128]", target="triton")
    y = torch.randn(8, 128, device="cuda", dtype=torch.float16, generator=g)
    h(y)
    assert h.graph_count() == 0 and h.stats["ungraphed_calls"] == 1  # met once: no recording
    h(y)
    h(y)
    assert h.graph_count() == 1 and h.stats["replays"] == 2
