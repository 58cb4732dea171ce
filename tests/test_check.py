"""``symshape check``: the sample contracts hold; a mutated GPT-2 (a hard-coded ``view(8, -1)``)
fails with the user line, the smallest counterexample (checked against eager) and exit 1; the JUnit
XML parses and the GitHub annotations follow the workflow-command syntax; ``--update`` round-trips.

The sample contract file takes ~40 s of CPU (GPT-2 and a conv net under dinfer); the mutated model
is searched once for the report formats and once more through the command.
"""
import json
import os
import re
import xml.etree.ElementTree as ET

import pytest
import torch

from cli import check_report
from cli.contracts import load_contracts
from cli.main import main
from cli.verify import verify

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPT2_TINY = os.path.join(ROOT, "examples", "gpt2_tiny.py")

MUTATED = f"""
[[contract]]
name = "gpt2-mutated"
program = "{GPT2_TINY}:make_mutated"
factory = true
inputs = ["input_ids: i64[B, T]"]
dims = {{ B = "1..16", T = "1..32" }}
output = ["B", "T", 64]
valid = true
"""


@pytest.fixture(scope="module")
def mutated(tmp_path_factory):
    path = tmp_path_factory.mktemp("contracts") / "symshape.toml"
    path.write_text(MUTATED)
    [c] = load_contracts(path)
    return path, verify(c)


