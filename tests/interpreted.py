"""Triton cases run where they can: in-process on CUDA, else in one subprocess under ``TRITON_INTERPRET=1``.

The interpreter is chosen when triton is first imported, so a CPU run needs a fresh
process: :func:`script_results` runs a test script there and reads the one
``RESULTS {json}`` line it prints (:func:`print_results`); :func:`run_cases` runs a
module's ``case_*`` functions and keeps each one's result or error.

Example::

    >>> def case_ok():
    ...     return "ok"
    >>> def case_bad():
    ...     raise ValueError("no")
    >>> run_cases({"case_ok": case_ok, "case_bad": case_bad, "other": 1})
    {'case_bad': 'ValueError: no', 'case_ok': 'ok'}
"""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def case_names(namespace: dict) -> list:
    """The ``case_*`` names of a module's namespace, sorted."""
    return sorted(n for n in namespace if n.startswith("case_"))


def run_cases(namespace: dict, names=None) -> dict:
    """``{name: result}`` for each case (``"ok"``, another string the case returns, or its error)."""
    out = {}
    for name in names if names is not None else case_names(namespace):
        try:
            out[name] = namespace[name]()
        except Exception as e:  # noqa: BLE001 - a case's failure is its result (the script's boundary)
            out[name] = f"{type(e).__name__}: {e}"
    return out


def script_results(script: str, *args: str, timeout: int = 900) -> dict:
    """Run ``script`` (a path) with ``args`` under ``TRITON_INTERPRET=1`` in a fresh Python and
    return the dict of its ``RESULTS`` line; fail with its output's tail where it printed none."""
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, env=env, cwd=ROOT,
                       timeout=timeout)
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULTS ")]
    assert line, f"{os.path.basename(script)} did not run its cases:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return json.loads(line[-1][len("RESULTS "):])


def module_results(namespace: dict, script: str) -> dict:
    """A test module's case results: its ``case_*`` functions run here on CUDA, else ``script``
    (the module's file, which prints them when run) under the interpreter."""
    import torch
    if torch.cuda.is_available():
        return run_cases(namespace)
    return script_results(os.path.abspath(script))


def print_results(results: dict) -> None:
    """The line :func:`script_results` reads."""
    print("RESULTS " + json.dumps(results))


def case_tests(namespace: dict, script: str) -> tuple:
    """``(results, test)`` for a module to bind at its end: a module-scoped fixture that runs
    its ``case_*`` functions (:func:`module_results`) and one test per case, which passes on
    ``"ok"``, skips on ``"skip: why"`` and fails with anything else (the case's error).

    Usage (the last line of a test module)::

        results, test_case = interpreted.case_tests(globals(), __file__)
    """
    import pytest

    @pytest.fixture(scope="module")
    def results():
        return module_results(namespace, script)

    @pytest.mark.parametrize("case", case_names(namespace))
    def test(results, case):
        if results[case].startswith("skip: "):
            pytest.skip(results[case][len("skip: "):])
        assert results[case] == "ok", results[case]

    return results, test
