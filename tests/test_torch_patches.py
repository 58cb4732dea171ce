"""The process-wide torch patches of a trace (shapes.torch_patches): early-bound names, threads, restoration."""
import pytest
import threading

import torch
import torch.nn.functional as F
# Bound before any trace, as a program's module does: the builtin itself, not the module attribute.
from torch.nn.functional import scaled_dot_product_attention as sdpa_bound_early

import shapes
from shapes import torch_patches


def causal_if_long(q):
    """``is_causal`` is a size comparison: a SymBool while tracing, which torch's parser rejects."""
    T = q.shape[2]
    return sdpa_bound_early(q, q, q, is_causal=T > 1)


def causal_if_long_positional(q):
    T = q.shape[2]
    return sdpa_bound_early(q, q, q, None, 0.0, T > 1)


def is_compiling_branch(x):
    # Libraries take their trace-safe path when torch says it is compiling.
    return x * 2 if torch.compiler.is_compiling() else x * 3


class BatchNormEval(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(4).eval()

    def forward(self, x):
        return self.bn(x)


def test_sdpa_bound_before_the_trace_gets_is_causal_as_bool():
    for program in (causal_if_long, causal_if_long_positional):
        tp = shapes.trace(program, "q: f32[B, H, T, 8]", dims={"T": 5})
        B, H, T = (tp.env.symbols[n] for n in "BHT")
        assert tp.output_shapes == [(B, H, T, 8)]
        assert [str(g.expr) for g in tp.guards] == ["T > 1"]
        q = torch.randn(2, 3, 5, 8)
        torch.testing.assert_close(tp.run(q), F.scaled_dot_product_attention(q, q, q, is_causal=True))
    # Nothing stays patched: the early binding is torch's builtin again.
    assert sdpa_bound_early is torch._C._nn.scaled_dot_product_attention
    assert F.scaled_dot_product_attention is torch._C._nn.scaled_dot_product_attention


def _signature(tp):
    return (tp.output_shapes, [str(g.expr) for g in tp.guards], len(tp.graph.nodes))


CASES = [
    (causal_if_long, "q: f32[B, H, T, 8]"),
    (is_compiling_branch, "x: f32[B, 4]"),
    (BatchNormEval(), "x: f32[B, 4]"),
]


def test_two_traces_in_two_threads_are_each_correct():
    expected = [_signature(shapes.trace(p, spec)) for p, spec in CASES]
    results: dict = {}
    errors: list = []
    start = threading.Barrier(2)

    def worker(k):
        try:
            start.wait()
            for _ in range(3):
                for i, (p, spec) in enumerate(CASES):
                    results.setdefault((k, i), []).append(_signature(shapes.trace(p, spec)))
        except BaseException as e:  # noqa: BLE001 - the test thread reports any failure to the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for (k, i), sigs in results.items():
        assert sigs == [expected[i]] * 3, (k, i)
    # The traces in the threads took the trace-safe branch, and the process is unpatched after.
    tp = shapes.trace(is_compiling_branch, "x: f32[B, 4]")
    assert [n.target for n in tp.graph.nodes if n.op == "call_function"] == [torch.ops.aten.mul.Tensor]
    assert torch.compiler.is_compiling() is False
    x = torch.ones(2, 4)
    assert torch.equal(tp.run(x), x * 2)
    assert torch.equal(is_compiling_branch(x), x * 3)


def test_the_lock_is_held_for_a_whole_trace():
    seen = []

    def probe(x):
        # Another thread cannot take the lock while this trace runs; this thread can (re-entrant).
        other = threading.Thread(target=lambda: seen.append(torch_patches.LOCK.acquire(blocking=False)))
        other.start()
        other.join()
        seen.append(torch_patches.LOCK.acquire(blocking=False))
        torch_patches.LOCK.release()
        return x + 1

    shapes.trace(probe, "x: f32[B]")
    assert seen == [False, True]


# -- the libraries' compile path and eager's ---------------------------------------------------------------

def _blocks(x):
    """Like transformers' LongT5 before its fix: the compile path drops a tensor that eager's path keeps."""
    mask = None if torch.compiler.is_compiling() else torch.ones_like(x[:, :1])
    return x * mask.sum()


def test_a_program_that_raises_only_on_its_compile_path_is_traced_on_eagers():
    tp = shapes.trace(_blocks, "x: f32[B, T]")
    assert tp.trace_options["compile_path"] is False
    x = torch.randn(3, 5)
    torch.testing.assert_close(tp.run(x), _blocks(x))


def test_a_program_that_runs_on_its_compile_path_stays_there():
    def scaled(x):
        return x * 2 if torch.compiler.is_compiling() else x * 3
    tp = shapes.trace(scaled, "x: f32[B]")
    assert tp.trace_options["compile_path"] is True
    # explicitly on eager's path, the other branch
    assert shapes.trace(scaled, "x: f32[B]", compile_path=False).run(torch.ones(2)).tolist() == [3.0, 3.0]


def test_a_program_error_that_asks_no_flag_is_not_traced_twice():
    calls = []

    def bad(x):
        calls.append(1)
        return x.reshape(3, -1)
    with pytest.raises(shapes.TraceError, match="the program raised"):
        shapes.trace(torch.nn.Sequential(torch.nn.Identity(), _Call(bad)), "x: f32[4]")
    assert len(calls) == 1  # nn.Module.__call__ asks is_compiling(), but torch's own reads do not count


def test_raising_on_the_compile_path_and_undecided_on_eagers_says_both():
    def prog(x):
        if torch.compiler.is_compiling():
            return x.reshape(3, -1)
        if (x > 0).all():
            return x
        return -x
    with pytest.raises(shapes.TraceError, match=r"compile path.*on eager's path the trace stops at: data-dependent"):
        shapes.trace(prog, "x: f32[4]")


class _Call(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def _pair_mask(m):
    # HunyuanVideo's token refiner: a pairwise mask, then one column set in place.
    b, s = m.shape
    a = m.view(b, 1, 1, s).repeat(1, 1, s, 1)
    a = a & a.transpose(2, 3)
    a[:, :, :, 0] = True
    return a


def _rotate_pairs(x):
    # Wan's rotary embedding writes the even and odd lanes of a fresh tensor in place.
    out = torch.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * 2
    out[..., 1::2] = x[..., 1::2] * 3
    return out


def test_an_in_place_slice_write_asks_no_size_question():
    # copy_'s meta kernel asks torch._debug_has_internal_overlap; its C++ tested each size < 2 (through
    # SymInt.h, not recognizable as a layout question), so these traces guarded B >= 2 and refused
    # the batch of 1 that eager runs (found by bench/diffusers_sweep.py on Wan and HunyuanVideo).
    tp = shapes.trace(_pair_mask, "m: bool[B, S]", dims={"B": 2, "S": 5})
    assert not tp.guards and not tp.failing_guards({"B": 1, "S": 1})
    m = torch.tensor([[True, False, True]])
    assert torch.equal(tp.run(m), _pair_mask(m))
    tp = shapes.trace(_rotate_pairs, "x: f32[B, T, 8]", dims={"B": 2, "T": 3})  # a head dim is static
    assert not tp.guards
    x = torch.randn(1, 1, 8)
    assert torch.equal(tp.run(x), _rotate_pairs(x))


def _write_expanded(x, n):
    return x.expand(n.shape[0], x.shape[1]).copy_(torch.ones(n.shape[0], x.shape[1]))


def test_writing_an_expanded_tensor_still_fails_where_eager_does():
    # stride 0 along a dim of B elements: eager refuses the write exactly when B > 1.
    with pytest.raises(shapes.TraceError, match="single memory location"):
        shapes.trace(_write_expanded, "x: f32[1, D]", "n: f32[B]", dims={"B": 2})
    tp = shapes.trace(_write_expanded, "x: f32[1, D]", "n: f32[B]", dims={"B": 1})
    assert tp.failing_guards({"B": 2, "D": 3})  # a write eager refuses is refused, never run
    x = torch.randn(1, 3)
    assert torch.equal(tp.run(x, torch.ones(1)), _write_expanded(x.clone(), torch.ones(1)))
