"""The engine's expressions as text: Python for people, Python for guard code, C++ and Triton.

Every printer is an :class:`~shapes.expr_kinds.ExprVisitor`: each kind the
engine builds prints in the target's syntax with Python's semantics (``//``
and ``%`` floor), or raises :class:`~shapes.errors.UnhandledExprKind`; sympy's
own text (``Mod(a, b)``, ``floor(x)``) never reaches a user or a kernel.

* :func:`to_python`: for people (messages, reports, suggested ``torch._check``
  lines): dim names or the user's terms, ``T - 1`` rather than ``-1 + T``,
  ``N in (1, 4)``, parentheses only where Python needs them.
* :func:`to_guard_python`: Python that a compiled program runs (guards, sizes).
* :func:`to_cpp`, :func:`to_triton`: size and index expressions in kernels;
  ``nonneg`` says which operands are known non-negative, so that C's
  truncating ``/`` and ``%`` may stand for Python's.

Example::

    >>> import sympy
    >>> from shapes.functions import FloorDiv
    >>> from shapes.printers import to_cpp, to_python, to_triton
    >>> B = sympy.Symbol("B", integer=True)
    >>> to_python(sympy.Eq(B % 8, 0)), to_python(B > 16, names={B: "x.shape[0]"})
    ('B % 8 == 0', 'x.shape[0] > 16')
    >>> to_python(sympy.Or(sympy.Eq(B, 1), sympy.Eq(B, 4)))
    'B in (1, 4)'
    >>> to_cpp(FloorDiv(B - 9, 8)), to_triton(FloorDiv(B - 9, 8), names={B: "ks0"})
    ('sym_floordiv(B - 9, 8)', '_floordiv(ks0 - 9, 8)')
"""
from __future__ import annotations

import functools
from typing import Callable, Mapping, Optional

import sympy
from sympy.printing.precedence import PRECEDENCE, precedence
from sympy.printing.str import StrPrinter

from .expr_kinds import ExprVisitor, Kind, kind_or_none
from .kernel_helpers import CPP, TRITON

#: Kinds that print their own parentheses in Python (``(a // b)``).
_SELF_PARENTHESIZED = (Kind.FLOOR_DIV, Kind.PY_MOD, Kind.MOD, Kind.TRUE_DIV)
_REL_OPS = {Kind.EQ: "==", Kind.NE: "!=", Kind.LT: "<", Kind.LE: "<=", Kind.GT: ">", Kind.GE: ">="}


def _binary(fmt):
    def visit(self, e):
        return fmt.format(*(self.paren(a) for a in e.args))
    return visit


def _unary(fmt):
    def visit(self, e):
        return fmt.format(self.visit(e.args[0]))
    return visit


def _call(fn):
    def visit(self, e):
        return f"{fn}(" + ", ".join(self.visit(a) for a in e.args) + ")"
    return visit


# --- Python -----------------------------------------------------------------------------


