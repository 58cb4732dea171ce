"""Symbolic bounds on the *values* of integer index tensors.

Shapes alone cannot say that ``wpe(torch.arange(T))`` fails once ``T``
exceeds the embedding's rows: the failure is an out-of-range index.  The
tracer therefore tracks, for integer tensors built from ``arange`` (or
constants), a symbolic interval of their values through views, arithmetic
with constants, ``clamp`` and ``cat``, and turns each op that indexes by a
tensor into runtime asserts that the indices are in range, with the user
line of the op.  A violated bound at the example sizes raises like eager.

Each op admits its own range (checked against eager): ``index_select``,
``embedding``, ``gather``, ``scatter*``, ``index_add`` and ``index_copy``
need ``0 <= i < n``; advanced indexing (``x[idx]``, ``index_put``),
``index_fill``, ``take`` and ``put`` also admit ``-n <= i < 0``.

An interval is *exact* when both ends are values the tensor holds (if it
holds any): only then is "the end is in range" the same condition as "every
index is in range", so only exact intervals become asserts.  A loose
interval (``a + b`` of two index tensors, a slice) is a sufficient
condition only: it becomes a *guard* (the trace covers the sizes where it
holds) and where it fails at the example sizes the trace stops with a
:class:`~shapes.errors.TracerLimitation`, since eager may or may not fail
there.  An index tensor whose values the sizes determine (built from
``arange``, ``ones``, constants ...; see :func:`determines_values`) but
whose range the engine cannot follow (``cumsum``, an in-place
shift, T5's log buckets) has no condition to state: the trace keeps a note
(``TracedProgram.unchecked_indices``) and dinfer reports the sizes it covers
as symshape's limitation, never as ok.  Only an index tensor read from data
(an input, a parameter) checks nothing: its values are not a question of sizes.

Positions that models compute from data (``cumsum`` of an attention mask
made by ``torch.ones`` or by ``input_ids.ne(pad)``, then an embedding) get
exact ranges too.  A comparison of an input with a constant (``ne``/``eq``)
is a *data source*: each element is 0 or 1 independently of the others, so
an interval is attained *for some data*: its ``hi`` at the data where every
element of the source is 1, its ``lo`` where every element is 0.  Ops that
keep this are monotone in the source (views, ``+ c``, ``cumsum``,
products of non-negative ranges); a binary op keeps it only if one operand
is *uniform* (every element is at the end at once, as a mask is) and the
sources agree.  The assert from such a range says: the program indexes out
of range for some data at these sizes (eager raises there for that data).

Integer-valued *float* tensors (``torch.ones(B, T)`` is float) are tracked
through ops that are exact on integers below ``2**bits`` (the dtype's
mantissa) and monotone; their asserts are made only for lookups into at
most ``2**(bits-2)`` entries, where rounding cannot change the verdict.

Example::

    >>> import sympy
    >>> from shapes.index_bounds import IndexRange, lookup_conditions
    >>> n = sympy.Symbol("n", integer=True)
    >>> [str(c) for c in lookup_conditions(IndexRange(n - 2, n + 1, True), n, "zero")]
    ['n - 2 >= 0', 'n + 1 < n']
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import sympy
import torch

from .enums import TextEnum
from .printers import to_python

aten = torch.ops.aten


@dataclass(frozen=True)
class IndexRange:
    """Values of an integer tensor lie in ``[lo, hi]``.

    ``exact``: both ends are attained (if the tensor holds any value): for
    every data when ``source`` is None, else for some values of the data
    source ``source`` (see the module docstring).  ``uniform``: where an end
    is attained, every element holds it.  ``bits``: the values passed
    through a float dtype whose integers are exact below ``2**bits``.

    >>> IndexRange(sympy.Integer(1), sympy.Integer(1)).is_uniform
    True
    """

    lo: sympy.Expr
    hi: sympy.Expr
    exact: bool = True
    uniform: bool = False
    source: Optional[int] = None
    bits: Optional[int] = None

    @property
    def is_uniform(self) -> bool:
        return self.uniform or (self.exact and self.lo == self.hi)


# Ops whose output holds exactly the values of input 0 (when non-empty).
_SAME_VALUES = {
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.unsqueeze.default,
    aten.squeeze.dim, aten.squeeze.default, aten.squeeze.dims, aten.expand.default,
    aten.permute.default, aten.transpose.int, aten.t.default, aten.clone.default,
    aten.alias.default, aten.detach.default, aten._to_copy.default, aten.contiguous.default,
    aten.repeat.default, aten.flatten.using_ints, aten.lift_fresh.default, aten.lift_fresh_copy.default,
    aten.view_copy.default, aten.expand_copy.default, aten.permute_copy.default,
    aten.flip.default, aten.roll.default,  # the same values in another order
}
# Ops whose output holds some of input 0's values.
_SUBSET = {aten.slice.Tensor, aten.select.int, aten.narrow.default, aten.diagonal.default}
# Reductions whose values are some of the input's.
_REDUCE_SUBSET = {aten.max.default, aten.min.default, aten.amax.default, aten.amin.default}
# Factories of a tensor filled with one value: (index of the fill value or None for the op's own).
_FILLS = {
    aten.ones.default: 1, aten.zeros.default: 0, aten.ones_like.default: 1, aten.zeros_like.default: 0,
    aten.new_ones.default: 1, aten.new_zeros.default: 0, aten.full.default: ("arg", 1),
    aten.full_like.default: ("arg", 1), aten.new_full.default: ("arg", 2),
    aten.scalar_tensor.default: ("arg", 0),
}
# Comparisons whose result, on data the program does not constrain, is 0 or 1 in each element.
_DATA_TESTS = {aten.ne.Scalar, aten.eq.Scalar}
# Ops allowed on float-valued ranges: exact on integers below 2**bits, monotone.
_FLOAT_OK = _SAME_VALUES | {aten.cumsum.default, aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor,
                            aten.slice.Tensor} | set(_FILLS)
_MANTISSA = {torch.float16: 11, torch.bfloat16: 8, torch.float32: 24, torch.float64: 53}


def _e(x):
    if isinstance(x, torch.SymInt):
        return x.node.expr
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return sympy.Integer(x)
    if isinstance(x, float) and x.is_integer():
        return sympy.Integer(int(x))
    return None


def written_tensors(func, args, kwargs) -> list:
    """The tensor arguments ``func`` writes into (in-place or ``out=``).

    >>> x = torch.zeros(2)
    >>> written_tensors(aten.add_.Tensor, (x, 1), {})[0] is x
    True
    """
    try:
        schema_args = func._schema.arguments
    except AttributeError:
        return []
    out = []
    for i, a in enumerate(schema_args):
        if a.alias_info is None or not a.alias_info.is_write:
            continue
        t = args[i] if i < len(args) else kwargs.get(a.name)
        ts = t if isinstance(t, (list, tuple)) else [t]
        out.extend(x for x in ts if isinstance(x, torch.Tensor))
    return out


def constant_range(t: torch.Tensor) -> Optional[IndexRange]:
    """The exact range of a real integer tensor's values (a constant of the program)."""
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype is torch.bool or t.numel() == 0:
        return None
    if t.device.type == "meta":
        return None
    return IndexRange(sympy.Integer(int(t.min())), sympy.Integer(int(t.max())), True)


