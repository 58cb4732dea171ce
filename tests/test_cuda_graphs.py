"""Bucketed padding for CUDA graphs, on the CPU: the padding, buckets and slicing run without capture."""
import pytest
import torch

import compiler
from compiler.backend import symshape_backend
from compiler.buckets import bucket_for, choose_buckets, default_buckets
from compiler.cuda_graphs import GraphedProgram
from tests.padding_programs import CASES


def _inputs(specs, B, T, gen):
    out = []
    for s in specs:
        dims = [d.strip() for d in s.split("[")[1].rstrip("]").split(",")]
        shape = [B if d == "B" else T if d == "T" else int(d) for d in dims]
        if s.split(":")[1].strip().startswith("i64"):
            out.append(torch.randint(0, 100, shape, generator=gen))
        else:
            out.append(torch.randn(shape, generator=gen))
    return out


def _sweep(name, Ts, B=2, kernels="compiled"):
    make, specs, _ = CASES[name]
    m = make()
    if isinstance(m, torch.nn.Module):
        m.eval()
    f = compiler.compile(m, *specs, dims={"T": (1, 64)}, cuda_graphs=True, graph_kernels=kernels)
    gen = torch.Generator().manual_seed(1)
    for T in Ts:
        ins = _inputs(specs, B, T, gen)
        with torch.no_grad():
            want = m(*ins)
        got = f(*ins)
        assert got.shape == want.shape, (name, T)
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4, msg=lambda e: f"{name} at T={T}: {e}")
    return f


def test_safe_programs_pad_and_equal_eager_at_every_size():
    for name in ("mlp", "causal_attention", "gpt", "cumsum", "reshape_outer"):
        f = _sweep(name, range(1, 41))
        plans = list(f.plans.values())
        assert "T" in plans[-1].pads or "T" in plans[0].pads
        # T=1 is its own trace (the 0/1 policy); every other T lands in a bucket of 2, 4, ..., 64.
        assert f.stats["graphs"] <= 7 and f.stats["padded_calls"] >= 30, (name, f.stats)


def test_unsafe_dims_never_pad_and_still_equal_eager():
    for name in ("mean_over_t", "softmax_over_t", "reverse_cumsum", "last_token"):
        f = _sweep(name, [1, 2, 3, 5, 9, 17])
        assert f.stats["padded_calls"] == 0 and f.stats["graphs"] == 6, (name, f.stats)
        assert all("T" in p.exact for p in f.plans.values() if p.pads != ("B", "T"))


def test_a_bucket_on_another_path_is_not_used():
    def branchy(x):
        if x.shape[1] > 10:
            return x * 2
        return x + 1

    f = compiler.compile(branchy, "x: f32[B, T]", cuda_graphs=True, buckets={"T": [16, 32]})
    for T in (9, 10, 11, 12):
        x = torch.randn(2, T)
        torch.testing.assert_close(f(x), branchy(x))
    # 9 and 10 would pad to 16, past the branch: they run at their own sizes.
    assert f.stats["padded_calls"] == 2 and sorted(k[1] for _, k in f.graphs) == [9, 10, 16]


def test_default_buckets_and_memory_budget():
    assert default_buckets(1, 512) == (1, 2, 4, 8, 16, 32, 64, 128, 192, 256, 320, 384, 448, 512)
    assert default_buckets(5, 100) == (8, 16, 32, 64, 100)
    assert bucket_for(65, default_buckets(1, 512)) == 128 and bucket_for(513, default_buckets(1, 512)) is None

    def estimate(name, size):
        return size * 1000

    roomy = choose_buckets({"T": (1, 512)}, estimate, budget=10 ** 9)
    assert roomy.buckets["T"] == default_buckets(1, 512) and not roomy.note
    tight = choose_buckets({"T": (1, 512)}, estimate, budget=1_100_000)
    assert tight.buckets["T"] == default_buckets(1, 512, powers_only=True) and "powers of 2" in tight.note
    tighter = choose_buckets({"T": (1, 512)}, estimate, budget=300_000)
    assert tighter.buckets["T"][-1] == 128 and "stop at 128" in tighter.note


def test_report_says_which_dims_pad_and_why_not():
    f = _sweep("mean_over_t", [3, 4])
    text = f.report()
    assert "T  cannot pad" in text and "x.mean(1)" in text and "true length" in text
    assert "buckets for B: 1, 2, 4" in text and "graphs recorded: 2" in text and "MiB" in text


def test_torch_compile_backend_option():
    made = []

    def backend(gm, example_inputs, **kw):
        run = symshape_backend(gm, example_inputs, **kw)
        made.append(run)
        return run

    m = CASES["mlp"][0]().eval()
    f = torch.compile(m, backend=backend, dynamic=True, options={"cuda_graphs": True, "buckets": {}})
    with torch.no_grad():
        for T in (3, 5, 7, 12):
            x = torch.randn(2, T, 32)
            torch.testing.assert_close(f(x), m(x), atol=1e-4, rtol=1e-4)
    runner = made[-1].runner
    assert isinstance(runner, GraphedProgram) and runner.stats["padded_calls"] >= 2


def test_explain_cuda_graphs_command(tmp_path, capsys):
    from cli.main import main

    prog = tmp_path / "pool.py"
    prog.write_text("import torch\n\ndef pooled(x):\n    h = torch.relu(x)\n    return h.mean(1)\n")
    assert main(["explain", f"{prog}:pooled", "-i", "x: f32[B, T, 64]", "--dim", "T=1..512", "--cuda-graphs"]) == 0
    out = capsys.readouterr().out
    assert "B  pads" in out and "T  cannot pad" in out and "pool.py:5 `return h.mean(1)`" in out
    assert "aten.mean.dim" in out and "true length" in out and "B: 1, 2, 4, 8" in out and "MiB" in out


