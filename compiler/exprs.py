"""Size and index expressions of compiled kernels: decided and simplified by the trace's engine.

The code generators print with :mod:`shapes.printers`; what they need to know
about an expression comes from here, through the trace's
:class:`~shapes.env.ShapeEnv`: whether it is non-negative (so C's truncating
``/`` and ``%`` are Python's floor forms) is a logged ``static`` decision, and
index simplification is the engine's logged rewrite rules
(:mod:`shapes.simplify`, ``div_mod_recombine`` among them).  Translation
validation (:mod:`validation.translation`) replays both.  Loop indices enter
the engine as axioms ``x >= 0``.

Example::

    >>> import sympy
    >>> from shapes import ShapeEnv
    >>> from shapes.functions import FloorDiv, PyMod
    >>> from compiler.exprs import IndexFacts
    >>> from compiler.ir import loop_var
    >>> env = ShapeEnv()
    >>> B = env.create_symbol("B", 8)
    >>> y = loop_var("x0")
    >>> facts = IndexFacts(env)
    >>> facts.simplify_index(16 * B * FloorDiv(y, B) + 16 * PyMod(y, B))
    16*x0
    >>> facts.nonneg(FloorDiv(y, B)), facts.nonneg(B - 9)
    (True, False)
"""
from __future__ import annotations

import math

import sympy

from shapes.env import ShapeEnv
from shapes.printers import to_guard_python


class IndexFacts:
    """The engine's answers about one compiled program's index and size expressions.

    ``env`` is the trace's env (its ranges and facts about the dims); without
    one, a fresh env knows only what the loop indices add.  Symbols that are not
    the env's dims are loop indices, declared non-negative by :func:`compiler.ir.loop_var`.
    """

    def __init__(self, env=None):
        self.env = env if env is not None else ShapeEnv()
        self._dims = set(self.env.symbols.values())
        self._known: set = set()
        self._simplified: dict = {}

    def _know_loop_vars(self, e) -> None:
        for s in e.free_symbols:
            if s not in self._known and s not in self._dims:
                self._known.add(s)
                if s.is_nonnegative:
                    self.env.add_op_axiom(sympy.Ge(s, 0, evaluate=False), f"{s} is a loop index of a compiled kernel")

    def nonneg(self, e) -> bool:
        """Whether ``e >= 0`` holds for all sizes the trace admits (a logged decision)."""
        e = sympy.sympify(e)
        if e.is_number:
            return bool(e >= 0)
        self._know_loop_vars(e)
        return self.env.static_bool(sympy.Ge(e, 0)) is True

    def simplify_index(self, e):
        """``e`` expanded and rewritten by the engine's rules; each step is in the env's log."""
        e = sympy.sympify(e)
        got = self._simplified.get(e)
        if got is None:
            self._know_loop_vars(e)
            expanded = sympy.expand(e)
            if expanded != e:
                self.env.log_step("rewrite", e, expanded, "expand")
            got = self.env.rewrite(expanded)
            self._simplified[e] = got
        return got


def compile_exprs(exprs, symbols):
    """A Python function ``f(*symbol values) -> tuple`` evaluating ``exprs``.

    >>> from shapes.functions import FloorDiv
    >>> B = sympy.Symbol("B", integer=True)
    >>> compile_exprs([B * 4, FloorDiv(B, 3)], [B])(10)
    (40, 3)
    """
    names = {s: f"_a{i}" for i, s in enumerate(symbols)}
    body = ", ".join(to_guard_python(e, names) for e in exprs)
    src = f"def _f({', '.join(names.values())}):\n    return ({body}{',' if len(exprs) == 1 else ''})\n"
    ns = {"math": math}
    exec(compile(src, "<symshape sizes>", "exec"), ns)
    return ns["_f"]