def _nonneg(e) -> bool:
    return bool(e.is_nonnegative)


def _with_bits(r: Optional[IndexRange], out_dtype, c=None) -> Optional[IndexRange]:
    """``r`` for an output of ``out_dtype``: float outputs narrow ``bits``; constants must stay small."""
    if r is None or out_dtype is None:
        return r
    m = _MANTISSA.get(out_dtype)
    bits = r.bits if m is None else min(m, r.bits or m)
    if bits is not None and c is not None and not (c.is_Integer and abs(c) <= 2 ** (bits - 2)):
        return None
    return IndexRange(r.lo, r.hi, r.exact, r.uniform, r.source, bits)


def _combine(a: IndexRange, b: IndexRange, lo, hi, nonempty) -> IndexRange:
    """The range of a monotone binary op of ``a`` and ``b`` with ends ``lo``, ``hi``."""
    sources_agree = a.source is None or b.source is None or a.source == b.source
    exact = (a.exact and b.exact and sources_agree and (a.is_uniform or b.is_uniform) and nonempty)
    bits = min([x for x in (a.bits, b.bits) if x is not None], default=None)
    return IndexRange(lo, hi, exact, exact and a.is_uniform and b.is_uniform, a.source or b.source, bits)


def _loosen(r: IndexRange, lo=None, hi=None) -> IndexRange:
    return IndexRange(r.lo if lo is None else lo, r.hi if hi is None else hi, False, False, None, r.bits)


