"""torch.compile(model, backend="symshape", dynamic=True): equal to eager at
several sizes with one dynamo graph and one symshape variant."""
import torch
import pytest

import compiler
from tests.compiler_programs import Attention, MLPBlock


@pytest.mark.parametrize("make", [MLPBlock, Attention])
def test_torch_compile_matches_eager_without_recompiling(make):
    torch.manual_seed(0)
    torch._dynamo.reset()
    m = make().eval()
    graphs, variants = compiler.BACKEND_STATS["graphs"], compiler.STATS["variants"]
    f = torch.compile(m, backend="symshape", dynamic=True)
    with torch.no_grad():
        for B, T in [(2, 5), (3, 9), (4, 17), (2, 33)]:
            x = torch.randn(B, T, 32)
            assert torch.allclose(f(x), m(x), atol=1e-5, rtol=1e-4)
    assert compiler.BACKEND_STATS["graphs"] - graphs == 1
    assert compiler.STATS["variants"] - variants == 1


def test_backend_callable_direct_and_autograd_fallback():
    torch._dynamo.reset()
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.SiLU(), torch.nn.Linear(16, 4))
    f = torch.compile(m, backend="symshape", dynamic=True)
    x = torch.randn(5, 8)
    y = f(x)  # parameters require grad: runs dynamo's graph so autograd records
    y.sum().backward()
    assert m[0].weight.grad is not None and torch.allclose(y, m(x), atol=1e-6)
    with torch.no_grad():
        for n in (3, 7, 12):
            x = torch.randn(n, 8)
            assert torch.allclose(f(x), m(x), atol=1e-5)


def test_backend_registered_by_name():
    from torch._dynamo.backends.registry import lookup_backend
    assert lookup_backend("symshape") is compiler.symshape_backend


def test_importing_compiler_registers_nothing_and_entry_point_finds_backend():
    """No import-time side effect: dynamo's registry is untouched by ``import compiler``;
    ``backend="symshape"`` resolves through the package's entry point."""
    import subprocess
    import sys
    code = ("import compiler, torch._dynamo.backends.registry as r\n"
            "assert 'symshape' not in r._COMPILER_FNS\n"
            "f = r.lookup_backend('symshape')\n"
            "assert f is compiler.symshape_backend, f\n"
            "import sys\n"
            "assert 'compiler.dynamo_entry' in sys.modules  # loaded by the lookup: it starts kernel builds\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]


class _Floats(torch.nn.Module):
    """Python float attributes read in forward: dynamo makes each a 0-dim tensor input under dynamic=True."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.eps, self.scale = 1e-5, 0.5

    def forward(self, x):
        return torch.nn.functional.layer_norm(self.lin(x), (8,), eps=self.eps) * self.scale


@pytest.mark.parametrize("specialize", ["1", "0"])
def test_module_floats_become_constants_and_a_new_value_compiles_again(monkeypatch, specialize):
    """The backend asks dynamo to specialize its float inputs (no 0-dim tensor made per call); with
    SYMSHAPE_SPECIALIZE_FLOATS=0 they stay inputs, baked in and checked.  Either way a changed
    attribute gives eager's value, never the first one's."""
    from compiler.backend import symshape_backend
    monkeypatch.setenv("SYMSHAPE_SPECIALIZE_FLOATS", specialize)
    torch._dynamo.reset()
    torch.manual_seed(0)
    m = _Floats().eval()
    handed = []

    def spy(gm, example_inputs, **kw):
        out = symshape_backend(gm, example_inputs, **kw)
        handed.append([e for e in example_inputs if isinstance(e, torch.Tensor) and e.dim() == 0])
        return out

    f = torch.compile(m, backend=spy, dynamic=True)
    with torch.no_grad():
        for n in (3, 5, 11):
            x = torch.randn(n, 8)
            torch.testing.assert_close(f(x), m(x), atol=1e-5, rtol=1e-5)
        assert len(handed) == 1 and (len(handed[0]) == 0) == (specialize == "1"), handed
        m.scale = 2.0
        x = torch.randn(7, 8)
        torch.testing.assert_close(f(x), m(x), atol=1e-5, rtol=1e-5)


def test_training_floats_stay_inputs_without_a_retrace_and_a_new_value_is_honoured():
    """In a training graph the floats are baked in and checked per call: dynamo traces the frame
    once (no restart to specialize them, neither ours nor AOTAutograd's), gradients equal eager's,
    and a changed attribute gives eager's values and gradients."""
    from torch._dynamo.utils import compilation_time_metrics as timers
    from compiler.backend import symshape_backend
    torch._dynamo.reset()
    torch.manual_seed(0)
    m = _Floats().train()
    ref = _Floats().train()
    ref.load_state_dict(m.state_dict())
    handed = []

    def spy(gm, example_inputs, **kw):
        handed.append([e for e in example_inputs if isinstance(e, torch.Tensor) and e.dim() == 0])
        return symshape_backend(gm, example_inputs, **kw)

    attempts = len(timers.get("compile_attempt_1", []))
    f = torch.compile(m, backend=spy, dynamic=True)
    for n, scale in ((3, 0.5), (5, 0.5), (11, 0.5), (7, 2.0)):
        m.scale = ref.scale = scale
        x = torch.randn(n, 8)
        out, want = f(x), ref(x)
        torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
        out.square().sum().backward()
        want.square().sum().backward()
        for p, q in zip(m.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4)
            p.grad = q.grad = None
    assert len(handed) == 1 and len(handed[0]) == 2, handed  # one trace, both floats passed in
    assert len(timers.get("compile_attempt_1", [])) == attempts, "dynamo traced the frame again"


def test_bf16_layer_norm_training_on_the_cpu_saves_stats_in_the_dtype_its_backward_reads():
    """Under CPU bf16 autocast a LayerNorm runs in bf16: eager's CPU kernel returns its mean and
    rstd in bf16 (the meta function says float32), and the backward graph's inputs say bf16.
    The forward equals eager bit for bit (float32 inside, one rounding) and its saved stats have
    the dtype the backward reads (a float32 rstd was refused by the backward's spec)."""
    torch._dynamo.reset()
    torch.manual_seed(0)

    def make():
        return torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))
    m, ref = make(), make()
    ref.load_state_dict(m.state_dict())
    f = torch.compile(m, backend="symshape", dynamic=True)
    before = compiler.BACKEND_STATS["eager_train_graphs"]
    for n in (5, 7, 13):
        x = torch.randn(2, n, 16)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out, want = f(x), ref(x)
        assert out.dtype == want.dtype == torch.bfloat16 and torch.equal(out, want), n
        out.float().square().sum().backward()
        want.float().square().sum().backward()
        for p, q in zip(m.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, atol=0.02 * q.grad.abs().max().item(), rtol=0)
            p.grad = q.grad = None
    assert compiler.BACKEND_STATS["eager_train_graphs"] == before  # compiled, not run as ATen