class PythonPrinter(ExprVisitor, StrPrinter):
    """Python text for people; ``names`` renames symbols (``{B: "x.shape[0]"}``).

    Sums and products are laid out by sympy's :class:`StrPrinter` (its
    ``_print`` comes back here for every sub-expression); every other kind is
    printed by a rule of this class.

    >>> N = sympy.Symbol("N", integer=True)
    >>> PythonPrinter().doprint(sympy.And(N > 2, sympy.Not(sympy.Eq(N % 2, 0), evaluate=False)))
    'N > 2 and not (N % 2 == 0)'
    """

    analysis = "the Python printer"

    def __init__(self, names: Optional[Mapping] = None):
        StrPrinter.__init__(self)
        self.names = dict(names or {})

    def _print(self, expr, **kwargs):
        if isinstance(expr, sympy.Basic):
            return self.visit(expr)
        return StrPrinter._print(self, expr, **kwargs)

    def visit(self, e):
        # StrPrinter prints a float in full below the top level; it counts levels in _print.
        self._print_level += 1
        try:
            return ExprVisitor.visit(self, e)
        finally:
            self._print_level -= 1

    def doprint(self, expr):
        return self.bare(sympy.sympify(expr))

    def _as_ordered_terms(self, expr, order=None):
        # A sum reads "T - 1", not sympy's "-1 + T": numeric terms go last.
        terms = super()._as_ordered_terms(expr, order=order)
        if expr.is_Add:
            numbers = [t for t in terms if t.is_number]
            others = [t for t in terms if not t.is_number]
            # ... unless every other term is negative: "1 - H", not "-H + 1".
            first = numbers if numbers and numbers[0] > 0 and all(t.could_extract_minus_sign() for t in others) \
                else []
            terms = first + others + [t for t in numbers if t not in first]
        return terms

    def parenthesize(self, item, level, strict=False):
        if kind_or_none(item) in _SELF_PARENTHESIZED:
            return self.visit(item)
        return super().parenthesize(item, level, strict)

    def paren(self, x):
        """``x`` as an operand of ``//``, ``%``, ``/``, ``**``: atoms and calls bare."""
        s = self.visit(x)
        if x.is_Atom or isinstance(x, sympy.Function):
            return s
        return f"({s})"

    # // and % are always printed inside parentheses: next to * or unary minus
    # Python would otherwise group them differently (2*(N + 2)//3 is not
    # 2*((N + 2)//3)).  bare() drops the outer pair where nothing can bind.
    def bare(self, x):
        s = self.visit(x)
        if kind_or_none(x) in _SELF_PARENTHESIZED and s.startswith("(") and s.endswith(")"):
            return s[1:-1]
        return s

    def visit_integer(self, e):
        return StrPrinter._print_Integer(self, e)

    def visit_rational(self, e):
        return StrPrinter._print_Rational(self, e)

    def visit_float(self, e):
        return StrPrinter._print_Float(self, e)

    def visit_infinity(self, e):
        return "math.inf" if e is sympy.oo else "-math.inf"

    def visit_symbol(self, s):
        return self.names.get(s, s.name)

    def visit_true(self, e):
        return "True"

    def visit_false(self, e):
        return "False"

    def visit_add(self, e):
        # StrPrinter's layout, except that a // or % term needs no parentheses of its
        # own in a sum (they bind tighter than + and -) unless its text starts with a
        # minus, which the sum would read as its sign.
        out = []
        for i, term in enumerate(self._as_ordered_terms(e)):
            s = self.visit(term)
            negated = -term if term.is_Mul and term.args[0] == -1 else None
            if kind_or_none(term) in _SELF_PARENTHESIZED and not self.bare(term).startswith("-"):
                s = self.bare(term)
            elif i > 0 and kind_or_none(negated) in _SELF_PARENTHESIZED and not self.bare(negated).startswith("-"):
                # "x - c % 3" is x - (c % 3), but a leading "-c % 3" would be (-c) % 3
                s = "-" + self.bare(negated)
            if s.startswith("-") and not term.is_Add:
                sign, s = "-", s[1:]
            else:
                sign = "+"
            if precedence(term) < PRECEDENCE["Add"]:
                s = f"({s})"
            out += [sign, s]
        sign = out.pop(0)
        return ("-" if sign == "-" else "") + " ".join(out)

    def visit_mul(self, e):
        return StrPrinter._print_Mul(self, e)

    def visit_pow(self, e):
        b, x = e.args
        return f"{self.paren(b)}**{self.visit(x)}"

    visit_floor_div = _binary("({} // {})")
    visit_py_mod = visit_mod = _binary("({} % {})")
    visit_true_div = _binary("({} / {})")
    visit_to_float = _unary("float({})")
    visit_trunc_to_int = _unary("int({})")
    visit_floor = _unary("math.floor({})")
    visit_ceiling = _unary("math.ceil({})")
    visit_abs = _call("abs")
    visit_min = _call("min")
    visit_max = _call("max")

    def visit_where(self, e):
        c, a, b = (self.visit(x) for x in e.args)
        return f"({a} if {c} else {b})"

    def visit_relational(self, e):
        return f"{self.bare(e.lhs)} {_REL_OPS[kind_or_none(e)]} {self.bare(e.rhs)}"

    def visit_not(self, e):
        return f"not ({self.visit(e.args[0])})"

    def visit_and(self, e):
        vals = same_symbol(e.args, sympy.Ne)
        if vals:  # N != 1 and N != 2  ->  N not in (1, 2)
            return f"{self.visit(vals[0])} not in ({', '.join(map(str, vals[1]))})"
        return " and ".join(self._bool_operand(a) for a in e.args)

    def visit_or(self, e):
        vals = same_symbol(e.args, sympy.Eq)
        if vals:  # N == 1 or N == 2  ->  N in (1, 2)
            return f"{self.visit(vals[0])} in ({', '.join(map(str, vals[1]))})"
        return " or ".join(self._bool_operand(a) for a in e.args)

    def visit_equivalent(self, e):
        return " == ".join(f"bool({self.visit(a)})" for a in e.args)

    def _bool_operand(self, a):
        s = self.visit(a)
        return f"({s})" if kind_or_none(a) in (Kind.AND, Kind.OR, Kind.EQUIVALENT) else s


