"""torch's OpInfo corpus through the compiler (``bench/opinfo_compile.py``): values equal eager's.

Each sample is compiled once and called at its own sizes and at others; every call's outputs are
compared with eager's on the same inputs.  The bugs this corpus found each keep a direct test here.
"""
import pytest
import torch

import compiler
from tests.programs import load_bench

opinfo_compile = load_bench("opinfo_compile")


def _inputs(*shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g) for s in shapes]


@pytest.mark.parametrize("target", ["cpp"])
def test_a_size_one_dim_broadcast_against_a_later_input_is_not_indexed_along_it(target):
    """``x0: [D0, D1] + x1: [D2]`` traced at D1 = 1: D1 is fixed to 1 only by the broadcast, after
    x0's node was recorded with D1.  The kernel read x0 at ``D1*i + j`` -- along the output's D2
    columns, past x0's end -- where eager repeats x0's one column."""
    def f(a, b):
        return torch.add(a, b, alpha=2)

    c = compiler.compile(f, "x0: f32[D0, D1]", "x1: f32[D2]", dims={"D0": 5, "D1": 1, "D2": 5}, target=target)
    for d0, d1, d2 in [(5, 1, 5), (4, 1, 7), (1, 1, 3), (6, 6, 6), (3, 1, 3)]:
        a, b = _inputs((d0, d1), (d2,))
        torch.testing.assert_close(c(a, b), f(a, b))


def test_a_program_with_a_data_dependent_size_is_called_at_every_size():
    """``masked_select``'s count and ``.item()`` make symbols for data; the variant's guard function
    took them as arguments too, so every call failed with a TypeError before any check."""
    sel = compiler.compile(lambda x, m: torch.masked_select(x, m), "x: f32[B, T]", "m: bool[B, T]",
                           dims={"B": 5, "T": 5})
    g = torch.Generator().manual_seed(1)
    for b, t in [(5, 5), (10, 10), (1, 7), (3, 2)]:
        x, m = torch.randn(b, t, generator=g), torch.rand(b, t, generator=g) > 0.5
        torch.testing.assert_close(sel(x, m), torch.masked_select(x, m))
    item = compiler.compile(lambda x: x.item() * 2, "x: f32[N]", dims={"N": 1})
    assert item(torch.tensor([3.5])) == 7.0


def test_the_corpus_sweep_reports_a_wrong_value_as_a_defect():
    want = torch.arange(4.0)
    assert opinfo_compile.compare(want.clone(), want) == "= eager"
    assert opinfo_compile.compare(want + 1, want).startswith("MISMATCH")
    assert opinfo_compile.compare(want[:3], want).startswith("WRONG SHAPE")
    assert opinfo_compile.compare(want.double(), want).startswith("WRONG DTYPE")
    assert opinfo_compile.compare(torch.tensor([float("nan")]), torch.tensor([float("nan")])) == "= eager"


CORPUS = ["add", "mul", "sub", "where", "softmax", "log_softmax", "sum", "mean", "var_mean", "amax",
          "cumsum", "nn.functional.layer_norm", "nn.functional.gelu", "matmul", "expand", "cat", "stack",
          "transpose", "permute", "flip", "roll", "clamp", "pow", "atan2", "maximum", "lerp", "addcmul"]


@pytest.fixture(scope="module")
def corpus_rows():
    from validation import opinfo
    rows = []
    for op, i, s in opinfo.corpus(CORPUS, samples=2):
        r = opinfo_compile.run_sample(op, i, s, target="cpp", device="cpu", timeout=120, others=3)
        if r is not None:
            rows.append(r)
    return rows


def test_corpus_slice_compiles_and_equals_eager(corpus_rows):
    assert len({r.op for r in corpus_rows}) >= 20
    bad = [(r.op, r.index, r.specs, r.defects) for r in corpus_rows if r.defects]
    assert not bad, bad
    failed = [(r.op, r.status, r.note) for r in corpus_rows if r.status != "ok"]
    assert not failed, failed
    assert sum(len(r.calls) for r in corpus_rows) >= 3 * len(corpus_rows)


def test_a_program_that_seeds_the_generator_runs_as_itself_with_eagers_random_values():
    """``torch.manual_seed`` is no tensor op: the graph did not replay it, so every call after the
    first drew other numbers than eager's (OpInfo's random ops seed inside their wrapper)."""
    from compiler.runtime import RngFallback

    def noisy(x):
        torch.manual_seed(42)
        return x + torch.rand_like(x)

    c = compiler.compile(noisy, "x: f32[N]", dims={"N": 5})
    with pytest.warns(RngFallback, match=r"torch.manual_seed at .*test_compiler_opinfo.py"):
        first = c(torch.zeros(5))
    for n in (5, 5, 9):
        x = torch.randn(n)
        torch.testing.assert_close(c(x), noisy(x))
    torch.testing.assert_close(first, noisy(torch.zeros(5)))
    # A program that only draws keeps its kernels, and eager's values under the same seed.
    plain = compiler.compile(lambda x: x * torch.rand_like(x), "x: f32[N]", dims={"N": 5})
    assert not plain.variants[0].tp.rng_writes
    x = torch.randn(7)
    torch.manual_seed(3)
    got = plain(x)
    torch.manual_seed(3)
    torch.testing.assert_close(got, x * torch.rand_like(x))


