"""Our node behind ``torch.SymInt`` / ``SymFloat`` / ``SymBool``.

torch wraps any object that speaks its SymNode protocol (the methods the C++
``PythonSymNodeImpl`` and ``torch/fx/experimental/sym_node.py`` call by
name).  :class:`SymExprNode` answers those calls with sympy expressions of
our :class:`~shapes.env.ShapeEnv`; every ``bool()``/``int()`` lands in
:meth:`ShapeEnv.evaluate` with the user's frame.

Example::

    >>> import torch
    >>> from shapes.env import ShapeEnv
    >>> from shapes.symnode import SymExprNode
    >>> env = ShapeEnv()
    >>> B = torch.SymInt(SymExprNode(env, env.create_symbol("B", 8), int))
    >>> (B * 2 + 1).node.expr
    2*B + 1
"""
from __future__ import annotations

import builtins
import functools

import sympy
import torch

from . import torch_adapter
from .errors import UnhandledExprKind
from .functions import FloorDiv, PyMod, ToFloat, TrueDiv, TruncToInt, Where, is_number
from .provenance import capture
from .printers import to_python


_REFLEXIVE = {sympy.Eq: True, sympy.Le: True, sympy.Ge: True, sympy.Ne: False, sympy.Lt: False, sympy.Gt: False}


def _rel(op):
    # torch's helpers compare sizes tens of thousands of times per model; sympy's
    # evaluating constructors are the bottleneck, so decide the trivial cases
    # here and leave the rest unevaluated for the engine's (logged) reasoning.
    def f(self, other):
        a, b = self.expr, other.expr
        if is_number(a) and is_number(b):
            return self.wrap_bool(builtins.bool(op(a, b)))
        if a == b:
            return self.wrap_bool(_REFLEXIVE[op])
        return SymExprNode(self.env, op(a, b, evaluate=False), builtins.bool)
    return f


@functools.lru_cache(maxsize=16384)
def _logic(op, a, b):
    # torch's contiguity helpers join the same comparisons over and over, and sympy's
    # And/Or constructors (which flatten and evaluate) are not cached by sympy.
    return op(a, b)


