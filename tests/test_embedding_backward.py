"""An embedding's weight gradient by atomic adds (compiler/embedding_backward.py) against ATen's op,
its call-time choice, and its use in a compiled training step.

Without CUDA the cases run on CPU under TRITON_INTERPRET=1 in one subprocess (this file run
as a script; the interpreter is chosen when triton is imported); with CUDA in-process.
"""

import pytest
import torch

from tests import interpreted

pytestmark = pytest.mark.triton
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}


def _aten(g, ids, nw, pad):
    return torch.ops.aten.embedding_dense_backward.default(g.double(), ids, nw, pad, False)


def case_kernel_matches_aten():
    from compiler.embedding_backward import CALLS, embedding_dense_backward
    torch.manual_seed(0)
    # (rows, D, num_weights, padding_idx): one row, primes, D over one column block (256) and not
    # a power of two, more rows than a chunk (32) with a short last chunk.
    shapes = [(1, 5, 3, -1), (37, 100, 11, 3), (97, 300, 7, 0), (64, 33, 64, -1), (0, 8, 4, -1)]
    kinds = {"random": lambda n, nw: torch.randint(0, nw, (n,)),
             "one id": lambda n, nw: torch.full((n,), nw - 1, dtype=torch.long),  # every chunk summed first
             "mostly one id": lambda n, nw: torch.where(torch.arange(n) % 7 == 3, 1 % nw, 0),
             "positions": lambda n, nw: torch.arange(n) % nw}
    before = CALLS["kernel"]
    calls = 0
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        for n, d, nw, pad in shapes:
            for kind, make in kinds.items():
                for ids_dt in (torch.int64, torch.int32):
                    g = torch.randn(n, d, device=DEVICE).to(dt)
                    ids = make(n, nw).to(DEVICE, ids_dt)
                    got = embedding_dense_backward(g, ids, nw, pad, False)
                    calls += 1
                    assert got.dtype == dt and got.shape == (nw, d), (got.dtype, got.shape)
                    want = _aten(g, ids.long(), nw, pad)
                    err = (got.double() - want).abs().max().item() if got.numel() else 0.0
                    scale = max(1.0, want.abs().max().item() if want.numel() else 0.0)
                    assert err <= TOL[dt] * scale, (dt, n, d, nw, pad, kind, ids_dt, err)
                    if 0 <= pad < nw:
                        assert not got[pad].any(), "padding_idx's row takes no gradient"
    assert CALLS["kernel"] - before == calls, "every call here is the kernel's"
    return "ok"


def case_batched_ids_and_strided_grad():
    # [B, T] ids with a [B, T, D] gradient that is a transposed view (not contiguous).
    from compiler.embedding_backward import embedding_dense_backward
    torch.manual_seed(1)
    ids = torch.randint(0, 50, (3, 41), device=DEVICE)
    g = torch.randn(41, 3, 64, device=DEVICE).transpose(0, 1)
    got = embedding_dense_backward(g, ids, 50, -1, False)
    want = _aten(g, ids, 50, -1)
    assert (got.double() - want).abs().max().item() <= 1e-5
    return "ok"


def case_deterministic_and_scaled_stay_on_aten():
    # Reproducibility asked for: ATen's sort-based op (atomic adds reorder the sums); a count
    # per id (scale_grad_by_freq): ATen too.  Both give ATen's exact bits.
    from compiler.embedding_backward import CALLS, embedding_dense_backward, uses_kernel
    g, ids = torch.randn(40, 16, device=DEVICE), torch.randint(0, 5, (40,), device=DEVICE)
    assert uses_kernel(g, ids, False)
    aten0 = CALLS["aten"]
    scaled = embedding_dense_backward(g, ids, 5, -1, True)
    assert torch.equal(scaled, torch.ops.aten.embedding_dense_backward.default(g, ids, 5, -1, True))
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        assert not uses_kernel(g, ids, False)
        det = embedding_dense_backward(g, ids, 5, -1, False)
    finally:
        torch.use_deterministic_algorithms(was)
    assert torch.equal(det, torch.ops.aten.embedding_dense_backward.default(g, ids, 5, -1, False))
    assert CALLS["aten"] - aten0 == 2
    return "ok"


