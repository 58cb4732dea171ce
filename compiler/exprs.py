"""Size and index expressions (sympy) printed as Python, C++ or Triton.

``//`` and ``%`` follow Python (floor) semantics in every target; where both
operands are provably non-negative the printers use the native operator.

Example::

    >>> import sympy
    >>> from shapes.functions import FloorDiv
    >>> from compiler.exprs import to_cpp, simplify_index
    >>> B = sympy.Symbol("B", integer=True)
    >>> to_cpp(FloorDiv(B - 9, 8))
    'sym_floordiv(-9 + B, 8)'
    >>> y = sympy.Symbol("y", integer=True, nonnegative=True)
    >>> simplify_index(16 * B * FloorDiv(y, B) + 16 * (y % B))
    16*y
"""
from __future__ import annotations

import sympy
from sympy.printing.str import StrPrinter

from shapes.functions import FloorDiv, PyMod


def nonneg(e, size_syms=None) -> bool:
    """True when ``e`` is provably >= 0 (dim symbols are sizes, hence >= 0)."""
    e = sympy.sympify(e)
    subs = {s: sympy.Symbol(s.name, integer=True, nonnegative=True)
            for s in e.free_symbols if not s.is_nonnegative}
    return bool(e.xreplace(subs).is_nonnegative)


def simplify_index(e):
    """Fold ``k*b*(a//b) + k*(a%b)`` into ``k*a`` (true for any b != 0 in
    Python semantics): views that split and re-merge dims index linearly."""
    e = sympy.expand(sympy.sympify(e))
    changed = True
    while changed and e.is_Add:
        changed = False
        terms = list(e.args)
        split = []
        for t in terms:
            coeff, fn = sympy.Integer(1), None
            for f in sympy.Mul.make_args(t):
                if isinstance(f, (FloorDiv, PyMod, sympy.Mod)) and fn is None:
                    fn = f
                else:
                    coeff = coeff * f
            split.append((coeff, fn))
        for i, (k, m) in enumerate(split):
            if not isinstance(m, (PyMod, sympy.Mod)):
                continue
            a, b = m.args
            want = sympy.expand(k * b)
            for j, (k2, f) in enumerate(split):
                if isinstance(f, FloorDiv) and f.args == (a, b) and sympy.expand(k2 - want) == 0:
                    rest = [t for n, t in enumerate(terms) if n not in (i, j)]
                    e = sympy.expand(sympy.Add(*rest) + k * a)
                    changed = True
                    break
            if changed:
                break
    return e


class _Base(StrPrinter):
    printmethod = "_symshape_codegen"

    def __init__(self, names=None):
        super().__init__({"order": "none"})
        self.names = dict(names or {})

    def _print_Symbol(self, s):
        return self.names.get(s, s.name)

    def _paren(self, x):
        s = self._print(x)
        return s if x.is_Atom else f"({s})"

    def _print_Pow(self, e, rational=False):
        b, x = e.args
        if x.is_Integer and 0 < int(x) <= 8:
            return "(" + "*".join([self._paren(b)] * int(x)) + ")"
        return self._pow(b, x)

    def _print_Relational(self, e):
        op = {"==": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}[e.rel_op]
        return f"({self._print(e.lhs)} {op} {self._print(e.rhs)})"

    def _print_Min(self, e):
        return self._fold(self.min_fn, e.args)

    def _print_Max(self, e):
        return self._fold(self.max_fn, e.args)

    def _fold(self, fn, args):
        acc = self._print(args[0])
        for a in args[1:]:
            acc = f"{fn}({acc}, {self._print(a)})"
        return acc

    def _print_Where(self, e):
        c, a, b = (self._print(x) for x in e.args)
        return self._ite(c, a, b)

    def _print_FloorDiv(self, e):
        a, b = e.args
        if nonneg(a) and nonneg(b):
            return f"({self._paren(a)} {self.div_op} {self._paren(b)})"
        return f"{self.floordiv_fn}({self._print(a)}, {self._print(b)})"

    def _print_PyMod(self, e):
        a, b = e.args
        if nonneg(a) and nonneg(b):
            return f"({self._paren(a)} % {self._paren(b)})"
        return f"{self.mod_fn}({self._print(a)}, {self._print(b)})"

    _print_Mod = _print_PyMod


