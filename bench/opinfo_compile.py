"""torch's OpInfo corpus through symshape's *compiler*, against eager's values.

``bench/opinfo_conformance.py`` checks the tracer's shapes and guards; this checks what a user of
the compiler gets.  Each OpInfo sample (a fresh symbol per dim, as :mod:`validation.opinfo` builds
it) is compiled once -- ``compiler.compile(..., target=)``, or ``torch.compile(backend="symshape",
dynamic=True)`` with ``--via backend`` (``--via train``: float inputs requiring grad, gradients of a
fixed random projection compared too) -- and called at the sample's sizes and at others.  Each
call's outputs are compared with eager's on the same inputs: structure, shape, dtype, then values
(``allclose`` at 1e-4 for fp32, torch.testing's tolerances for half types, the absolute one scaled
by eager's largest magnitude; equality for the rest; NaN where eager has NaN).  Random ops (eager's
values differ between two seeds) and ops returning uninitialized memory (``empty*``, a growing
``resize_``) are compared by shape and dtype only.

Outcomes per call:

* ``= eager``; ``= float64 (nearer than eager)``: a result off eager's but as near the program's
  float64 result (eager rounds each half op, a fused kernel once; an ill-conditioned gradient);
  ``= float64 (ill-conditioned ...)``: off eager's, but the program compiled for float64 inputs
  equals eager's float64 result, and its rounding error is within ten times eager's own;
  ``= aot_eager`` (``--via train``): off eager's, but equal to ``backend="aot_eager"``'s, so the
  difference is in the graph AOTAutograd hands every backend;
* ``eager not reproducible``: off eager's, but eager run again on the same inputs, after freed
  memory was refilled, disagrees with itself (on invalid inputs its kernel reads memory it never
  wrote: ``embedding_bag`` with decreasing offsets on one CPU thread), so there is nothing to
  compare with;
* ``refused``: ``compiler.compile``'s guards, or the program while traced at those sizes, refuse.
  Eager is not run there: outside the checks eager may crash the process rather than raise
  (``native_batch_norm`` with too few weights).  ``torch.compile``'s program refuses nothing, so
  there a refusal is ``refused`` only where eager raises too;
* ``dynamo error``: dynamo failed before any backend ran;
* the defects: ``WRONG SHAPE``, ``WRONG DTYPE``, ``WRONG LAYOUT``, ``MISMATCH``, ``ACCEPTED where
  eager fails`` and ``run error`` (a failure of symshape's at a call).

Run::

    python bench/opinfo_compile.py --samples 1                 # the corpus, C++ kernels (CPU)
    python bench/opinfo_compile.py --ops softmax var_mean --details
    TRITON_INTERPRET=1 python bench/opinfo_compile.py --target triton --ops softmax
    python bench/opinfo_compile.py --target triton --device cuda --samples 2   # on a GPU
    python bench/opinfo_compile.py --via backend --ops softmax   # through torch.compile's backend
    python bench/opinfo_compile.py --via train --ops softmax     # the backend's training graphs: gradients too
    python bench/opinfo_compile.py --strided --dtype bfloat16    # non-contiguous inputs, bf16 samples
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import warnings
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Optional

import torch
from torch.utils import _pytree as pytree

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import compiler  # noqa: E402
import shapes  # noqa: E402
from validation import opinfo  # noqa: E402
from validation.dinfer.limits import TraceTimeout, time_limit  # noqa: E402

DEFECTS = ("WRONG SHAPE", "WRONG DTYPE", "WRONG LAYOUT", "MISMATCH", "ACCEPTED where eager fails", "run error")


@dataclass(kw_only=True)
class CompileCase:
    """One sample's outcome: the compile, then one outcome per size called."""

    op: str
    index: int
    specs: list
    status: str = ""
    note: str = ""
    random: bool = False
    compile_s: Optional[float] = None
    calls: list = field(default_factory=list)  # (sizes, outcome)

    @property
    def defects(self) -> list:
        return [(s, o) for s, o in self.calls if o.split(" (")[0] in DEFECTS]