def case_large_half_tables_stay_on_aten():
    # A half-precision gradient whose float32 accumulator would pass HALF_ACC_BYTES runs ATen's
    # op (its result stays in the half type); fp32 gradients have no such bound (the result is fp32).
    from compiler import embedding_backward as eb
    g16, g32 = torch.randn(40, 16, device=DEVICE).half(), torch.randn(40, 16, device=DEVICE)
    ids = torch.randint(0, 100, (40,), device=DEVICE)
    was = eb.HALF_ACC_BYTES
    eb.HALF_ACC_BYTES = 100 * 16 * 4 - 1
    try:
        assert not eb.uses_kernel(g16, ids, False, 100) and eb.uses_kernel(g32, ids, False, 100)
        aten0 = eb.CALLS["aten"]
        got = eb.embedding_dense_backward(g16, ids, 100, -1, False)
        assert eb.CALLS["aten"] == aten0 + 1 and got.dtype == torch.float16
        assert torch.equal(got, torch.ops.aten.embedding_dense_backward.default(g16, ids, 100, -1, False))
    finally:
        eb.HALF_ACC_BYTES = was
    assert eb.uses_kernel(g16, ids, False, 100)
    return "ok"


def case_a_kernel_that_does_not_build_runs_aten():
    # A real Triton build failure (a non-power-of-two arange: CompilationError on a GPU,
    # InterpreterError under TRITON_INTERPRET=1) in place of the kernel: ATen's values, one
    # KernelFallback warning, and the kernel off from then on.
    import warnings

    import triton
    import triton.language as tl

    from compiler import embedding_backward as eb
    from compiler.kernel_fallback import DISABLED, KernelFallback

    @triton.jit
    def unbuildable(g, ids, out, n, d, padding_idx, ROWS: tl.constexpr, BLOCK_D: tl.constexpr):
        i = tl.arange(0, 3)
        tl.store(out + i, tl.load(g + i))

    g, ids = torch.randn(40, 16, device=DEVICE), torch.randint(0, 10, (40,), device=DEVICE)
    was = eb._kernel
    eb._kernel = lambda: unbuildable
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            first = eb.embedding_dense_backward(g, ids, 10, -1, False)
            aten0 = eb.CALLS["aten"]
            second = eb.embedding_dense_backward(g, ids, 10, -1, False)
        assert [w.category for w in seen] == [KernelFallback], [str(w.message) for w in seen]
        assert "embedding_grad" in DISABLED and eb.CALLS["aten"] == aten0 + 1
        want = torch.ops.aten.embedding_dense_backward.default(g, ids, 10, -1, False)
        assert torch.equal(first, want) and torch.equal(second, want)
    finally:
        eb._kernel = was
        DISABLED.pop("embedding_grad", None)
    return "ok"


def case_compiled_training_step_uses_it():
    # A compiled step of a model with a padded word embedding and a position embedding: the
    # weight gradients equal eager's, and they came from the kernel.
    import copy

    import torch.nn as nn
    from compiler.embedding_backward import CALLS

    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.words, self.pos = nn.Embedding(60, 24, padding_idx=0), nn.Embedding(64, 24)
            self.norm, self.head = nn.LayerNorm(24), nn.Linear(24, 5)

        def forward(self, ids):
            t = torch.arange(ids.shape[1], device=ids.device)
            return self.head(self.norm(self.words(ids) + self.pos(t)[None])).logsumexp(-1).sum()

    torch.manual_seed(2)
    eager = Tagger().to(DEVICE)
    mine = copy.deepcopy(eager)
    import compiler
    compiler.register()  # where the package's entry point is not installed (a checkout on PYTHONPATH)
    f = torch.compile(mine, backend="symshape", dynamic=True, options={"target": "triton"})
    before = CALLS["kernel"]
    for b, t in [(2, 9), (3, 13), (1, 17)]:
        ids = torch.randint(0, 60, (b, t), device=DEVICE)
        ids[:, -1] = 0  # padding
        for m in (eager, mine):
            m.zero_grad()
        eager(ids).backward()
        f(ids).backward()
        for (name, p), q in zip(eager.named_parameters(), mine.parameters()):
            assert torch.allclose(p.grad, q.grad, atol=1e-5, rtol=1e-4), (b, t, name, (p.grad - q.grad).abs().max())
        assert not mine.words.weight.grad[0].any()
    assert CALLS["kernel"] - before >= 3 * 2, CALLS
    return "ok"


results, test_embedding_backward_case = interpreted.case_tests(globals(), __file__)


if __name__ == "__main__":
    interpreted.print_results(interpreted.run_cases(globals()))
