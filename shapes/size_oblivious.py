"""Size 1 is a size: which questions about ``== 1`` may be answered without a guard.

Under the default policy (``specialize_zero_one=False``) a backed dim keeps
1 (and 0, where its range allows it) inside its range.  Questions the
program asks about its sizes then fall in two groups:

* **semantic** questions change what the program computes: broadcasting a
  dim of size 1 against a dim of another size, ``squeeze``, ``expand``, a
  user branch on ``x.shape[0] == 1``.  They are decided by the example size
  and recorded as guards, as always.
* **layout-only** questions change how a result is laid out in memory (its
  strides, its memory format, whether a copy is made) or which of two
  equal-valued algorithms computes it, never its shape or its values.  They
  come from fixed places in torch: the contiguity and stride helpers of
  ``torch._prims_common`` (``is_contiguous``, ``should_swap``, ...), the
  C++ contiguity flags (``is_contiguous`` of a SymNode), torch's own
  ``guard_size_oblivious`` sites, and the steps of broadcasting that both
  branches settle the same way (see :func:`site_of`).

A layout-only question is answered *size-obliviously*: as it is answered at
every point where each size it mentions is at least 2 (the generic point),
with no guard.  The answer is a claim that translation validation checks
like every other decision (``facts and every size atom >= 2 imply the
answer``; the atoms are stored in ``env.oblivious_atoms``).  Why this is
safe at a point where some of those sizes are 1 (or 0): at such a point the
answer may differ from eager's, but the question is layout-only, so both
answers give tensors of equal shape and equal values: an index along a dim of
size 1 is always 0, so that dim's stride is never used to address an
element, and the broadcasting steps listed in :func:`site_of` are those whose
two branches assign the same size.  The trace therefore computes what eager
computes at every size, without recording a guard for it.

torch does this approximately: ``backed_size_oblivious`` answers every
``guard_or_false`` site by its default, including broadcasting, so a
program that broadcasts a size-1 batch is traced on the non-broadcast path
with a ``torch._check(B == S)`` that rejects sizes eager accepts.  Here only
the sites proven layout-only are answered without a guard; broadcasting
questions whose branches differ stay guards, so the accepted sizes are
exactly eager's.

Example::

    >>> import torch, shapes
    >>> tp = shapes.trace(lambda x: x.transpose(0, 1).contiguous() * 2, "x: f32[B, T]")
    >>> tp.guards                     # contiguity at B == 1 or T == 1 needs no guard
    []
    >>> tp.run(torch.ones(1, 3)).shape
    torch.Size([3, 1])
"""
from __future__ import annotations

import sys
from typing import Optional

import sympy
import torch

from .functions import FloorDiv, PyMod, ToFloat, TrueDiv
from .reasoner import Reasoner
from .value_ranges import UnsupportedExpression, ValueRange, bound

# Functions in torch whose questions only choose a layout or an equal-valued
# algorithm (module path suffix -> function names).
_LAYOUT_SITES = {
    "torch/_prims_common/__init__.py": frozenset({
        "check_contiguous_sizes_strides", "is_contiguous", "is_channels_last_contiguous_2d",
        "is_channels_last_contiguous_3d", "is_channels_last_contiguous", "is_contiguous_for_memory_format",
        "is_non_overlapping_and_dense", "_is_non_overlapping_and_dense_or_false",
        "compute_elementwise_output_logical_to_physical_perm", "should_swap", "compute_elementwise_output_strides",
        "suggest_memory_format", "are_strides_like_channels_last", "are_strides_like_channels_last_or_false",
        # ge: should_swap's stride comparison (a nested helper in recent torch), a layout choice too.
        "is_channels_last_strides_2d", "is_channels_last_strides_3d", "__lt__", "ge",
    }),
    # should_expand: expanding a tensor to its own shape is the identity.
    # _reshape_view_helper_core_alg: the result has the requested shape and the input's values.
    "torch/_refs/__init__.py": frozenset({"cat_compute_output_memory_format", "should_expand",
                                          "_reshape_view_helper_core_alg"}),
    # should_fold: mm on the folded batch or bmm, the same products and FLOPs.
    "torch/_decomp/decompositions.py": frozenset({"should_fold"}),
    # The collapsed dim's stride (a view's validity only gets easier with dims of size 1).
    "torch/_prims/__init__.py": frozenset({"_collapse_view_helper"}),
    "torch/_subclasses/fake_impls.py": frozenset({"_is_contiguous_with_hinted_checks"}),
}

# Frames between the question and the function that asked it.
_PASS_THROUGH_FILES = ("torch/fx/experimental/symbolic_shapes.py", "torch/fx/experimental/sym_node.py",
                       "torch/__init__.py")
_PASS_THROUGH_FUNCS = frozenset({"eval_eager", "maybe_guard_or_false", "maybe_guard_or_true", "<genexpr>",
                                 "<listcomp>", "<lambda>"})
_ENGINE_DIR = __file__.rsplit("/", 1)[0] + "/"


