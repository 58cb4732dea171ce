"""dinfer's summary (valid iff ...), suggested torch.export spec, printer and time limits,
checked against eager PyTorch on every grid point and against torch.export itself."""
import os
import re

import pytest
import torch
import torch.fx.experimental._config  # noqa: F401  (backed_size_oblivious, for torch.export)
import torch.nn.functional as F

from cli.main import dinfer_main
from validation import dinfer
from validation.input_space import Status
from tests.programs import eager_error, grid, instance, load_zoo, real_inputs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZOO_PATH = os.path.join(ROOT, "examples", "shape_zoo.py")


zoo = load_zoo("shape_zoo_summary")
CASES = {c[0]: c for c in zoo.SUMMARY_CASES}


def _inputs(name, specs, point):
    """Real tensors of these sizes; for data-dependent programs, data that meet the
    run-time conditions dinfer reports (so the sizes alone decide)."""
    out = real_inputs(specs, point)
    if name == "nonzero_heads":
        out[0][:, 0] = out[0][:, 0].abs() + 0.5  # every row selected: idx.shape[0] >= 1
    if name == "take_k":
        out[1] = torch.tensor(min(3, point["N"]))  # 0 <= k <= N
    return out


def _eager(name, program, specs, point):
    """None if it runs, else the exception type's name."""
    return eager_error(program, _inputs(name, specs, point))


_SPACES = {}


def _space(name):
    if name not in _SPACES:
        _, program, specs, dims = CASES[name]
        program = instance(program)
        _SPACES[name] = (program, dinfer(program, *specs, dims=dims))
    return _SPACES[name]


def _holds(formula, point) -> bool:
    try:
        return bool(eval(formula, {}, dict(point)))
    except ZeroDivisionError:
        return False


@pytest.mark.parametrize("name", list(CASES))
def test_valid_iff_is_the_eager_truth_on_the_grid(name):
    """The printed `valid iff` (Python over the dim names) and every error region agree
    with eager PyTorch at each point of the grid; each region's form was proved by Z3."""
    program, space = _space(name)
    _, _, specs, dims = CASES[name]
    assert space.complete, space.reason
    summary = space.summary
    assert all(r.short and r.proved for r in summary.regions), [r.to_dict() for r in summary.regions]
    errors = [r for r in summary.regions if r.kind == "error"]
    for point in grid(dims):
        got = _eager(name, program, specs, point)
        assert _holds(summary.valid_iff, point) == (got is None), (summary.valid_iff, point, got)
        if got is not None:
            owners = [r for r in errors if _holds(r.formula(), point)]
            assert len(owners) == 1 and owners[0].error.type == got, (point, got, [r.formula() for r in owners])


def test_conv_pool_one_line_from_the_cli(capsys):
    rc = dinfer_main([f"{ZOO_PATH}:conv_pool", "-i", "x: f32[B, 3, H, W]", "--dim", "B=1..4",
                      "--dim", "H=1..64", "--dim", "W=1..64"])
    out, _ = capsys.readouterr()
    assert rc == 0
    lines = out.splitlines()
    valid = next(line for line in lines if line.startswith("valid iff"))
    assert valid == "valid iff H >= 8 and W >= 8"  # 2 conjuncts; B=1 and B>=2 merged
    assert "RuntimeError iff H <= 7 or W <= 7" in out
    assert 'H = Dim("H", min=8, max=64)' in out and 'B = Dim("B", min=1, max=4)' in out
    # The summary comes before the detailed classes.
    assert lines.index(valid) < next(i for i, l in enumerate(lines) if l.startswith("outcomes ("))


