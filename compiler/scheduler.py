"""Group lowered stores and reductions into fused kernels.

Pointwise chains are already fused by lowering (values are inlined index
functions).  The scheduler decides *where* each materialized buffer is
computed: a kernel iterates rows over an ``outer`` shape; per row it runs the
reductions its stores need (prologues inlined into the reduction body),
then writes its stores (epilogues that read the row's reduction results).
A store joins an existing kernel with the same rows when every buffer it
reads is produced by an earlier step; a reduction read at other rows (or
from another kernel) is materialized into its own buffer.

Example::

    >>> import torch, shapes
    >>> from compiler.lowering import lower
    >>> from compiler.scheduler import schedule
    >>> tp = shapes.trace(lambda x: torch.softmax(x, -1) * 2, "x: f32[B, 16]")
    >>> steps = schedule(lower(tp))
    >>> [(type(s).__name__, len(s.reductions)) for s in steps]
    [('Kernel', 2)]
"""
from __future__ import annotations

import sympy

from .ir import JVAR, RVAR, Buffer, Kernel, Load, Op, RedRef, contiguous_strides, flat_index, loop_var, walk
from .codegen.cpp_loops import column_reduction
from .lowered import ExternItem, LoweredProgram, StoreItem


class _Scheduler:
    def __init__(self, lp: LoweredProgram):
        self.lp = lp
        self.steps: list = []
        self.pos: dict[str, int] = {b.name: -1 for b in lp.inputs}
        self.pos.update({b.name: -1 for b, _ in lp.consts})

    def run(self):
        for item in self.lp.items:
            if isinstance(item, ExternItem):
                self.steps.append(item)
                if isinstance(item.out, Buffer):
                    self.pos[item.out.name] = len(self.steps) - 1
                else:
                    self.pos[item.out.value] = len(self.steps) - 1
            elif isinstance(item, StoreItem):
                buf = item.buffer
                if buf.shape and not self._reads_reduction_per_element(item.box, len(buf.shape)):
                    perm = memory_order(buf)
                    if perm is None:
                        outer = tuple(buf.shape[:-1])
                        self.place(outer, lambda ov: item.box(ov + (JVAR,)), buf, inner=True)
                    else:
                        # A transposed buffer (the permuted view a weight gradient's matmul reads):
                        # loop in its memory order, so stores and most loads run along stride 1.
                        view = permuted(buf, perm)
                        self.place(tuple(view.shape[:-1]),
                                   lambda ov, perm=perm: item.box(unpermute(ov + (JVAR,), perm)), view, inner=True)
                elif buf.shape:
                    # A reduction result itself (x.sum(-1) of shape (B, T)): one row per element.
                    self.place(tuple(buf.shape), lambda ov: item.box(ov), buf, inner=False)
                else:
                    self.place((), lambda ov: item.box(()), buf, inner=False)
        for i, s in enumerate(self.steps):
            if isinstance(s, Kernel):
                s.name = f"kernel{i}"
        return self.steps

    def _reads_reduction_per_element(self, box, rank) -> bool:
        ov = tuple(loop_var(f"x{i}") for i in range(rank - 1)) + (JVAR,)
        for n in walk(box(ov)):
            if isinstance(n, RedRef) and any(JVAR in sympy.sympify(i).free_symbols for i in n.index) \
                    and _same_rows(self.lp.reductions[n.red].outer, box.shape):
                return True
        return False

    def materialize(self, red) -> Buffer:
        """A buffer holding reduction ``red`` for every outer point (computed once)."""
        if red.buffer is None:
            buf = Buffer(name=f"red{red.id}", shape=red.outer, strides=contiguous_strides(red.outer), dtype=red.dtype,
                             kind="kernel")
            self.lp.buffers[buf.name] = buf
            red.buffer = buf.name
            self.place(red.outer, lambda ov: RedRef(red.id, ov, red.dtype), buf, inner=False)
        return self.lp.buffers[red.buffer]

    def analyze(self, value, outer, ov, deps, fused, reads):
        """Rewrite ``value`` for a kernel over ``outer``: reductions at this row stay
        RedRefs (computed in the kernel, listed in ``fused``), others become Loads."""
        memo = {}

        def rw(n):
            got = memo.get(id(n))
            if got is not None:
                return got[1]
            if isinstance(n, Load):
                reads.add(n.buf)
                deps.append(self.pos[n.buf])
                out = n
            elif isinstance(n, RedRef):
                red = self.lp.reductions[n.red]
                idx = tuple(n.index)
                free = set().union(*[sympy.sympify(i).free_symbols for i in idx]) if idx else set()
                if JVAR not in free and RVAR not in free and _same_rows(red.outer, outer):
                    # Rows of the reduction correspond one to one to the kernel's rows
                    # (possibly through a reshape): compute it in the row loop.
                    key = (red.id, idx)
                    if key not in fused:
                        body = rw(red.body(idx, RVAR))
                        fused[key] = (red, idx, body)
                    out = n
                else:
                    buf = self.materialize(red)
                    reads.add(buf.name)
                    deps.append(self.pos[buf.name])
                    out = Load(buf.name, flat_index(n.index, buf.strides), red.dtype)
            elif isinstance(n, Op):
                out = Op(n.op, tuple(rw(a) for a in n.args), n.dtype)
            else:
                out = n
            memo[id(n)] = (n, out)
            return out
        return rw(value)

    def place(self, outer, make_value, buf: Buffer, inner: bool):
        outer = tuple(outer)
        ov = tuple(loop_var(f"x{i}") for i in range(len(outer)))
        deps, fused, reads = [], {}, set()
        value = self.analyze(make_value(ov), outer, ov, deps, fused, reads)
        first = max(deps, default=-1) + 1
        best, best_score = None, -1
        alone = Kernel(name="", outer=outer)
        _add(alone, fused, reads, buf, value, inner)
        for p in range(first, len(self.steps)):
            k = self.steps[p]
            if isinstance(k, Kernel) and k.outer == outer and _keeps_columns(k, alone, fused, reads, buf, value, inner):
                have = {(r.id, i) for r, i, _ in k.reductions}
                score = len(have & fused.keys())
                if score >= best_score:
                    best, best_score = p, score
        if best is None:
            self.steps.append(Kernel(name="", outer=outer))
            best = len(self.steps) - 1
        _add(self.steps[best], fused, reads, buf, value, inner)
        self.pos[buf.name] = best


