"""Everything symshape does because torch reaches into *its own* ShapeEnv.

Some of torch's helpers in ``torch/fx/experimental/symbolic_shapes.py``
(``guard_or_false``, ``statically_known_true``, ``has_hint`` ...) read
``sym_node.shape_env`` and call methods of torch's ShapeEnv on it.  Our node
answers with :class:`ShapeEnvFacade`, which forwards those calls to our own
engine.  This module is the only place that knows those method names.

Checked against torch 2.13.0 (CPU, this machine) and torch 2.11 (GPU
machine).  The methods torch calls are: ``evaluate_sym_node``,
``_maybe_evaluate_static``, ``evaluate_expr``, ``guard_or_defer_runtime_assert``,
``defer_runtime_assert``, ``size_hint``, ``is_unbacked_symint``,
``bound_sympy``, ``var_to_range``; plus settings read as attributes.
"""
from __future__ import annotations

import sympy

from .errors import UnsupportedOpError
from .printers import to_python


class ShapeEnvFacade:
    """Answers torch's calls to ``node.shape_env`` from our ShapeEnv."""

    # Settings torch reads off its ShapeEnv; ours has no such modes.
    prefer_deferred_runtime_asserts_over_guards = False
    allow_complex_guards_as_runtime_asserts = False
    specialize_zero_one = True
    duck_shape = False
    _ignore_fresh_unbacked_symbols_tls = staticmethod(lambda: False)

    def __init__(self, env):
        self._env = env

    def evaluate_sym_node(self, sym_node, size_oblivious=False, fallback_value=None):
        kw = {"size_oblivious": size_oblivious}
        if fallback_value is not None:
            kw["fallback"] = fallback_value
        return self._env.evaluate(sym_node.expr, **kw)

    def evaluate_expr(self, expr, hint=None, fx_node=None, size_oblivious=False, fallback_value=None, **kw):
        kw2 = {"size_oblivious": size_oblivious}
        if fallback_value is not None:
            kw2["fallback"] = fallback_value
        return self._env.evaluate(expr, **kw2)

    def _maybe_evaluate_static(self, expr, *args, **kwargs):
        expr = sympy.sympify(expr)
        s = self._env.simplify(expr)
        if s.is_number:
            return s
        v = self._env.static_bool(s) if (s.is_Boolean or isinstance(s, sympy.Rel)) else None
        if v is None:
            return None
        return sympy.true if v else sympy.false

    def guard_or_defer_runtime_assert(self, orig_expr, msg="", fx_node=None):
        return self._env.expect_true(orig_expr, message=str(msg))

    def defer_runtime_assert(self, orig_expr, msg="", fx_node=None):
        return self._env.expect_true(orig_expr, message=str(msg))

    def size_hint(self, expr, *, allow_none=False):
        v = self._env.hint_of(sympy.sympify(expr))
        if v is None and not allow_none:
            raise UnsupportedOpError(f"torch asked for the example value of {to_python(sympy.sympify(expr))}, which depends on data "
                                     f"and has none")
        return None if v is None else sympy.sympify(v)

    def is_unbacked_symint(self, sym):
        return sym in self._env.unbacked

    def bound_sympy(self, expr, size_oblivious=False):
        from .value_ranges import bound
        return bound(expr, self._env.ranges_for(size_oblivious))

    @property
    def var_to_range(self):
        return dict(self._env.ranges)

    @property
    def replacements(self):
        return dict(self._env.replacements)

    def simplify(self, expr, *args, **kwargs):
        return self._env.simplify(sympy.sympify(expr))

    def __getattr__(self, name):
        from .errors import AdapterGap
        raise AdapterGap(
            f"torch asked its ShapeEnv for {name!r}, which symshape's adapter does not "
            f"provide (torch {__import__('torch').__version__}). Please report this with the program "
            f"that triggered it."
        )


def contiguous_expr(sizes, strides):
    """sympy condition for a row-major contiguous layout."""
    conds = []
    expected = sympy.Integer(1)
    for size, stride in reversed(list(zip(sizes, strides))):
        conds.append(sympy.Or(sympy.Eq(size, 1), sympy.Eq(stride, expected)))
        expected = expected * size
    any_zero = sympy.Or(*[sympy.Eq(s, 0) for s in sizes]) if sizes else sympy.false
    return sympy.Or(any_zero, sympy.And(*conds))


def channels_last_expr(sizes, strides):
    if len(sizes) not in (4, 5):
        return sympy.false
    order = [1] + list(range(len(sizes) - 1, 1, -1)) + [0]
    conds = []
    expected = sympy.Integer(1)
    for d in order:
        conds.append(sympy.Or(sympy.Eq(sizes[d], 1), sympy.Eq(strides[d], expected)))
        expected = expected * sizes[d]
    return sympy.And(*conds)


def dense_expr(sizes, strides):
    # Contiguous layouts are dense; permuted ones are judged after sorting by stride,
    # which needs concrete strides, so anything else is left to the caller's guard.
    return sympy.Or(contiguous_expr(sizes, strides), channels_last_expr(sizes, strides))
