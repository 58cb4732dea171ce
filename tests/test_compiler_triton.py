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


@pytest.mark.skipif(not torch.cuda.is_available(), reason="direct launches need CUDA (the interpreter launches generically)")
def test_a_new_size_launches_direct_through_the_shared_kernel():
    """Sizes are not specialized: after one size, every kernel launch at a new size goes
    straight to the compiled kernel (no generic JIT launch), and the values stay right."""
    import compiler
    from compiler.codegen import triton_launch
    f = compiler.compile(lambda x: torch.softmax(x * 2, -1) + 1, "x: f32[N, 64]", target="triton")
    x = torch.randn(5, 64, device="cuda")
    torch.testing.assert_close(f(x), torch.softmax(x * 2, -1) + 1)
    fns = list(triton_launch._SHARED.keys())
    assert fns, "no compiled kernel was shared after the first size"
    generic = []
    for fn in fns:
        run = fn.run

        def counted(*a, _run=run, **kw):
            generic.append(1)
            return _run(*a, **kw)
        fn.run = counted
    try:
        for n in (6, 7, 33):
            x = torch.randn(n, 64, device="cuda")
            torch.testing.assert_close(f(x), torch.softmax(x * 2, -1) + 1)
    finally:
        for fn in fns:
            del fn.run
    assert not generic, f"{len(generic)} generic launches at new sizes"
