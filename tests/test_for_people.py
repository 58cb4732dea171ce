"""What a person reads, on three programs people write (tests/reading_programs.py) and the
README's conv_pool: conditions solved per dim, no ``True``/``False``, no engine symbols
(``u0``), no sympy spellings, one row per outcome; trace finds sizes that run when the
example sizes fail."""
import json
import re

import pytest

from cli.main import main
from tests.reading_programs import CausalAttention, SmallCNN, pad_then_chunk
from validation import dinfer

#: What a person should never read: Python's booleans as a condition (``patch(x=True)`` in code is fine), the engine's names for
#: data-dependent values, ``1 % (...)`` guards, ``a <= X <= a``, sympy's spellings.
UNREADABLE = re.compile(r"(?<![=\w])(True|False)\b|\bu\d+\b|1 % \(|\b(\d+) <= \w+ <= \1\b|Eq\(|Mod\(|(?<![.\w])floor\(")
#: JSON fields that hold a Python condition for tools (``"True"`` is the right answer there).
PYTHON_FIELDS = {"valid_iff", "formula", "predicate", "valid_when", "expr", "raw", "original", "user_expr",
                 "suggested_spec", "negation", "covers"}

CNN = ("tests/reading_programs.py:SmallCNN", ["img: f32[B, 3, H, W]"], {"B": (1, 4), "H": (1, 64), "W": (1, 64)})
ATTN = ("tests/reading_programs.py:CausalAttention", ["x: f32[B, T, 32]"], {"B": (1, 4), "T": (1, 96)})
PAD = ("tests/reading_programs.py:pad_then_chunk", ["x: f32[B, T, 4]"], {"B": (1, 4), "T": (1, 64)})
PROGRAMS = {"cnn": (SmallCNN(), *CNN[1:]), "attention": (CausalAttention(), *ATTN[1:]),
            "pad_then_chunk": (pad_then_chunk, *PAD[1:])}

_spaces = {}


def _space(name):
    if name not in _spaces:
        prog, specs, dims = PROGRAMS[name]
        _spaces[name] = dinfer(prog, *specs, dims=dims, time_budget=120)
    return _spaces[name]


def _readable(text, where):
    m = UNREADABLE.search(text)
    assert m is None, f"{where}: {m.group()!r} in ...{text[max(0, m.start() - 100):m.end() + 100]}..."