def test_a_tensor_read_with_item_is_not_taken_for_a_float_attribute():
    """A 0-dim tensor argument read with .item() is data, not a Python float: never specialized to
    its first value."""
    torch._dynamo.reset()

    def f(x, t):
        return x / t.item()

    g = torch.compile(f, backend="symshape", dynamic=True)
    with torch.no_grad():
        for n, t in ((3, 2.0), (5, 4.0), (7, 0.5)):
            x, tt = torch.randn(n, 4), torch.tensor(t, dtype=torch.float64)
            torch.testing.assert_close(g(x, tt), f(x, tt))


class _ExpandedBuffer(torch.nn.Module):
    """BERT's ``token_type_ids``: a buffer's first T columns expanded to the batch."""

    def __init__(self):
        super().__init__()
        self.register_buffer("ids", torch.arange(64).remainder(3).unsqueeze(0))
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        B, T, _ = x.shape
        return self.lin(x) + self.ids[:, :T].expand(B, T).unsqueeze(-1)


def test_torchs_size_oblivious_flag_gives_one_graph_for_batch_one_too():
    # A user who sets torch's backed_size_oblivious (so that dynamo captures size 1 with the other
    # sizes) got a symshape limitation here: torch's expand reference asked our SymInt node for a
    # hint through a helper that knows torch's SymNode only.
    from torch.fx.experimental import _config as fx_config
    torch.manual_seed(0)
    torch._dynamo.reset()
    m = _ExpandedBuffer().eval()
    graphs = compiler.BACKEND_STATS["graphs"]
    f = torch.compile(m, backend="symshape", dynamic=True)
    with torch.no_grad(), fx_config.patch(backed_size_oblivious=True):
        for B, T in [(4, 7), (1, 5), (3, 11), (1, 1)]:
            x = torch.randn(B, T, 8)
            assert torch.allclose(f(x), m(x), atol=1e-5, rtol=1e-4), (B, T)
    assert compiler.BACKEND_STATS["graphs"] - graphs == 1


class _ConvThenLinear(torch.nn.Module):
    """Whisper's encoder start: a conv's output permuted to (B, T, C), normed, then a linear."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 8, 3, padding=1)
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.conv(x)).permute(0, 2, 1)
        return self.lin(torch.nn.functional.layer_norm(h, (8,)))


def test_a_graph_captured_at_batch_one_is_traced_at_a_general_size():
    # Under backed_size_oblivious dynamo's example batch is 1; traced there, the linear's view of
    # its permuted input held only at B = 1 (a guard Eq(B, 1)) and B = 2 traced again.
    from torch.fx.experimental import _config as fx_config
    torch.manual_seed(0)
    torch._dynamo.reset()
    m = _ConvThenLinear().eval()
    graphs, traces = compiler.BACKEND_STATS["graphs"], compiler.STATS["traces"]
    f = torch.compile(m, backend="symshape", dynamic=True)
    with torch.no_grad(), fx_config.patch(backed_size_oblivious=True):
        for B, T in [(1, 9), (2, 9), (3, 17), (1, 4)]:
            x = torch.randn(B, 4, T)
            assert torch.allclose(f(x), m(x), atol=1e-5, rtol=1e-4), (B, T)
    assert compiler.BACKEND_STATS["graphs"] - graphs == 1
    assert compiler.STATS["traces"] - traces == 1


def test_a_training_step_captured_at_batch_one_traces_forward_and_backward_once():
    import copy
    from torch.fx.experimental import _config as fx_config
    torch.manual_seed(0)
    torch._dynamo.reset()
    m = _ConvThenLinear()
    ref = copy.deepcopy(m)
    graphs, traces = compiler.BACKEND_STATS["graphs"], compiler.STATS["traces"]
    f = torch.compile(m, backend="symshape", dynamic=True)
    with fx_config.patch(backed_size_oblivious=True):
        for B, T in [(1, 9), (2, 9), (3, 17), (1, 4)]:
            x = torch.randn(B, 4, T)
            f(x).square().sum().backward()
            ref(x).square().sum().backward()
            for p, q in zip(m.parameters(), ref.parameters()):
                assert torch.allclose(p.grad, q.grad, atol=1e-4, rtol=1e-4), (B, T)
    assert compiler.BACKEND_STATS["graphs"] - graphs == 1
    assert compiler.STATS["traces"] - traces == 2  # the forward graph and the backward graph