def _first_line(e: BaseException, n: int = 160) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:n] if text else ''}"


def _run(fn, ts, seed: int = 5):
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*ts)


def _leaves(out):
    return pytree.tree_flatten(out)


#: Tolerances per half dtype: torch.testing's defaults (a value computed in fp32 and rounded once
#: may differ from eager's by an ulp; the Triton interpreter rounds fp32 -> bf16 toward zero).
_HALF_TOL = {torch.bfloat16: (1.6e-2, 1e-5), torch.float16: (1e-3, 1e-5)}


#: Half dtypes' unit roundoff (half an ulp at 1): the float64 comparison's absolute tolerance, as a
#: fraction of the output's largest magnitude.
_UNIT_ROUNDOFF = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}


def _same_values(a, b) -> bool:
    """Close within the dtype's tolerance, absolute errors measured against ``b``'s largest finite
    magnitude (a sum's gradient of ~1e3 carries ~1e-4 of rounding in its small entries too)."""
    if a.dtype.is_floating_point or a.dtype.is_complex:
        rtol, atol = _HALF_TOL.get(a.dtype, (1e-4, 1e-4))
        finite = b[torch.isfinite(b)] if b.numel() else b
        scale = max(1.0, float(finite.abs().max())) if finite.numel() else 1.0
        return torch.allclose(a, b, atol=atol * scale, rtol=rtol, equal_nan=True)
    return torch.equal(a, b)


def compare(got, want, shapes_only: bool = False) -> str:
    """The outcome of a compiled call's ``got`` against eager's ``want``.

    >>> compare(torch.ones(2), torch.ones(2)), compare(torch.ones(2), torch.ones(3))[:11]
    ('= eager', 'WRONG SHAPE')
    """
    gl, gs = _leaves(got)
    wl, ws = _leaves(want)
    if gs != ws:
        return f"WRONG SHAPE (structure {gs} vs {ws})"[:200]
    for g, w in zip(gl, wl):
        if isinstance(g, torch.Tensor) != isinstance(w, torch.Tensor):
            return f"WRONG SHAPE ({type(g).__name__} vs {type(w).__name__})"
        if not isinstance(w, torch.Tensor):
            if g != w and not shapes_only:
                return f"MISMATCH ({g!r} vs {w!r})"[:200]
            continue
        if tuple(g.shape) != tuple(w.shape):
            return f"WRONG SHAPE ({tuple(g.shape)} vs {tuple(w.shape)})"
        if g.dtype != w.dtype:
            return f"WRONG DTYPE ({g.dtype} vs {w.dtype})"
        if g.layout != w.layout:
            return f"WRONG LAYOUT ({g.layout} vs {w.layout})"
        if w.layout != torch.strided:
            g, w = g.to_dense(), w.to_dense()
        if shapes_only or not w.numel():
            continue
        g = g.detach().to("cpu")
        w = w.detach().to("cpu")
        if not _same_values(g, w):
            if w.dtype.is_floating_point:
                d = (g.double() - w.double()).abs()
                d = torch.where(torch.isnan(g) & torch.isnan(w), torch.zeros_like(d), d)
                return f"MISMATCH (max abs err {d.nan_to_num(float('inf')).max().item():.2e})"
            return f"MISMATCH ({int((g != w).sum())} of {w.numel()} elements differ)"
    return "= eager"


def _is_random(case, ts) -> bool:
    """Eager's values depend on the RNG's seed (an op that draws random numbers, whose stream
    the compiled program does not promise to reproduce): compared by shape and dtype only."""
    try:
        a, b = _run(case, [t.clone() for t in ts], seed=5), _run(case, [t.clone() for t in ts], seed=6)
        return compare(a, b) != "= eager"
    except Exception:  # noqa: BLE001 -- eager fails on a second run: compare shapes only
        return True


