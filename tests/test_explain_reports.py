"""Explanation reports: the 80-column text, JSON against the schema in the repo, and the CLI."""
import importlib.resources
import json
import os
import re
import subprocess
import sys
import tomllib

import pytest

import guards
import shapes
from cli.main import main
from guards.report_json import SCHEMA_PATH, load_schema, to_dict, validate
from tests import explain_programs as E
from tests import programs as P

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAMS = P.__file__
EXPLAIN_PROGRAMS = E.__file__


def traces():
    return {
        "branch": (shapes.trace(P.branch_on_size, "x: f32[B, 4]", dims={"B": 32}), {"B": 4}),
        "view": (shapes.trace(P.view_by_8, "x: f32[N]", dims={"N": 64}), {"N": 12}),
        "matmul": (shapes.trace(P.matmul, "a: f32[M, K]", "b: f32[J, N]", dims={"K": 16, "J": 16}),
                   {"M": 2, "K": 3, "J": 4, "N": 5}),
        "nonzero": (shapes.trace(P.nonzero_slice_checked, "x: f32[N, 4]", "mask: bool[M]"), {"N": 3, "M": 9}),
        "convpool": (shapes.trace(P.ConvPool(), "x: f32[B, 3, H, W]"), {"B": 1, "H": 3, "W": 100}),
        "zero_one": (shapes.trace(E.reduce_rows, "x: f32[B, T]", dims={"B": 1}, specialize_zero_one=True),
                     {"B": 2, "T": 2}),
        "mixed": (shapes.trace(E.branch_and_view, "x: f32[B, T]", dims={"B": 8, "T": 32}), {"B": 2, "T": 12}),
        "int": (shapes.trace(E.size_as_int, "x: f32[N, 4]"), {"N": 9}),
    }


@pytest.fixture(scope="module")
def traced():
    return traces()


# -- text --------------------------------------------------------------------------------------


def test_text_fits_80_columns_and_shows_every_record(traced):
    for name, (tp, point) in traced.items():
        for at in (None, point):
            ex = guards.explain(tp, at=at)
            text = ex.text()
            lines = text.splitlines()
            too_long = [line for line in lines if len(line) > 80]
            assert not too_long, (name, too_long)
            assert lines[0].startswith("symshape explain: ")
            for e in ex.entries:
                assert f"-- #{e.index} " in text
                assert e.user_expr in text.replace("\n", " ") or len(e.user_expr) > 70
                if e.origin != "input_spec":  # an example size has no source line
                    assert f"{os.path.basename(e.file)}:{e.line}" in text
            # The summary comes first, then the --at verdict, then the records.
            order = [text.index("Dims")]
            if at is not None:
                order.append(text.index("\nAt "))
            if ex.entries:
                order.append(text.index("-- #0 "))
            assert order == sorted(order)


def test_text_narrower_width(traced):
    tp, point = traced["convpool"]
    text = guards.explain(tp, at=point).text(width=60)
    assert max(len(line) for line in text.splitlines()) <= 60


def test_text_sample(traced):
    tp, _ = traced["branch"]
    text = guards.explain(tp, at={"B": 4}).text()
    assert "by origin:  your code 1, inside torch 0, input spec 0" in text
    assert "  B = x.shape[0]: dynamic, sizes 17..inf (example 32)" in text
    assert "At B=4: 1 of 1 record fails" in text
    assert "  - this call would recompile because x.shape[0] > 16 is false at B=4" in text
    assert re.search(r"^ +\d+ \| if x\.shape\[0\] > 16:$", text, re.M)
    assert "  asked by:   your code" in text
    assert "  avoid it:   this branch specializes on B" in text


# -- JSON --------------------------------------------------------------------------------------


def test_json_validates_against_the_schema(traced):
    for name, (tp, point) in traced.items():
        for at in (None, point):
            doc = json.loads(guards.explain(tp, at=at).json())
            assert validate(doc) == [], name
            assert len(doc["records"]) == len(tp.records)
            assert (doc["at"] is None) == (at is None)


def test_json_content(traced):
    tp, point = traced["mixed"]
    doc = to_dict(guards.explain(tp, at=point))
    r0, r1 = doc["records"]
    assert r0["kind"] == "guard" and r0["origin"] == "user_code" and r0["op"] is None
    assert r0["source"]["code"] == "if x.shape[0] > 4:" and r0["source"]["file"] == EXPLAIN_PROGRAMS
    hit = r0["source"]["snippet"]["lines"][r0["source"]["line"] - r0["source"]["snippet"]["start"]]
    assert hit.strip() == "if x.shape[0] > 4:"
    assert r1["kind"] == "runtime_assert" and r1["op"] == "aten.view.default" and r1["cost"] == "runtime_error"
    assert doc["at"]["failing"] == [0, 1] and doc["at"]["verdict"] == "recompile"
    assert doc["summary"]["counts"]["by_origin"]["user_code"] == 1


