"""The Triton path: kernels equal eager at several sizes with one variant.

Without CUDA the cases run on CPU under TRITON_INTERPRET=1 in one subprocess
(the interpreter is chosen when triton is imported); with CUDA in-process.
Sizes are small: the interpreter is slow.
"""
import json
import os
import subprocess
import sys

import pytest
import torch

from tests import compiler_triton_cases as cases

pytestmark = pytest.mark.triton
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def results():
    if torch.cuda.is_available():
        return cases.run_all()
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "compiler_triton_cases.py")],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULTS ")]
    assert line, f"the Triton cases did not run:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return json.loads(line[-1][len("RESULTS "):])


@pytest.mark.parametrize("case", cases.CASES)
def test_triton_case(results, case):
    assert results[case] == "ok", results[case]