def _call(case, compiled, ts) -> str:
    """The compiled call first, on copies (ops update inputs in place: BatchNorm's running
    stats); eager runs only where it accepted: outside its guards eager may not fail cleanly
    (``native_batch_norm`` with too few weights reads past them and crashes the process)."""
    try:
        got = _run(compiled, [_copy(t) for t in ts])
    except (shapes.GuardViolation, shapes.TraceError) as e:
        if getattr(compiled, "_symshape_via", "compile") != "compile":
            # torch.compile's program refuses nothing eager runs: a symshape guard or trace
            # error out of the backend is a defect wherever eager runs.
            return _failed(case, ts, e)
        # A guard, or the program while traced at these sizes, refused: eager is not run here.
        return f"refused ({_first_line(e, 100)})"
    except Exception as e:  # noqa: BLE001 -- the compiled call's failure is the outcome
        return _failed(case, ts, e)
    pristine = [_copy(t) for t in ts]  # eager may update its inputs in place
    try:
        want = _run(case, ts)
    except Exception:  # noqa: BLE001 -- eager's verdict, whatever it raises
        return "ACCEPTED where eager fails"
    out = compare(got, want, shapes_only=case.random)
    if out.startswith("MISMATCH"):
        return _mismatch_verdict(case, compiled, pristine, got, want) or out
    return out


def _mismatch_verdict(case, compiled, pristine, got, want):
    """Why a result off eager's is no defect, or None.  Every reference runs on copies of the
    sample's inputs as they were before eager's run (``pristine``: an in-place op's eager run
    updated the others), and eager's float64 result is computed once for both float64 verdicts."""
    if not _eager_reproducible(case, pristine, want):
        return "eager not reproducible (its values read memory it did not write)"
    wide = [_copy(t).double() if t.is_floating_point() else _copy(t) for t in pristine]
    try:
        ref = _run(case, [_copy(t) for t in wide])
    except Exception:  # noqa: BLE001 -- no float64 run (an op without float64): no float64 verdict
        ref = None
    if ref is not None and _nearer_float64(got, want, ref):
        return "= float64 (nearer than eager)"
    if ref is not None and _right_in_float64(compiled, pristine, wide, got, want, ref):
        return "= float64 (ill-conditioned: equal in float64, rounding within 10x eager's)"
    if isinstance(compiled, WithGrads) and _equals_aot_eager(case, pristine, got):
        return "= aot_eager (AOTAutograd's graph rounds otherwise than eager)"
    return None


def _eager_reproducible(case, ts, want) -> bool:
    """Whether eager, run again on ``ts`` four times, gives ``want`` every time; two of the reruns
    come after freed memory was filled with another value (:func:`_dirty_freed_memory`).  On
    invalid inputs eager's kernel may read memory it never wrote (``embedding_bag`` with
    decreasing offsets on one CPU thread): runs in a row may read the same leftovers (session 32
    saw two equal runs, then two others).  No compiled result can be compared with such a value."""
    for fill in (None, float("nan"), 7.0, None):
        if fill is not None:
            _dirty_freed_memory(fill, ts[0].device if ts else torch.device("cpu"))
        try:
            again = _run(case, [_copy(t) for t in ts])
        except Exception:  # noqa: BLE001 -- eager raises the second time: not reproducible either
            return False
        if compare(again, want) != "= eager":
            return False
    return True


def _dirty_freed_memory(fill: float, device) -> None:
    """Allocate blocks of many sizes holding ``fill`` and free them: the next small allocations
    (an op's output) reuse them, so values an op reads without writing show ``fill``.

    >>> _dirty_freed_memory(7.0, torch.device("cpu"))
    """
    blocks = [torch.full((n,), fill, device=device) for n in (4, 16, 64, 256, 1024, 4096, 1 << 14, 1 << 16)
              for _ in range(4)]
    del blocks


