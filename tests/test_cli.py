"""The symshape/dinfer command line: fast startup, help, arguments, outputs, progress.

Most tests call :func:`cli.main.main` in-process; the startup and progress
tests run real processes (the first without torch, ~1 s in all; the two
progress ones trace in a child, ~10 s).
"""
import json
import os
import pty
import subprocess
import sys
import tomllib

import pytest
import torch

import shapes
from cli.main import SUBCOMMANDS, dinfer_main, main
from shapes.errors import GuardViolation, SpecError
from tests import cli_programs as C

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGS = os.path.join("tests", "cli_programs.py")
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
ENV.pop("SYMSHAPE_TRANSLATION_VALIDATION", None)

# ------------------------------------------------------------------------------ startup

_LIGHT_CALLS = [
    ["--help"], ["--version"], [], ["frobnicate"], ["trace", "x.py:f"], ["trace", "x.py:f", "-i", "x: f32[B]",
                                                                         "--dim", "B=x"],
    ["dinfer", "x.py:f", "-i", "x: f32[N]", "--max-classes", "0"], ["explain", "x.py:f", "-i", "x: f32[N]",
                                                                     "--format", "pdf"],
    ["flops", "missing.py:f", "-i", "x: f32[N]"],
] + [[name, "--help"] for name in ("trace", "explain", "flops", "dinfer")]


def test_help_and_argument_errors_import_no_torch_sympy_or_z3():
    # What makes --help answer at once: nothing heavy is imported on these paths.
    code = (
        "import contextlib, io, json, sys\n"
        "from cli.main import main, dinfer_main\n"
        f"calls = {_LIGHT_CALLS!r}\n"
        "codes = []\n"
        "for argv in calls:\n"
        "    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        "        codes.append(main(argv))\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    codes.append(dinfer_main(['--help']))\n"
        "heavy = sorted(m for m in ('torch', 'sympy', 'z3', 'numpy', 'shapes', 'guards', 'validation') "
        "if m in sys.modules)\n"
        "print(json.dumps([codes, heavy]))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=120)
    assert r.returncode == 0, r.stderr
    codes, heavy = json.loads(r.stdout)
    assert heavy == []
    assert codes == [0, 0, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0]


def test_every_registered_subcommand_has_a_module_with_register():
    import importlib
    for name, (module, help_text) in SUBCOMMANDS.items():
        assert callable(importlib.import_module(module).register) and help_text
    from cli.main import build_parser
    full = build_parser()  # every subcommand's real parser
    choices = next(a for a in full._actions if a.dest == "command").choices
    assert set(choices) == set(SUBCOMMANDS) and all(p.get_default("run") for p in choices.values())


@pytest.mark.parametrize("argv, fragment", [
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["trace", "nope.py:f", "-i", "x: f32[N]"], "argument target: no such file: nope.py"),
    (["explain", "README.md", "-i", "x: f32[N]"], "expected FILE.py:NAME"),
    (["trace", f"{PROGS}:interleave"], "the following arguments are required: -i/--input"),
    (["trace", f"{PROGS}:interleave", "-i", "x: f32[B]", "--dim", "B=1..x"], "bad --dim 'B=1..x'"),
    (["trace", f"{PROGS}:interleave", "-i", "x: f32[B]", "--arg", "=3"], "bad --arg '=3'"),
    (["trace", f"{PROGS}:interleave", "-i", "x: f32[B]", "--arg", "n=1", "--arg", "n=2"], "n given twice"),
    (["trace", f"{PROGS}:interleave", "-i", "x: f32[B]", "--bogus"], "unrecognized arguments: --bogus"),
    (["dinfer", f"{PROGS}:interleave", "-i", "x: f32[B]", "--time-budget", "-1"], "must be positive"),
])
def test_argument_errors_are_one_line_exit_2(argv, fragment, capsys):
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and fragment in err and err.startswith("symshape"), err
    assert "--help" in err  # where to look next


def test_console_script_argument_error_has_no_traceback():
    r = subprocess.run([sys.executable, "-m", "cli.main", "trace", "--dim", "B=oops", "f.py:g", "-i", "x: f32[B]"],
                       capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.splitlines()) == 1


def test_version_matches_pyproject(capsys):
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        expected = tomllib.load(f)["project"]["version"]
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"symshape {expected}\n"
    assert dinfer_main(["--version"]) == 0
    assert capsys.readouterr().out == f"dinfer {expected}\n"


def test_dinfer_default_range_in_help_matches_the_engine():
    from cli.dinfer import DEFAULT_RANGE_TEXT
    from validation.dinfer import DEFAULT_RANGE
    assert DEFAULT_RANGE_TEXT == f"{DEFAULT_RANGE[0]}..{DEFAULT_RANGE[1]}"