def _sum(args, kwargs, b0: IndexRange) -> Optional[IndexRange]:
    """A count: the sum of ``n`` values in ``[0, 1]`` lies in ``[n*lo, n*hi]`` (Flaubert's
    ``(ids != pad).sum(1)`` is at most T).  Only counts, summed in int64: they never
    overflow (``n`` is at most a tensor's numel), where other sums may wrap around."""
    x = args[0]
    if b0.bits is not None or x.dtype.is_floating_point or x.dtype.is_complex:
        return None
    if kwargs.get("dtype") not in (None, torch.int64) or not (b0.lo.is_Integer and b0.hi.is_Integer
                                                              and 0 <= b0.lo <= b0.hi <= 1):
        return None
    dims = args[1] if len(args) > 1 else None
    if dims is None or (isinstance(dims, (list, tuple)) and not dims):
        dims = range(x.dim())
    n = sympy.Integer(1)
    for d in dims:
        size = _e(x.shape[d % max(x.dim(), 1)]) if x.dim() else sympy.Integer(1)
        if size is None:
            return None
        n = n * size
    return IndexRange(n * b0.lo, n * b0.hi, False)


def _fill(func, args, kwargs) -> Optional[IndexRange]:
    spec = _FILLS[func]
    v = _e(args[spec[1]] if spec[1] < len(args) else kwargs.get("fill_value")) if isinstance(spec, tuple) \
        else sympy.Integer(spec)
    if v is None:
        return None
    return IndexRange(v, v, True, True)


def _cumsum(args, b0: IndexRange) -> Optional[IndexRange]:
    x, dim = args[0], args[1]
    if not isinstance(dim, int) or x.dim() == 0:
        return None
    n = _e(x.shape[dim % x.dim()])
    if not (b0.lo.is_number and b0.hi.is_number):
        return None
    # The k-th partial sum lies in [k*lo, k*hi] for k = 1..n.
    lo = b0.lo if _nonneg(b0.lo) else n * b0.lo
    hi = n * b0.hi if _nonneg(b0.hi) else b0.hi
    # Exact when every element is at the end at once (a mask of ones, at the data where it is).
    return IndexRange(lo, hi, b0.exact and b0.is_uniform, False, b0.source, b0.bits)


def output_bounds(func, args, kwargs, bounds_of, nonempty=lambda t: False, out_dtype=None,
                  is_free=lambda t: False) -> Optional[IndexRange]:
    """The :class:`IndexRange` of ``func``'s integer-valued output, or None if unknown.

    ``nonempty(t)``: the tensor ``t`` is known to hold at least one value.
    ``is_free(t)``: ``t`` holds data the program does not constrain (an input).

    >>> output_bounds(aten.ones.default, ([3],), {}, lambda t: None)
    IndexRange(lo=1, hi=1, exact=True, uniform=True, source=None, bits=None)
    """
    r = _output_bounds(func, args, kwargs, bounds_of, nonempty, is_free)
    if out_dtype is not None and (out_dtype.is_floating_point or func in _FILLS):
        if out_dtype.is_complex or (out_dtype.is_floating_point and func not in _FLOAT_OK):
            return None
        c = None
        if func in (aten.add.Tensor, aten.sub.Tensor) and len(args) > 1 and not isinstance(args[1], torch.Tensor):
            c = _e(args[1])
        elif func in _FILLS and r is not None:
            c = r.hi
        r = _with_bits(r, out_dtype, c)
        if r is not None and r.bits is not None and func is aten.mul.Tensor:
            # Float products stay exact only by a 0/1 factor.
            f = [bounds_of(t) for t in args[:2] if isinstance(t, torch.Tensor)]
            if len(f) < 2 or not any(_nonneg(x.lo) and (x.hi - 1).is_nonpositive for x in f if x):
                return None
    return r