def _right_in_float64(compiled, ts, wide, got, want, ref) -> bool:
    """A result off eager's where the program is right and the op ill-conditioned
    (householder_product's gradient, whose fp32 error reaches 1e-3 of its magnitude in eager too):
    compiled again for float64 inputs (``wide``: the inputs ``ts`` widened), it equals eager's
    float64 result ``ref`` to 1e-9 of its magnitude; and in the sample's dtype its error from that
    result is within ten times eager's own plus a few units of roundoff (the same rounding, summed
    in another order and amplified alike).  A wrong program fails the first test; a kernel that
    loses precision, the second."""
    recompile = getattr(compiled, "_float64", None)
    floats = [t for t in ts if t.is_floating_point()]
    if recompile is None or not floats or any(t.dtype == torch.float64 for t in floats):
        return False
    try:
        got64 = _run(recompile(), [_copy(t) for t in wide])
    except Exception:  # noqa: BLE001 -- no float64 compile: no verdict
        return False
    eps = torch.finfo(floats[0].dtype).eps
    for g, w, r, g64 in zip(_leaves(got)[0], _leaves(want)[0], _leaves(ref)[0], _leaves(got64)[0]):
        if not isinstance(w, torch.Tensor) or not w.is_floating_point():
            continue
        if any(not isinstance(x, torch.Tensor) or x.shape != w.shape for x in (r, g64)):
            return False
        g, w, r, g64 = (x.detach().to("cpu", torch.float64) for x in (g, w, r, g64))
        if not (torch.isfinite(r).all() and torch.isfinite(g).all() and torch.isfinite(w).all()):
            return False
        scale = max(1.0, float(r.abs().max()))
        if float((g64 - r).abs().max()) > 1e-9 * scale:
            return False
        if float((g - r).abs().max()) > 10 * float((w - r).abs().max()) + 16 * eps * scale:
            return False
    return True


def _equals_aot_eager(case, ts, got) -> bool:
    """Training's values equal ``backend="aot_eager"``'s: AOTAutograd's own graph, run by ATen,
    rounds as symshape's kernels do (bf16 gradients of ``expand_as`` or ``broadcast_tensors``,
    whose outputs alias inputs and whose backward AOTAutograd regenerates): the difference from
    eager is in the graph torch hands every backend, not in symshape's compile of it."""
    try:
        aot = WithGrads(torch.compile(lambda *xs: case.fn(*xs), backend="aot_eager", dynamic=True))
        ref = _run(aot, [_copy(t) for t in ts])
    except Exception:  # noqa: BLE001 -- aot_eager fails: no verdict
        return False
    return compare(got, ref) == "= eager"


def _copy(t):
    """A copy of ``t`` in the layout the sweep gave it (``clone`` makes a strided view dense)."""
    return _strided(t.contiguous().clone()) if STRIDED["on"] else t.clone()


def _failed(case, ts, e) -> str:
    """The outcome of a compiled call that raised ``e``: refused where eager raises too."""
    try:
        _run(case, ts)
    except Exception:  # noqa: BLE001 -- eager refuses too
        return "refused"
    if STRIDED["on"]:
        # Eager on invalid inputs can depend on their layout (embedding_bag with decreasing
        # offsets raises for dense inputs, returns values for a column-major weight).
        try:
            _run(case, [t.contiguous() for t in ts])
        except Exception:  # noqa: BLE001 -- eager refuses the same values laid out densely
            return "refused"
    if _dynamos_own(e):
        return f"dynamo error ({_first_line(e, 100)})"
    return f"run error ({_first_line(e, 120)})"


def _dynamos_own(e: BaseException) -> bool:
    """dynamo failed before any backend ran (its fake-tensor run of a node, an unsupported
    construct): the same with every backend.  A backend's own failure comes wrapped as
    ``BackendCompilerFailed``, which stays a defect."""
    exc = getattr(torch._dynamo, "exc", None)
    if exc is None or not isinstance(e, exc.TorchDynamoException):
        return False
    return not isinstance(e, exc.BackendCompilerFailed)


def _half_outputs(out) -> bool:
    return any(isinstance(t, torch.Tensor) and t.dtype in _HALF_TOL for t in _leaves(out)[0])