def _example(spec, bump):
    """A point inside the spec, mid-range, sizes >= 2 where it can (torch.export's 0/1 rule)."""
    point = {}
    for i, (n, (lo, hi)) in enumerate(spec.ranges.items()):
        if n in spec.static:
            point[n] = spec.static[n]
            continue
        m = spec.same.get(n, n)
        i = list(spec.ranges).index(m)
        k = spec.multiple.get(m, 1)
        lo2, hi2 = spec.ranges[m]
        # Mid-range, distinct per dim: an example at a range's end can make an
        # intermediate size 1, which torch.export then specializes.
        v = max(lo2, 2) + i + bump if hi2 is None else max(max(lo2, 2), (lo2 + hi2) // 2 - i - bump)
        v = -(-v // k) * k
        if hi2 is not None and v > hi2:
            v = hi2 // k * k
        point[n] = v
    return point


class _Wrap1(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, a):
        return self.fn(a)


class _Wrap3(_Wrap1):
    def forward(self, a, b, c):
        return self.fn(a, b, c)


# pad_to_multiple is exact too (T >= 5), but torch.export cannot check it: its range
# analysis does not prove (T + (-T) % 4) // 4 >= 2 from T >= 5 (it can from T >= 9), and
# raises while building its own suggested fix.
EXACT = ["matmul_chain", "split_pairs", "conv_pool", "heads", "pool_stack"]


@pytest.mark.parametrize("name", EXACT)
def test_suggested_dims_export_and_run_at_the_bounds(name):
    """The suggested Dims go to torch.export.export as they are; the exported program runs
    at the smallest and largest sizes the spec allows, with eager's output shapes."""
    program, space = _space(name)
    _, _, specs, _ = CASES[name]
    spec = space.suggestion
    assert spec is not None and spec.exact and not spec.checks, spec.text()
    point = _example(spec, 0)
    module = program if isinstance(program, torch.nn.Module) else \
        (_Wrap1 if len(specs) == 1 else _Wrap3)(program)
    # As the spec's text says: otherwise export specializes intermediate sizes that can be 1.
    with torch.fx.experimental._config.patch(backed_size_oblivious=True):
        ep = torch.export.export(module, tuple(_inputs(name, specs, point)), dynamic_shapes=spec.dynamic_shapes())
    for corner in spec.corners():
        args = _inputs(name, specs, corner)
        want = program(*args)
        got = ep.module()(*args)
        assert got.shape == want.shape, (corner, got.shape, want.shape)


def test_spec_uses_user_names_and_derived_dims():
    _, space = _space("heads")
    text = space.suggestion.text()
    assert '_C = Dim("_C", min=1, max=4)  # C = 4*_C' in text and "2: 4*_C" in text
    _, space = _space("matmul_chain")
    assert "# K must equal J" in space.suggestion.text()


def take_k_checked(x, k):
    n = k.item()
    torch._check(n >= 0)
    torch._check(n <= x.shape[0])
    return x[:n]


def test_data_dependent_slices_need_no_advice():
    """x[:n] with n read from data traces as torch.export traces it (a data-dependent length, which
    Python clamps to the rows there are): no assumption and no check needed, with or without the
    user's checks (assume_data=False)."""
    _, space = _space("take_k")
    assert space.summary.valid_iff == "True"
    assert not space.summary.valid.run_time
    assert all(c.decision is None for c in space.classes)
    assert "output [len(x[:n]), 2]" in space.table()
    checked = dinfer(take_k_checked, "x: f32[N, 2]", "k: i64[]", dims={"N": (1, 8)}, assume_data=False)
    assert checked.complete and all(c.decision is None for c in checked.classes)
    assert checked.summary.valid_iff == "True"
    # Without the checks and without assuming, the same program traces: there is no data branch.
    raw = dinfer(zoo.take_k, "x: f32[N, 2]", "k: i64[]", dims={"N": (1, 8)}, assume_data=False)
    assert raw.complete and all(c.decision is None for c in raw.classes)


def resize_if_long(q):
    if q.shape[1] > 4:
        # resize_as_ on a fresh tensor: its kernel reads sizes as ints, which symshape cannot trace.
        return torch.empty(0).resize_as_(q).fill_(1.0) * q
    return q * 2


def test_engine_limitation_is_its_own_outcome_never_an_error():
    space = dinfer(resize_if_long, "q: f32[1, T, 8]", dims={"T": (1, 12)})
    c = space.classify(T=6)
    assert c.status is Status.UNSUPPORTED and c.message.startswith("unsupported by symshape:")
    assert not space.error_classes
    kinds = {r.kind for r in space.summary.regions}
    assert kinds == {"ok", "unsupported"}
    text = space.table()
    assert "not proved" in text and "where the outcome is known" in text
    assert not space.suggestion.exact
    q = torch.randn(1, 6, 8)
    resize_if_long(q)  # eager runs there: reporting an error class would have been wrong


SYMPY_TEXT = re.compile(r"\bEq\(|\bNe\(|\bMod\(|\bfloor\(|\bPyMod\(|\bFloorDiv\(|\b\d+x[A-Za-z(]|\bu\d+\b")


@pytest.mark.parametrize("name", ["chunk_add", "unfold_pairs", "nonzero_heads", "take_k", "view_k"])
def test_cli_output_has_no_sympy_syntax(capsys, name):
    _, _, specs, dims = CASES[name]
    args = [f"{ZOO_PATH}:{name}", "-q"]
    for s in specs:
        args += ["-i", s]
    for n, (lo, hi) in dims.items():
        args += ["--dim", f"{n}={lo}..{hi}"]
    assert dinfer_main(args) == 0
    out, err = capsys.readouterr()
    assert not SYMPY_TEXT.search(out + err), SYMPY_TEXT.search(out + err)


def test_tables_of_every_program_have_no_sympy_syntax():
    for name in CASES:
        _, space = _space(name)
        text = space.table() + (space.suggestion.text() if space.suggestion else "")
        assert not SYMPY_TEXT.search(text), (name, SYMPY_TEXT.search(text))
    # torch's "4x6x6" size tuples with symbolic sizes become Python tuples.
    _, space = _space("conv_pool")
    assert "Given input size: (4, H - 2, W - 2)" in space.table(detail=True)


def loop_forever(x):
    while True:
        x = x + 1


def test_a_program_that_loops_forever_ends_with_one_line(capsys):
    space = dinfer(loop_forever, "x: f32[N]", dims={"N": (1, 8)}, trace_timeout=0.5)
    assert space.timed_out and not space.complete and "did not finish within 0.5 s" in space.reason
    rc = dinfer_main([f"{os.path.abspath(__file__)}:loop_forever", "-i", "x: f32[N]", "--dim", "N=1..8",
                      "--trace-timeout", "0.5"])
    out, err = capsys.readouterr()
    assert rc != 0 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "may loop forever" in lines[0], err


def test_time_budget_cuts_the_search_and_says_so():
    program, specs = zoo.conv_pool, ["x: f32[B, 3, H, W]"]
    space = dinfer(program, *specs, dims={"B": (1, 4), "H": (1, 64), "W": (1, 64)}, time_budget=1.0)
    assert not space.complete and "time budget" in space.reason
    assert "INCOMPLETE" in space.table()
    if space.classes:  # on a busy machine even the first trace may not finish in time
        assert "among the sizes classified so far" in space.table()
