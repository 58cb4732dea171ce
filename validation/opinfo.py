"""Conformance of symshape's tracer with torch on torch's own operator corpus.

The corpus is ``op_db`` of ``torch.testing._internal.common_methods_invocations``:
every OpInfo that supports float32 on CPU, its first samples whose tensors all
have rank >= 1.  Every dim of every tensor gets a fresh symbol (``D0``,
``D1``, ...), with the sample's size as example.  Each sample is traced by
:func:`shapes.trace` and by ``make_fx(tracing_mode="symbolic")`` (duck
shaping off, so torch also has one symbol per dim), then checked against
eager at the traced sizes and at other sizes:

* *wrong shape*: symshape's output shape, evaluated at sizes its guards
  accept, differs from eager's output shape there;
* *unsound accept*: symshape's guards accept sizes that torch's guards
  reject, and eager fails there;
* guard counts: the distinct conditions among symshape's guards and
  runtime asserts against those among torch's guards and runtime asserts,
  conjunctions counted by conjunct.  torch's 0/1 policy makes every dim
  whose example is 0 or 1 a constant and assumes every other dim >= 2,
  recording neither; symshape treats size 1 as a size and keeps such
  conditions (``K != 1``, ``C >= 2``) as guards.  A symshape condition
  that holds wherever torch's policy puts the sizes is therefore counted
  apart (``sym_size_one_guards``), not against symshape: the comparison
  is of what each tracer requires beyond its own size policy.

Other sizes come from uniform moves of every dim (+1, x2, -1), random moves
of each dim, and Z3 models of symshape's own guard set, so sizes that only
just satisfy the guards (an equality between two dims, a product) are
checked too.

Example::

    >>> from validation.opinfo import run_op
    >>> res = run_op("nn.functional.conv1d", samples=1)
    >>> res[0].sym_ok, res[0].torch_ok, res[0].wrong, res[0].unsound
    (True, True, [], [])
"""
from __future__ import annotations

import random
import time
import warnings
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Optional

import sympy
import torch
from torch.utils import _pytree as pytree

from .dinfer.limits import TraceTimeout, time_limit

__all__ = ["SampleResult", "Summary", "corpus", "run_case", "run_op", "run_corpus", "split_size_one", "summarize",
           "table"]


def op_db():
    """torch's OpInfo list (imported lazily: the import takes seconds)."""
    from torch.testing._internal.common_methods_invocations import op_db as db
    return db