def _nearer_float64(got, want, ref) -> bool:
    """A result that differs from eager's is no defect where it lies as near the program's float64
    result ``ref`` (eager's, on the inputs widened) as eager's does, within the dtype's tolerance:
    eager rounds each op to half where a fused kernel rounds once; an ill-conditioned gradient
    (householder_product's) differs from the float64 one in both, by more than eager's and ours
    differ from each other."""
    for g, w, r in zip(_leaves(got)[0], _leaves(want)[0], _leaves(ref)[0]):
        if not isinstance(w, torch.Tensor) or not w.is_floating_point():
            continue
        if not isinstance(r, torch.Tensor) or r.shape != w.shape:
            return False
        rtol, atol = _HALF_TOL.get(w.dtype, (1e-4, 1e-4))
        # In half precision each op of a graph rounds at its own magnitude: where terms of the
        # output's size cancel (a gradient's ``a * (x - mean) + b / n``), an element near 0 keeps
        # their rounding, one unit at the output's scale, whichever way the graph is run.
        atol = _UNIT_ROUNDOFF.get(w.dtype, atol)
        g, w, r = (x.detach().to("cpu", torch.float64) for x in (g, w, r))
        atol *= max(1.0, float(r[torch.isfinite(r)].abs().max())) if bool(torch.isfinite(r).any()) else 1.0
        ok = ((g - r).abs() <= (w - r).abs() + rtol * r.abs() + atol) | (torch.isnan(g) & torch.isnan(w))
        if not bool(ok.all()):
            return False
    return True


class WithGrads:
    """``fn`` with the float inputs requiring grad: returns ``(outputs, gradients)``, the gradients
    those of a fixed random projection of the float outputs (a seeded ``randn`` per output shape),
    one per float input (zeros where unused).

    >>> out, (g,) = WithGrads(lambda x: (x * 3).sum())(torch.ones(2))
    >>> g.shape
    torch.Size([2])
    """

    def __init__(self, fn):
        self.fn = fn
        self.random = False

    def __call__(self, *ts):
        leaves = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in ts]
        out = self.fn(*leaves)
        outs = [o for o in pytree.tree_leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad
                and o.is_floating_point()]
        wrt = [t for t in leaves if t.requires_grad]
        out = pytree.tree_map(lambda o: o.detach() if isinstance(o, torch.Tensor) else o, out)
        if not outs or not wrt:
            return out, ()
        g = torch.Generator().manual_seed(3)
        loss = sum((o.float() * torch.randn(o.shape, generator=g).to(o.device)).sum() for o in outs)
        grads = torch.autograd.grad(loss, wrt, allow_unused=True)
        return out, tuple(torch.zeros_like(w) if d is None else d for d, w in zip(grads, wrt))


class _Graded(WithGrads):
    """A sample's case whose call returns outputs and gradients (``--via train``)."""

    def __init__(self, case):
        super().__init__(case)
        self.inputs, self.hints, self.inputs_at = case.inputs, case.hints, case.inputs_at
        self.specs = case.specs


#: Ops whose float inputs' values eager checks on the device (``multinomial``'s probabilities).
_VALUE_CHECKED = {"multinomial", "bernoulli", "binomial", "poisson"}

#: ``--strided``: inputs reach both programs as non-contiguous tensors of the same values.
STRIDED = {"on": False}


def _strided(t):
    """``t``'s values in a non-contiguous layout: the last two dims column-major, or every other
    element of a larger buffer for a vector.

    >>> x = _strided(torch.arange(6.).reshape(2, 3)); (x.is_contiguous(), torch.equal(x, torch.arange(6.).reshape(2, 3)))
    (False, True)
    """
    if t.dim() >= 2 and t.shape[-1] > 1 and t.shape[-2] > 1:
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if t.numel() > 1:
        buf = torch.zeros((*t.shape[:-1], 2 * t.shape[-1]), dtype=t.dtype, device=t.device)  # holes alike
        buf[..., ::2] = t
        return buf[..., ::2]
    return t


def _to(ts, device):
    ts = [t.to(device) for t in ts]
    return [_strided(t) for t in ts] if STRIDED["on"] else ts


