"""C++ modules built over several translation units (compiler.codegen.cpp_build) run like one."""
import ctypes
import os

import torch

import compiler
from compiler.codegen import cpp as cpp_codegen
from compiler.codegen import cpp_build
from compiler.ir import Kernel
from tests.compiler_programs import MLPBlock


def test_a_module_split_over_units_links_every_kernel_and_matches_eager(tmp_path, monkeypatch):
    monkeypatch.setenv("SYMSHAPE_CACHE", str(tmp_path))
    monkeypatch.setenv("SYMSHAPE_BUILD_WORKERS", "4")  # split even on a 2-core machine
    torch.manual_seed(0)
    m = MLPBlock(approximate="tanh").eval()

    def prog(x):
        return torch.softmax(m(x), -1) + x.mean(-1, keepdim=True)

    builds = cpp_codegen.BUILD_COUNT["gcc"]
    f = compiler.compile(prog, "x: f32[B, T, 32]")
    assert cpp_codegen.BUILD_COUNT["gcc"] == builds + 1
    v = f.variants[0]
    names = [s.name for s in v.steps if isinstance(s, Kernel)]
    assert len(names) >= 3, names
    with torch.no_grad():
        for B, T in [(2, 3), (3, 64), (1, 17)]:
            x = torch.randn(B, T, 32)
            assert torch.allclose(f(x), prog(x), atol=1e-5, rtol=1e-4)
    # The same source built here over several units: one library holding every kernel.
    src, meta = cpp_codegen.CPP.generate(v.lp, v.steps)
    names = [base for _, _, base in meta.values()]  # each kernel's function, named by its source
    assert len(cpp_build.units(src, 4)) >= 2
    path = str(tmp_path / "again.cpp")
    with open(path, "w") as fh:
        fh.write(src)
    failed = cpp_build.compile_module("g++", cpp_codegen.CXXFLAGS, cpp_codegen.LDFLAGS, src, path,
                                      str(tmp_path / "again.so"), jobs=4)
    assert failed is None
    lib = ctypes.CDLL(str(tmp_path / "again.so"))
    assert all(hasattr(lib, n) for n in names)
    assert sorted(os.listdir(tmp_path)).count("again.so") == 1
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".o")]  # the units' objects are removed


def test_a_compile_error_in_one_unit_is_reported(tmp_path):
    src = "// prelude" + cpp_build.UNIT + 'extern "C" int a() { return 0; }' + cpp_build.UNIT + "int b( {"
    path = str(tmp_path / "bad.cpp")
    with open(path, "w") as fh:
        fh.write(src)
    failed = cpp_build.compile_module("g++", cpp_codegen.CXXFLAGS, cpp_codegen.LDFLAGS, src, path,
                                      str(tmp_path / "bad.so"), jobs=4)
    assert failed is not None and failed.returncode != 0 and "error" in failed.stderr
    assert not os.path.exists(tmp_path / "bad.so")
