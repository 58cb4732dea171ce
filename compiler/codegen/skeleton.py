"""The code generator skeleton every target shares: kernel signature, CSE emitter, launchers.

A target (:class:`Target`) supplies only what differs between languages:
how a value is declared, loaded, and spelled (one table entry per
:class:`~compiler.ir.OpKind`), how a kernel's loops are laid out, and how a
module is built and launched.  The skeleton walks the IR: each distinct value
is emitted once per scope (values are hashable DAGs, so CSE is a dict
lookup), in dependency order, into the target's statements.

Example::

    >>> import torch
    >>> from compiler.codegen import TARGETS
    >>> from compiler.ir import OpKind
    >>> sorted(TARGETS)
    ['cpp', 'triton']
    >>> all(k in t.op_table for t in TARGETS.values() for k in OpKind)
    True
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Callable, Optional

import sympy
import torch

from ..exprs import IndexFacts
from ..ir import HALF_DTYPES, Const, Kernel, Load, Op, OpKind, RedRef, SizeVal, compute_dtype, loop_var


class CodegenError(NotImplementedError):
    """A code generator met an IR value or op kind it has no spelling for."""


#: Infix spellings shared by C++ and Triton; targets override ``and``/``or``.
INFIX = {OpKind.ADD: "+", OpKind.SUB: "-", OpKind.MUL: "*", OpKind.DIV: "/", OpKind.LT: "<", OpKind.LE: "<=",
         OpKind.GT: ">", OpKind.GE: ">=", OpKind.EQ: "==", OpKind.NE: "!="}

#: An op spelling: ``(operand code strings, the Op, the target's type name) -> code``.
Spelling = Callable[[list, Op, str], str]


def infix_table(infix: dict) -> dict:
    """Spellings ``a OP b`` for every entry of ``infix`` (OpKind -> operator text)."""
    return {k: (lambda a, v, t, _o=o: f"{a[0]} {_o} {a[1]}") for k, o in infix.items()}


@dataclass(frozen=True)
class Literals:
    """How a target spells constants: the truth values, NaN, infinity and numbers of each dtype."""

    true: str
    false: str
    nan: str
    inf: Callable[[torch.dtype], str]
    float_suffix: Callable[[torch.dtype], str]
    integer: Callable[[int, torch.dtype], str]

    def spell(self, v, dtype) -> str:
        """``v`` as a literal of ``dtype``.

        >>> lit = Literals("1", "0", "NAN", lambda d: "INF", lambda d: "", lambda v, d: str(v))
        >>> lit.spell(float("-inf"), torch.float32), lit.spell(2, torch.float64), lit.spell(True, torch.bool)
        ('(-INF)', '2.0', '1')
        """
        if dtype == torch.bool:
            return self.true if v else self.false
        if dtype.is_floating_point:
            v = float(v)
            if math.isnan(v):
                return self.nan
            if math.isinf(v):
                return self.inf(dtype) if v > 0 else f"(-{self.inf(dtype)})"
            return repr(v) + self.float_suffix(dtype)
        return self.integer(int(v), dtype)


def templates(spellings: dict) -> dict:
    """Spellings from format strings: ``{0}``, ``{1}`` ... are the operands, ``{t}`` the type name.

    >>> templates({OpKind.NEG: "-{0}"})[OpKind.NEG](["x"], None, "float")
    '-x'
    """
    return {k: (lambda a, v, t, _f=f: _f.format(*a, t=t)) for k, f in spellings.items()}


def call(fn: str) -> Spelling:
    """Spelling ``fn(a, b, ...)``."""
    return lambda a, v, t: f"{fn}({', '.join(a)})"


class KernelSignature:
    """A kernel's buffer arguments (reads in the order the kernel's values first load them,
    then writes) and their pointer names.

    The order follows the kernel's structure, never the buffers' names: two kernels that
    compute the same thing on other buffers (a model's layers) get the same source, which
    is built once (:meth:`Target.generate`).

    >>> import sympy, torch
    >>> from compiler.ir import Buffer, Kernel, Load, Op
    >>> out = Buffer(name="buf1", shape=(), strides=(), dtype=torch.float32, kind="kernel")
    >>> add = Op("add", (Load("z9", 0, torch.float32), Load("a0", 0, torch.float32)), torch.float32)
    >>> k = Kernel(name="kernel0", outer=(), row_stores=[(out, add)], reads={"a0", "z9"})
    >>> sig = KernelSignature(k)
    >>> sig.args, sig.ptr["buf1"], sig.written
    (['z9', 'a0', 'buf1'], 'b2', {'buf1'})
    """

    def __init__(self, kernel: Kernel):
        stores = [b for b, *_ in kernel.inner_stores + kernel.row_stores]
        seen = first_loads(kernel)
        reads = [b for b in seen if b in kernel.reads] + sorted(set(kernel.reads) - set(seen))
        self.args: list[str] = reads + [b.name for b in stores]
        self.ptr = {name: f"b{i}" for i, name in enumerate(self.args)}
        self.written = {b.name for b in stores}


#: The function name a kernel's source is generated with, before a digest of that source
#: (:func:`function_name`) replaces it.
FN_PLACEHOLDER = "SYMSHAPE_KERNEL_FN"


def function_name(source: str) -> str:
    """The name of the kernel function whose source, written with :data:`FN_PLACEHOLDER` as
    its name, is ``source``: a digest of it, so the same kernel has the same name everywhere.

    >>> function_name("int SYMSHAPE_KERNEL_FN(void);") == function_name("int SYMSHAPE_KERNEL_FN(void);")
    True
    >>> function_name("int SYMSHAPE_KERNEL_FN(void);").startswith("k_")
    True
    """
    return "k_" + hashlib.sha256(source.encode()).hexdigest()[:16]


def first_loads(kernel: Kernel) -> list:
    """The buffers ``kernel``'s values load, in the order of a walk of its reductions' bodies,
    then its inner and row stores' values (each operand in turn, depth first)."""
    order: dict = {}
    seen: set = set()
    values = ([v for *_, v in kernel.reductions] + [v for _, _, v in kernel.inner_stores]
              + [v for _, v in kernel.row_stores])
    stack = values[::-1]
    while stack:
        v = stack.pop()
        if v is None or id(v) in seen:
            continue
        seen.add(id(v))
        buf = getattr(v, "buf", None)
        if isinstance(buf, str):
            order.setdefault(buf, None)
        stack.extend(reversed(getattr(v, "args", ()) or ()))
    return list(order)


class Scope:
    """One straight-line region of a kernel body: emits each distinct value once.

    ``mask`` is the target's name for the active-lane mask of the region
    (Triton blocks), ``None`` where every lane is in bounds.  A child scope
    sees its parent's values (they were computed before it).  ``zero`` names
    a zero block of the mask's shape (Triton broadcasts a mask to the pointer,
    not the pointer to the mask; a tiled kernel's rows and tiles differ).
    """

    def __init__(self, gen: "KernelGen", indent: str, mask: Optional[str] = None,
                 parent: Optional["Scope"] = None, zero: str = "zvec", j_range: Optional[tuple] = None):
        self.g = gen
        self.zero = zero
        #: ``(lo, hi)`` bounds of the row loop's ``j`` in this region (``hi`` None: unbounded), where
        #: a target splits a row at its seams; loads may fold min/max indices over it.
        self.j_range = j_range
        self.indent = indent
        self.mask = mask
        self.lines: list[str] = []
        self.cache = dict(parent.cache) if parent is not None else {}

    def emit(self, v) -> str:
        """The code name (or literal) holding value ``v`` in this scope."""
        v = self.g.legal(v)
        got = self.cache.get(v)
        if got is not None:
            return got
        t = self.g.target
        if isinstance(v, Const):
            return t.const(v.value, v.dtype)
        if isinstance(v, RedRef):
            return self.g.kernel.red_var(v.red, v.index)
        if isinstance(v, SizeVal):
            code = t.size_value(self.g, v)
            if not isinstance(code, _Declare):
                return code
            code = code.text
        elif isinstance(v, Load):
            code = t.load(self, v)
        elif isinstance(v, Op):
            spell = t.op_table.get(v.op)
            if spell is None:
                raise CodegenError(f"the {t.name} code generator has no spelling for op {v.op.value}")
            code = spell([self.emit(a) for a in v.args], v, t.type_name(v.dtype))
        else:
            raise CodegenError(f"unknown IR value {v!r}")
        name = f"t{self.g.counter}"
        self.g.counter += 1
        self.lines.append(self.indent + t.declare(name, code, v.dtype))
        self.cache[v] = name
        return name


class _Declare:
    """A size value's code that must be bound to a name (not inlined as a literal)."""

    def __init__(self, text: str):
        self.text = text


def declare(text: str) -> _Declare:
    """Mark a size expression's code as needing a declaration (see :meth:`Target.size_value`)."""
    return _Declare(text)


def _widen(v):
    return Op(OpKind.CAST, (v,), torch.float32) if v.dtype in HALF_DTYPES else v


def _legalize(v, legal):
    if isinstance(v, Op):
        args = tuple(legal(a) for a in v.args)
        if v.op is OpKind.CAST:
            return Op(OpKind.CAST, args, v.dtype)  # conversions to and from half are spelled by targets
        op = Op(v.op, tuple(_widen(a) for a in args), compute_dtype(v.dtype))
        return Op(OpKind.CAST, (op,), v.dtype) if v.dtype in HALF_DTYPES else op
    if v.dtype not in HALF_DTYPES or isinstance(v, Load):
        return v
    if isinstance(v, Const):
        return Op(OpKind.CAST, (Const(float(v.value), torch.float32),), v.dtype)
    if isinstance(v, SizeVal):
        return Op(OpKind.CAST, (SizeVal(v.expr, torch.float32),), v.dtype)
    if isinstance(v, RedRef):  # the accumulator is float32
        return Op(OpKind.CAST, (RedRef(v.red, v.index, torch.float32),), v.dtype)
    return v


class KernelGen:
    """State while one kernel's source is generated: its signature, names and counters."""

    def __init__(self, target: "Target", kernel: Kernel, lp, sym_names: dict, facts: Optional[IndexFacts] = None):
        self.target = target
        self.kernel = kernel
        self.lp = lp
        self.sym_names = sym_names
        # One per program: the engine's decisions about its index expressions, logged in the trace's env.
        self.facts = facts if facts is not None else IndexFacts(lp.env)
        self.counter = 0
        sig = KernelSignature(kernel)
        self.args, self.ptr, self.written = sig.args, sig.ptr, sig.written
        #: The function name the source is written with (None: the kernel's own name).
        self.fn_base = None
        #: canonical value -> its legal form (see :meth:`legal`).
        self.legal_memo: dict = {}
        #: id of a value met -> (the value, its canonical node): equal values share one node, so
        #: memo lookups compare by identity (see :meth:`canonical`).
        self._canon: dict = {}
        self._interned: dict = {}
        #: Index expressions (simplified) a kernel has already computed under a name: a flat
        #: kernel's dense row-major index is its block's own linear index, no div/mod needed.
        self.index_names: dict = {}
        #: ``(outer vars, their row-major flat index, name)`` where a kernel binds its flat row
        #: number (a tiled kernel's ``xrow``): an index reading the outer dims in that order
        #: prints as ``c*xrow + ...`` (Triton then sees it contiguous; see :meth:`index`).
        self.flat_rows = None

    def legal(self, v):
        """``v`` with every half-precision computation done in float32.

        Each op on half values becomes the float32 op followed by a rounding
        cast back to the half type, so results round after every op as eager's
        do; operands are widened (exactly) first.  Loads stay in the storage type.
        """
        v = self.canonical(v)  # one node per value: the lookups below hit by identity
        got = self.legal_memo.get(v)
        if got is not None:
            return got
        out = self.canonical(_legalize(v, self.legal))  # with nothing to widen, ``v`` itself
        self.legal_memo[v] = out
        self.legal_memo.setdefault(out, out)
        return out

    def canonical(self, v):
        """The one node of this kernel equal to ``v``: an op is looked up by its kind, its dtype
        and the identities of its operands' canonical nodes, so no lookup compares two DAGs node
        by node.  Lowering inlines a buffer at each use, which makes equal copies of deep
        expressions, and comparing those structurally at every memo lookup made codegen of HF
        glm5_next_text's training kernels (DAGs of ~1000 nodes) run past 300 s.

        >>> from compiler.ir import Load, Op
        >>> x = Load("x", 0, torch.float32)
        >>> a, b = (Op("add", (Op("neg", (x,), torch.float32), x), torch.float32) for _ in range(2))
        >>> g = KernelGen.__new__(KernelGen); g._canon, g._interned = {}, {}
        >>> a is b, g.canonical(a) is g.canonical(b)
        (False, True)
        """
        got = self._canon.get(id(v))
        if got is not None:
            return got[1]
        stack = [v]
        while stack:  # operands first, without recursion (expressions may be thousands deep)
            x = stack[-1]
            if id(x) in self._canon:
                stack.pop()
                continue
            args = x.args if isinstance(x, Op) else ()
            todo = [a for a in args if id(a) not in self._canon]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            if isinstance(x, Op):
                cargs = tuple(self._canon[id(a)][1] for a in args)
                key = (x.op, tuple(id(a) for a in cargs), x.dtype)
                c = self._interned.get(key)
                if c is None:
                    c = x if all(a is b for a, b in zip(cargs, args)) else Op(x.op, cargs, x.dtype)
                    self._interned[key] = c
            else:
                c = self._interned.setdefault(("leaf", x), x)
            self._canon[id(x)] = (x, c)
            self._canon.setdefault(id(c), (c, c))
        return self._canon[id(v)][1]

    def accumulated(self, v):
        """A reduction body value in its accumulator's dtype (float32 for half types)."""
        v = self.legal(v)
        return Op(OpKind.CAST, (v,), compute_dtype(v.dtype)) if v.dtype in HALF_DTYPES else v

    def expr(self, e) -> str:
        """A size or index expression in the target's syntax."""
        return self.target.print_expr(e, self.sym_names, self.facts.nonneg)

    def index(self, e) -> str:
        e = self.facts.simplify_index(e)
        name = self.index_names.get(e)
        if name is not None:
            return name
        if self.flat_rows is not None:
            e = _by_flat_row(e, *self.flat_rows)
        return self.target.print_expr(e, self.sym_names, self.facts.nonneg)


def _by_flat_row(e, outer_vars, dense, name):
    """``e`` with its outer-var part written through the flat row number ``name`` where that part
    is ``c * dense`` (the row-major flat index of ``outer_vars``), else ``e`` as it is.

    ``x1 + C*x0 + C*T*r`` (a [B, T, C] tensor summed over B, rows unravelled from ``xrow``) is
    ``xrow + C*T*r``: the unravelled ``x1 = xrow % C`` hides from Triton that consecutive rows
    read consecutive elements, which costs vector loads.

    >>> import sympy
    >>> from compiler.ir import loop_var
    >>> x0, x1, r = loop_var("x0"), loop_var("x1"), loop_var("r")
    >>> C, T = sympy.symbols("C T", integer=True, positive=True)
    >>> _by_flat_row(x1 + C*x0 + C*T*r, (x0, x1), x1 + C*x0, "xrow")
    C*T*r + xrow
    >>> _by_flat_row(x1 + C*r, (x0, x1), x1 + C*x0, "xrow")
    C*r + x1
    """
    last = outer_vars[-1]
    if len(outer_vars) < 2 or not e.has(last) or not e.is_polynomial(last):
        return e
    c = sympy.expand(e).coeff(last, 1)
    if c == 0 or c.has(*outer_vars):
        return e
    rest = sympy.expand(e - c * dense)
    if rest.has(*outer_vars):
        return e
    return rest + c * loop_var(name)


class Target:
    """What a language adds to the skeleton; see :mod:`compiler.codegen.cpp` and ``.triton``."""

    name: str = ""
    #: OpKind -> how the target spells it (see :func:`infix_table`).
    op_table: dict = {}
    #: torch dtype -> the target's type name.
    type_names: dict = {}
    def extern_call(self, op, dtype):
        """The function compiled programs call where ATen's ``op`` (whose result has ``dtype``)
        runs as an extern: ``op`` itself unless the target has a faster one."""
        return op

    # -- values ------------------------------------------------------------------------
    def type_name(self, dtype) -> str:
        return self.type_names[dtype]

    def const(self, value, dtype) -> str:
        """``value`` as a literal of ``dtype``."""
        raise NotImplementedError

    def declare(self, name: str, code: str, dtype) -> str:
        raise NotImplementedError

    def load(self, scope: Scope, v: Load) -> str:
        raise NotImplementedError

    def size_value(self, gen: KernelGen, v: SizeVal):
        """A literal (returned as ``str``) or code to bind to a name (returned via :func:`declare`)."""
        raise NotImplementedError

    def print_expr(self, e, names, nonneg) -> str:
        """``e`` in the target's syntax; ``nonneg(x)`` says whether ``x >= 0`` is known."""
        raise NotImplementedError

    # -- kernels, modules, launchers ---------------------------------------------------
    def kernel_source(self, gen: KernelGen):
        """``(source text, launch metadata)`` for one kernel."""
        raise NotImplementedError

    def module_source(self, parts: list) -> str:
        raise NotImplementedError

    def build(self, source: str):
        """Compile/load a module (cached by content); returns an object with the kernels."""
        raise NotImplementedError

    def launcher(self, module, name: str, meta, lp) -> Callable:
        """``launch(tensors, size values)`` for kernel ``name`` of a built module."""
        raise NotImplementedError

    def prestart(self) -> None:
        """Start what builds kernels (worker processes) before :meth:`warm` needs it."""

    def warm(self, launchers: dict, current=None) -> int:
        """Build every kernel variant a later call may need (the launchers of
        :meth:`make_launchers`), those of sizes ``current`` first; returns how many.
        Targets that build all variants up front (C++) have nothing to do."""
        return 0

    # -- the shared driver -------------------------------------------------------------
    def sym_names(self, lp) -> dict:
        return {s: f"ks{i}" for i, s in enumerate(lp.symbols)}

    def generate(self, lp, steps):
        """Module source and, per kernel, ``(buffer argument names, launch metadata, function
        name)``.  A kernel's function is named by its source (:func:`function_name`): kernels
        that compute the same thing on other buffers (each layer's LayerNorm; the signature
        orders arguments by the kernel's structure) are one function of the module, compiled
        once."""
        names = self.sym_names(lp)
        facts = IndexFacts(lp.env)
        parts, meta, emitted = [], {}, set()
        for s in steps:
            if isinstance(s, Kernel):
                g = KernelGen(self, s, lp, names, facts)
                g.fn_base = FN_PLACEHOLDER
                src, m = self.kernel_source(g)
                base = function_name(src)
                if base not in emitted:
                    emitted.add(base)
                    parts.append(src.replace(FN_PLACEHOLDER, base))
                meta[s.name] = (g.args, m, base)
        return self.module_source(parts), meta

    def make_launchers(self, lp, steps) -> dict:
        """Kernel name -> (buffer argument names, launch(tensors, size values))."""
        src, meta = self.generate(lp, steps)
        if not meta:
            return {}
        module = self.build(src)
        return {name: (args, self.launcher(module, base, m, lp)) for name, (args, m, base) in meta.items()}