def _output_bounds(func, args, kwargs, bounds_of, nonempty, is_free) -> Optional[IndexRange]:
    if func in (aten.arange.default, aten.arange.start, aten.arange.start_step):
        return _arange(func, args, kwargs)
    if func in _FILLS:
        return _fill(func, args, kwargs)
    if func is aten.cat.default:
        return _cat(args, bounds_of, nonempty)
    if not args or not isinstance(args[0], torch.Tensor):
        return None
    if func in _DATA_TESTS and is_free(args[0]) and _holds_value(args[0].dtype, _e(args[1])):
        # Each element is 1 or 0 as the data is or is not the constant: a new data source.
        return IndexRange(sympy.Integer(0), sympy.Integer(1), True, True, source=_new_source())
    b0 = bounds_of(args[0])
    if b0 is None:
        if func is aten.clamp.default:
            # Whatever the input holds, min(max(x, lo), hi) lies in [min(lo, hi), hi] (not all of it).
            mn = _e(args[1]) if len(args) > 1 and args[1] is not None else _e(kwargs.get("min"))
            mx = _e(args[2]) if len(args) > 2 and args[2] is not None else _e(kwargs.get("max"))
            if mn is not None and mx is not None:
                return IndexRange(sympy.Min(mn, mx), mx, False)
        return None
    if func in _SAME_VALUES:
        return b0
    if func is aten.slice.Tensor and _whole_slice(args):
        return b0
    if func in _SUBSET or func in _REDUCE_SUBSET:
        return _loosen(b0)
    if func in (aten.sum.default, aten.sum.dim_IntList):
        return _sum(args, kwargs, b0)
    if func is aten.cumsum.default:
        return _cumsum(args, b0)
    if func in (aten.add.Tensor, aten.sub.Tensor) and len(args) >= 2:
        return _add_sub(func, args, kwargs, b0, bounds_of, nonempty)
    if func is aten.rsub.Scalar and len(args) >= 2:
        c = _e(args[1])
        if c is None or kwargs.get("alpha", 1) != 1:
            return None
        # Decreasing in the data: ends of a data source are no longer attained together.
        return IndexRange(c - b0.hi, c - b0.lo, b0.exact and b0.source is None, b0.uniform, None, b0.bits)
    if func is aten.neg.default:
        return IndexRange(-b0.hi, -b0.lo, b0.exact and b0.source is None, b0.uniform, None, b0.bits)
    if func is aten.mul.Tensor and len(args) >= 2:
        return _mul(args, b0, bounds_of, nonempty)
    if func in (aten.clamp.default, aten.clamp_min.default, aten.clamp_max.default):
        return _clamp(func, args, kwargs, b0)
    return None


def _arange(func, args, kwargs) -> Optional[IndexRange]:
    dtype = kwargs.get("dtype")
    if dtype is not None and dtype.is_floating_point:
        return None
    if func is aten.arange.default:
        start, end, step = sympy.Integer(0), _e(args[0]), sympy.Integer(1)
    else:
        start, end = _e(args[0]), _e(args[1])
        step = _e(args[2]) if len(args) > 2 else _e(kwargs.get("step", 1))
    if start is None or end is None or step is None or not (step.is_Integer and step > 0):
        return None
    # The last value is the largest start + k*step below end.
    from .functions import FloorDiv
    hi = end - 1 if step == 1 else start + step * FloorDiv(end - start - 1, step)
    return IndexRange(start, hi, True)