def _messages(doc, path=""):
    """Every string of a JSON document meant for people (not the Python conditions for tools)."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k not in PYTHON_FIELDS:
                yield from _messages(v, f"{path}.{k}")
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _messages(v, f"{path}[{i}]")
    elif isinstance(doc, str):
        yield path, doc


@pytest.mark.parametrize("name, valid, others", [
    ("cnn", "valid iff 28 <= H <= 31 and 28 <= W <= 31", ["H <= 3 or W <= 3"]),
    ("attention", "valid iff T <= 64", ["T >= 65"]),
    ("pad_then_chunk", "every size in the ranges runs", []),
])
def test_one_row_per_outcome_solved_per_dim(name, valid, others):
    sp = _space(name)
    assert sp.complete
    s = sp.summary
    assert s.valid_text() == valid
    # One row per outcome: the split by B == 1, T == 64 (SDPA's inside), T == 1 stays in the classes.
    outcomes = [(r.region.kind, r.region.error.lineno if r.region.error else None) for r in s.rows]
    assert len(outcomes) == len(set(outcomes)) == len(s.regions)
    assert len(sp.classes) > len(s.rows) or name == "pad_then_chunk" and len(s.rows) == 1
    texts = [r.region.text() for r in s.rows if r.region.kind != "ok"]
    for o in others:
        assert o in texts, texts
    table = sp.table()
    n = len(sp.classes)
    assert f"--detail lists the {n} class{'es' if n != 1 else ''}" in table
    assert sum(1 for line in table.splitlines() if re.match(r"  (ok|RuntimeError) ", line)) == len(s.rows)
    _readable(table, f"{name} table")
    for path, msg in _messages(json.loads(sp.to_json())):
        _readable(msg, f"{name} JSON {path}")


def _special_cased(x):
    # T == 64 takes its own path, with the same output formula as every other T.
    if x.shape[1] == 64:
        return x * 2.0
    return x + 1.0


def test_ok_rows_merge_outputs_equal_on_each_class():
    # [B, 64, 32] where T == 64 is a case of [B, T, 32]: one row, the general formula.
    sp = dinfer(_special_cased, "x: f32[B, T, 32]", dims={"B": (1, 4), "T": (1, 96)}, time_budget=120)
    (ok,) = [r for r in sp.summary.rows if r.region.kind == "ok"]
    assert ok.output_text() == "[B, T, 32]"
    assert len(ok.region.classes) >= 2  # the T == 64 class ([B, 64, 32]) is in the row
    assert len(sp.classes) >= 2


def test_trace_without_dims_finds_sizes_that_run(capsys):
    assert main(["trace", CNN[0], "-i", CNN[1][0]]) == 0
    out, err = capsys.readouterr()
    m = re.search(r"traced \S+ at B=(\d+), H=(\d+), W=(\d+)", out)
    # Sizes that run: (H // 4)*(W // 4) == 49 (28 <= H <= 31 and 28 <= W <= 31, or H=196, W=4, ...)
    assert m and (int(m.group(2)) // 4) * (int(m.group(3)) // 4) == 49, out
    assert "out: f32[B, 10]" in out
    assert "the example sizes raise RuntimeError at tests/reading_programs.py:22" in err
    assert "traced at sizes that run" in err and f"H={m.group(2)}" in err


@pytest.mark.parametrize("target, spec", [(CNN[0], CNN[1][0]), (ATTN[0], ATTN[1][0]), (PAD[0], PAD[1][0]),
                                          ("examples/shape_zoo.py:conv_pool", "x: f32[B, 3, H, W]")])
def test_explain_reports_read_well(target, spec, tmp_path, capsys):
    for fmt in ("txt", "json", "html"):
        out = tmp_path / f"r.{fmt}"
        assert main(["explain", target, "-i", spec, "-o", str(out), "-q"]) == 0
        text = out.read_text()
        if fmt == "json":
            for path, msg in _messages(json.loads(text)):
                _readable(msg, f"{target} explain JSON {path}")
        else:
            _readable(re.sub(r"<[^>]+>", " ", text) if fmt == "html" else text, f"{target} explain {fmt}")
    capsys.readouterr()


def test_attention_mask_special_case_is_gone(capsys):
    # SDPA is one traced node: its math path's `T != 64` question (which a torch._check would
    # have turned into a rejected valid size) is never asked; only the mask slice's bound is.
    assert main(["explain", ATTN[0], "-i", ATTN[1][0], "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["expr"] for r in doc["records"]] == ["T <= 64"]
    assert _space("attention").classify(B=2, T=64).ok


def test_check_proposes_the_general_output_not_the_smallest_class(tmp_path, capsys):
    import os
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = tmp_path / "symshape.toml"
    path.write_text(f"""[[contract]]
name = "attention"
program = "{root}/tests/reading_programs.py:CausalAttention"
inputs = ["x: f32[B, T, 32]"]
dims = {{ B = "1..4", T = "1..64" }}
output = ["B", "T", 16]
""")
    assert main(["check", str(path)]) == 1
    out = capsys.readouterr().out
    assert "[FAIL] output" in out
    fix = re.search(r"fix: (.*)", out).group(1)
    assert fix == 'output = ["B", "T", 32]', out


def test_output_fix_is_the_general_formula_whichever_class_failed():
    from validation.contracts.expectations import output_fix as _output_fix
    sp = _space("attention")
    smallest = min(sp.ok_classes, key=lambda c: sum(c.example.values()))
    assert [list(map(str, s)) for s in smallest.output_shapes] == [["1", "1", "32"]] or smallest.output_shapes
    for c in sp.ok_classes:  # [1, 1, 32] where B == 1 and T == 1 is a case of [B, T, 32]
        assert _output_fix(sp, c) == 'output = ["B", "T", 32]'


@pytest.mark.parametrize("width", [40, 52, 60, 80])
def test_formulas_wrap_between_tokens(width, capsys):
    assert main(["flops", "examples/shape_zoo.py:conv_pool", "-i", "x: f32[B, 3, H, W]", "--width", str(width)]) == 0
    out = capsys.readouterr().out
    assert "(H // 2)" in out
    for line in out.splitlines():
        assert not line.rstrip().endswith(("//", "%")) and not line.lstrip().startswith(("// ", "% ")), line