def _add(k: Kernel, fused, reads, buf, value, inner: bool):
    """Put a placed value (its fused reductions, reads and store) into kernel ``k``."""
    have = {(r.id, i) for r, i, _ in k.reductions}
    for key, (red, idx, body) in fused.items():  # insertion order is dependency order
        if key not in have:
            k.reductions.append((red, idx, body))
    k.reads |= reads
    if inner:
        k.inner_stores.append((buf, buf.shape[-1], value))
    else:
        k.row_stores.append((buf, value))


def _keeps_columns(k: Kernel, alone: Kernel, fused, reads, buf, value, inner: bool) -> bool:
    """Whether the value may join kernel ``k`` without turning a sum down columns (a bias
    gradient, :func:`compiler.codegen.cpp_loops.column_reduction`) into a loop that walks
    its rows with a stride: that loop is ~20x slower on the CPU than its column form."""
    if not (column_reduction(k) or column_reduction(alone)):
        return True
    merged = Kernel(name="", outer=k.outer, reductions=list(k.reductions), row_stores=list(k.row_stores),
                    inner_stores=list(k.inner_stores), reads=set(k.reads))
    _add(merged, fused, reads, buf, value, inner)
    return column_reduction(merged)


def memory_order(buf: Buffer):
    """The loop order (a permutation of ``buf``'s dims) that makes the innermost loop run
    along stride 1, when the last dim does not and another (of size > 1) does; else None.

    >>> import torch
    >>> memory_order(Buffer(name="b", shape=(256, 7), strides=(1, 256), dtype=torch.float32, kind="kernel"))
    (1, 0)
    >>> memory_order(Buffer(name="b", shape=(7, 256), strides=(256, 1), dtype=torch.float32, kind="kernel")) is None
    True
    """
    strides = [sympy.sympify(s) for s in buf.strides]
    if not strides or strides[-1] == 1:
        return None
    unit = [d for d, s in enumerate(strides) if s == 1 and sympy.sympify(buf.shape[d]) != 1]
    if len(unit) != 1:
        return None
    d = unit[0]
    return tuple(i for i in range(len(strides)) if i != d) + (d,)


def permuted(buf: Buffer, perm) -> Buffer:
    """``buf`` seen with its dims in ``perm`` order (same name, same addresses).

    >>> import torch
    >>> permuted(Buffer(name="b", shape=(256, 7), strides=(1, 256), dtype=torch.float32, kind="kernel"), (1, 0)).strides
    (256, 1)
    """
    return Buffer(name=buf.name, shape=tuple(buf.shape[d] for d in perm),
                  strides=tuple(buf.strides[d] for d in perm), dtype=buf.dtype, kind=buf.kind)


def unpermute(index, perm) -> tuple:
    """The index in the buffer's own dim order from an index in ``perm`` order.

    >>> unpermute(("j", "x0"), (1, 0))
    ('x0', 'j')
    """
    out = [None] * len(perm)
    for pos, d in enumerate(perm):
        out[d] = index[pos]
    return tuple(out)


def _same_rows(a, b) -> bool:
    if tuple(a) == tuple(b):
        return True
    return sympy.expand(sympy.Mul(*a) - sympy.Mul(*b)) == 0


def schedule(lp: LoweredProgram) -> list:
    """Steps to run in order: :class:`~compiler.lowering.ExternItem` and
    :class:`~compiler.ir.Kernel` objects."""
    return _Scheduler(lp).run()


def describe(steps) -> str:
    """A one-line-per-step summary (for debugging and the bench)."""
    lines = []
    for s in steps:
        if isinstance(s, Kernel):
            lines.append(f"{s.name}: rows={list(s.outer)} reductions={len(s.reductions)} "
                         f"stores={[b.name for b, *_ in s.inner_stores + s.row_stores]}")
        else:
            lines.append(f"extern {getattr(s.target, '__name__', s.target)}")
    return "\n".join(lines)


__all__ = ["schedule", "describe", "sympy"]