class SymExprNode:
    """A sympy expression of ``env`` with a Python type (int, float or bool)."""

    __slots__ = ("env", "expr", "pytype", "_hint_cache")

    def __init__(self, env, expr, pytype):
        self.env = env
        self.expr = sympy.sympify(expr)
        self.pytype = pytype
        self._hint_cache = _UNSET

    # -- identity and hints -------------------------------------------------------
    def is_int(self):
        return self.pytype is builtins.int

    def is_float(self):
        return self.pytype is builtins.float

    def is_bool(self):
        return self.pytype is builtins.bool

    def is_nested_int(self):
        return False

    def nested_int(self):
        return None

    def nested_int_coeff(self):
        return None

    def is_symbolic(self):
        # sympy's truth values are singletons: identity, not sympy's slower ==.
        e = self.expr
        return not (e is sympy.true or e is sympy.false or is_number(e))

    def is_constant(self):
        # torch's user magic turns a constant result into a Python value only for SymInt and
        # SymBool (``get_constant`` asserts otherwise): a float stays a SymFloat, as torch's own
        # nodes do (``H / W`` where the engine knows both sizes is ``SymFloat(0.75)``).
        return not self.is_symbolic() and self.pytype is not builtins.float

    @property
    def hint(self):
        if self._hint_cache is _UNSET:
            self._hint_cache = self.env.hint_of(self.expr)
            if self._hint_cache is not None:
                self._hint_cache = self.pytype(self._hint_cache)
        return self._hint_cache

    _hint = hint

    def has_hint(self):
        return self.hint is not None

    def require_hint(self, fallback=None):
        h = self.hint
        if h is None:
            if fallback is not None:
                return fallback
            raise self._dd_error()
        return h

    def maybe_as_int(self):
        if self.pytype is builtins.int and self.expr.is_Integer:
            return builtins.int(self.expr)
        return None

    def maybe_as_float(self):
        if self.pytype is builtins.float and self.expr.is_number:
            return builtins.float(self.expr)
        return None

    def maybe_as_bool(self):
        if self.expr is sympy.true:
            return True
        if self.expr is sympy.false:
            return False
        return None

    @property
    def shape_env(self):
        return torch_adapter.ShapeEnvFacade(self.env)

    @property
    def constant(self):
        # torch's wrap_node only consults this on its own SymNode class; kept so
        # helpers that peek at it see "not a constant" for symbolic nodes.
        if self.expr.is_number or self.expr in (sympy.true, sympy.false):
            return self.pytype(self.expr) if self.pytype is not builtins.bool else self.expr is sympy.true
        return None

    def _dd_error(self):
        return self.env.data_dependent_error(self.expr, capture(self.env.current_op()))

    # -- wrapping -------------------------------------------------------------------
    def _make(self, expr, pytype):
        if pytype is not builtins.bool and not (expr.is_Atom):
            expr = self.env.simplify(expr)
        return SymExprNode(self.env, expr, pytype)

    def wrap_int(self, num):
        return SymExprNode(self.env, sympy.Integer(num), builtins.int)

    def wrap_float(self, num):
        return SymExprNode(self.env, sympy.Float(num), builtins.float)

    def wrap_bool(self, num):
        return SymExprNode(self.env, sympy.true if num else sympy.false, builtins.bool)

    def clone(self):
        return self

    def with_shape_env(self, shape_env):
        return self

    def str(self):
        # torch formats sizes into its own error messages ("invalid for input of
        # size ...") through this: Python syntax, as every other message shows them.
        try:
            return to_python(self.expr)
        except UnhandledExprKind:
            return builtins.str(self.expr)

    def _graph_repr(self):
        return self.str()

    def __str__(self):
        return self.str()

    def __repr__(self):
        return f"SymExprNode({self.expr}, {self.pytype.__name__})"

    # -- arithmetic --------------------------------------------------------------------
    def _num_type(self, other):
        return builtins.float if builtins.float in (self.pytype, other.pytype) else builtins.int

    def add(self, other):
        return self._make(self.expr + other.expr, self._num_type(other))

    def sub(self, other):
        return self._make(self.expr - other.expr, self._num_type(other))

    def mul(self, other):
        return self._make(self.expr * other.expr, self._num_type(other))

    def sym_sum(self, args):
        total = sympy.Add(*[a.expr for a in args])
        pytype = builtins.float if any(a.pytype is builtins.float for a in args) else builtins.int
        return self._make(total, pytype)

    def neg(self):
        return self._make(-self.expr, self.pytype)

    def pos(self):
        return self

    def abs(self):
        return self._make(sympy.Abs(self.expr) if self.pytype is builtins.float else
                          sympy.Max(self.expr, -self.expr), self.pytype)

    def floordiv(self, other):
        if self._num_type(other) is builtins.float:
            return self._make(ToFloat(TruncToInt(sympy.floor(TrueDiv(self.expr, other.expr)))), builtins.float)
        return self._make(FloorDiv(self.expr, other.expr), builtins.int)

    int_floordiv = floordiv

    def mod(self, other):
        return self._make(PyMod(self.expr, other.expr), self._num_type(other))

    def truediv(self, other):
        return self._make(TrueDiv(self.expr, other.expr), builtins.float)

    int_truediv = truediv
    float_truediv = truediv

    def pow(self, other):
        e = other.expr
        if e.is_Integer and builtins.int(e) >= 0 and self.pytype is builtins.int:
            return self._make(self.expr ** e, builtins.int)
        if e.is_Integer:
            return self._make(sympy.Pow(self.expr, e), builtins.float)
        if e.is_number:
            # A float exponent (``D ** 0.5``, SDPA's default scale): torch has already
            # checked the base is >= 0 (SymFloat.__pow__), so the result is real.
            return self._make(sympy.Pow(self._as_float(), sympy.Float(e)), builtins.float)
        from .errors import TracerLimitation
        raise TracerLimitation(f"a power with a symbolic exponent ({to_python(self.expr)} ** {e}) is not supported")

    def _as_float(self):
        return self.expr if self.pytype is builtins.float else ToFloat(self.expr)

    def sym_sqrt(self):
        from .errors import TracerLimitation, program_error
        if self.env.static_bool(sympy.Ge(self.expr, 0)) is not True:
            if not self.env.expect_true(sympy.Ge(self.expr, 0), message="sqrt of a negative size"):
                raise program_error(ValueError, "math domain error")
        if not isinstance(self.expr, sympy.Expr):
            raise TracerLimitation(f"sqrt of {to_python(self.expr)} is not supported")
        return self._make(sympy.Pow(self._as_float(), sympy.Float(0.5)), builtins.float)

    pow_by_natural = pow
    float_pow = pow

    # sympy's own Min/Max constructors prove argument orderings with their
    # generic machinery (slow, and unlogged); ours decide it in simplify.
    def sym_min(self, other):
        if self.expr == other.expr:
            return self
        return self._make(sympy.Min(self.expr, other.expr, evaluate=False), self._num_type(other))

    def sym_max(self, other):
        if self.expr == other.expr:
            return self
        return self._make(sympy.Max(self.expr, other.expr, evaluate=False), self._num_type(other))

    def sym_float(self):
        if self.pytype is builtins.float:
            return self
        return SymExprNode(self.env, ToFloat(self.expr), builtins.float)

    def sym_int(self):
        if self.pytype is builtins.int:
            return self
        return self._make(TruncToInt(self.expr), builtins.int)

    def floor(self):
        return self._make(TruncToInt(sympy.floor(self.expr)) if self.pytype is builtins.float else self.expr,
                          builtins.int)

    def ceil(self):
        return self._make(TruncToInt(sympy.ceiling(self.expr)) if self.pytype is builtins.float else self.expr,
                          builtins.int)

    def trunc(self):
        return self._make(TruncToInt(self.expr), builtins.int)

    def round(self, ndigits=None):
        """Python's ``round(x)``: to the nearest int, ties to even (``round(2.5) == 2``).

        The tie is a decision (is ``x + 1/2`` an integer?), recorded as a guard
        like any other; then the result is ``2*floor((x + 1/2)/2)`` or ``floor(x + 1/2)``.
        """
        from .errors import TracerLimitation
        if ndigits is not None:
            raise TracerLimitation("round(x, ndigits) of a symbolic size is not supported")
        if self.pytype is not builtins.float:
            return self
        t = sympy.Add(self.expr, sympy.Float(0.5))
        f = TruncToInt(sympy.floor(t))
        tie = SymExprNode(self.env, sympy.Eq(t, ToFloat(f)), builtins.bool).guard_bool()
        return self._make(2 * FloorDiv(f, 2) if tie else f, builtins.int)

    def is_integer(self):
        return self.wrap_bool(self.pytype is builtins.int)

    # -- comparisons and logic ------------------------------------------------------------
    eq = _rel(sympy.Eq)
    ne = _rel(sympy.Ne)
    lt = _rel(sympy.Lt)
    le = _rel(sympy.Le)
    gt = _rel(sympy.Gt)
    ge = _rel(sympy.Ge)

    def sym_not(self):
        return self._make(sympy.Not(self.expr), builtins.bool)

    def sym_and(self, other):
        return self._make(_logic(sympy.And, self.expr, other.expr), builtins.bool)

    def sym_or(self, other):
        return self._make(_logic(sympy.Or, self.expr, other.expr), builtins.bool)

    and_ = sym_and
    or_ = sym_or

    def sym_ite(self, then_node, else_node):
        return self._make(Where(self.expr, then_node.expr, else_node.expr), then_node.pytype)

    # -- layout predicates over sizes/strides ----------------------------------------------
    def is_contiguous(self, sizes, strides):
        return self._layout(torch_adapter.contiguous_expr([s.expr for s in sizes], [s.expr for s in strides]))

    def is_channels_last_contiguous_2d(self, sizes, strides):
        return self._layout(torch_adapter.channels_last_expr([s.expr for s in sizes], [s.expr for s in strides]))

    is_channels_last_contiguous_3d = is_channels_last_contiguous_2d

    def is_channels_last_strides_2d(self, sizes, strides):
        return self._layout(torch_adapter.channels_last_expr([s.expr for s in sizes], [s.expr for s in strides]))

    is_channels_last_strides_3d = is_channels_last_strides_2d

    def is_non_overlapping_and_dense(self, sizes, strides):
        return self._layout(torch_adapter.dense_expr([s.expr for s in sizes], [s.expr for s in strides]))

    def _layout(self, expr):
        self.env.note_layout(expr)
        return SymExprNode(self.env, expr, builtins.bool)

    # -- decisions -----------------------------------------------------------------------
    def _evaluate(self, **kw):
        v = self.env.evaluate(self.expr, **kw)
        return self.pytype(v) if self.pytype is not builtins.bool else builtins.bool(v)

    def guard_int(self, file=None, line=None):
        return builtins.int(self._evaluate())

    def guard_float(self, file=None, line=None):
        return builtins.float(self._evaluate())

    def guard_bool(self, file=None, line=None):
        return builtins.bool(self._evaluate(cpp_site=file))

    def bool_(self):
        return self.guard_bool()

    def int_(self):
        return self.guard_int()

    def expect_true(self, file=None, line=None):
        return self.env.expect_true(self.expr)

    def expect_size(self, file=None, line=None):
        return self.env.expect_true(sympy.Ge(self.expr, 0))

    def guard_size_oblivious(self, file=None, line=None):
        return builtins.bool(self._evaluate(size_oblivious=True))

    def guard_or_false(self, file=None, line=None):
        return builtins.bool(self._evaluate(fallback=False, cpp_site=file))

    def guard_or_true(self, file=None, line=None):
        return builtins.bool(self._evaluate(fallback=True, cpp_site=file))

    def statically_known_true(self, file=None, line=None):
        return self.env.static_bool(self.env.simplify(self.expr)) is True

    def evaluate(self, size_oblivious=False):
        return self._evaluate(size_oblivious=size_oblivious)


_UNSET = object()


def sym_value(env, expr, pytype=builtins.int):
    """A torch SymInt/SymFloat/SymBool for ``expr`` (a plain value if constant)."""
    expr = sympy.sympify(expr)
    if pytype is builtins.int and expr.is_Integer:
        return builtins.int(expr)
    node = SymExprNode(env, expr, pytype)
    if pytype is builtins.int:
        return torch.SymInt(node)
    if pytype is builtins.float:
        return torch.SymFloat(node)
    return torch.SymBool(node)
