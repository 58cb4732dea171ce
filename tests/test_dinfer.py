"""dinfer against ground truth: eager PyTorch on real tensors at every point of small grids."""
import itertools
import json
import math
import os
import subprocess
import sys

import pytest
import sympy
import torch
import torch.nn as nn

from cli.main import dinfer_main, main
from shapes import SpecError
from validation import dinfer
from validation.input_space import Status
from tests.programs import eager_runs, grid, instance, load_zoo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZOO_PATH = os.path.join(ROOT, "examples", "shape_zoo.py")


zoo = load_zoo("shape_zoo")


_SPACES = {}


def _searched(name, program, specs, dims):
    """One search per zoo program, shared by the tests below (the search is deterministic)."""
    if name not in _SPACES:
        program = instance(program)
        _SPACES[name] = (program, dinfer(program, *specs, dims=dims))
    return _SPACES[name]


@pytest.mark.parametrize("name,program,specs,dims", zoo.CASES, ids=[c[0] for c in zoo.CASES])
def test_classify_matches_eager_on_every_grid_point(name, program, specs, dims):
    program, space = _searched(name, program, specs, dims)
    assert space.complete, space.reason
    assert not space.overlaps and not space.warnings
    statuses = set()
    for point in grid(dims):
        c = space.classify(point)
        assert c is not None, point  # complete: every point has a class
        statuses.add(c.ok)
        assert c.ok == eager_runs(program, specs, point), (point, c, c.error)
    # Every program here has sizes where it runs and sizes where it fails.
    assert statuses == {True, False}


@pytest.mark.parametrize("name,program,specs,dims", zoo.CASES, ids=[c[0] for c in zoo.CASES])
def test_predicates_examples_and_python_form(name, program, specs, dims):
    """Classes are disjoint, examples minimal, and the printed predicates are correct Python."""
    _, space = _searched(name, program, specs, dims)
    points = list(grid(dims))
    names = list(dims)
    owner = [space.classify(p) for p in points]
    for c in space.classes:
        members = [p for p, o in zip(points, owner) if o is c]
        assert members, c
        # The traced point and the example lie in the class; the example is its smallest
        # point (least sum of sizes, then lexicographic in dim order).
        assert space.classify(c.traced_at) is c
        assert c.example_minimal and space.classify(c.example) is c
        key = lambda p: (sum(p.values()), [p[n] for n in names])
        assert key(c.example) == min(key(p) for p in members)
        # The printed predicate is Python that means the same as the sympy predicate
        # (classes are disjoint, checked above, so membership is "classify gives c").
        code = compile(c.describe(), "<predicate>", "eval")
        for p, o in zip(points, owner):
            try:
                holds = bool(eval(code, {}, dict(p)))
            except ZeroDivisionError:
                holds = False
            assert holds == (o is c), (c.describe(), p)


def test_size_branch_classes_are_simplified():
    space = dinfer(zoo.size_branch, "x: f32[N]", dims={"N": (1, 64)})
    assert space.complete
    got = {(c.describe(), c.ok) for c in space.classes}
    # Size 1 fails like every other odd N <= 8: one class (the 0/1 policy split off N == 1).
    assert got == {("N <= 8 and N % 2 == 0", True), ("N >= 9", True), ("N <= 8 and N % 2 != 0", False)}
    err = space.classify(N=5).error
    assert err.type == "RuntimeError" and "invalid for input of size" in err.message
    assert err.filename == ZOO_PATH and err.code == "return x.view(-1, 2)"
    assert space.valid_ranges == {"N": (2, 64)}


def test_failed_torch_check_is_an_error_class_with_its_message():
    space = dinfer(zoo.pad_to_multiple, "x: f32[B, T]", dims={"B": (1, 4), "T": (1, 64)})
    assert space.complete
    c = space.classify(B=3, T=4)
    assert c.ok is False and "need at least two blocks of 4" in c.error.message
    assert "torch._check(blocks >= 2" in c.error.code
    assert space.classify(B=3, T=5).ok is True  # padded to 8: two blocks
    assert space.valid_ranges["T"] == (5, 64)


def test_gpt2_boundary_at_max_positions():
    transformers = pytest.importorskip("transformers")
    transformers.utils.logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, n_positions=16, vocab_size=50)
    model = transformers.GPT2Model(cfg).eval()
    dims = {"B": (1, 4), "T": (1, 40)}
    space = dinfer(model, "ids: i64[B, T]", dims=dims)
    assert space.complete, space.reason
    # The boundary is n_positions: T <= 16 runs, T >= 17 fails like eager (IndexError in wpe).
    assert space.valid_ranges == {"B": (1, 4), "T": (1, 16)}
    bad = space.classify(B=2, T=17)
    assert bad.ok is False and bad.error.type == "IndexError"
    assert "index out of range" in bad.error.message and "wpe" in bad.error.code
    assert bad.example["T"] == 17
    # (an ok class may join the paths sizes 1 take: its conditions are then one `or`)
    assert any(sympy.Le(space.symbols["T"], 16) in c.conditions or "T <= 16" in c.describe()
               for c in space.ok_classes)
    for point in [{"B": 1, "T": 1}, {"B": 2, "T": 16}, {"B": 2, "T": 17}, {"B": 1, "T": 40}, {"B": 4, "T": 9}]:
        assert space.classify(point).ok == eager_runs(model, ["ids: i64[B, T]"], point), point
    for b, t in itertools.product(range(1, 5), range(1, 41)):
        assert space.classify(B=b, T=t).ok == (t <= 16)


