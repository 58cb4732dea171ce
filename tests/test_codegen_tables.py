"""Every IR op kind x every code generator: spelled, compiled, and equal to torch.

Each kernel is built from IR directly (one Load per operand, one store), so a
kind that no lowering happens to produce today is still checked; the C++
kernels run through gcc, the Triton ones under ``TRITON_INTERPRET=1``.
"""
import os
import subprocess
import sys

import pytest
import sympy
import torch

from compiler.codegen import TARGETS, CodegenError
from compiler.codegen.skeleton import Scope, KernelGen
from compiler.ir import JVAR, Buffer, Kernel, Load, Op, OpKind, UnknownOpKind
from compiler.lowered import LoweredProgram

N = sympy.Symbol("N", integer=True, positive=True)
F32, BOOL = torch.float32, torch.bool

#: kind -> (operand dtypes, result dtype, reference on torch tensors)
REFERENCE = {
    OpKind.ADD: ((F32, F32), F32, torch.add), OpKind.SUB: ((F32, F32), F32, torch.sub),
    OpKind.MUL: ((F32, F32), F32, torch.mul), OpKind.DIV: ((F32, F32), F32, torch.div),
    OpKind.NEG: ((F32,), F32, torch.neg), OpKind.RELU: ((F32,), F32, torch.relu),
    OpKind.EXP: ((F32,), F32, torch.exp), OpKind.LOG: ((F32,), F32, lambda a: torch.log(a.abs() + 0.5)),
    OpKind.SQRT: ((F32,), F32, lambda a: torch.sqrt(a.abs() + 0.5)),
    OpKind.RSQRT: ((F32,), F32, lambda a: torch.rsqrt(a.abs() + 0.5)),
    OpKind.TANH: ((F32,), F32, torch.tanh), OpKind.SIGMOID: ((F32,), F32, torch.sigmoid),
    OpKind.ERF: ((F32,), F32, torch.erf), OpKind.ABS: ((F32,), F32, torch.abs),
    OpKind.POW: ((F32, F32), F32, lambda a, b: torch.pow(a.abs() + 0.5, b)),
    OpKind.MAXIMUM: ((F32, F32), F32, torch.maximum), OpKind.MINIMUM: ((F32, F32), F32, torch.minimum),
    OpKind.WHERE: ((BOOL, F32, F32), F32, torch.where), OpKind.CAST: ((F32,), BOOL, lambda a: a != 0),
    OpKind.LT: ((F32, F32), BOOL, torch.lt), OpKind.LE: ((F32, F32), BOOL, torch.le),
    OpKind.GT: ((F32, F32), BOOL, torch.gt), OpKind.GE: ((F32, F32), BOOL, torch.ge),
    OpKind.EQ: ((F32, F32), BOOL, torch.eq), OpKind.NE: ((F32, F32), BOOL, torch.ne),
    OpKind.AND: ((BOOL, BOOL), BOOL, torch.logical_and), OpKind.OR: ((BOOL, BOOL), BOOL, torch.logical_or),
    OpKind.NOT: ((BOOL,), BOOL, torch.logical_not),
    OpKind.RECIPROCAL: ((F32,), F32, lambda a: torch.reciprocal(a.abs() + 0.5)),
    OpKind.SIN: ((F32,), F32, torch.sin), OpKind.COS: ((F32,), F32, torch.cos),
    OpKind.FLOOR: ((F32,), F32, torch.floor), OpKind.CEIL: ((F32,), F32, torch.ceil),
    OpKind.LOG1P: ((F32,), F32, lambda a: torch.log1p(a.abs())), OpKind.EXPM1: ((F32,), F32, torch.expm1),
}
#: Operand preparations the reference applies before the op (domain restrictions).
DOMAIN = {OpKind.LOG: "shift", OpKind.SQRT: "shift", OpKind.RSQRT: "shift", OpKind.RECIPROCAL: "shift",
          OpKind.POW: "shift0", OpKind.LOG1P: "abs"}