@pytest.mark.parametrize("command", ["trace", "explain", "flops", "dinfer"])
def test_command_help_explains_the_spec_syntax(command, capsys):
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    for needle in ('"NAME: DTYPE[DIM, ...]"', "f32 f16 bf16", "2*T", "--dim B=1..4096", "--arg NAME=VALUE",
                   "true/false"):
        assert needle in out, (needle, out)


def test_top_level_help_lists_every_subcommand(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name, (_, help_text) in SUBCOMMANDS.items():
        assert name in out
    assert "--version" in out


# ------------------------------------------------------------------------------ --arg

def test_arg_values_reach_the_program_and_match_eager(capsys):
    rc = main(["trace", f"{PROGS}:windowed", "-i", "x: f32[B, T]", "--arg", "n=3", "--arg", "scale=0.5",
               "--arg", "causal=true", "--arg", "mode=neg", "--json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["arguments"] == {"n": 3, "scale": 0.5, "causal": True, "mode": "neg"}
    assert [(o["path"], o["text"]) for o in doc["outputs"]] == [
        ('out[0]["logits"]', "f32[B, 3]"), ('out[0]["len"]', "2*T"), ("out[1]", "B")]
    # The same trace through the API: its graph computes what eager computes with these values.
    kw = {"n": 3, "scale": 0.5, "causal": True, "mode": "neg"}
    tp = shapes.trace(C.windowed, "x: f32[B, T]", kwargs=kw)
    x = torch.randn(5, 7)
    got, want = tp.run(x), C.windowed(x, **kw)
    assert torch.equal(got[0]["logits"], want[0]["logits"]) and got[0]["len"] == want[0]["len"] == 14
    assert got[1] == want[1] == 5


def test_arg_unknown_name_is_one_line(capsys):
    rc = main(["trace", f"{PROGS}:windowed", "-i", "x: f32[B, T]", "--arg", "m=3"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert "has no parameter named 'm'" in err and "x, n, scale, causal, mode" in err


def test_missing_argument_names_it(capsys):
    rc = main(["trace", f"{PROGS}:windowed", "-i", "x: f32[B, T]"])
    err = capsys.readouterr().err
    assert rc == 2 and "missing: n" in err


def test_dinfer_passes_args(capsys):
    rc = dinfer_main([f"{PROGS}:windowed", "-i", "x: f32[B, T]", "--dim", "B=1..4,T=1..16", "--arg", "n=3",
                      "--json", "-q"])
    d = json.loads(capsys.readouterr().out)
    assert rc == 0 and d["complete"]
    # y[:, :3] works for every T (slicing clamps): every class runs, as in eager.
    assert all(c["ok"] for c in d["classes"])
    for t in (1, 2, 3, 5):
        C.windowed(torch.randn(2, t), n=3)


# ------------------------------------------------------------------------------ outputs

def test_trace_lists_every_output_with_its_path(capsys):
    assert main(["trace", f"{PROGS}:odd_pairs", "-i", "x: f32[B, 2*T + 1]"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "  out.values: f32[B, T, 2]" in out and "  out.count: T" in out
    # The symbolic outputs agree with eager at a concrete size.
    r = C.odd_pairs(torch.randn(3, 9))
    assert tuple(r.values.shape) == (3, 4, 2) and r.count == 4


def test_outputs_api_against_eager():
    tp = shapes.trace(C.windowed, "x: f32[B, T]", kwargs={"n": 2})
    outs = tp.outputs()
    assert [o.path for o in outs] == ['out[0]["logits"]', 'out[0]["len"]', "out[1]"]
    assert [o.kind for o in outs] == ["tensor", "size", "size"]
    sizes = {tp.symbol("B"): 4, tp.symbol("T"): 6}
    eager = C.windowed(torch.randn(4, 6), n=2)
    assert tuple(int(e.subs(sizes)) for e in outs[0].shape) == tuple(eager[0]["logits"].shape)
    assert int(outs[1].value.subs(sizes)) == eager[0]["len"] and int(outs[2].value.subs(sizes)) == eager[1]


# ------------------------------------------------------------------------------ dim expressions

def test_dim_expression_spec_traces_and_runs_like_eager():
    tp = shapes.trace(C.interleave, "x: f32[B, 2*T]", "y: f32[B, T]")
    assert [str(e) for e in tp.output_shapes[0]] == ["B", "T"]
    for b, t in ((2, 3), (4, 8), (3, 17)):
        x, y = torch.randn(b, 2 * t), torch.randn(b, t)
        assert torch.allclose(tp.run(x, y), C.interleave(x, y))


@pytest.mark.parametrize("xs, ys, fragment", [
    ((3, 11), (3, 5), "x.shape[1] is 11 but the spec `x: f32[B, 2*T]` says it is 2*T = 10 (T=5 from y.shape[1])"),
    ((3, 12), (3, 5), "says it is 2*T = 10"),
])
def test_dim_expression_inconsistent_inputs_are_refused(xs, ys, fragment):
    tp = shapes.trace(C.interleave, "x: f32[B, 2*T]", "y: f32[B, T]")
    with pytest.raises(GuardViolation, match=fragment.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")
                       .replace("*", r"\*")):
        tp.run(torch.randn(*xs), torch.randn(*ys))
    with pytest.raises(RuntimeError):  # eager refuses too
        C.interleave(torch.randn(*xs), torch.randn(*ys))


def test_dim_expression_solved_from_the_input():
    # T appears only inside 2*T + 1: run() solves it from x and checks it is an integer.
    tp = shapes.trace(C.odd_pairs, "x: f32[B, 2*T + 1]")
    for b, w in ((2, 5), (3, 9), (2, 21)):
        x = torch.randn(b, w)
        got, want = tp.run(x), C.odd_pairs(x)
        assert torch.equal(got.values, want.values) and got.count == want.count
    with pytest.raises(GuardViolation, match="no size T makes 2\\*T \\+ 1 equal 8"):
        tp.run(torch.randn(2, 8))


def test_dim_expression_bad_syntax_is_a_spec_error():
    with pytest.raises(SpecError, match="use //"):
        shapes.trace(C.interleave, "x: f32[B, T/2]", "y: f32[B, T]")
    with pytest.raises(SpecError, match="names no dim"):
        shapes.trace(C.interleave, "x: f32[B, 2*3]", "y: f32[B, T]")


def test_dim_expression_in_the_cli(capsys):
    assert main(["trace", f"{PROGS}:interleave", "-i", "x: f32[B, 2*T]", "-i", "y: f32[B, T]",
                 "--dim", "T=1..64"]) == 0
    out = capsys.readouterr().out
    assert "  out: f32[B, T]" in out


# ------------------------------------------------------------------------------ -o format, validation

@pytest.mark.parametrize("suffix, check", [
    (".html", lambda s: s.startswith("<!DOCTYPE html>")),
    (".json", lambda s: json.loads(s)["records"] is not None),
    (".txt", lambda s: not s.startswith(("<", "{")) and "view_by_8" in s),
])
def test_output_format_follows_the_suffix(tmp_path, suffix, check, capsys):
    path = tmp_path / f"report{suffix}"
    rc = main(["explain", "tests/programs.py:view_by_8", "-i", "x: f32[N]", "-o", str(path)])
    assert rc == 0, capsys.readouterr().err
    assert check(path.read_text())


def test_output_format_contradicting_the_suffix_is_an_error(tmp_path, capsys):
    path = tmp_path / "report.html"
    rc = main(["explain", "tests/programs.py:view_by_8", "-i", "x: f32[N]", "--format", "json", "-o", str(path)])
    err = capsys.readouterr().err
    assert rc == 2 and "--format json but -o" in err and not path.exists()


def test_translation_validation_is_reported(monkeypatch, capsys):
    monkeypatch.setenv("SYMSHAPE_TRANSLATION_VALIDATION", "1")
    assert main(["flops", "examples/mlp.py:tokens_to_blocks", "-i", "x: f32[B, T, 64]", "--json"]) == 0
    out, err = capsys.readouterr()
    json.loads(out)  # stdout stays clean JSON
    line = next(ln for ln in err.splitlines() if ln.startswith("translation validation:"))
    # The numbers are those of validating the same trace directly.
    from examples.mlp import tokens_to_blocks
    from validation.translation import validate
    report = validate(shapes.trace(tokens_to_blocks, "x: f32[B, T, 64]"))
    assert line.startswith(f"translation validation: {report.checked} of {report.steps} log steps checked")
    assert report.steps > 0 and ": sound;" in line


def test_translation_validation_is_reported_by_dinfer(monkeypatch, capsys):
    monkeypatch.setenv("SYMSHAPE_TRANSLATION_VALIDATION", "1")
    assert dinfer_main(["examples/shape_zoo.py:size_branch", "-i", "x: f32[N]", "--dim", "N=1..64", "-q",
                        "--json"]) == 0
    out, err = capsys.readouterr()
    n_ok = sum(c["status"] == "ok" for c in json.loads(out)["classes"])
    assert n_ok >= 1 and f"each of the {n_ok} trace(s) that ran to the end" in err


def test_no_validation_line_without_the_variable(monkeypatch, capsys):
    monkeypatch.delenv("SYMSHAPE_TRANSLATION_VALIDATION", raising=False)
    assert main(["trace", "examples/mlp.py:tokens_to_blocks", "-i", "x: f32[B, T, 64]"]) == 0
    assert capsys.readouterr().err == ""


# ------------------------------------------------------------------------------ progress

def _run_with_stderr_on_a_pty(argv):
    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "cli.main"] + argv, cwd=ROOT, env=ENV, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            b = os.read(master, 65536)
        except OSError:  # the child closed the pty
            break
        if not b:
            break
        chunks.append(b)
    out = p.stdout.read().decode()
    p.wait(timeout=300)
    os.close(master)
    return p.returncode, out, b"".join(chunks).decode()


def test_progress_on_a_terminal_and_quiet_when_piped(capsys):
    argv = ["trace", "examples/mlp.py:MLP", "-i", "x: f32[B, T, 64]"]
    rc, out, err = _run_with_stderr_on_a_pty(argv)
    assert rc == 0 and "out: f32[B, T, 64]" in out
    assert "loading examples/mlp.py:MLP" in err and "tracing examples/mlp.py:MLP" in err and "\r" in err
    assert err.endswith("\r")  # the status line is erased: the terminal is left clean
    assert main(argv) == 0  # stderr captured, not a terminal: nothing on it, same output
    piped = capsys.readouterr()
    assert piped.err == "" and piped.out == out
    assert main(argv + ["--progress"]) == 0  # asked for: one line per phase
    assert capsys.readouterr().err.splitlines() == ["loading examples/mlp.py:MLP", "tracing examples/mlp.py:MLP"]


def test_dinfer_progress_on_a_terminal_by_default():
    rc, out, err = _run_with_stderr_on_a_pty(["dinfer", "examples/shape_zoo.py:size_branch", "-i", "x: f32[N]",
                                              "--dim", "N=1..64"])
    assert rc == 0 and "complete: Z3 proved" in out
    assert "trace 1: N=8 -> class 1 (ok)" in err and "\r" in err


def test_dinfer_quiet_when_not_a_terminal(capsys):
    assert dinfer_main(["examples/shape_zoo.py:size_branch", "-i", "x: f32[N]", "--dim", "N=1..64"]) == 0
    assert capsys.readouterr().err == ""


def test_status_line_on_a_fake_terminal():
    import io
    import time

    from cli.progress import Status

    class Tty(io.StringIO):
        def isatty(self):
            return True

    s = Tty()
    with Status(s, enabled=True) as st:
        st.phase("tracing f")
        st.ops(12)
        time.sleep(3 * Status.TICK)
        st.print("a message")
        time.sleep(3 * Status.TICK)
    text = s.getvalue()
    assert "\rtracing f, 12 ops  [" in text
    # The message replaced the status line, which came back below it and was erased at the end.
    before, after = text.split("a message\n")
    assert before.endswith("\r") and "tracing f" in after
    assert after.endswith("\r") and after.split("\r")[-2].strip() == ""


def test_dims_read_off_an_expression_are_shown_in_input_terms():
    import guards
    tp = shapes.trace(lambda x: x[:, :5].view(x.shape[0], -1), "x: f32[B, 2*T]")
    assert [guards.render_guard(g, tp.env) for g in tp.records] == ["(x.shape[1] // 2) >= 3"]
    x = torch.randn(2, 8)
    assert torch.equal(tp.run(x), x[:, :5].reshape(2, -1))
    with pytest.raises(GuardViolation):  # T=2: slicing takes another path there; the guard says so
        tp.run(torch.randn(2, 4))


def test_trace_lists_index_lookups_it_cannot_check(capsys):
    assert main(["trace", f"{PROGS}:reversed_rows", "-i", "x: f32[M]", "-i", "y: f32[N]", "--dim", "M=8",
                 "--dim", "N=4"]) == 0
    out = capsys.readouterr().out
    assert "[unchecked index]" in out and "cannot bound them (index_select admits indices from 0 to M - 1)" in out
    assert main(["trace", f"{PROGS}:reversed_rows", "-i", "x: f32[M]", "-i", "y: f32[N]", "--json"]) == 0
    (item,) = json.loads(capsys.readouterr().out)["unchecked_indices"]
    assert item["file"].endswith("cli_programs.py") and item["line"] > 0


def test_a_limitation_of_symshape_is_one_line_that_says_so(tmp_path, capsys):
    # round(size, ndigits) is symshape's limit, not the program's error: the CLI says
    # "limitation" (not "error") and names symshape once.
    src = tmp_path / "prog.py"
    src.write_text("def f(x):\n    return x[: int(round(x.shape[0] / 3, 1))]\n")
    rc = main(["trace", f"{src}:f", "-i", "x: f32[N]", "--dim", "N=9"])
    out, err = capsys.readouterr()
    assert rc == 2 and err.count("\n") == 1, err
    assert err.startswith("symshape: limitation: round(x, ndigits) of a symbolic size is not supported"), err
    assert err.count("symshape") == 1, err