def test_sample_contracts_hold(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    xml_path = tmp_path / "contracts.xml"
    assert main(["check", "examples/symshape.toml", "--format", "junit", "-o", str(xml_path)]) == 0
    assert "4/4 contract(s) hold" in capsys.readouterr().out
    root = ET.parse(xml_path).getroot()
    assert root.tag == "testsuites" and root.get("failures") == "0" and root.get("errors") == "0"
    assert {s.get("name") for s in root.iter("testsuite")} == {"mlp", "gpt2", "pad_to_multiple", "conv_pool"}
    assert int(root.get("tests")) == sum(len(c.expectations) for c in load_contracts("examples/symshape.toml"))


def test_mutated_model_fails_with_line_and_counterexample(mutated):
    from examples.gpt2_tiny import make_mutated
    _, res = mutated
    assert not res.ok
    f = next(f for f in res.findings if f.expectation == "valid")
    assert f.status == "fail"
    assert f.file.endswith("examples/gpt2_tiny.py") and "view(8, -1)" in f.code
    assert open(GPT2_TINY).read().splitlines()[f.line - 1].strip() == f.code.strip()
    # The counterexample really fails in eager PyTorch, at the smallest sizes.
    assert f.counterexample == {"B": 1, "T": 1}
    model = make_mutated()
    with pytest.raises(RuntimeError, match=r"\[8, -1\]"):
        model(torch.zeros(1, 1, dtype=torch.long))
    model(torch.zeros(2, 4, dtype=torch.long))  # B*T == 8 runs
    assert "gpt2_tiny.py" in f.fix and "view(8, -1)" in f.fix
    # The output shape holds wherever the model runs: only `valid` is broken.
    assert next(f for f in res.findings if f.expectation == "output").status == "pass"


def test_mutated_model_github_and_junit(mutated):
    _, res = mutated
    lines = check_report.github([res]).splitlines()
    [ann] = lines
    m = re.fullmatch(r"::error file=([^,]+),line=(\d+),title=([^:]+)::(.+)", ann)
    assert m, ann
    assert m.group(1).endswith("examples/gpt2_tiny.py") and "%0A" in m.group(4) and "\n" not in ann
    assert open(GPT2_TINY).read().splitlines()[int(m.group(2)) - 1].strip().startswith("rows = input_ids.view(8, -1)")
    assert "counterexample: B=1, T=1" in m.group(4).replace("%0A", "\n")
    root = ET.fromstring(check_report.junit([res]))
    assert root.get("tests") == "2" and root.get("failures") == "1"
    [case] = [c for c in root.iter("testcase") if c.find("failure") is not None]
    assert case.get("name") == "valid" and case.get("file").endswith("examples/gpt2_tiny.py")
    assert "counterexample: B=1, T=1" in case.find("failure").text


def test_mutated_model_exits_1(mutated, capsys):
    path, _ = mutated
    assert main(["check", str(path)]) == 1
    out = capsys.readouterr().out
    assert "[FAIL] valid" in out and "gpt2_tiny.py:44" in out and "counterexample: B=1, T=1" in out


def test_update_writes_the_facts_and_they_then_hold(tmp_path, capsys):
    path = tmp_path / "pyproject.toml"
    path.write_text(f"""[project]
name = "demo"

[[tool.symshape.contract]]
name = "pad"
program = "{ROOT}/examples/shape_zoo.py:pad_to_multiple"
inputs = ["x: f32[B, T]"]
dims = {{ B = "1..4", T = "1..32" }}
valid = true
max_guards = 7

[tool.other]
keep = 1
""")
    assert main(["check", str(path)]) == 1
    capsys.readouterr()
    assert main(["check", str(path), "--update"]) == 0
    assert "wrote the current facts of 1 contract(s)" in capsys.readouterr().out
    text = path.read_text()
    assert '[project]\nname = "demo"' in text and "[tool.other]\nkeep = 1" in text
    [c] = load_contracts(path)
    assert c.expectations["valid"] == "T >= 5" and c.expectations["max_guards"] == 0
    assert c.expectations["output"] == ["B", "(T + 3) // 4"]  # (T + (-T) % 4) // 4, simplified
    assert main(["check", str(path), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["summary"]["fail"] == 0
    assert {f["expectation"] for f in report["contracts"][0]["findings"]} == \
        {"output", "valid", "no_specialization", "max_guards", "flops"}


def test_contract_errors_are_one_line(tmp_path, capsys):
    bad = tmp_path / "symshape.toml"
    bad.write_text('[[contract]]\nname = "x"\nprogram = "m.py:f"\ninputs = ["x: f32[N]"]\ndims = { N = "5..2" }\n'
                   'valid = true\n')
    assert main(["check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "empty or negative range" in err
    bad.write_text("[[contract]\n")
    assert main(["check", str(bad)]) == 2
    assert "not valid TOML" in capsys.readouterr().err
    bad.write_text('[[contract]]\nname = "x"\nprogram = "nope.py:f"\ninputs = ["x: f32[N]"]\nvalid = true\n')
    assert main(["check", str(bad)]) == 1
    assert "no such file" in capsys.readouterr().out


def _two_paths(x):
    if x.shape[0] > 16:
        return x @ torch.ones(x.shape[1], 4)
    return x @ torch.ones(x.shape[1], 8)


def test_flops_are_counted_once_per_path_not_traced_once_per_class():
    """A class whose point the example trace's guards accept reuses its FLOP report; the other
    path is traced once, however many expectations ask (flops and comm asked it per class)."""
    from validation.contracts.contract import Contract
    from validation.contracts.facts import ProgramFacts
    from validation.contracts.verify import verify as prove
    c = Contract(name="two", program="-", inputs=["x: f32[B, D]"], dims={"B": (1, 64), "D": (1, 32)},
                 expectations={"flops": "8*B*D", "max_guards": 1})
    facts = ProgramFacts(c, _two_paths, time_budget=30)
    totals = sorted(str(facts.report_of_class(k).total) for k in facts.space.ok_classes)
    assert totals == ["16*B*D", "8*B*D"]  # B <= 16 multiplies by 8 columns, B >= 17 by 4
    assert facts.traces == 2  # the example trace (B >= 17) and one for B <= 16
    for k in facts.space.ok_classes:
        facts.report_of_class(k)
    assert facts.traces == 2
    [guards, flops] = prove(c, _two_paths, time_budget=30).findings  # in EXPECTATIONS order
    assert (str(flops.status), flops.counterexample) == ("fail", {"B": 1, "D": 1})
    assert str(guards.status) == "pass"
