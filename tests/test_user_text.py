"""What people read prints sizes in Python syntax: FLOP tables and JSON, dinfer and explain
reports show ``min(8, N)``, ``(H - 3) // 2``, ``N % 6 != 0``, never sympy's ``Min(``,
``FloorDiv``, ``Eq(``; and the printed closed forms are the counts themselves (they
evaluate, as Python, to the counted values, and parse back to an equal formula)."""
import json
import pathlib
import re

import pytest

import shapes
from cli.main import main
from guards import explain
from shapes.errors import TracerLimitation
from shapes.flops import count_flops
from tests.printing_programs import ClampedRows, StridedConv, every_third_in_pairs
from validation import dinfer

#: Spellings only sympy's own printer produces ("math.floor(" is Python; bare "floor(" is not).
SYMPY_ONLY = re.compile(r"Max\(|Min\(|FloorDiv|PyMod|\bMod\(|Eq\(|Ne\(|(?<![.\w])floor\(|ceiling\(|\S//")

FLOP_CASES = [(ClampedRows, "x: f32[N, 4]", [{"N": 1}, {"N": 5}, {"N": 11}]),
              (StridedConv, "x: f32[N, 3, H, W]", [{"N": 2, "H": 9, "W": 12}, {"N": 1, "H": 16, "W": 7}])]


def _no_sympy_text(text: str):
    found = SYMPY_ONLY.search(text)
    assert found is None, f"sympy spelling {found.group()!r} in: {text[max(0, found.start() - 80):found.end() + 80]}"


def _python_value(text: str, sizes) -> int:
    return eval(text, {"__builtins__": {}, "min": min, "max": max}, dict(sizes))


@pytest.mark.parametrize("cls, spec, points", FLOP_CASES, ids=lambda c: getattr(c, "__name__", ""))
def test_flop_report_text_is_python(cls, spec, points):
    r = count_flops(cls(), spec)
    # The programs do have the terms that sympy spells its own way.
    assert SYMPY_ONLY.search(str(r.total) + str(r.total_bytes))
    for text in (r.table(), r.table(points), r.module_table(), r.module_table(points[0]), r.to_json(points), repr(r)):
        _no_sympy_text(text)


@pytest.mark.parametrize("cls, spec, points", FLOP_CASES, ids=lambda c: getattr(c, "__name__", ""))
def test_printed_closed_forms_are_the_counts(cls, spec, points):
    r = count_flops(cls(), spec)
    d = r.to_dict()
    for sizes in points:
        v = r.at(sizes)
        assert _python_value(d["total_flops"], sizes) == v.flops
        assert _python_value(d["total_bytes"], sizes) == v.bytes
        for op in d["ops"]:
            _, flops, nbytes = v.ops[op["op"]]
            assert (_python_value(op["flops"], sizes), _python_value(op["bytes"], sizes)) == (flops, nbytes), op
    # Parsed back as a hand-written formula, the printed total is proved equal to the count.
    res = r.check(d["total_flops"])
    assert res.outcome == "equal", res.message
    _no_sympy_text(res.message)


def test_flops_cli_prints_python(capsys):
    argv = ["flops", "tests/printing_programs.py:ClampedRows", "-i", "x: f32[N, 4]", "--modules"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "32*min(8, N)" in out
    _no_sympy_text(out)
    assert main(argv[:-1] + ["--json", "--at", "N=5"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["total_flops"] == "32*min(8, N)" and d["at"][0]["flops"] == 32 * 5


def test_dinfer_reports_are_python():
    space = dinfer(every_third_in_pairs, "x: f32[N]", dims={"N": (1, 40)})
    text, js = space.table(), space.to_json()
    # torch's own error message names the size: through the engine's printer too.
    assert "invalid for input of size (N + 2) // 3" in js
    assert json.loads(js)["summary"]["valid_iff"] == "((N + 2) // 3) % 2 == 0"
    _no_sympy_text(text)
    _no_sympy_text(js)


def test_explain_reports_are_python():
    tp = shapes.trace(every_third_in_pairs, "x: f32[N]", dims={"N": 12})
    ex = explain(tp, at="N=8")
    assert any("(N + 2) // 3" in e.expr for e in ex.entries)
    _no_sympy_text(ex.text())
    _no_sympy_text(ex.json())


def rounded_rows(x):
    """``round(size, ndigits)``: a limitation of symshape (TracerLimitation), not the program's error."""
    return x[: int(round(x.shape[0] / 3, 1))]


def test_limitation_says_symshape_once():
    """The "symshape: " of a limitation is its type's, not each raise site's text; dinfer's class
    message says "unsupported by symshape: " and then the limitation itself, once."""
    with pytest.raises(TracerLimitation) as info:
        shapes.trace(rounded_rows, "x: f32[N]")
    e = info.value
    assert e.detail == "round(x, ndigits) of a symbolic size is not supported"
    assert str(e) == "symshape: " + e.detail
    space = dinfer(rounded_rows, "x: f32[N]", dims={"N": (1, 20)})
    messages = {c.message for c in space.classes}
    assert messages == {"unsupported by symshape: round(x, ndigits) of a symbolic size is not supported"}, messages


def test_no_raise_site_writes_the_limitation_prefix():
    """A TracerLimitation's message starts with what went wrong: its class adds "symshape: "."""
    root = pathlib.Path(__file__).resolve().parent.parent
    raise_site = re.compile(r"(TracerLimitation|UnsupportedOpError|AdapterGap|EngineFailure)\(\s*f?[\"']symshape")
    # \s* spans a message that starts on the line after the class name.
    offenders = [str(p.relative_to(root)) for p in sorted(root.glob("[a-z]*/**/*.py"))
                 if "tests" not in p.parts and raise_site.search(p.read_text())]
    assert offenders == []