def same_symbol(args, rel):
    """``(symbol, sorted ints)`` when every arg is ``symbol rel int`` for one symbol.

    >>> N = sympy.Symbol("N", integer=True)
    >>> same_symbol([sympy.Eq(N, 4), sympy.Eq(N, 1)], sympy.Eq)
    (N, [1, 4])
    """
    if len(args) < 2 or not all(isinstance(a, rel) for a in args):
        return None
    syms = {a.lhs for a in args}
    if len(syms) != 1 or not all(a.rhs.is_Integer for a in args):
        return None
    return next(iter(syms)), sorted(int(a.rhs) for a in args)


class GuardPythonPrinter(PythonPrinter):
    """Python that compiled programs run: exact float constants; needs ``math`` in its namespace.

    >>> N = sympy.Symbol("N", integer=True)
    >>> GuardPythonPrinter({N: "a0"}).doprint(sympy.Float(0.1) * N)
    '0.1*a0'
    """

    analysis = "the guard-code printer"

    def visit_float(self, e):
        return repr(float(e))

    visit_infinity = None  # no rule: a guard never holds an infinity


def to_python(expr, names: Optional[Mapping] = None) -> str:
    """``expr`` as a Python expression for people; ``names`` renames symbols (e.g. to ``x.shape[0]``)."""
    if names is None:
        return _to_python_plain(expr)
    return PythonPrinter(names).doprint(expr)


@functools.lru_cache(maxsize=16384)
def _to_python_plain(expr) -> str:
    # Eager's messages (kept with each check and limit) print the same sizes op after op.
    return PythonPrinter(None).doprint(expr)


def to_guard_python(expr, names: Optional[Mapping] = None) -> str:
    """``expr`` as Python source a compiled program evaluates (``math`` in scope)."""
    return GuardPythonPrinter(names).doprint(expr)


# --- C++ and Triton -------------------------------------------------------------------------


def _assumed_nonneg(e) -> bool:
    return e.is_nonnegative is True