def test_conv_reports_minimum_spatial_size():
    conv = nn.Conv2d(3, 8, 3).eval()
    space = dinfer(conv, "x: f32[N, 3, H, W]", dims={"N": (1, 8), "H": (1, 256), "W": (1, 256)})
    assert space.complete
    assert space.valid_ranges == {"N": (1, 8), "H": (3, 256), "W": (3, 256)}
    assert space.classify(N=2, H=2, W=100).ok is False
    assert space.classify(N=2, H=3, W=3).ok is True
    # Conv -> pool -> conv needs 8x8.
    space = dinfer(zoo.ConvPool().eval(), "x: f32[1, 3, H, W]", dims={"H": (1, 512), "W": (1, 512)})
    assert space.complete
    assert space.valid_ranges == {"H": (8, 512), "W": (8, 512)}
    # (torch versions differ in how many ok classes: 2.11's pool meta guards on parity)
    assert min((c.example for c in space.ok_classes), key=lambda e: (e["H"] + e["W"], e["H"])) == {"H": 8, "W": 8}
    assert space.classify(H=8, W=8).ok is True and space.classify(H=7, W=8).ok is False


def data_branch(x):
    if x.shape[0] < 4:
        return x.view(-1, 2)
    if x.sum() > 0:  # decided by data
        return x[:4]
    return x


def test_data_dependent_branch_is_reported_not_guessed():
    space = dinfer(data_branch, "x: f32[N]", dims={"N": (1, 20)})
    assert space.complete
    dd = space.classify(N=6)
    assert dd.status is Status.DATA_DEPENDENT and dd.data_dependent and dd.ok is None
    assert dd.describe() == "N >= 4"
    assert dd.decision.code == "if x.sum() > 0:  # decided by data" and "branches on data" in dd.decision.message
    # The search went on below the data-dependent region, where sizes decide.
    for n in range(1, 4):
        assert space.classify(N=n).ok == eager_runs(data_branch, ["x: f32[N]"], {"N": n})


def test_runtime_assert_on_data_dependent_size_is_data_dependent():
    space = dinfer(zoo.nonzero_rows, "x: f32[N, M]", dims={"N": (1, 8), "M": (1, 8)})
    assert space.complete
    c = space.classify(N=5, M=3)
    assert c.ok is None and c.status is Status.DATA_DEPENDENT
    assert [str(d) for d in c.data_conditions] == ["Eq((u0 % 2), 0)"]
    assert "number of nonzero elements" in c.message
    # Both outcomes really happen at these sizes, depending on data.
    x = torch.zeros(5, 3)
    x[:2] = 1
    zoo.nonzero_rows(x)  # two positive rows: runs
    x[2] = 1
    with pytest.raises(RuntimeError):
        zoo.nonzero_rows(x)  # three: the view fails


def unique_rows(x):
    if x.shape[0] < 3:
        return x.view(-1, 2)
    return torch.unique(x, dim=0)  # symshape cannot model unique(dim=...)


def test_unsupported_op_is_unknown_and_the_search_goes_on():
    space = dinfer(unique_rows, "x: f32[N, 2]", dims={"N": (1, 10)})
    assert space.complete
    c = space.classify(N=7)
    assert c.status is Status.UNSUPPORTED and c.ok is None and "unique" in c.message
    assert c.describe() == "N >= 3"
    assert space.classify(N=2).ok is True and space.classify(N=1).ok is True
    assert "some sizes are data-dependent or unsupported" in space.table()


def test_budget_stop_is_honest():
    name, program, specs, dims = zoo.CASES[0]
    space = dinfer(program, *specs, dims=dims, max_classes=2)
    assert not space.complete and len(space.classes) == 2 and space.traces == 2
    assert "max_classes=2" in space.reason
    left = space.unexplored_example
    assert left is not None and space.classify(left) is None
    assert "INCOMPLETE" in space.table()