def op_name(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


@dataclass
class SampleResult:
    """The outcome of one sample.  ``sym_status`` / ``torch_status`` are
    ``ok`` or the exception type name; ``wrong`` and ``unsound`` list the
    sizes (dim name -> value) where symshape was wrong, with a reason."""

    op: str
    index: int
    specs: list
    sym_status: str = "ok"
    sym_error: str = ""
    torch_status: str = "ok"
    torch_error: str = ""
    sym_guards: int = 0
    sym_size_one_guards: int = 0  # conditions torch's 0/1 policy assumes (not in sym_guards)
    torch_guards: int = 0
    points: int = 0
    wrong: list = field(default_factory=list)
    unsound: list = field(default_factory=list)
    both_accept_eager_fails: int = 0
    both_accept_errors: list = field(default_factory=list)  # the first few (sizes, eager's error)
    sym_s: float = 0.0
    torch_s: float = 0.0

    @property
    def sym_ok(self) -> bool:
        return self.sym_status == "ok"

    @property
    def torch_ok(self) -> bool:
        return self.torch_status == "ok"


def _flat_tensors(sample):
    leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
    return leaves, spec, [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]


def corpus(ops: Optional[Iterable[str]] = None, samples: int = 3, dtype=torch.float32) -> Iterator[tuple]:
    """``(opinfo, index, sample)`` for the first ``samples`` samples of each
    OpInfo (``dtype``, default float32; CPU) whose tensors all have rank >= 1
    (dense ones: symshape's specs describe strided tensors)."""
    wanted = set(ops) if ops is not None else None
    for op in op_db():
        if wanted is not None and op_name(op) not in wanted and op.name not in wanted:
            continue
        if not op.supports_dtype(dtype, "cpu"):
            continue
        n = 0
        try:
            gen = op.sample_inputs("cpu", dtype, requires_grad=False)
            for s in gen:
                leaves, _, pos = _flat_tensors(s)
                if not pos or any(leaves[i].dim() == 0 or leaves[i].layout != torch.strided for i in pos):
                    continue
                yield op, n, s
                n += 1
                if n >= samples:
                    break
        except Exception:  # a sample generator that fails on this build: nothing to compare
            continue


class _Case:
    """One sample as a program of its tensors, with fresh dim names."""

    def __init__(self, op, sample):
        from shapes.spec import InputSpec
        self.op = op
        leaves, self.tree, self.pos = _flat_tensors(sample)
        self.leaves = leaves
        self.inputs = [leaves[i].detach().contiguous().clone() for i in self.pos]
        self.specs, self.dims, self.hints = [], [], {}
        k = 0
        for j, t in enumerate(self.inputs):
            names = []
            for s in t.shape:
                name = f"D{k}"
                k += 1
                names.append(name)
                self.hints[name] = int(s)
            self.dims.append(names)
            self.specs.append(InputSpec(name=f"x{j}", dtype=t.dtype, dims=tuple(names)))

    def __call__(self, *ts):
        leaves = list(self.leaves)
        for i, t in zip(self.pos, ts):
            leaves[i] = t
        inp, args, kwargs = pytree.tree_unflatten(leaves, self.tree)
        return self.op.op(inp, *args, **kwargs)

    def inputs_at(self, sizes: dict, gen: torch.Generator):
        """Inputs at other sizes: floats fresh, other dtypes the sample's values repeated
        (index tensors keep values that were valid, masks keep their density)."""
        out = []
        for t, names in zip(self.inputs, self.dims):
            shape = [sizes.get(n, self.hints[n]) for n in names]
            if t.dtype.is_floating_point or t.dtype.is_complex:
                out.append(torch.randn(shape, generator=gen, dtype=t.dtype))
            else:
                n = 1
                for s in shape:
                    n *= s
                flat = t.reshape(-1)
                if flat.numel() == 0:
                    out.append(torch.zeros(shape, dtype=t.dtype))
                else:
                    idx = torch.arange(n) % flat.numel()
                    out.append(flat[idx].reshape(shape))
        return out


def _shapes_of(out):
    return [tuple(int(s) for s in x.shape) for x in pytree.tree_leaves(out) if isinstance(x, torch.Tensor)]


def _eager(case, ts):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return True, _shapes_of(case(*ts))
    except Exception as e:  # noqa: BLE001 - eager's verdict, whatever it raises
        return False, f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"


def _first_line(e) -> str:
    s = str(e).strip()
    return s.splitlines()[0][:300] if s else ""


def _conjuncts(e):
    return e.args if isinstance(e, sympy.And) else (e,)


def split_size_one(tp) -> tuple[set, set]:
    """The distinct conditions of ``tp``'s guards and runtime asserts, split in two:
    those torch's 0/1 policy would not assume, and those it assumes without recording.

    >>> import shapes, torch
    >>> tp = shapes.trace(lambda x: torch.fft.irfft(x), "x: f32[N, C]")
    >>> counted, assumed = split_size_one(tp)
    >>> sorted(map(str, counted)), sorted(map(str, assumed))
    ([], ['C >= 2'])
    """
    from shapes.guard import Decision
    conds = {c for g in tp.env.records if g.decided_by is not Decision.ZERO_ONE for c in _conjuncts(g.expr)}
    ranges = _torch_size_policy(tp.env)
    assumed = {c for c in conds if ranges is not None and _always_true(c, ranges)}
    return conds - assumed, assumed


def _symshape_count(tp) -> tuple[int, int]:
    counted, assumed = split_size_one(tp)
    return len(counted), len(assumed)


def _torch_size_policy(env):
    """Symbol ranges as torch's 0/1 policy sees them: example 0 or 1 a constant, other dims >= 2."""
    from shapes.value_ranges import ValueRange
    out = {}
    for sym, r in env.ranges.items():
        if sym in env.unbacked:
            out[sym] = r
            continue
        try:
            h = int(env.hint_of(sym))
        except (TypeError, ValueError):
            return None
        lo, hi = (h, h) if h in (0, 1) else (max(r.lower, 2), r.upper)
        if lo > hi:
            return None
        out[sym] = ValueRange(lo, hi)
    return out


def _always_true(cond, ranges) -> bool:
    from shapes.value_ranges import UnsupportedExpression, bound
    try:
        b = bound(cond, ranges)
    except UnsupportedExpression:  # an expression the range analysis does not take: counted
        return False
    return b.is_bool and b.lower == 1


def _torch_trace(case, timeout):
    from torch.fx.experimental import _config as fx_config
    from torch.fx.experimental.proxy_tensor import make_fx
    with time_limit(timeout or None), fx_config.patch(use_duck_shape=False), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gm = make_fx(case, tracing_mode="symbolic")(*case.inputs)
    vals = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    senv = None
    for v in vals:
        for s in v.shape:
            if isinstance(s, torch.SymInt):
                senv = s.node.shape_env
                break
        if senv is not None:
            break
    return gm, vals, senv


def _torch_count(senv) -> int:
    """Distinct conditions among torch's guards and deferred runtime asserts.

    torch keeps a conjunction as one guard where symshape keeps one record per
    conjunct, so both are counted by conjunct."""
    if senv is None:
        return 0
    exprs = [g.expr for g in senv.guards]
    exprs += [ra.expr for v in senv.deferred_runtime_asserts.values() for ra in v]
    return len({c for e in exprs if e is not sympy.true for c in _conjuncts(e)})


def _candidates(tp, case, rng: random.Random, z3_models: int = 2) -> list[dict]:
    """Other size assignments to check, over the dims that stayed symbolic."""
    names = [n for n, v in case.hints.items() if v >= 2]
    if not names:
        return []
    h = case.hints
    cands = [{n: h[n] + 1 for n in names}, {n: 2 * h[n] for n in names}]
    if all(h[n] >= 3 for n in names):
        cands.append({n: h[n] - 1 for n in names})
    for _ in range(3):
        cands.append({n: max(2, rng.choice([h[n] - 1, h[n], h[n] + 1, h[n] + 2, 2 * h[n]])) for n in names})
    if tp is not None and z3_models:
        cands.extend(_z3_points(tp, names, h, z3_models))
    seen, out = set(), []
    for c in cands:
        key = tuple(c[n] for n in names)
        if key not in seen and any(c[n] != h[n] for n in names):
            seen.add(key)
            out.append(c)
    return out


def _z3_points(tp, names, hints, count) -> list[dict]:
    """Sizes symshape's guards accept, as far from the example as Z3 finds (each dim in [2, 3*hint])."""
    import z3
    from validation.z3_translate import Z3Translator, UntranslatableExpression
    tr = Z3Translator()
    s = z3.Solver()
    s.set("timeout", 2000)
    syms = {n: tp.env.symbols[n] for n in names if n in tp.env.symbols}
    try:
        for g in list(tp.env.constraints) + list(tp.env.records):
            if g.expr.free_symbols <= set(syms.values()):
                s.add(tr.to_z3(g.expr))
    except UntranslatableExpression:
        return []
    zs = {n: tr.var(sym) for n, sym in syms.items()}
    for n, v in zs.items():
        s.add(v >= 2, v <= 3 * hints[n] + 4)
    out = []
    # First as many dims as possible moved, then anything else that differs.
    for cond in (z3.And(*[v != hints[n] for n, v in zs.items()]), z3.Or(*[v != hints[n] for n, v in zs.items()])):
        while len(out) < count:
            s.push()
            s.add(cond)
            for p in out:
                s.add(z3.Or(*[zs[n] != p[n] for n in zs]))
            ok = s.check() == z3.sat
            m = s.model() if ok else None
            s.pop()
            if not ok:
                break
            out.append({n: m.eval(v, model_completion=True).as_long() for n, v in zs.items()})
    return out


def _eval_shape(shape, subs, unbacked):
    """Sizes at ``subs``; a data-dependent size (unbacked symbol) is ``None``, which matches anything."""
    out = []
    for e in shape:
        e = sympy.sympify(e)
        if e.free_symbols & unbacked:
            out.append(None)
            continue
        v = e.xreplace(subs)
        if not v.is_Integer:
            v = sympy.simplify(v)
        out.append(int(v) if v.is_Integer else str(v))
    return tuple(out)


def _same_shapes(got, want) -> bool:
    return len(got) == len(want) and all(
        len(g) == len(w) and all(a is None or a == b for a, b in zip(g, w)) for g, w in zip(got, want))


def run_case(op, index, sample, *, timeout: Optional[float] = 30, seed: int = 0,
             z3_models: int = 2) -> Optional[SampleResult]:
    """Trace one sample with symshape and make_fx and check both against eager.

    Returns None when eager itself fails on the sample (nothing to compare).
    """
    import shapes
    case = _Case(op, sample)
    ok, eager_shapes = _eager(case, case.inputs)
    if not ok:
        return None
    res = SampleResult(op_name(op), index, [str(s) for s in case.specs])
    tp = None
    t0 = time.perf_counter()
    try:
        with time_limit(timeout or None), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tp = shapes.trace(case, *case.specs, dims=dict(case.hints), translation_validation=False)
        res.sym_guards, res.sym_size_one_guards = _symshape_count(tp)
    except (Exception, TraceTimeout) as e:  # noqa: BLE001 - every failure is a figure of the table
        res.sym_status, res.sym_error = type(e).__name__, _first_line(e)
    t1 = time.perf_counter()
    senv = vals = None
    try:
        _, vals, senv = _torch_trace(case, timeout)
        res.torch_guards = _torch_count(senv)
    except (Exception, TraceTimeout) as e:  # noqa: BLE001 - a timeout too is a figure of the table
        res.torch_status, res.torch_error = type(e).__name__, _first_line(e)
    res.sym_s, res.torch_s = t1 - t0, time.perf_counter() - t1
    if tp is None:
        return res

    syms = tp.env.symbols
    unbacked = set(tp.env.unbacked)
    torch_code = []

    def torch_accepts(ts):
        if senv is None:
            return True
        if not torch_code:
            torch_code.append(senv.produce_guards_expression(vals, ignore_static=True))
        code = torch_code[0]
        return True if not code else bool(senv.evaluate_guards_expression(code, ts))

    def check(sizes, ts, eager):
        subs = {syms[n]: sympy.Integer(v) for n, v in sizes.items() if n in syms}
        res.points += 1
        ok, shapes_or_err = eager
        if ok:
            got = [_eval_shape(s, subs, unbacked) for s in tp.output_shapes]
            if not _same_shapes(got, shapes_or_err):
                res.wrong.append((dict(sizes), f"symshape {got}, eager {shapes_or_err}"))
        elif res.torch_ok and not torch_accepts(ts):
            res.unsound.append((dict(sizes), shapes_or_err))
        else:
            res.both_accept_eager_fails += 1
            if len(res.both_accept_errors) < 3:
                res.both_accept_errors.append((dict(sizes), shapes_or_err))

    check(dict(case.hints), case.inputs, (True, eager_shapes))
    gen = torch.Generator().manual_seed(seed)
    for sizes in _candidates(tp, case, random.Random(seed + index), z3_models):
        full = dict(case.hints)
        full.update(sizes)
        if tp.failing_guards({n: v for n, v in full.items() if n in syms}):
            continue
        ts = case.inputs_at(full, gen)
        check(full, ts, _eager(case, ts))
    return res


def run_op(name: str, samples: int = 3, **kw) -> list[SampleResult]:
    """Results for one OpInfo by name (``"nn.functional.conv1d"``)."""
    out = []
    for op, i, s in corpus([name], samples):
        r = run_case(op, i, s, **kw)
        if r is not None:
            out.append(r)
    return out


def run_corpus(ops: Optional[Iterable[str]] = None, samples: int = 3, progress=None, **kw) -> list[SampleResult]:
    out = []
    for op, i, s in corpus(ops, samples):
        r = run_case(op, i, s, **kw)
        if r is not None:
            out.append(r)
            if progress:
                progress(r)
    return out


@dataclass
class Summary:
    samples: int
    sym_ok: int
    torch_ok: int
    wrong: int
    unsound: int
    guards_le: int
    both_ok: int
    both_accept_eager_fails: int
    size_one_guards: int = 0

    @property
    def sym_pct(self) -> float:
        return 100.0 * self.sym_ok / max(self.samples, 1)

    @property
    def torch_pct(self) -> float:
        return 100.0 * self.torch_ok / max(self.samples, 1)

    @property
    def guards_le_pct(self) -> float:
        return 100.0 * self.guards_le / max(self.both_ok, 1)


def summarize(results: list[SampleResult]) -> Summary:
    both = [r for r in results if r.sym_ok and r.torch_ok]
    return Summary(
        samples=len(results), sym_ok=sum(r.sym_ok for r in results), torch_ok=sum(r.torch_ok for r in results),
        wrong=sum(1 for r in results if r.wrong), unsound=sum(1 for r in results if r.unsound),
        guards_le=sum(1 for r in both if r.sym_guards <= r.torch_guards), both_ok=len(both),
        both_accept_eager_fails=sum(r.both_accept_eager_fails for r in results),
        size_one_guards=sum(r.sym_size_one_guards for r in both),
    )


def table(results: list[SampleResult]) -> str:
    s = summarize(results)
    rows = [
        ("samples", str(s.samples)),
        ("symshape traces", f"{s.sym_ok} ({s.sym_pct:.1f}%)"),
        ("make_fx traces", f"{s.torch_ok} ({s.torch_pct:.1f}%)"),
        ("wrong output shapes (samples)", str(s.wrong)),
        ("unsound accepts (samples)", str(s.unsound)),
        ("guards <= torch's", f"{s.guards_le}/{s.both_ok} ({s.guards_le_pct:.1f}%)"),
        ("  size-1 guards torch assumes, apart", str(s.size_one_guards)),
        ("sizes both accept, eager fails", str(s.both_accept_eager_fails)),
        ("size points checked", str(sum(r.points for r in results))),
    ]
    w = max(len(a) for a, _ in rows)
    return "\n".join(f"{a:<{w}}  {b}" for a, b in rows)
