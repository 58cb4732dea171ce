"""Every example in README.md runs, and shows what it really prints.

* ```python blocks are doctests (``>>>`` lines with their real output);
* ```console blocks are ``$ command`` lines followed by the exact stdout;
* ```bash blocks are commands: ``symshape``/``dinfer`` run (in-process, from
  the repository root, ``/tmp/`` paths redirected to a temp dir), and the
  install and test commands must be the ones ``.ci/run`` executes.

About a minute on 2 cores, most of it the README's two dinfer searches.
"""
import doctest
import os
import re
import shlex

import pytest

from cli.main import dinfer_main, main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Python's booleans as a condition, engine symbols, ``1 % (``, ``a <= X <= a``, sympy spellings.
UNREADABLE = re.compile(r"(?<![=\w])(True|False)\b|\bu\d+\b|1 % \(|\b(\d+) <= \w+ <= \2\b|Eq\(|Mod\(|"
                        r"(?<![.\w])floor\(")
README = os.path.join(ROOT, "README.md")


def _blocks(lang):
    text = open(README, encoding="utf-8").read()
    out = []
    for m in re.finditer(r"^```(\w+)\n(.*?)^```$", text, re.S | re.M):
        if m.group(1) == lang:
            out.append(pytest.param(m.group(2), id=f"line{text[:m.start()].count(chr(10)) + 1}"))
    return out


def _ci_lines():
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
        return [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]


def _run_cli(command, tmp_path, capsys):
    argv = shlex.split(command.replace("/tmp/", f"{tmp_path}/"))
    rc = main(argv[1:]) if argv[0] == "symshape" else dinfer_main(argv[1:])
    return rc, capsys.readouterr()


def test_readme_has_examples_of_each_kind():
    assert len(_blocks("python")) >= 2 and _blocks("console") and len(_blocks("bash")) >= 5


@pytest.mark.parametrize("block", _blocks("python"))
def test_python_block_is_a_passing_doctest(block, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert ">>> " in block, "write README Python examples as doctests, so their output is checked"
    test = doctest.DocTestParser().get_doctest(block, {}, "README", README, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report = []
    runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)


@pytest.mark.parametrize("block", _blocks("console"))
def test_console_block_prints_what_it_shows(block, monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("SYMSHAPE_TRANSLATION_VALIDATION", raising=False)
    runs = re.split(r"^\$ ", block, flags=re.M)
    assert runs[0] == "", "a console block starts with a $ command"
    for run in runs[1:]:
        command, _, expected = run.partition("\n")
        rc, cap = _run_cli(command, tmp_path, capsys)
        assert rc == 0, cap.err
        assert cap.out == expected


@pytest.mark.parametrize("block", _blocks("bash"))
def test_bash_block_commands_run(block, monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(ROOT)
    ci = _ci_lines()
    for line in block.strip().splitlines():
        for command in (c.strip() for c in line.split("&&")):
            if command.startswith("python -m pip install"):
                # The install CI runs, with or without the test extra.
                pin = re.search(r'"torch==[\d.]+"', command).group(0)
                assert any(ln.startswith("python -m pip install") and pin in ln for ln in ci), (command, ci)
            elif command == "python -m pytest":
                assert command in ci
            elif command.split()[0] in ("symshape", "dinfer"):
                rc, cap = _run_cli(command, tmp_path, capsys)
                assert rc == 0, (command, cap.err)
                assert cap.out or "wrote " in cap.err, command
                written = "".join(p.read_text() for p in tmp_path.iterdir() if p.is_file())
                for text in (cap.out, cap.err, written):  # what people read (tests/test_for_people.py)
                    m = UNREADABLE.search(re.sub(r"<[^>]+>", " ", text))
                    assert m is None, (command, text[max(0, m.start() - 100):m.end() + 100])
                if "-o /tmp/" in command:
                    assert list(tmp_path.iterdir()), "the report was written to the temp dir"
            else:
                pytest.fail(f"README command {command!r}: teach tests/test_readme.py how to check it")


def test_dinfer_sample_is_what_dinfer_prints(monkeypatch, tmp_path, capsys):
    """The ```text sample after the README's conv_pool dinfer command: each line (``...`` skips
    lines) is a line of the real output, in order."""
    monkeypatch.chdir(ROOT)
    text = open(README, encoding="utf-8").read()
    cmd = next(m.group(0) for m in re.finditer(r"^dinfer examples/shape_zoo.py:conv_pool .*$", text, re.M))
    (sample,) = [m.group(1) for m in re.finditer(r"^```text\n(.*?)^```$", text, re.S | re.M)]
    rc, out = _run_cli(cmd, tmp_path, capsys)
    assert rc == 0, out.err
    real = out.out.splitlines()
    i = 0
    for line in sample.splitlines():
        if line == "...":
            continue
        assert line in real[i:], f"README line not printed (in order): {line!r}\nreal output:\n{out.out}"
        i = real.index(line, i) + 1