# Sites that decide whether a view exists.  A view found at the generic point
# exists wherever sizes are 1 too (dims of size 1 are skipped), but not the
# other way round: where the example point itself has a size 1 and the generic
# answer differs, the hint decides (a guard), so the trace never reports an
# error eager does not raise.
VIEW_SITES = frozenset({"_reshape_view_helper_core_alg", "_collapse_view_helper", "TensorUtils.cpp"})


def _expr(x):
    node = getattr(x, "node", None)
    if node is not None and hasattr(node, "expr"):
        return node.expr
    if isinstance(x, (int, sympy.Integer)) and not isinstance(x, bool):
        return sympy.Integer(x)
    return None


def _same(ctx: Reasoner, a, b) -> bool:
    if a is None or b is None:
        return False
    if a == b:
        return True
    return ctx.simplify(a - b) == 0


def _asking_frame():
    f = sys._getframe(2)
    depth = 0
    while f is not None and depth < 40:
        fn = f.f_code.co_filename.replace("\\", "/")
        if not (fn.startswith(_ENGINE_DIR) or fn.endswith(_PASS_THROUGH_FILES)
                or f.f_code.co_name in _PASS_THROUGH_FUNCS):
            return f, fn
        f = f.f_back
        depth += 1
    return None, ""


# C++ files whose questions only compute contiguity flags, or strides of a view
# (computeStride: a view found at the generic point is a view at every size,
# since it skips dims of size 1; reshape copies where no view exists).
_CPP_LAYOUT_FILES = ("c10/core/Contiguity.h", "c10/core/SymbolicShapeMeta.cpp", "aten/src/ATen/TensorUtils.cpp",
                     "c10/core/MemoryFormat.h")


def _copy_allowed(frame) -> bool:
    """Whether ``_collapse_view_helper`` (asked with ``must_be_valid=None``) falls
    back to a copy when no view exists: under ``flatten`` and ``reshape``.  Under
    ``view`` (``_reshape_view_helper_core_alg`` with ``allow_copy=False``) its
    caller raises "Cannot view a tensor ..." instead, so the question decides
    whether the program fails, and must follow eager at the example sizes.
    """
    caller = frame.f_back
    if caller is None or caller.f_code.co_name != "_reshape_view_helper_core_alg":
        return True
    return caller.f_locals.get("allow_copy") is True


def _group_norm_format(expr) -> bool:
    """Whether ``expr`` is a question of C++ ``group_norm``'s ``input.suggest_memory_format()``.

    That composite (called from ``torch.nn.functional.group_norm``) picks the memory format
    of the contiguous copy it hands ``native_group_norm``: MemoryFormat.h's channels-last
    stride test asks ``sizes[d] > 1`` and compares strides through SymInt.h's operators,
    which name no layout file.  The format chooses a layout only (on meta tensors not even
    that: the copy is made in the default format), never a value.  The composite's other
    questions are equalities (channels divisible by the groups, weight and bias sizes),
    semantic and left to guards; only strict comparisons asked under that function qualify.
    """
    if not isinstance(expr, (sympy.StrictGreaterThan, sympy.StrictLessThan)):
        return False
    frame, fn = _asking_frame()
    return frame is not None and frame.f_code.co_name == "group_norm" and fn.endswith("torch/nn/functional.py")