@pytest.mark.skipif(not torch.cuda.is_available(), reason="records CUDA graphs")
def test_cuda_graph_replays_equal_eager_at_every_size():
    torch.backends.cuda.matmul.allow_tf32 = False
    for name in ("gpt", "mean_over_t"):
        make, specs, _ = CASES[name]
        m = make()
        m = m.cuda().eval() if isinstance(m, torch.nn.Module) else m
        f = compiler.compile(m, *specs, dims={"T": (1, 64)}, target="triton", cuda_graphs=True)
        gen = torch.Generator().manual_seed(2)
        order = list(range(1, 41)) + list(range(40, 0, -3))
        for T in order:
            ins = [t.cuda() for t in _inputs(specs, 2, T, gen)]
            with torch.no_grad():
                want = m(*ins)
            got = f(*ins)
            torch.testing.assert_close(got, want, atol=2e-4, rtol=2e-4, msg=lambda e: f"{name} at T={T}: {e}")
        assert all(e.graph is not None for e in f.graphs.values()), f.failed
        assert f.stats["replays"] == len(order)
        if name == "gpt":
            assert len(f.graphs) <= 7 and f.stats["padded_calls"] > 0
        else:
            assert f.stats["padded_calls"] == 0 and len(f.graphs) == 40


def test_aten_kernels_pad_alike():
    f = _sweep("gpt", [3, 9, 17, 33], kernels="aten")
    assert f.kernels == "aten" and f.stats["padded_calls"] == 4 and len(f.graphs) == 4


def test_padded_positions_hold_zeros_after_longer_and_shorter_calls():
    # A shorter call after a longer one into the same bucket must not see the longer call's
    # rows as padding: those positions are zeroed again (and only then).
    f = _sweep("mlp", [40, 35, 64, 33, 50, 2])
    for (_, key), e in f.graphs.items():
        (buf,) = e.inputs
        B, T = e.written[0][:2]
        assert (B, T) <= tuple(buf.shape[:2])
        assert not buf[B:].any() and not buf[:, T:].any(), (key, e.written)
    seen = {}
    for T in [40, 35, 64, 33, 50, 2]:
        x = torch.randn(2, T, 32)
        f(x)
        e = f._routes[next(k for k in f._routes if k[0][0] == x.shape)].entry
        torch.testing.assert_close(e.inputs[0][:, :T], x)
        assert not e.inputs[0][:, T:].any(), T
        seen[T] = e.key
    assert seen[40] == seen[35] == seen[33] == seen[50] == (2, 64)


def test_single_and_tuple_outputs_slice_back():
    def two(x):
        return torch.relu(x), (x * 2).cumsum(1)

    f = compiler.compile(two, "x: f32[B, T]", cuda_graphs=True, buckets={"T": [8, 16]})
    for T in (3, 9, 16):
        x = torch.randn(2, T)
        got, want = f(x), two(x)
        assert isinstance(got, tuple) and len(got) == 2
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)
    g = compiler.compile(torch.relu, "x: f32[B, T]", cuda_graphs=True, buckets={"T": [8]})
    x = torch.randn(2, 5)
    assert isinstance(g(x), torch.Tensor) and torch.equal(g(x), torch.relu(x))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="records CUDA graphs")
def test_graphs_share_one_pool_record_largest_first_and_keep_only_outputs():
    torch.backends.cuda.matmul.allow_tf32 = False
    make, specs, _ = CASES["gpt"]
    m = make().cuda().eval()
    f = compiler.compile(m, *specs, dims={"T": (1, 128)}, target="triton", cuda_graphs=True)
    order = list(range(2, 129))  # the tiny GPT has 128 positions
    import random
    random.Random(0).shuffle(order)
    with torch.no_grad():
        for T in order:
            ids = torch.randint(0, 100, (2, T), device="cuda")
            torch.testing.assert_close(f(ids), m(ids), atol=2e-4, rtol=2e-4)
    keys = [k for _, k in f.graphs]
    assert keys[0] == (2, 128), keys  # the largest bucket first, whatever T came first
    assert f.recorder.recorded == len(f.graphs) and f.recorder.stream is not None
    for e in f.graphs.values():
        out_bytes = sum(t.numel() * t.element_size() for t in e.outputs)
        assert e.kept <= out_bytes + 2 ** 20, (e.key, e.kept, out_bytes)  # no workspace, no intermediates
    first = f.graphs[next(iter(f.graphs))].pool_growth
    later = sum(e.pool_growth for e in list(f.graphs.values())[1:])
    assert later <= first + 16 * 2 ** 20, f.report()


def test_calls_too_large_to_graph_bind_their_sizes_once(monkeypatch):
    """A size whose buffers exceed ``max_graph_bytes`` runs without a graph: its sizes and launches are
    bound at the signature's first call (masks classified at its second), not at every call."""
    from compiler.runtime import Variant
    make, specs, _ = CASES["causal_attention"]
    m = make().eval()
    g = GraphedProgram(compiler.runtime.compile(m, *specs, dims={"T": (1, 64)}), max_graph_bytes=0)
    binds = []
    real = Variant.bind_sizes
    monkeypatch.setattr(Variant, "bind_sizes", lambda self, *a, **k: binds.append(a) or real(self, *a, **k))
    gen = torch.Generator().manual_seed(0)
    for T in (5, 5, 5, 9, 9, 5, 17, 17, 17):
        ins = _inputs(specs, 2, T, gen)
        with torch.no_grad():
            torch.testing.assert_close(g(*ins), m(*ins), atol=1e-4, rtol=1e-4)
    assert g.stats["ungraphed_calls"] == 9 and g.stats["graphs"] == 0, g.stats
    assert len(binds) <= 6, len(binds)  # three signatures, at most two bindings each