class KernelPrinter(ExprVisitor):
    """Size and index expressions in a kernel language; a subclass is one target's table.

    ``nonneg(e)`` says whether ``e`` is known >= 0 (the compiler passes the
    engine's decision); where both operands of ``//`` or ``%`` are, the target's
    native operator is Python's, elsewhere a helper with floor semantics runs.
    Operands print fully parenthesized unless they are atoms or calls.
    """

    # the target's table
    div_op = mod_op = floordiv_fn = mod_fn = min_fn = max_fn = and_op = or_op = ""
    not_fmt = where_fmt = true_div_fmt = to_float_fmt = trunc_fmt = floor_fmt = ceil_fmt = abs_fmt = ""
    int_pow_fn = float_pow_fn = ""

    def __init__(self, names: Optional[Mapping] = None, nonneg: Callable = _assumed_nonneg):
        self.names = dict(names or {})
        self.nonneg = nonneg

    def doprint(self, expr) -> str:
        return self.visit(sympy.sympify(expr))

    def paren(self, x) -> str:
        s = self.visit(x)
        return s if x.is_Atom and not (x.is_Number and x < 0) else f"({s})"

    def visit_symbol(self, s):
        return self.names.get(s, s.name)

    def visit_integer(self, e):
        return str(int(e))

    def visit_float(self, e):
        return repr(float(e))

    def visit_rational(self, e):
        return f"({int(e.p)}.0 / {int(e.q)}.0)"

    def visit_true(self, e):
        return "1"

    def visit_false(self, e):
        return "0"

    def visit_add(self, e):
        terms = sorted(e.args, key=lambda t: t.is_number)  # numbers last: "x0 + 1"
        out = self.visit(terms[0])
        for t in terms[1:]:
            s = self.visit(t)
            out += f" - {s[1:]}" if s.startswith("-") and not s.startswith("-(") else f" + {s}"
        return out

    def visit_mul(self, e):
        coeff, rest = e.as_coeff_Mul()
        factors = sympy.Mul.make_args(rest)
        if any(f.is_Pow and f.args[1].is_negative for f in factors):
            raise self.unhandled(e, detail="a division inside a product")
        body = "*".join(self.mul_operand(f) for f in factors)
        if coeff == 1:
            return body
        if coeff == -1:
            return f"-{body}"
        return f"{self.paren(coeff) if coeff.is_Rational and not coeff.is_Integer else self.visit(coeff)}*{body}"

    def mul_operand(self, f):
        s = self.visit(f)
        return s if f.is_Atom or kind_or_none(f) in self.call_kinds else f"({s})"

    def visit_pow(self, e):
        b, x = e.args
        if x.is_Integer and 0 < int(x) <= 8:
            return "(" + "*".join([self.paren(b)] * int(x)) + ")"
        if x.is_Integer and int(x) >= 0 and b.is_integer is True:
            if not self.int_pow_fn:
                raise self.unhandled(e, detail="an integer power above 8")
            return f"{self.int_pow_fn}({self.visit(b)}, {self.visit(x)})"
        if self.float_pow_fn:
            return f"{self.float_pow_fn}({self.to_float_fmt.format(self.visit(b))}, {self.visit(x)})"
        raise self.unhandled(e, detail="this exponent")

    def _floor_op(self, e, native: str, helper: str) -> str:
        """Python's ``//`` or ``%``: the native operator where both operands are known >= 0."""
        if not all(a.is_integer is True for a in e.args):
            # C's integer / and % on a float operand would truncate it first: a wrong answer.
            raise self.unhandled(e, detail="an operand that may not be an integer")
        a, b = e.args
        if self.nonneg(a) and self.nonneg(b):
            return f"({self.paren(a)} {native} {self.paren(b)})"
        return f"{helper}({self.visit(a)}, {self.visit(b)})"

    def visit_floor_div(self, e):
        return self._floor_op(e, self.div_op, self.floordiv_fn)

    def visit_py_mod(self, e):
        return self._floor_op(e, self.mod_op, self.mod_fn)

    visit_mod = visit_py_mod

    def visit_true_div(self, e):
        return self.true_div_fmt.format(*(self.visit(a) for a in e.args))

    def visit_to_float(self, e):
        return self.to_float_fmt.format(self.visit(e.args[0]))

    def visit_trunc_to_int(self, e):
        return self.trunc_fmt.format(self.visit(e.args[0]))

    def visit_floor(self, e):
        return self.floor_fmt.format(self.visit(e.args[0]))

    def visit_ceiling(self, e):
        return self.ceil_fmt.format(self.visit(e.args[0]))

    def visit_abs(self, e):
        return self.abs_fmt.format(self.visit(e.args[0]))

    def _fold(self, fn, args):
        acc = self.visit(args[0])
        for a in args[1:]:
            acc = f"{fn}({acc}, {self.visit(a)})"
        return acc

    def visit_min(self, e):
        return self._fold(self.min_fn, e.args)

    def visit_max(self, e):
        return self._fold(self.max_fn, e.args)

    def visit_where(self, e):
        return self.where_fmt.format(*(self.visit(a) for a in e.args))

    def visit_relational(self, e):
        return f"({self.visit(e.lhs)} {_REL_OPS[kind_or_none(e)]} {self.visit(e.rhs)})"

    def visit_not(self, e):
        return self.not_fmt.format(self.visit(e.args[0]))

    def visit_and(self, e):
        return "(" + f" {self.and_op} ".join(self.visit(a) for a in e.args) + ")"

    def visit_or(self, e):
        return "(" + f" {self.or_op} ".join(self.visit(a) for a in e.args) + ")"

    def visit_equivalent(self, e):
        return "(" + " == ".join(self.visit(a) for a in e.args) + ")"

    #: Kinds that print as a call or in their own parentheses (no extra pair in a product).
    call_kinds = (Kind.FLOOR_DIV, Kind.PY_MOD, Kind.MOD, Kind.TRUE_DIV, Kind.TO_FLOAT, Kind.TRUNC_TO_INT,
                  Kind.FLOOR, Kind.CEILING, Kind.ABS, Kind.MIN, Kind.MAX, Kind.WHERE, Kind.POW)