def test_reference_covers_every_kind():
    assert set(REFERENCE) == set(OpKind)


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_every_kind_has_a_spelling(target):
    missing = [k.value for k in OpKind if k not in TARGETS[target].op_table]
    assert not missing, f"{target} lacks {missing}"


def test_unknown_kind_is_a_named_error():
    with pytest.raises(UnknownOpKind, match="fused_magic"):
        Op("fused_magic", (), F32)


def test_codegen_without_a_spelling_raises_codegen_error():
    t = TARGETS["cpp"]
    k = Kernel(name="kernel0", outer=(), reads={"a"})
    lp = LoweredProgram(inputs=[], consts=[], buffers={"a": Buffer(name="a", shape=(N,), strides=(1,), dtype=F32, kind="input")}, items=[], reductions={}, outputs=[], symbols=[N])
    scope = Scope(KernelGen(t, k, lp, {N: "ks0"}), "  ")
    saved = t.op_table.pop(OpKind.EXP)
    try:
        with pytest.raises(CodegenError, match="no spelling for op exp"):
            scope.emit(Op(OpKind.EXP, (Load("a", JVAR, F32),), F32))
    finally:
        t.op_table[OpKind.EXP] = saved


def _prepare(kind, i, v):
    how = DOMAIN.get(kind)
    if how == "shift" or (how == "shift0" and i == 0):
        return Op(OpKind.ADD, (Op(OpKind.ABS, (v,), F32), _half()), F32)
    if how == "abs":
        return Op(OpKind.ABS, (v,), F32)
    return v


def _half():
    from compiler.ir import Const
    return Const(0.5, F32)


def _kernel_for(kind):
    dtypes, out_dt, _ = REFERENCE[kind]
    bufs = {f"in{i}": Buffer(name=f"in{i}", shape=(N,), strides=(1,), dtype=dt, kind="input") for i, dt in enumerate(dtypes)}
    out = Buffer(name="out", shape=(N,), strides=(1,), dtype=out_dt, kind="kernel")
    bufs["out"] = out
    loads = [_prepare(kind, i, Load(f"in{i}", JVAR, dt)) for i, dt in enumerate(dtypes)]
    value = Op(kind, tuple(loads), out_dt)
    k = Kernel(name="kernel0", outer=(), inner_stores=[(out, N, value)], reads=set(bufs) - {"out"})
    lp = LoweredProgram(inputs=[bufs[n] for n in bufs if n != "out"], consts=[], buffers=bufs, items=[], reductions={}, outputs=[], symbols=[N])
    return lp, k


def _inputs(kind, n):
    g = torch.Generator().manual_seed(int(kind.value.encode().hex(), 16) % 2**31)
    dtypes, _, _ = REFERENCE[kind]
    out = []
    for dt in dtypes:
        if dt == BOOL:
            out.append(torch.rand(n, generator=g) > 0.5)
        else:
            x = torch.randn(n, generator=g) * 2
            x[::7] = 0.0  # equal operands and zeros exercise comparisons and casts
            out.append(x)
    if len(dtypes) == 2 and dtypes[0] == F32:
        out[1][::5] = out[0][::5]
    return out


def check_kind(target, kind, device="cpu"):
    """Build, launch and compare one kind on one target; raises AssertionError on a mismatch."""
    lp, k = _kernel_for(kind)
    names, launch = TARGETS[target].make_launchers(lp, [k])["kernel0"]
    n = 37  # not a multiple of any block: the tail mask is exercised
    ins = [t.to(device) for t in _inputs(kind, n)]
    _, out_dt, ref = REFERENCE[kind]
    out = torch.empty(n, dtype=out_dt, device=device)
    by_name = {f"in{i}": t for i, t in enumerate(ins)}
    by_name["out"] = out
    launch([by_name[nm] for nm in names], (n,))
    expect = ref(*ins)
    if out_dt == BOOL:
        assert torch.equal(out.cpu(), expect.cpu()), f"{target} {kind.value}: {out} != {expect}"
    else:
        torch.testing.assert_close(out.cpu(), expect.cpu(), rtol=2e-5, atol=2e-5, equal_nan=True,
                                   msg=lambda m: f"{target} {kind.value}: {m}")