def _compiled(case, target: str, via: str):
    if via in ("train", "backend"):
        # dynamo captures the sample's call (pytree and all) and hands its graph to the backend.
        torch._dynamo.reset()
        fn = case.fn if via == "train" else case
        out = torch.compile(lambda *ts: fn(*ts), backend="symshape", dynamic=True, options={"target": target})
        out = WithGrads(out) if via == "train" else out
        out._symshape_via = via  # torch.compile's program refuses no call eager runs
        out._float64 = lambda: out  # float64 inputs: dynamo's dtype guard compiles them anew
        return out
    # A compile's example sizes start at 1 (a size-0 call gets its own variant): a sample's empty
    # dims are traced at 2 (one size for all, as square matrices need) and met at the first call.
    dims = {n: v or 2 for n, v in case.hints.items()}
    out = compiler.compile(case, *case.specs, dims=dims, target=target)
    out._float64 = lambda: compiler.compile(case, *[_widened(s) for s in case.specs], dims=dims, target=target)
    return out


def _widened(spec) -> str:
    """An input spec with its floating dtype made float64.

    >>> _widened("x0: bf16[D0, 3]"), _widened("x1: i64[D1]")
    ('x0: f64[D0, 3]', 'x1: i64[D1]')
    """
    name, _, rest = str(spec).partition(": ")
    dtype, bracket, dims = rest.partition("[")
    return f"{name}: {'f64' if dtype in ('f16', 'bf16', 'f32') else dtype}{bracket}{dims}"


def run_sample(op, index, sample, *, target: str, device: str, timeout: float, seed: int = 0,
               others: int = 5, via: str = "compile") -> Optional[CompileCase]:
    """Compile one sample (``via`` ``compiler.compile`` or ``torch.compile(backend="symshape")``)
    and call it at its sizes and up to ``others`` more; ``None`` where eager fails on the sample."""
    case = opinfo._Case(op, sample)
    if via == "train":
        if not op.supports_autograd or not any(t.is_floating_point() for t in case.inputs):
            return None
        case = _Graded(case)
    inputs = _to(case.inputs, device)
    try:
        _run(case, inputs)
    except Exception:  # noqa: BLE001 -- eager fails on the sample: nothing to compare
        return None
    # Random ops, and ops whose values are uninitialized memory (``empty``, ``new_empty_strided``,
    # ``resize_`` growing a tensor).
    case.random = any(w in opinfo.op_name(op) for w in ("empty", "resize")) or _is_random(case, inputs)
    row = CompileCase(op=opinfo.op_name(op), index=index, specs=[str(s) for s in case.specs],
                      random=case.random)
    t0 = time.perf_counter()
    try:
        with time_limit(timeout), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = _compiled(case, target, via)
            first = _call(case, compiled, inputs)
    except TraceTimeout:
        row.status, row.note = "timeout", f"compile over {timeout:g} s"
        return row
    except Exception as e:  # noqa: BLE001 -- a process boundary: the compile's failure is the row
        row.status, row.note = f"compile: {type(e).__name__}", _first_line(e)
        return row
    row.compile_s = time.perf_counter() - t0
    row.calls.append((dict(case.hints), first))
    if torch.device(device).type == "cuda" and (any(not t.is_floating_point() for t in case.inputs)
                                                or row.op.split(".")[0] in _VALUE_CHECKED):
        # Index values repeated at other sizes may be out of range, random probabilities negative:
        # on CUDA eager's kernel then asserts on the device, which ends the process (its CUDA
        # context is lost).  Such samples are called at their own sizes only.
        others = 0
    gen = torch.Generator().manual_seed(seed)
    for sizes in opinfo._candidates(None, case, random.Random(seed + index), 0)[:others]:
        full = dict(case.hints)
        full.update(sizes)
        ts = _to(case.inputs_at(full, gen), device)
        try:
            with time_limit(timeout):
                row.calls.append((full, _call(case, compiled, ts)))
        except TraceTimeout:
            row.calls.append((full, f"timeout (over {timeout:g} s)"))
    bad = row.defects
    row.status = "DEFECT" if bad else "ok"
    return row


