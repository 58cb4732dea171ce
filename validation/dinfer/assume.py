"""Data-dependent decisions: take the usual branch, and say what it assumed.

A trace that reaches a torch op's decision on a data-dependent value
(``x.new_ones(k) + x`` with ``k = y.item()`` asks whether ``k == 1`` to
broadcast) cannot know which way real data go.  (A branch in the user's own code on data, ``if x.sum() > 0``,
is never assumed: it stays a data-dependent outcome.)
torch.export answers such programs in one go; so does dinfer: inside
:func:`assume_data_branches` each such decision takes the branch that holds
for typical data (a small positive value, at the example sizes) and is
recorded as a runtime assert, exactly as if the user had written
``torch._check`` for it.  The class then says "runs if, at run
time, ..." with every assumption at once, and :func:`user_names` prints
them in the user's names (``k``, ``idx.shape[0]``, ``x.shape[0]``).

Example::

    >>> import torch
    >>> from shapes import trace
    >>> from validation.dinfer.assume import assume_data_branches, user_names
    >>> from guards.render import to_python
    >>> def add_ones(x, y):
    ...     k = y.item()
    ...     return x.new_ones(k) + x
    >>> with assume_data_branches():
    ...     tp = trace(add_ones, "x: f32[N]", "y: i64[]", dims={"N": 8})
    >>> names = user_names(tp.env)
    >>> [to_python(r.expr, names) for r in tp.env.records if tp.env.has_unbacked(r.expr)]
    ['k >= 0', 'x.shape[0] == k']
"""
from __future__ import annotations

import contextlib
import re

import sympy

from shapes.data_names import data_name
from shapes.env import ShapeEnv
from shapes.data_dependent_error import DataDependentError

#: The most decisions one trace may assume (a loop over data would otherwise go on).
MAX_ASSUMPTIONS = 16
ASSUMED = "assumed by dinfer for typical data (state it with torch._check)"

_ASSIGN = re.compile(r"^\s*([A-Za-z_]\w*)\s*=\s*(.+?)\s*$")
_CODE = re.compile(r"`([^`]*)`")


def _typical(env, s):
    """The branch typical data take at ``s``, or None when no rule applies."""
    for val in (1, 2):
        subs = {}
        for u in s.free_symbols:
            if env.is_unbacked(u):
                r = env.ranges.get(u)
                if r is not None and not (r.lower <= val <= r.upper):
                    return None
                subs[u] = sympy.Integer(val)
            else:
                h = env.hint_of(u)
                if h is None:
                    return None
                subs[u] = sympy.Integer(h)
        try:
            out = s.xreplace(subs)
        except (ZeroDivisionError, TypeError):
            continue
        if out in (sympy.true, sympy.false):
            return bool(out)
    return None


@contextlib.contextmanager
def assume_data_branches(limit: int = MAX_ASSUMPTIONS):
    """Within the block, traces assume the typical branch of data-dependent decisions."""
    original = ShapeEnv.evaluate

    def evaluate(self, expr, *args, **kwargs):
        try:
            return original(self, expr, *args, **kwargs)
        except DataDependentError as e:
            s = e.expr
            n = getattr(self, "_dinfer_assumed", 0)
            # Only a torch op's own question (slicing asks whether k < 0) has a usual
            # answer; a branch in the user's code on data is theirs to state, never guessed.
            if (n >= limit or not (s.is_Boolean or isinstance(s, sympy.Rel))
                    or getattr(e.provenance, "op", None) is None):
                raise
            branch = _typical(self, s)
            if branch is None:
                raise
            self._dinfer_assumed = n + 1
            cond = s if branch else sympy.Not(s)
            if not self.expect_true(cond, provenance=e.provenance, message=ASSUMED):
                raise
            return branch

    ShapeEnv.evaluate = evaluate
    try:
        yield
    finally:
        ShapeEnv.evaluate = original


def unbacked_name(env, u) -> str:
    """A Python name for a data-dependent symbol: the variable the user assigned it to
    (``k`` for ``k = y.item()``, ``idx.shape[0]`` for ``idx = torch.nonzero(m)``), else the
    expression it came from (:func:`shapes.data_names.data_name`)."""
    return data_name(env, u)


def user_names(env) -> dict:
    """Symbol -> the user's name: ``x.shape[0]`` for a dim, the variable for a data value."""
    out = {s: str(srcs[0]) for s, srcs in env.sources.items() if srcs}
    for u in env.unbacked:
        out[u] = unbacked_name(env, u)
    return out


def dim_and_data_names(env, dims) -> dict:
    """Dims by their spec names (``N``), data-dependent values by the user's names."""
    out = {s: s.name for s in dims}
    for u in env.unbacked:
        out[u] = unbacked_name(env, u)
    return out