def test_validator_rejects_bad_documents(traced):
    tp, point = traced["zero_one"]
    good = to_dict(guards.explain(tp, at=point))
    assert validate(good) == []
    bad = json.loads(json.dumps(good))
    bad["records"][0]["kind"] = "maybe"
    bad["records"][0]["source"]["line"] = "12"
    bad["summary"]["dims"][0]["example"] = True
    bad["summary"]["counts"]["by_kind"]["guard"] = -1
    bad["at"]["verdict"] = None
    del bad["program"]
    bad["extra"] = 1
    errors = validate(bad)
    assert sorted(errors) == sorted([
        "$: missing required property 'program'",
        "$: unexpected property 'extra'",
        "$.summary.dims[0].example: expected integer, got bool True",
        "$.summary.counts.by_kind.guard: -1 is less than the minimum 0",
        "$.records[0].kind: 'maybe' is not one of ['guard', 'runtime_assert', 'specialization']",
        "$.records[0].source.line: expected integer, got str '12'",
        "$.at: matches none of the 2 allowed forms",
    ])


def test_schema_enums_match_the_engine():
    from shapes.guard import Decision, GuardKind
    s = load_schema()["definitions"]["record"]["properties"]
    assert set(s["kind"]["enum"]) == {k.value for k in GuardKind}
    assert set(s["decided_by"]["enum"]) == {d.value for d in Decision}


def test_schema_is_valid_json_schema_and_agrees_with_jsonschema(traced):
    # Cross-check of the hand-written validator with the reference implementation (the test extra has it).
    import jsonschema
    schema = load_schema()
    jsonschema.Draft7Validator.check_schema(schema)
    for tp, point in traced.values():
        jsonschema.validate(to_dict(guards.explain(tp, at=point)), schema)


def test_schema_ships_as_package_data():
    assert importlib.resources.files("guards").joinpath("report.schema.json").is_file()
    assert os.path.dirname(SCHEMA_PATH) == os.path.dirname(guards.__file__)
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        cfg = tomllib.load(f)
    assert "*.json" in cfg["tool"]["setuptools"]["package-data"]["guards"]


# -- CLI ---------------------------------------------------------------------------------------


def test_cli_text_with_at(capsys):
    rc = main(["explain", f"{PROGRAMS}:branch_on_size", "-i", "x: f32[B, 4]", "--dim", "B=32", "--at", "B=4"])
    out = capsys.readouterr().out
    assert rc == 0
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "this call would recompile because x.shape[0] > 16 is false at B=4" in out
    assert out.count("-- #") == 1


def test_cli_at_runtime_error(capsys):
    rc = main(["explain", f"{EXPLAIN_PROGRAMS}:branch_and_view", "-i", "x: f32[B, T]", "--dim", "B=8,T=32",
               "--at", "B=8,T=12"])
    cap = capsys.readouterr()
    out = cap.out
    # The report, and exit 1: a script can tell that the call fails there.
    assert rc == 1 and "At B=8, T=12: 1 of 2 records fails" in out and "fails at run time" in cap.err
    assert "this call would fail at run time because x.shape[1] % 8 == 0 is false" in out.replace("\n   ", "")


def test_cli_json_and_html_to_file(tmp_path, capsys):
    rc = main(["explain", f"{PROGRAMS}:view_by_8", "-i", "x: f32[N]", "--format", "json", "--at", "N=12"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1 and validate(doc) == [] and doc["at"]["verdict"] == "runtime_error"
    assert doc["program"].endswith("programs.py:view_by_8")
    out = tmp_path / "r.html"
    rc = main(["explain", f"{PROGRAMS}:view_by_8", "-i", "x: f32[N]", "--format", "html", "-o", str(out)])
    cap = capsys.readouterr()
    assert rc == 0 and cap.out == "" and "wrote html report" in cap.err
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "x.shape[0] % 8 == 0" in page
    # Self-contained: no URL to fetch, every link is an in-page anchor.
    assert not re.search(r"(src|href)=\"(?!#)", page) and "http:" not in page and "https:" not in page


@pytest.mark.parametrize("args, message", [
    (["--at", "B=4,Q=1"], "names Q, which the program does not have"),
    (["--at", "B=four"], "bad size 'B=four'"),
    (["--at", ","], "names no sizes"),
    (["-o", "/nonexistent-dir/r.txt"], "cannot write /nonexistent-dir/r.txt"),
    (["--width", "10"], "too narrow"),
])
def test_cli_errors_are_one_line(args, message, capsys):
    rc = main(["explain", f"{PROGRAMS}:branch_on_size", "-i", "x: f32[B, 4]"] + args)
    err = capsys.readouterr().err
    assert rc == 2 and message in err and err.count("\n") == 1 and err.startswith("symshape: error: ")


def test_cli_entry_point(tmp_path):
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", "explain", f"{PROGRAMS}:matmul", "-i", "a: f32[M, K]",
         "-i", "b: f32[J, N]", "--dim", "K=16,J=16", "--format", "json", "-o", str(out)],
        capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert validate(doc) == [] and doc["records"][0]["op"] == "aten.mm.default"