class CppPrinter(KernelPrinter):
    """C++ (int64 sizes, double reals); the helpers it calls are :data:`shapes.kernel_helpers.CPP`."""

    analysis = "the C++ printer"
    div_op, mod_op, floordiv_fn, mod_fn = "/", "%", CPP.floordiv, CPP.mod
    min_fn, max_fn, and_op, or_op = CPP.min, CPP.max, "&&", "||"
    not_fmt, where_fmt = "(!{})", "({} ? {} : {})"
    true_div_fmt = "((double)({}) / (double)({}))"
    to_float_fmt, trunc_fmt = "((double)({}))", "((int64_t)({}))"
    floor_fmt, ceil_fmt = "((int64_t)std::floor({}))", "((int64_t)std::ceil({}))"
    abs_fmt, int_pow_fn, float_pow_fn = "std::abs({})", CPP.int_pow, CPP.float_pow

    def visit_integer(self, e):
        v = int(e)
        return f"{v}LL" if abs(v) >= 2 ** 31 else str(v)

    def visit_min(self, e):
        if not all(a.is_integer is True for a in e.args):
            return self._fold("std::fmin", e.args)
        return super().visit_min(e)

    def visit_max(self, e):
        if not all(a.is_integer is True for a in e.args):
            return self._fold("std::fmax", e.args)
        return super().visit_max(e)


class TritonPrinter(KernelPrinter):
    """Triton: integer ``//`` and ``%`` truncate like C, so floor forms call the helpers of
    :data:`shapes.kernel_helpers.TRITON`."""

    analysis = "the Triton printer"
    div_op, mod_op, floordiv_fn, mod_fn = "//", "%", TRITON.floordiv, TRITON.mod
    min_fn, max_fn, and_op, or_op = TRITON.min, TRITON.max, "&", "|"
    not_fmt, where_fmt = "({} == 0)", "tl.where({}, {}, {})"
    to_float_fmt, trunc_fmt = "({}).to(tl.float64)", "({}).to(tl.int64)"
    floor_fmt, ceil_fmt = "tl.floor({}).to(tl.int64)", "tl.ceil({}).to(tl.int64)"
    abs_fmt, float_pow_fn = "tl.abs({})", TRITON.float_pow

    def visit_true_div(self, e):
        # Triton's / on integers is a float32 true division.
        return f"({self.paren(e.args[0])} / {self.paren(e.args[1])})"


def to_cpp(e, names: Optional[Mapping] = None, nonneg: Callable = _assumed_nonneg) -> str:
    """``e`` as a C++ expression (see :class:`CppPrinter`)."""
    return CppPrinter(names, nonneg).doprint(e)


def to_triton(e, names: Optional[Mapping] = None, nonneg: Callable = _assumed_nonneg) -> str:
    """``e`` as a Triton expression (see :class:`TritonPrinter`)."""
    return TritonPrinter(names, nonneg).doprint(e)