def _cat(args, bounds_of, nonempty) -> Optional[IndexRange]:
    ts = [t for t in args[0] if isinstance(t, torch.Tensor)]
    bs = [bounds_of(t) for t in ts]
    if not ts or any(b is None for b in bs):
        return None
    exact = all(b.exact and b.source is None for b in bs) and all(nonempty(t) for t in ts)
    bits = min([b.bits for b in bs if b.bits is not None], default=None)
    return IndexRange(sympy.Min(*[b.lo for b in bs]), sympy.Max(*[b.hi for b in bs]), exact, bits=bits)


def _add_sub(func, args, kwargs, b0, bounds_of, nonempty) -> Optional[IndexRange]:
    b = args[1]
    alpha = kwargs.get("alpha", 1)
    if alpha != 1:
        return None
    if isinstance(b, torch.Tensor):
        bb = bounds_of(b)
        if bb is None:
            return None
        if func is aten.add.Tensor:
            return _combine(b0, bb, b0.lo + bb.lo, b0.hi + bb.hi, nonempty(args[0]) and nonempty(b))
        return _loosen(b0, b0.lo - bb.hi, b0.hi - bb.lo)
    c = _e(b)
    if c is None:
        return None
    return IndexRange(b0.lo + c, b0.hi + c, b0.exact, b0.uniform, b0.source, b0.bits) \
        if func is aten.add.Tensor else IndexRange(b0.lo - c, b0.hi - c, b0.exact, b0.uniform, b0.source, b0.bits)


def _mul(args, b0, bounds_of, nonempty) -> Optional[IndexRange]:
    if isinstance(args[1], torch.Tensor):
        bb = bounds_of(args[1])
        if bb is None:
            return None
        if _nonneg(b0.lo) and _nonneg(bb.lo):
            return _combine(b0, bb, b0.lo * bb.lo, b0.hi * bb.hi, nonempty(args[0]) and nonempty(args[1]))
        return None
    c = _e(args[1])
    if c is None or not c.is_Integer:
        return None
    if c >= 0:
        return IndexRange(c * b0.lo, c * b0.hi, b0.exact, b0.uniform, b0.source, b0.bits)
    return IndexRange(c * b0.hi, c * b0.lo, b0.exact and b0.source is None, b0.uniform, None, b0.bits)


def _clamp(func, args, kwargs, b0) -> Optional[IndexRange]:
    if func is aten.clamp.default:
        mn = args[1] if len(args) > 1 else kwargs.get("min")
        mx = args[2] if len(args) > 2 else kwargs.get("max")
    elif func is aten.clamp_min.default:
        mn, mx = args[1], None
    else:
        mn, mx = None, args[1]
    lo, hi = b0.lo, b0.hi
    for v, f in ((mn, sympy.Max), (mx, sympy.Min)):
        if v is None:
            continue
        c = _e(v)
        if c is None:
            return None
        lo, hi = f(lo, c), f(hi, c)
    # Clamping maps the smallest value to the smallest: ends stay attained.
    return IndexRange(lo, hi, b0.exact, b0.uniform, b0.source, b0.bits)


def _holds_value(dtype, c) -> bool:
    """Whether an element of ``dtype`` can equal the integer ``c`` (so ``x == c`` can be 1 or 0)."""
    if c is None:
        return False
    if dtype is torch.bool:
        return c in (0, 1)
    if dtype.is_floating_point:
        return abs(c) <= 2 ** _MANTISSA.get(dtype, 8)
    if dtype.is_complex:
        return False
    info = torch.iinfo(dtype)
    return info.min <= c <= info.max


def _whole_slice(args) -> bool:
    """``x[a:b]`` that keeps every element along its dim (``x[:, 0:]``)."""
    start = args[2] if len(args) > 2 else 0
    end = args[3] if len(args) > 3 else None
    step = args[4] if len(args) > 4 else 1
    return start in (0, None) and step == 1 and (end is None or (isinstance(end, int) and end >= 2 ** 62))


def keeps_free(func) -> bool:
    """Whether ``func``'s output holds unconstrained data when input 0 does (a view of it).

    >>> keeps_free(aten.view.default), keeps_free(aten._to_copy.default)
    (True, False)
    """
    return (func in _SAME_VALUES or func in _SUBSET) and func is not aten._to_copy.default