def test_dims_handling():
    # No range: the documented default, and the report says so.
    space = dinfer(lambda x: x.view(-1, 4), "x: f32[N]")
    assert space.dims == {"N": (1, 4096)} and space.defaulted == ("N",)
    assert "no range given for N" in space.table()
    # An int pins the dim; an unbounded range is searched too.
    space = dinfer(lambda x: x.view(-1, 4), "x: f32[B, N]", dims={"B": 3, "N": (1, math.inf)})
    assert space.complete and space.dims["B"] == (3, 3)
    assert space.classify(N=8).ok is True and space.classify(N=10).ok is False
    assert space.valid_ranges == {"B": (3, 3), "N": (4, math.inf)}
    with pytest.raises(ValueError, match="outside the range"):
        space.classify(B=4, N=8)
    with pytest.raises(SpecError):
        dinfer(lambda x: x, "x: f32[N")
    with pytest.raises(SpecError):
        dinfer(lambda x: x, "x: f32[N]", dims={"Q": (1, 4)})
    with pytest.raises(SpecError):
        dinfer(lambda x: x, "x: f32[N]", dims={"N": (5, 2)})


def test_json_round_trip():
    space = dinfer(zoo.size_branch, "x: f32[N]", dims={"N": (1, 64)})
    d = json.loads(space.to_json())
    assert d["complete"] is True and d["traces"] == len(d["classes"]) == 3
    assert {c["predicate"] for c in d["classes"] if c["ok"]} == {"N <= 8 and N % 2 == 0", "N >= 9"}
    assert d["valid_ranges"] == {"N": [2, 64]}


# ---------------------------------------------------------------------------------------- CLI


def test_cli_table_and_progress(capsys):
    rc = dinfer_main([f"{ZOO_PATH}:size_branch", "-i", "x: f32[N]", "--dim", "N=1..64", "--progress"])
    out, err = capsys.readouterr()
    assert rc == 0
    assert "N <= 8 and N % 2 == 0" in out and "RuntimeError" in out and "complete: Z3 proved" in out
    assert "runs for sizes within: N 2..64" in out
    assert "trace 1: N=8 -> class 1 (ok)" in err  # progress on stderr, not in the table
    # Without --progress it is shown only on a terminal (stderr is captured here).
    rc = dinfer_main([f"{ZOO_PATH}:size_branch", "-i", "x: f32[N]", "--dim", "N=1..64"])
    out, err = capsys.readouterr()
    assert rc == 0 and err == "" and out.startswith("dinfer ")


def test_cli_json_and_quiet(capsys):
    rc = main(["dinfer", f"{ZOO_PATH}:conv_pool", "-i", "x: f32[B, 3, H, W]", "--dim", "B=1..4,H=1..64,W=1..64",
               "--json", "--quiet", "--max-classes", "256"])
    out, err = capsys.readouterr()
    assert rc == 0 and err == ""
    d = json.loads(out)
    assert d["complete"] and d["valid_ranges"] == {"B": [1, 4], "H": [8, 64], "W": [8, 64]}
    assert d["summary"]["valid_iff"] == "H >= 8 and W >= 8"
    assert d["program"].endswith("shape_zoo.py:conv_pool")


def test_cli_module_class_target(capsys):
    # NAME may be an nn.Module subclass constructible without arguments.
    rc = dinfer_main([f"{ZOO_PATH}:ConvPool", "-i", "x: f32[1, 3, H, W]", "--dim", "H=1..32,W=8", "-q"])
    out, _ = capsys.readouterr()
    assert rc == 0 and "complete: Z3 proved" in out
    assert "runs for sizes within: H 8..32, W 8..8" in out


def test_cli_budget_flags(capsys):
    rc = dinfer_main([f"{ZOO_PATH}:matmul_chain", "-i", "a: f32[M, K]", "-i", "b: f32[J, N]",
                      "-i", "c: f32[L, 3]", "--max-classes", "2", "-q"])
    out, _ = capsys.readouterr()
    assert rc == 0 and "INCOMPLETE: stopped at max_classes=2" in out
    assert "note: no range given for M; searched the default 1..4096" in out


@pytest.mark.parametrize("args,fragment", [
    (["nope.py:f", "-i", "x: f32[N]"], "no such file"),
    ([f"{ZOO_PATH}:missing", "-i", "x: f32[N]"], "has no name 'missing'"),
    ([f"{ZOO_PATH}:size_branch", "-i", "x: f32[N"], "malformed input spec"),
    ([f"{ZOO_PATH}:size_branch", "-i", "x: f32[N]", "--dim", "N=9..2"], "empty or negative range"),
    ([f"{ZOO_PATH}:size_branch", "-i", "x: f32[N]", "--dim", "N=1..x"], "bad --dim"),
    ([f"{ZOO_PATH}:size_branch", "-i", "x: f32[N]", "--dim", "Q=1..4"], "no input spec uses"),
    ([f"{ZOO_PATH}:size_branch", "-i", "x: f32[N]", "--max-classes", "0"], "--max-classes"),
])
def test_cli_bad_input_is_one_line_and_nonzero(capsys, args, fragment):
    rc = dinfer_main(args)
    out, err = capsys.readouterr()
    assert rc != 0 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], err


def test_dinfer_console_script():
    r = subprocess.run(["dinfer", f"{ZOO_PATH}:view_k", "-i", "x: f32[N, M]", "--dim", "N=1..6,M=1..6",
                        "--json", "-q"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["complete"] and all(c["status"] in ("ok", "error") for c in d["classes"])