class PythonPrinter(_Base):
    div_op, floordiv_fn, mod_fn, min_fn, max_fn = "//", "_fdiv", "_mod", "min", "max"

    def _pow(self, b, x):
        return f"({self._paren(b)} ** {self._paren(x)})"

    def _ite(self, c, a, b):
        return f"({a} if {c} else {b})"

    def _print_TrueDiv(self, e):
        return f"({self._paren(e.args[0])} / {self._paren(e.args[1])})"

    def _print_ToFloat(self, e):
        return f"float({self._print(e.args[0])})"

    def _print_TruncToInt(self, e):
        return f"int({self._print(e.args[0])})"

    def _print_And(self, e):
        return "(" + " and ".join(self._print(a) for a in e.args) + ")"

    def _print_Or(self, e):
        return "(" + " or ".join(self._print(a) for a in e.args) + ")"

    def _print_Not(self, e):
        return f"(not {self._print(e.args[0])})"

    def _print_BooleanTrue(self, e):
        return "True"

    def _print_BooleanFalse(self, e):
        return "False"


class CppPrinter(_Base):
    div_op, floordiv_fn, mod_fn, min_fn, max_fn = "/", "sym_floordiv", "sym_mod", "std::min<int64_t>", \
        "std::max<int64_t>"

    def _pow(self, b, x):
        return f"sym_ipow({self._print(b)}, {self._print(x)})"

    def _ite(self, c, a, b):
        return f"({c} ? {a} : {b})"

    def _print_Integer(self, e):
        v = int(e)
        return f"{v}LL" if abs(v) >= 2 ** 31 else str(v)

    def _print_TrueDiv(self, e):
        return f"((double)({self._print(e.args[0])}) / (double)({self._print(e.args[1])}))"

    def _print_ToFloat(self, e):
        return f"((double)({self._print(e.args[0])}))"

    def _print_TruncToInt(self, e):
        return f"((int64_t)({self._print(e.args[0])}))"

    def _print_And(self, e):
        return "(" + " && ".join(self._print(a) for a in e.args) + ")"

    def _print_Or(self, e):
        return "(" + " || ".join(self._print(a) for a in e.args) + ")"

    def _print_Not(self, e):
        return f"(!{self._print(e.args[0])})"


class TritonPrinter(_Base):
    # Triton's integer // and % truncate like C: floor forms go through helpers.
    div_op, floordiv_fn, mod_fn, min_fn, max_fn = "//", "_floordiv", "_pymod", "tl.minimum", "tl.maximum"

    def _pow(self, b, x):
        raise NotImplementedError(f"symbolic power {b}**{x} in a Triton index")

    def _ite(self, c, a, b):
        return f"tl.where({c}, {a}, {b})"

    def _print_TrueDiv(self, e):
        return f"({self._paren(e.args[0])} / {self._paren(e.args[1])})"

    def _print_And(self, e):
        return "(" + " & ".join(self._print(a) for a in e.args) + ")"

    def _print_Or(self, e):
        return "(" + " | ".join(self._print(a) for a in e.args) + ")"


def to_python(e, names=None) -> str:
    return PythonPrinter(names).doprint(sympy.sympify(e))


def to_cpp(e, names=None) -> str:
    return CppPrinter(names).doprint(sympy.sympify(e))


def to_triton(e, names=None) -> str:
    return TritonPrinter(names).doprint(sympy.sympify(e))


def _fdiv(a, b):
    return a // b


def _mod(a, b):
    return a % b


def compile_exprs(exprs, symbols):
    """A Python function ``f(*symbol values) -> tuple`` evaluating ``exprs``.

    >>> B = sympy.Symbol("B", integer=True)
    >>> compile_exprs([B * 4, FloorDiv(B, 3)], [B])(10)
    (40, 3)
    """
    names = {s: f"_a{i}" for i, s in enumerate(symbols)}
    body = ", ".join(to_python(e, names) for e in exprs)
    src = f"def _f({', '.join(names.values())}):\n    return ({body}{',' if len(exprs) == 1 else ''})\n"
    ns = {"_fdiv": _fdiv, "_mod": _mod}
    exec(compile(src, "<symshape sizes>", "exec"), ns)
    return ns["_f"]