def declared_range(lo: int, hi: int) -> IndexRange:
    """The range of an input whose spec declares its values ``in lo..hi``: a data source.

    >>> declared_range(0, 1).hi
    1
    """
    return IndexRange(sympy.Integer(lo), sympy.Integer(hi), True, True, source=_new_source())


_SOURCES = [0]


def _new_source() -> int:
    _SOURCES[0] += 1
    return _SOURCES[0]


def lookup_conditions(r: IndexRange, n, lower: str):
    """[lo >= lower bound, hi < n] for indices in ``r`` into a dim of size ``n``."""
    lb = sympy.Integer(0) if lower == "zero" else -n
    return [sympy.Ge(r.lo, lb, evaluate=False), sympy.Lt(r.hi, n, evaluate=False)]


# packet name -> (self arg, dim arg or None for flat indexing, index arg, lower bound, exception)
_LOOKUPS = {
    "embedding": (0, "rows", 1, "zero", IndexError),
    "index_select": (0, 1, 2, "zero", IndexError),
    "gather": (0, 1, 2, "zero", RuntimeError),
    "scatter": (0, 1, 2, "zero", RuntimeError),
    "scatter_": (0, 1, 2, "zero", RuntimeError),
    "scatter_add": (0, 1, 2, "zero", RuntimeError),
    "scatter_add_": (0, 1, 2, "zero", RuntimeError),
    "scatter_reduce": (0, 1, 2, "zero", RuntimeError),
    "scatter_reduce_": (0, 1, 2, "zero", RuntimeError),
    "index_add": (0, 1, 2, "zero", RuntimeError),
    "index_add_": (0, 1, 2, "zero", RuntimeError),
    "index_copy": (0, 1, 2, "zero", IndexError),
    "index_copy_": (0, 1, 2, "zero", IndexError),
    "index_fill": (0, 1, 2, "negative", IndexError),
    "index_fill_": (0, 1, 2, "negative", IndexError),
    "take": (0, None, 1, "negative", IndexError),
    "put": (0, None, 1, "negative", IndexError),
    "put_": (0, None, 1, "negative", IndexError),
}
_ADVANCED = {"index", "index_put", "index_put_", "_index_put_impl_", "_unsafe_index"}


def _numel(t):
    n = sympy.Integer(1)
    for s in t.shape:
        n = n * _e(s)
    return n


def lookups(func, args):
    """[(index tensor, index range source, dim size n, lower, exception, what)] this op checks."""
    try:
        name = func.overloadpacket.__name__
    except AttributeError:
        return []
    out = []
    if name in _ADVANCED:
        x, indices = args[0], args[1]
        if not isinstance(x, torch.Tensor) or not isinstance(indices, (list, tuple)):
            return []
        d = 0
        for ix in indices:
            if ix is None:
                d += 1
                continue
            if ix.dtype in (torch.bool, torch.uint8):
                d += ix.dim()
                continue
            if d < x.dim():
                out.append((ix, _e(x.shape[d]), "negative", IndexError, f"dimension {d}"))
            d += 1
        return out
    spec = _LOOKUPS.get(name)
    if spec is None or len(args) <= spec[2]:
        return []
    si, di, ii, lower, exc = spec
    x, idx = args[si], args[ii]
    if not isinstance(x, torch.Tensor) or not isinstance(idx, torch.Tensor):
        return []
    if di == "rows":
        return [(idx, _e(x.shape[0]), lower, exc, "the embedding's rows")]
    if di is None:
        return [(idx, _numel(x), lower, exc, "the elements")]
    if x.dim() == 0:
        return []
    dim = args[di] if isinstance(args[di], int) else None
    if dim is None:
        return []
    dim = dim % x.dim()
    return [(idx, _e(x.shape[dim]), lower, exc, f"dimension {dim}")]