def summary(rows: list) -> str:
    """Counts by outcome, then every defect and compile failure."""
    out = []
    st = Counter(r.status.split(":")[0] for r in rows)
    calls = Counter(o.split(" (")[0] for r in rows for _, o in r.calls)
    out.append(f"samples {len(rows)}: " + ", ".join(f"{k} {v}" for k, v in st.most_common()))
    out.append(f"calls {sum(calls.values())}: " + ", ".join(f"{k} {v}" for k, v in calls.most_common()))
    out.append(f"random ops compared by shape: {sum(r.random for r in rows)}")
    fails = Counter(r.status for r in rows if r.status.startswith("compile"))
    if fails:
        out.append("compile failures: " + ", ".join(f"{k[9:]} {v}" for k, v in fails.most_common()))
    for r in rows:
        if r.status == "DEFECT":
            for s, o in r.defects:
                out.append(f"  DEFECT {r.op}[{r.index}] {r.specs} at {s}: {o}")
    for r in rows:
        if r.status.startswith("compile") or r.status == "timeout":
            out.append(f"  {r.status} {r.op}[{r.index}] {r.specs}: {r.note}")
    return "\n".join(out)


def _matches(name, patterns):
    return any(p == name or p == name.split(".")[0] or name.endswith("." + p) for p in patterns)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", nargs="*", help="only these OpInfos (name, name.variant, or the last name part)")
    ap.add_argument("--samples", type=int, default=1, help="samples per OpInfo (default 1)")
    ap.add_argument("--others", type=int, default=4, help="other sizes called per sample (default 4)")
    ap.add_argument("--target", choices=("cpp", "triton"), default="cpp")
    ap.add_argument("--via", choices=("compile", "backend", "train"), default="compile",
                    help="compiler.compile, torch.compile(backend='symshape', dynamic=True), or that backend "
                         "with the float inputs requiring grad (outputs and input gradients compared)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", help="the samples' floating dtype (float32, bfloat16, float16)")
    ap.add_argument("--timeout", type=float, default=60, help="seconds per compile or call")
    ap.add_argument("--shard", default="0/1", help="K/N: only every N-th OpInfo from the K-th")
    ap.add_argument("--strided", action="store_true", help="pass the inputs in non-contiguous layouts")
    ap.add_argument("--start-at", help="the OpInfo name to start from (resume a run)")
    ap.add_argument("--details", action="store_true", help="print every call's outcome")
    ap.add_argument("--json", help="write every sample's outcome to this file")
    args = ap.parse_args(argv)

    STRIDED["on"] = args.strided
    compiler.register()  # backend="symshape" from a source tree, installed or not
    k, n = (int(v) for v in args.shard.split("/"))
    names = [opinfo.op_name(o) for o in opinfo.op_db()
             if not args.ops or _matches(opinfo.op_name(o), args.ops)][k::n]
    if args.start_at:
        names = names[names.index(args.start_at):]
    rows, t0, stopped = [], time.perf_counter(), ""
    try:
        for op, i, s in opinfo.corpus(names, args.samples, dtype=getattr(torch, args.dtype)):
            r = run_sample(op, i, s, target=args.target, device=args.device, timeout=args.timeout,
                           others=args.others, via=args.via)
            if r is None:
                continue
            rows.append(r)
            mark = "" if r.status == "ok" else f"  <- {r.status} {r.note}"
            print(f"{r.op}[{r.index}] {r.compile_s or 0:.2f}s {len(r.calls)} calls{mark}", file=sys.stderr, flush=True)
            if args.details:
                for sz, o in r.calls:
                    print(f"    {sz}: {o}", file=sys.stderr)
    except KeyboardInterrupt:  # a time limit's SIGINT: the samples done so far are the result
        stopped = f", stopped after {len(rows)} samples (interrupted)"
    print(f"torch {torch.__version__}, {args.via} target {args.target} on {args.device}, {args.dtype}, {args.samples} sample(s) per OpInfo, "
          f"{time.perf_counter() - t0:.0f} s{stopped}")
    print(summary(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in rows], f, indent=1, default=str)
    return 1 if any(r.status == "DEFECT" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