#: Ops a target may decompose (compiler.codegen.decompositions), at points where a naive
#: formulation loses every digit (log(1 + x) and exp(x) - 1 near 0, 2 sigmoid(2x) - 1 for tanh).
PRECISE_POINTS = [1e-3, -1e-3, 1e-5, -1e-5, 3e-7, -3e-7, 1e-9, -1e-9, 1e-12, -1e-12, 0.0, 0.5, -0.5, 20.0, -20.0,
                  100.0, -100.0]
PRECISE_KINDS = {OpKind.LOG1P: torch.log1p, OpKind.EXPM1: torch.expm1, OpKind.TANH: torch.tanh,
                 OpKind.SIGMOID: torch.sigmoid}


def check_precise(target, kind, device="cpu"):
    """``kind`` at :data:`PRECISE_POINTS` equals torch's float64 value rounded to float32, to 4 ulp."""
    x = torch.tensor(PRECISE_POINTS, dtype=F32)
    if kind is OpKind.LOG1P:
        x = x.clamp(min=-0.5)  # log1p's domain
    inp, out = Buffer(name="in0", shape=(N,), strides=(1,), dtype=F32, kind="input"), Buffer(name="out", shape=(N,), strides=(1,), dtype=F32, kind="kernel")
    k = Kernel(name="kernel0", outer=(), inner_stores=[(out, N, Op(kind, (Load("in0", JVAR, F32),), F32))], reads={"in0"})
    lp = LoweredProgram(inputs=[inp], consts=[], buffers={"in0": inp, "out": out}, items=[], reductions={}, outputs=[], symbols=[N])
    names, launch = TARGETS[target].make_launchers(lp, [k])["kernel0"]
    got = torch.empty(len(x), dtype=F32, device=device)
    by_name = {"in0": x.to(device), "out": got}
    launch([by_name[nm] for nm in names], (len(x),))
    want = PRECISE_KINDS[kind](x.double()).float()
    # atol: the smallest normal float32 (a subnormal result such as sigmoid(-100) may flush to 0)
    torch.testing.assert_close(got.cpu(), want, rtol=4 * 1.2e-7, atol=1.2e-38,
                               msg=lambda m: f"{target} {kind.value} at {x.tolist()}: {got.tolist()}: {m}")


@pytest.mark.parametrize("kind", list(PRECISE_KINDS), ids=lambda k: k.value)
def test_composites_precise_near_zero_cpp(kind):
    check_precise("cpp", kind)


def check_all_triton():
    """Every kind through Triton (CUDA when present); prints one line per failing kind."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    bad = 0
    for kind in OpKind:
        try:
            check_kind("triton", kind, device)
            if kind in PRECISE_KINDS:
                check_precise("triton", kind, device)
        except Exception as e:  # report every kind, not only the first
            bad += 1
            print(f"FAIL {kind.value}: {type(e).__name__}: {str(e)[:300]}")
    print(f"checked {len(OpKind)} kinds, {bad} failed")


@pytest.mark.parametrize("kind", list(OpKind), ids=lambda k: k.value)
def test_kind_matches_torch_cpp(kind):
    check_kind("cpp", kind)


@pytest.mark.triton
def test_every_kind_matches_torch_triton():
    # A fresh interpreter: TRITON_INTERPRET must be set before triton is first imported
    # (an earlier torch.compile in this process imports it for real kernels).
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if not torch.cuda.is_available():
        env["TRITON_INTERPRET"] = "1"
    r = subprocess.run([sys.executable, "-c", "from tests.test_codegen_tables import check_all_triton as f; f()"],
                       capture_output=True, text=True, env=env, cwd=root, timeout=900)
    assert f"checked {len(OpKind)} kinds, 0 failed" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