def test_a_training_graph_with_a_symint_argument_that_may_be_negative_runs_its_aten_graph():
    """A training graph's SymInt arguments reach the kernels as empty tensors' sizes; that cannot
    carry a negative value.  ``masked.softmax``'s backward (range from -1: every call raised
    "dim s28 = 0 lies outside its range [1, inf]"), ``index_add``'s ``alpha=-1`` (range unbounded:
    "negative dimension -1") and ``roll`` of an empty tensor (no range known) now run their ATen
    graph, and ``as_strided_copy``'s unbounded range no longer crashes the plan (torch's
    ``-int_oo`` says it is a finite integer)."""
    from validation import opinfo
    names = ["masked.softmax", "masked.cumsum", "index_add", "roll", "as_strided_copy"]
    rows = [opinfo_compile.run_sample(op, i, s, target="cpp", device="cpu", timeout=120, others=3, via="train")
            for op, i, s in opinfo.corpus(names, samples=1)]
    rows = [r for r in rows if r is not None]
    assert sorted(r.op for r in rows) == sorted(names)
    for r in rows:
        assert r.status == "ok", (r.op, r.status, r.note, r.calls)
        assert all(o == "= eager" or o == "refused" for _, o in r.calls), (r.op, r.calls)
    assert sum(o == "= eager" for r in rows for _, o in r.calls) >= 10


def test_a_training_graph_whose_saved_sizes_contradict_torchs_meta_runs_that_call_as_its_aten_graph():
    """On the CPU a bf16 ``embedding_bag`` takes its kernel's fast path and returns an empty
    ``offset2bag``, where torch's meta function (fast path for float and half only) promised one
    entry per index.  The backward graph AOTAutograd traced then gets ``offset2bag`` of size 0 for
    a dim it traced as ``N``: every step raised "dim s83 is 5 and 0 in one call" where eager runs.
    Such a call now runs the ATen graph, with a one-line TrainingFallback."""
    import warnings
    import torch.nn.functional as F
    from compiler.training import FallbackKind, TrainingFallback

    def bag(w, i, o, p):
        return F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p)

    compiler.register()
    step = torch.compile(bag, backend="symshape", dynamic=True)
    g = torch.Generator().manual_seed(0)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for n, bags in [(5, 2), (7, 3), (11, 4)]:
            w = torch.randn(10, 5, generator=g).bfloat16().requires_grad_()
            p = torch.randn(n, generator=g).bfloat16().requires_grad_()
            i, o = torch.randint(0, 10, (n,), generator=g), torch.arange(bags) * (n // bags)
            out = step(w, i, o, p)
            out.float().square().sum().backward()
            w2, p2 = w.detach().clone().requires_grad_(), p.detach().clone().requires_grad_()
            ref = bag(w2, i, o, p2)
            ref.float().square().sum().backward()
            torch.testing.assert_close(out, ref)
            torch.testing.assert_close(w.grad, w2.grad)
            torch.testing.assert_close(p.grad, p2.grad)
    sizes = [w for w in seen if issubclass(w.category, TrainingFallback) and f"({FallbackKind.SIZES.value})" in str(w.message)]
    assert sizes and "offset2bag" not in str(sizes[0].message) and "in one call" in str(sizes[0].message)


def _column_major(t):
    return t.transpose(-1, -2).contiguous().transpose(-1, -2)


def _every_other(t):
    buf = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)
    buf[..., ::2] = t
    return buf[..., ::2]


def test_strided_inputs_reach_inner_aten_ops_dense_as_traced():
    """The trace ran on contiguous inputs, so the ``.contiguous()`` eager's composite takes before
    its inner op left no node.  Handed the caller's strided tensor, ``_embedding_bag`` read its
    indices as dense (values like 93979201778544), ``native_group_norm`` and ``_pdist_forward``
    raised where eager runs."""
    import torch.nn.functional as F
    g = torch.Generator().manual_seed(0)
    bag = compiler.compile(lambda w, i, o: F.embedding_bag(i, w, o, mode="sum"),
                           "w: f32[V, D]", "i: i64[N]", "o: i64[B]", dims={"V": 10, "D": 5, "N": 6, "B": 3})
    w, i, o = torch.randn(10, 5, generator=g), torch.tensor([1, 5, 4, 5, 9, 2]), torch.tensor([0, 2, 3])
    for args in [(w, i, o), (_column_major(w), _every_other(i), _every_other(o))]:
        torch.testing.assert_close(bag(*args), F.embedding_bag(args[1], args[0], args[2], mode="sum"))
    gn = compiler.compile(lambda x: F.group_norm(x, 2), "x: f32[B, C, L]", dims={"B": 2, "C": 4, "L": 6})
    pd = compiler.compile(lambda x: F.pdist(x), "x: f32[N, D]", dims={"N": 5, "D": 3})
    for shape in [(2, 4, 6), (3, 6, 5)]:
        x = _column_major(torch.randn(*shape, generator=g))
        torch.testing.assert_close(gn(x), F.group_norm(x, 2))
        y = _column_major(torch.randn(shape[1], shape[2], generator=g))
        torch.testing.assert_close(pd(y), F.pdist(y))