def _eager_message(name: str, v, n, what: str) -> str:
    """The message eager raises for an index out of range (with symbolic values)."""
    v, n = to_python(v), to_python(n)
    if name in ("embedding", "index_select"):
        return "index out of range in self"
    if name in ("take", "put", "put_"):
        return f"out of range: tried to access index {v} on a tensor of {n} elements."
    if name.startswith("index_copy"):
        return f"index_copy_(): index {v} is out of bounds for {what} with size {n}"
    return f"index {v} is out of bounds for {what} with size {n}"


class CheckKind(TextEnum):
    """How an :class:`IndexCheck` is kept.

    ``ASSERT``: exact range, the condition is eager's own check; ``GUARD``:
    loose range, the condition suffices, so the trace covers the sizes where it
    holds; ``UNKNOWN``: values the sizes determine but the engine cannot bound
    (``condition`` is None; the trace notes it).
    """

    ASSERT = "assert"
    GUARD = "guard"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class IndexCheck:
    """One check an op that indexes by a tensor needs (see :class:`CheckKind` for ``kind``)."""

    condition: Optional[sympy.Basic]
    message: str
    exception: type
    kind: CheckKind


_CREATES_GARBAGE = {aten.empty.memory_format, aten.empty_strided.default, aten.empty_like.default,
                    aten.new_empty.default, aten.new_empty_strided.default}


def determines_values(func, tensor_args, all_determined: bool) -> bool:
    """Whether ``func``'s outputs hold values the sizes and constants determine.

    True for a deterministic op all of whose tensor arguments do
    (``all_determined``); creation ops without tensor arguments do, except
    the random ones and ``empty`` (whatever memory held).

    >>> determines_values(aten.arange.default, [], True), determines_values(aten.randn.default, [], True)
    (True, False)
    """
    if torch.Tag.nondeterministic_seeded in getattr(func, "tags", ()) or func in _CREATES_GARBAGE:
        return False
    return all_determined if tensor_args else True


def lookup_checks(func, args, bounds_of, nonempty=lambda t: False, determined=lambda t: False):
    """The :class:`IndexCheck` s ``func`` needs for its indices to be in range.

    An index tensor that may be empty checks nothing then, as in eager.  An
    index tensor read from data (not ``determined``) with no known range
    checks nothing: what it holds is not a question of sizes.
    """
    out = []
    name = getattr(getattr(func, "overloadpacket", None), "__name__", str(func))
    for idx, n, lower, exc, what in lookups(func, args):
        if n is None:
            continue
        r = bounds_of(idx)
        least = "0" if lower == "zero" else to_python(-n)
        admits = f"{name} admits indices from {least} to {to_python(n - 1)}"
        if r is not None and r.bits is not None and not (n.is_Integer and n <= 2 ** (r.bits - 2)):
            r = None  # rounding in a float dtype could decide: eager's kernel does, at run time
        if r is None:
            if determined(idx):
                out.append(IndexCheck(condition=None, message=f"the values of the index tensor of {name} follow from "
                                      f"the sizes, but symshape cannot bound them ({admits})",
                                      exception=exc, kind=CheckKind.UNKNOWN))
            continue
        if not r.exact and not determined(idx):
            continue  # a bound on values read from data: what eager does there is not a question of sizes
        empty = None if nonempty(idx) else sympy.Eq(_numel(idx), 0)
        lo_c, hi_c = lookup_conditions(r, n, lower)
        for c, v in ((lo_c, r.lo), (hi_c, r.hi)):
            cond = c if empty is None else sympy.Or(empty, c)
            if r.exact:
                msg = _eager_message(name, v, n, what) + f" ({admits})"
                if r.source is not None:
                    msg += f"; the indices are computed from the program's data and reach {to_python(v)} for some data"
                out.append(IndexCheck(condition=cond, message=msg, exception=exc, kind=CheckKind.ASSERT))
            else:
                msg = (f"symshape bounds the index values of {name} only loosely (from {to_python(r.lo)} to "
                       f"{to_python(r.hi)}); "
                       f"where that bound leaves {what} eager may or may not fail ({admits})")
                out.append(IndexCheck(condition=cond, message=msg, exception=exc, kind=CheckKind.GUARD))
    return out

