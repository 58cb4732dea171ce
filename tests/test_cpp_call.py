"""C++ kernels called through symshape's CPython extension (compiler.codegen.cpp_call), not ctypes."""
import ctypes
import os
import subprocess
import sys

import pytest
import torch

import compiler
from compiler.codegen import cpp, cpp_call

_KERNEL = r"""
#include <cstdint>
extern "C" int scale_add(void** ptrs, int64_t* sizes) {
  const float* x = (const float*)ptrs[0];
  float* y = (float*)ptrs[1];
  for (int64_t i = 0; i < sizes[0]; i++) y[i] = x[i] * sizes[1] + 1.0f;
  return sizes[0] > 3 ? 1 : 0;
}
"""


def _caller():
    """The extension's call; a machine without Python's headers skips (launches stay on ctypes there)."""
    call = cpp_call.caller(cpp.cache_dir())
    if call is None and str(cpp_call.STATE.get("why", "")).startswith("no Python.h"):
        pytest.skip(cpp_call.STATE["why"])
    assert call is not None, cpp_call.STATE
    return call


def test_the_extension_calls_a_kernel_with_its_buffers_and_sizes():
    call = _caller()
    fn = cpp.build(_KERNEL).scale_add
    x, y = torch.arange(5, dtype=torch.float32), torch.zeros(5)
    assert call(ctypes.cast(fn, ctypes.c_void_p).value, 2, 5, 3, x.data_ptr(), y.data_ptr()) == 1
    assert torch.equal(y, x * 3 + 1)
    with pytest.raises(ValueError, match="fewer arguments"):
        call(ctypes.cast(fn, ctypes.c_void_p).value, 3, 5, 3)


def test_a_bound_launch_goes_through_it_and_counts_the_variant():
    fn = cpp.build(_KERNEL).scale_add
    fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int
    calls = {"small": 0, "big": 0}
    launch = cpp._bound_launch(fn, ["small", "big"], calls, "scale_add", (2, 4), ctypes.cast(fn, ctypes.c_void_p).value,
                               _caller())
    assert launch.__name__ == "direct"
    x, y = torch.tensor([1.0, 2.0]), torch.zeros(2)
    launch([x, y])
    assert torch.equal(y, torch.tensor([5.0, 9.0])) and calls == {"small": 1, "big": 0}


def test_compiled_programs_equal_eager_through_it():
    f = compiler.compile(lambda x: torch.softmax(x * 2, -1) + x.sum(0), "x: f32[N, 16]", target="cpp")
    for n in (1, 7, 33):
        x = torch.randn(n, 16)
        torch.testing.assert_close(f(x), torch.softmax(x * 2, -1) + x.sum(0))
    _caller()


def test_without_it_launches_stay_on_ctypes():
    code = ("import torch, compiler; from compiler.codegen import cpp_call\n"
            "f = compiler.compile(lambda x: x.exp() + 1, 'x: f32[N]', target='cpp')\n"
            "x = torch.randn(9); assert torch.allclose(f(x), x.exp() + 1)\n"
            "print(cpp_call.STATE)")
    env = dict(os.environ, SYMSHAPE_CPP_CALL="0")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "'call': None" in r.stdout and "SYMSHAPE_CPP_CALL=0" in r.stdout, r.stdout


def test_a_shape_s_first_call_launches_unbound_and_equals_eager():
    """A C++ program meets a new shape at every call (a training loop): its first call at a shape
    passes the sizes with the addresses (no launch bound per kernel), and a shape met again binds."""
    _caller()
    f = compiler.compile(lambda x, y: torch.relu(x) @ y + x.sum(), "x: f32[N, K]", "y: f32[K, M]", target="cpp")
    v = None
    for n in (3, 5, 3, 8, 1):
        x, y = torch.randn(n, 6), torch.randn(6, 4)
        torch.testing.assert_close(f(x, y), torch.relu(x) @ y + x.sum())
        v = f.variants[0]
        assert v.launches_at(tuple(range(len(v.sym_index)))) is not None