def test_a_program_that_writes_to_a_strided_input_writes_to_the_callers_tensor():
    """Dense copies are for ops that read: the in-place op writes to the caller's strided tensor
    itself, and the op reading it after sees the write."""
    def scale(x, y):
        x.mul_(2)
        return torch.nn.functional.pdist(x) + y.sum()

    c = compiler.compile(scale, "x: f32[A, B]", "y: f32[A, B]", dims={"A": 3, "B": 4})
    for a, b in [(3, 4), (5, 2)]:
        x, y = torch.randn(b, a).t(), torch.randn(a, b)
        x2 = x.clone()
        out = c(x, y)
        torch.testing.assert_close(out, scale(x2, y))
        torch.testing.assert_close(x, x2)


def test_as_strided_of_a_strided_input_reads_its_storage_as_eager_does():
    """``as_strided``'s strides index the input's storage: a column-major input gives other values
    than a contiguous one.  The trace saw a contiguous input, so ``as_strided`` on an input is a
    layout read and a strided call runs the program itself (it gave the contiguous copy's values)."""
    from compiler.runtime import LayoutFallback

    def prog(x):
        return torch.as_strided(x, (2, 3), (1, 2)) * 2

    c = compiler.compile(prog, "x: f32[A, B]", dims={"A": 3, "B": 3})
    assert [r.what for r in c.variants[0].tp.layout_reads] == ["aten.as_strided.default"]
    x = torch.randn(4, 3).t()
    with pytest.warns(LayoutFallback, match="aten.as_strided"):
        torch.testing.assert_close(c(x), prog(x))
    y = torch.randn(3, 4)
    torch.testing.assert_close(c(y), prog(y))
    assert not compiler.compile(lambda x: torch.as_strided(x * 1, (2, 3), (1, 2)), "x: f32[A, B]",
                                dims={"A": 3, "B": 3}).variants[0].tp.layout_reads


def test_strided_inputs_through_the_backend_for_inference_and_training(monkeypatch):
    """Through ``torch.compile``: inference graphs take the dense copies; training graphs do not
    (AOTAutograd traced them at the inputs' own strides, and a dense weight takes embedding_bag's
    fast path, whose empty ``offset2bag`` the backward's sizes refused: "dim s83 is 5 and 0")."""
    from validation import opinfo
    monkeypatch.setitem(opinfo_compile.STRIDED, "on", True)
    names = ["nn.functional.embedding_bag", "nn.functional.group_norm", "nn.functional.pdist"]
    for via in ("backend", "train"):
        rows = [opinfo_compile.run_sample(op, i, s, target="cpp", device="cpu", timeout=120, others=2, via=via)
                for op, i, s in opinfo.corpus(names, samples=1)]
        rows = [r for r in rows if r is not None]
        assert len(rows) == 3, via
        for r in rows:
            assert r.status == "ok", (via, r.op, r.note, r.calls)
            assert r.calls[0][1] == "= eager", (via, r.op, r.calls)


def test_the_float64_verdict_tells_a_right_ill_conditioned_program_from_a_wrong_or_lossy_one():
    """A result off eager's passes as ``= float64`` only where the program, compiled for float64,
    equals eager's float64 result and its own rounding error is within ten times eager's: a sum
    taken in another order passes; a sum off by one, or one taken in bf16, does not."""
    x = torch.randn(4096, generator=torch.Generator().manual_seed(0)) * 100

    def case(t):
        return t.sum()

    def with_float64(fn):
        fn._float64 = lambda: fn
        return fn

    reordered = with_float64(lambda t: t.reshape(64, 64).sum(1).sum())
    wrong = with_float64(lambda t: t.sum() + 1)
    lossy = with_float64(lambda t: t.sum() if t.dtype == torch.float64 else t.bfloat16().sum().float())
    want = case(x)
    assert reordered(x) != want  # off eager's, by its rounding
    wide = [x.double()]
    verdicts = {name: opinfo_compile._right_in_float64(fn, [x], wide, fn(x), want, case(*wide))
                for name, fn in (("reordered", reordered), ("wrong", wrong), ("lossy", lossy))}
    assert verdicts == {"reordered": True, "wrong": False, "lossy": False}


def test_float64_references_run_on_the_inputs_as_they_were_before_eager_updated_them():
    """An in-place op's eager run updates the sample's inputs: a float64 reference computed from
    them afterwards is the op applied twice, which a program off by one more lies nearest to.  The
    verdict takes the references from the inputs as they were, and so rejects it."""
    class AddOneInPlace:
        random = False

        def __call__(self, t):
            return t.add_(1)

    x = torch.randn(64, generator=torch.Generator().manual_seed(0))
    verdict = opinfo_compile._call(AddOneInPlace(), lambda t: t + 2, [x.clone()])
    assert verdict.startswith("MISMATCH"), verdict
    assert opinfo_compile._call(AddOneInPlace(), lambda t: t + 1, [x.clone()]) == "= eager"