def site_of(ctx: Reasoner, expr, size_oblivious: bool = False, cpp_site: Optional[str] = None) -> Optional[str]:
    """Why the question ``expr`` being asked now is layout-only, or None (semantic).

    Layout-only: torch asked for a size-oblivious answer, the question is a
    C++ contiguity flag, or the asking function is in the layout list.  Two
    broadcasting helpers are layout-only for some questions, decided from
    their local variables:

    * ``torch._refs._broadcast_shapes`` merging size ``s`` into the common
      size ``c``: when ``s`` is 1, ``c`` is 1 or ``s == c``, every branch
      leaves the common size equal to ``c`` or ``s``, which are then equal
      wherever the question's answer matters.
    * ``torch._prims._broadcast_in_dim_meta``: the stride of a new dim, of
      an old dim of size 1, or of an old dim whose size equals its target
      size (a stride is all these questions choose).
    """
    if size_oblivious:
        return "guard_size_oblivious"
    if expr in ctx.layout_exprs:
        return "contiguity flag"
    if cpp_site:
        site = str(cpp_site).replace("\\", "/")
        if site.endswith(_CPP_LAYOUT_FILES):
            name = site.rsplit("/", 1)[-1]
            if name == "TensorUtils.cpp" and "view" not in (ctx.current_op() or ""):
                return "reshape"  # computeStride under reshape: a view or a copy, equal values
            return name
        # c10's SymInt.h re-asks, through guard_bool, the question a contiguity
        # computation just asked through guard_or_*: the same question, the same answer.
        if site.endswith("c10/core/SymInt.h") and expr in ctx.layout_answers:
            return "contiguity flag"
        if site.endswith("c10/core/SymInt.h") and _group_norm_format(expr):
            return "group_norm memory format"
        return None
    frame, fn = _asking_frame()
    if frame is None:
        return None
    name = frame.f_code.co_name
    loc = frame.f_locals
    for suffix, funcs in _LAYOUT_SITES.items():
        if fn.endswith(suffix) and name in funcs:
            if name == "ge" and isinstance(expr, sympy.Eq) and 0 in expr.args and not expr.has(PyMod, sympy.Mod):
                # ge(a, b) asks b == 0 before a % b == 0: answered as at sizes >= 2 where b is 0,
                # the next question would divide by zero.  Decided as usual (ranges or a guard).
                return None
            if name == "_reshape_view_helper_core_alg" and loc.get("allow_copy") is True:
                return "reshape"  # a view or a copy: equal values either way
            if name == "_collapse_view_helper" and loc.get("must_be_valid") is None and _copy_allowed(frame):
                return "reshape"  # no view means a copy, not an error
            return name
    if name == "_broadcast_shapes" and fn.endswith("torch/_refs/__init__.py"):
        try:
            s, c = _expr(loc["shape"][loc["idx"]]), _expr(loc["common_shape"][loc["idx"]])
        except (KeyError, IndexError, TypeError):
            return None
        if s is not None and c is not None and (s == 1 or c == 1 or _same(ctx, s, c)):
            return name
        return None
    if name == "_broadcast_in_dim_meta" and fn.endswith("torch/_prims/__init__.py"):
        try:
            idx, dims, a, shape = loc["idx"], loc["broadcast_dimensions"], loc["a"], loc["shape"]
            if idx not in dims:
                return name
            old = _expr(a.shape[loc["original_idx"]])
            if old == 1 or _same(ctx, old, _expr(shape[idx])):
                return name
        except (KeyError, IndexError, TypeError, AttributeError):
            return None
    return None


def size_atoms(expr, ranges) -> tuple:
    """The sizes a question mentions: maximal non-negative sums, symbols and
    quotients, found through products, powers, ``%``, ``min``/``max`` and
    relations.

    >>> B, T = sympy.symbols("B T", integer=True)
    >>> q = sympy.Ne(8 * B * (FloorDiv(T - 1, 2) + 1), 8)
    >>> sorted(map(str, size_atoms(q, {B: ValueRange(1, 9), T: ValueRange(1, 9)})))
    ['((T - 1)//2) + 1', 'B']
    """
    out: dict = {}

    def walk(e):
        if e.is_number or e in (sympy.true, sympy.false):
            return
        if isinstance(e, (sympy.Rel, sympy.And, sympy.Or, sympy.Not, sympy.Mul, sympy.Min, sympy.Max, PyMod)):
            for a in e.args:
                walk(a)
            return
        if isinstance(e, sympy.Pow):
            walk(e.base)
            return
        if isinstance(e, (ToFloat, TrueDiv)):
            return  # not a size
        if e.is_Symbol or e.is_Add or isinstance(e, FloorDiv):
            try:
                r = bound(e, ranges)
            except UnsupportedExpression:
                return
            if r.lower >= 0 and r.upper >= 2:
                out[e] = None
    walk(expr)
    return tuple(out)


# The i-th generic size of a question.  The same symbols serve every question:
# sympy caches what it derives about an expression (assumptions, evaluated
# relations), and fresh symbols per question made each one new to it.  They
# stand for nothing outside one decide_generic call (their ranges are passed
# in with it), and never appear in a logged step or a result.
_GENERIC_SIZES: list = []


def _generic_size(i: int) -> sympy.Dummy:
    while len(_GENERIC_SIZES) <= i:
        _GENERIC_SIZES.append(sympy.Dummy(f"size{len(_GENERIC_SIZES)}", integer=True))
    return _GENERIC_SIZES[i]


def decide_generic(ctx: Reasoner, expr) -> Optional[tuple]:
    """``(value, atoms)``: the value of ``expr`` wherever each of its size atoms
    is at least 2 (given ``ctx``'s ranges), or None when that does not decide it.

    Each atom stands for a fresh size in ``[max(2, lo), hi]`` (its own bounds):
    a value decided for every such size holds for the atoms' actual values,
    however they are related.  Nothing is logged: the caller logs the
    decision as one claim, with the atoms it assumed.
    """
    atoms = size_atoms(expr, ctx.ranges)
    if not atoms:
        return None
    ranges = dict(ctx.ranges)
    subs = {}
    for i, a in enumerate(atoms):
        r = bound(a, ctx.ranges)
        d = _generic_size(i)
        subs[a] = d
        ranges[d] = ValueRange(max(2, r.lower), r.upper)
    generic = expr.xreplace(subs)
    try:
        v = ctx.decide_with_ranges(generic, ranges)
    except (UnsupportedExpression, ZeroDivisionError):  # no rule at the generic point: a guard instead
        v = None
    return None if v is None else (v, atoms)
