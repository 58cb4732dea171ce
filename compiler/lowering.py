"""Lower a traced ATen graph into loop-level IR and extern (ATen) calls.

Every tensor value becomes a :class:`TensorBox`: a function from an index
(sympy exprs) to a Val.  Pointwise ops compose these functions, views remap
indices, reductions create :class:`~compiler.ir.Reduction` objects.  Nothing
is materialized until something needs a real tensor (an extern op or a
graph output); the scheduler then fuses what must be computed.

Example::

    >>> import torch, shapes
    >>> from compiler.lowering import lower
    >>> tp = shapes.trace(lambda x: torch.relu(x) * 2, "x: f32[N]")
    >>> lp = lower(tp)
    >>> [type(i).__name__ for i in lp.items]
    ['StoreItem']
"""
from __future__ import annotations

import itertools
import operator
from typing import Any

import sympy

import torch
import torch.fx

from shapes.functions import FloorDiv, PyMod, ToFloat, TrueDiv, TruncToInt

from . import index_lowering, ops_lowering, view_lowering  # noqa: F401 (index_lowering, view_lowering: register their handlers)
from .ir import KERNEL_DTYPES, Buffer, BufferKind, Const, Load, Op, OpKind, RedRef, Reduction, SizeVal, \
    compute_dtype, contiguous_strides, flat_index, loop_var, walk
from .lowered import ExternItem, LoweredProgram, Ref, RefKind, SizeExpr, StoreItem, TensorBox, Unsupported, cast


def _is_dense(shape, strides, hints) -> bool:
    """Strides describe a permutation of a contiguous layout (no gaps, no overlap)."""
    try:
        sz = [int(sympy.sympify(s).xreplace(hints)) for s in shape]
        st = [int(sympy.sympify(s).xreplace(hints)) for s in strides]
    except (TypeError, ValueError):
        return False
    order = sorted((i for i in range(len(sz)) if sz[i] != 1), key=lambda i: st[i])
    acc = 1
    for i in order:
        if st[i] != acc:
            return False
        acc *= sz[i]
    return True


class Lowerer:
    def __init__(self, tp):
        self.tp = tp
        self.buffers: dict[str, Buffer] = {}
        self.items: list = []
        self.reductions: dict[int, Reduction] = {}
        self.vals: dict[torch.fx.Node, Any] = {}
        self.hints = {s: sympy.Integer(v) for s, v in tp.env.hints.items()}
        self.externs = 0
        self.mutating = False

    # -- buffers and boxes --------------------------------------------------------------
    def new_buffer(self, name, shape, dtype, kind, strides=None) -> Buffer:
        base, k = name, 1
        while name in self.buffers:
            name = f"{base}_{k}"
            k += 1
        b = Buffer(name=name, shape=tuple(shape),
                   strides=tuple(strides) if strides is not None else contiguous_strides(shape),
                   dtype=dtype, kind=kind)
        self.buffers[name] = b
        return b

    def buffer_box(self, buf: Buffer, node=None) -> TensorBox:
        return TensorBox(buf.shape, buf.dtype, lambda idx: Load(buf.name, flat_index(idx, buf.strides), buf.dtype),
                         node=node, buf=buf)

    def reduction(self, op, outer, rsize, body, dtype) -> Reduction:
        r = Reduction(len(self.reductions), op, tuple(outer), rsize, body, dtype)
        self.reductions[r.id] = r
        return r

    def realize(self, box: TensorBox) -> Buffer:
        """A real tensor for ``box``: replay a view eagerly, or store it with a kernel."""
        if box.buf is not None:
            return box.buf
        src = box.__dict__.get("clone_of")
        if src is not None and (src.buf is not None or src.view_of is None):
            # A clone in a functional graph is the value it copies: where that is stored by a kernel
            # at the clone's strides, the clone is that tensor (BERT's embeddings: one store, not two).
            # A source not stored yet is stored in the clone's place only where it gets those strides.
            have = src.buf.strides if src.buf is not None else self._store_strides(src)
            if (src.buf is None or src.buf.kind is BufferKind.KERNEL) and _eager_strides(box.node) == tuple(
                    sympy.sympify(s) for s in have):
                box.buf = self.realize(src)
                return box.buf
        name = box.node.name if box.node is not None else "tmp"
        root = _reshape_root(box)
        if root is not None and self.realize(root).strides != _eager_strides(root.node):
            root = None  # stored at other strides than eager's: its views are not replayed on it
        if box.view_of is not None and box.node is not None and (
                root is not None or _replayable(box.view_of) or _matrix_transpose(box)):
            # A chain of views: replay each on the real tensor, no copies.  A matrix's transpose
            # (a matmul operand: the backward's grad.t() @ x) is a view of any tensor, so its
            # source is stored once and transposed as a view, not stored twice in two layouts.
            self.realize(box.view_of)
            buf = self.new_buffer(name, box.shape, box.dtype, "extern")
            self.items.append(ExternItem(target=box.node.target, args=self.template(box.node.args),
                                         kwargs=self.template(box.node.kwargs), out=buf, node=box.node))
        else:
            buf = self.new_buffer(name, box.shape, box.dtype, "kernel", self._store_strides(box))
            self.items.append(StoreItem(buffer=buf, box=box))
        box.buf = buf
        return buf

    def _store_strides(self, box) -> tuple:
        """The strides a kernel stores ``box`` at: eager's where dense and someone may see them,
        else contiguous.

        Eager's layout follows its inputs': Whisper's encoder adds positions to its convolution's
        output viewed ``(B, T, D)`` from ``(B, D, T)``, and every residual sum after it keeps that
        transposed layout, so each norm and sum of every layer read across rows (eager copies it
        back before each matmul; here the sums ran at a seventh of the bandwidth).  A value only
        symshape's own kernels read has no layout anyone observes: it is stored contiguous."""
        val = box.node.meta.get("val") if box.node is not None else None
        if isinstance(val, torch.Tensor) and tuple(val.shape) and all(
                isinstance(s, (int, torch.SymInt)) for s in val.stride()):
            st = tuple(sympy.sympify(s.node.expr if isinstance(s, torch.SymInt) else s) for s in val.stride())
            if _is_dense(box.shape, st, self.hints):
                contiguous = contiguous_strides(box.shape)
                if st != contiguous and self._kernels_only(box.node):
                    return contiguous
                return st
        return contiguous_strides(box.shape)

    def _kernels_only(self, node) -> bool:
        """Whether every reader of ``node`` is an op lowered into kernels (not an ATen call, which
        may return another layout for another input layout, nor the program's output)."""
        if not node.users or self.mutating:
            return False
        for u in node.users:
            if u.op != "call_function" or u.target not in ops_lowering.HANDLERS or not _kernel_dtypes_ok(u):
                return False
        return True

    def template(self, a):
        """Extern arguments: tensors become buffer refs, SymInts size refs."""
        if isinstance(a, torch.fx.Node):
            v = self.vals[a]
            if isinstance(v, TensorBox):
                return Ref(RefKind.BUF, self.realize(v).name)
            if isinstance(v, SizeExpr):
                return Ref(RefKind.SIZE, v.expr)
            if isinstance(v, Ref):
                return v
            if isinstance(v, tuple):
                return tuple(self.template_value(x) for x in v)
            return v
        if isinstance(a, (list, tuple)):
            return type(a)(self.template(x) for x in a)
        if isinstance(a, dict):
            return {k: self.template(v) for k, v in a.items()}
        if isinstance(a, torch.device) and a.type == "meta":
            return Ref(RefKind.DEVICE, None)
        return a

    def template_value(self, v):
        if isinstance(v, TensorBox):
            return Ref(RefKind.BUF, self.realize(v).name)
        if isinstance(v, SizeExpr):
            return Ref(RefKind.SIZE, v.expr)
        return v

    # -- the walk ------------------------------------------------------------------------
    def run(self) -> LoweredProgram:
        g = self.tp.graph
        mutating = any(n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
                       and n.target._schema.is_mutable for n in g.nodes)
        inputs, consts, outputs = [], [], []
        for node in g.nodes:
            if node.op == "placeholder":
                val = node.meta["val"]
                buf = self.new_buffer(node.name, node.meta["shape"], val.dtype, "input")
                inputs.append(buf)
                self.vals[node] = self.buffer_box(buf, node)
            elif node.op == "get_attr":
                val = node.meta["val"]
                buf = self.new_buffer(node.name, node.meta["shape"], val.dtype, "const")
                consts.append((buf, node.target))
                self.vals[node] = self.buffer_box(buf, node)
            elif node.op == "call_function":
                self.vals[node] = self.call(node, force_extern=mutating)
            elif node.op == "output":
                for a in node.args[0]:
                    outputs.append(self.template(a) if isinstance(a, torch.fx.Node) else a)
        syms = sorted(self.tp.env.hints.keys(), key=lambda s: s.name)
        return LoweredProgram(inputs=inputs, consts=consts, buffers=self.buffers, items=self.items,
                              reductions=self.reductions, outputs=outputs,
                              symbols=[s for s in syms if s.name in self.tp.env.symbols], externs=self.externs,
                              env=self.tp.env)

    def call(self, node, force_extern=False):
        if "expr" in node.meta and "val" not in node.meta:
            return SizeExpr(node.meta["expr"])
        if "val" not in node.meta and node.target in _SIZE_OPS:
            # An intermediate of a folded size expression (the tracer keeps no expr for it).
            args = [a.expr if isinstance(a, SizeExpr) else sympy.sympify(a) for a in self.arg(node.args)]
            return SizeExpr(_SIZE_OPS[node.target](*args))
        if node.target is operator.getitem:
            src = self.vals[node.args[0]]
            if isinstance(src, tuple):
                out = src[node.args[1]]
                if isinstance(out, TensorBox) and self.store_shared(node, out):
                    return self.buffer_box(self.realize(out), node)  # a norm's output read twice
                return out
            buf = self.new_buffer(node.name, node.meta["shape"], node.meta["val"].dtype, "extern")
            self.items.append(ExternItem(target=operator.getitem, args=(src, node.args[1]), kwargs={}, out=buf, node=node))
            return self.buffer_box(buf, node)
        handler = None if force_extern else ops_lowering.HANDLERS.get(node.target)
        if handler is not None and _kernel_dtypes_ok(node):
            try:
                out = handler(self, node, *[self.arg(a) for a in node.args],
                              **{k: self.arg(v) for k, v in node.kwargs.items()})
            except Unsupported:
                pass
            else:
                if isinstance(out, TensorBox) and (self.store_broadcast(node, out) or self.store_shared(node, out)):
                    return self.buffer_box(self.realize(out), node)
                return out
        return self.extern(node)

    def store_broadcast(self, node, box: TensorBox) -> bool:
        """Whether ``box`` is computed once into a buffer rather than inlined into its users:
        a pointwise value with transcendental ops (no reduction) that some user reads broadcast
        to more elements.  Inlined there it is recomputed per broadcast copy: a rotary
        embedding's cos and sin of ``[B, T, D]`` positions, read by every head of q and k of
        every layer, would cost H x 2 x layers sin/cos per element instead of one."""
        if box.buf is not None or box.view_of is not None or not box.shape:
            return False
        mine = self.numel(box.shape)
        if mine is None or not any((n or 0) > mine for n in _user_numels(node, self.numel)):
            return False
        ov = tuple(loop_var(f"x{i}") for i in range(len(box.shape)))
        kinds = set()
        for n in walk(box(ov)):
            if isinstance(n, RedRef):
                return False  # a per-row reduction's epilogue (a norm's rsqrt) stays in its kernel
            if isinstance(n, Op):
                kinds.add(OpKind(n.op))
        return bool(kinds & TRANSCENDENTAL)

    def store_shared(self, node, box: TensorBox) -> bool:
        """Whether ``box`` is stored once because several ops read it and it combines at least
        :data:`SHARED_LOADS` loads or reduction results: a transformer's residual stream, which
        every later norm would otherwise recompute from the embeddings on, once per pass of its
        reductions."""
        copy = getattr(node.target, "overloadpacket", None) is torch.ops.aten.clone  # lowered as a view
        if box.buf is not None or (box.view_of is not None and not copy) or not box.shape:
            return False
        if len(_user_numels(node, self.numel)) < 2:
            return False
        ov = tuple(loop_var(f"x{i}") for i in range(len(box.shape)))
        nodes = list(walk(box(ov)))
        # A norm's output counts too (its reductions' results are read like loads): post-norm
        # blocks (BERT) read it in the next residual sum and the next norm.  A load of one value
        # per row (a saved max or logsumexp, a label, a scalar) costs next to nothing recomputed:
        # a cross-entropy's log-softmax (logits - max - lse) and its one-hot gradient stay inline
        # rather than each becoming a [T, vocab] float32 buffer written and read back.
        last = ov[-1] if sympy.sympify(box.shape[-1]) != 1 else None
        if sum(isinstance(n, RedRef) or (isinstance(n, Load) and (
                last is None or last in sympy.sympify(n.index).free_symbols)) for n in nodes) < SHARED_LOADS:
            return False
        # A function of one tensor of its size (plus per-row reductions and smaller, broadcast
        # operands) costs its users one load either way: recomputed, it needs no buffer.  A
        # loss's log-softmax (logits - max - logsumexp), stored, was two fp32 copies of the
        # (tokens, vocabulary) logits at the start of the backward: +512 MiB at its peak.
        mine = self.numel(box.shape)
        full = {n.buf for n in nodes if isinstance(n, Load) and n.buf in self.buffers
                and (self.numel(self.buffers[n.buf].shape) or 0) >= (mine or 0)}
        return mine is None or len(full) >= 2

    def numel(self, shape):
        """Elements of ``shape`` at the trace's size hints (None: not a number)."""
        try:
            return int(sympy.Mul(*[sympy.sympify(d) for d in shape]).xreplace(self.hints))
        except (TypeError, ValueError):
            return None

    def arg(self, a):
        if isinstance(a, torch.fx.Node):
            return self.vals[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self.arg(x) for x in a)
        return a

    def extern(self, node):
        self.externs += 1
        args, kwargs = self.template(node.args), self.template(node.kwargs)
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            buf = self.new_buffer(node.name, node.meta["shape"], val.dtype, "extern")
            self.items.append(ExternItem(target=node.target, args=args, kwargs=kwargs, out=buf, node=node))
            return self.buffer_box(buf, node)
        key = Ref(RefKind.BUF, self.new_buffer(node.name, (), torch.float32, "tuple").name)
        self.items.append(ExternItem(target=node.target, args=args, kwargs=kwargs, out=key, node=node))
        return key

    # -- helpers for op handlers -----------------------------------------------------------
    def out_box(self, node, fn, shape=None, dtype=None) -> TensorBox:
        return TensorBox(tuple(shape if shape is not None else node.meta["shape"]),
                         dtype or node.meta["val"].dtype, fn, node=node)

    def value(self, a, idx, out_shape, dtype=None):
        """``a`` (a box, scalar or size) at the output index ``idx``, broadcast."""
        if isinstance(a, TensorBox):
            n, k = len(out_shape), len(a.shape)
            sub = tuple(sympy.Integer(0) if (a.shape[i] == 1 and out_shape[n - k + i] != 1) else idx[n - k + i]
                        for i in range(k))
            v = a(sub)
        elif isinstance(a, SizeExpr):
            # A SymFloat (``4 / N``: interpolate's scale) is a float value, not an integer size.
            v = SizeVal(a.expr, torch.float64 if float_valued(a.expr) else torch.int64)
        elif isinstance(a, bool):
            v = Const(a, torch.bool)
        elif isinstance(a, int):
            v = Const(a, dtype if dtype is not None else torch.int64)
        elif isinstance(a, float):
            v = Const(a, dtype if dtype is not None and dtype.is_floating_point else torch.float64)
        else:
            raise Unsupported(f"operand {a!r}")
        return cast(v, dtype) if dtype is not None else v

    def reduce(self, box: TensorBox, dims, keepdim, op, dtype, node=None) -> TensorBox:
        """``op`` over ``dims`` of ``box``; the result box reads the reduction."""
        n = len(box.shape)
        dims = sorted({d % n for d in dims}) if dims else list(range(n))
        outer_dims = [i for i in range(n) if i not in dims]
        outer = tuple(box.shape[i] for i in outer_dims)
        rsizes = [box.shape[i] for i in dims]
        rsize = sympy.Mul(*rsizes) if rsizes else sympy.Integer(1)

        # Reduced dims of extent 1 take index 0: the others split the reduction index without a
        # modulo by a size the index never reaches (``r % T`` for a ``[1, T, C]`` sum over (0, 1)
        # would hide that the loads walk the rows with a fixed stride).
        split = [d for d in dims if sympy.sympify(box.shape[d]) != 1]
        if box.buf is not None and n - 1 not in dims and sympy.sympify(box.shape[-1]) != 1:
            # A sum down the columns of a value already stored (GPT-2's GELU-backward output, a
            # bias gradient's input that the weight gradient's matmul reads): it runs in its own
            # kernel, so reading the stored rows costs one load where the inlined value would
            # recompute the whole pointwise chain (~20 ops per element, each bf16-rounded).
            box = self.buffer_box(box.buf)
        if op == "sum" and _small_static(box.shape, split):
            out = self._unrolled_sum(box, dims, split, keepdim, dtype, node)
            out.rsize = rsize
            return out

        def body(ov, r):
            idx = [sympy.Integer(0)] * n
            for i, v in zip(outer_dims, ov):
                idx[i] = v
            rem = r
            for d in reversed(split[1:]):
                idx[d] = PyMod(rem, box.shape[d])
                rem = FloorDiv(rem, box.shape[d])
            if split:
                idx[split[0]] = rem
            return cast(box(idx), dtype)

        red = self.reduction(op, outer, rsize, body, dtype)
        if keepdim:
            shape = tuple(sympy.Integer(1) if i in dims else box.shape[i] for i in range(n))
            fn = lambda idx: RedRef(red.id, tuple(idx[i] for i in outer_dims), dtype)  # noqa: E731
        else:
            shape = outer
            fn = lambda idx: RedRef(red.id, tuple(idx), dtype)  # noqa: E731
        out = TensorBox(shape, dtype, fn, node=node)
        out.rsize = rsize
        return out

    def _unrolled_sum(self, box: TensorBox, dims, split, keepdim, dtype, node) -> TensorBox:
        """A sum over a few elements of static count as a chain of adds: a pointwise value.

        Reducing ``[B, Hkv, 2, T, D]`` over its group dim (grouped-query attention's backward
        through ``repeat_kv``) is otherwise a reduction of 2 per output element: a kernel with
        one row per element, far slower than the adds, and a fusion boundary.
        """
        n = len(box.shape)
        acc = compute_dtype(dtype)
        outer_dims = [i for i in range(n) if i not in dims]
        points = list(itertools.product(*(range(int(box.shape[d])) for d in split)))

        def fn(idx):
            full = [sympy.Integer(0)] * n
            it = iter(idx) if not keepdim else iter(idx[i] for i in outer_dims)
            for i in outer_dims:
                full[i] = next(it)
            total = None
            for pt in points:
                for d, v in zip(split, pt):
                    full[d] = sympy.Integer(v)
                term = cast(cast(box(tuple(full)), dtype), acc)
                total = term if total is None else Op("add", (total, term), acc)
            return cast(total, dtype)
        shape = tuple(sympy.Integer(1) if i in dims else box.shape[i] for i in range(n)) if keepdim else \
            tuple(box.shape[i] for i in outer_dims)
        return TensorBox(shape, dtype, fn, node=node)


#: Reductions of at most this many elements (a static count) are unrolled into adds.
SMALL_REDUCTION = 8


def _small_static(shape, split) -> bool:
    """The dims ``split`` of ``shape`` are static and hold 2..SMALL_REDUCTION elements in all."""
    sizes = [sympy.sympify(shape[d]) for d in split]
    if not sizes or not all(s.is_Integer for s in sizes):
        return False
    return 1 < int(sympy.Mul(*sizes)) <= SMALL_REDUCTION


#: Ops worth computing once rather than per broadcast copy (see :meth:`Lowerer.store_broadcast`).
TRANSCENDENTAL = frozenset({OpKind.EXP, OpKind.LOG, OpKind.SIN, OpKind.COS, OpKind.TANH, OpKind.ERF, OpKind.POW,
                            OpKind.SIGMOID, OpKind.LOG1P, OpKind.EXPM1})
#: Loads in a value read by several ops from which it is stored once (see :meth:`Lowerer.store_shared`).
SHARED_LOADS = 3
#: Ops whose result is a view of their input: a broadcast is seen through them.
_VIEW_OPS = frozenset(getattr(torch.ops.aten, n) for n in (
    "view", "_unsafe_view", "unsqueeze", "squeeze", "expand", "permute", "t", "alias", "clone", "reshape", "slice",
    "select", "narrow", "transpose"))


def _user_numels(node, numel, depth: int = 4) -> list:
    """Output elements of the ops that read ``node``'s value, seen through views (None where unknown)."""
    out = []
    for u in node.users:
        target = getattr(u, "target", None)
        shape = u.meta.get("shape")
        if depth and getattr(target, "overloadpacket", None) in _VIEW_OPS:
            out += _user_numels(u, numel, depth - 1)
        else:
            out.append(numel(shape) if shape is not None and isinstance(u.meta.get("val"), torch.Tensor) else None)
    return out


_SIZE_OPS = {operator.add: operator.add, operator.mul: operator.mul, operator.sub: operator.sub,
             operator.neg: operator.neg, operator.floordiv: FloorDiv, operator.mod: PyMod,
             torch.sym_min: sympy.Min, torch.sym_max: sympy.Max}


#: View ops that keep every element (a reshape): storing their base instead costs nothing more.
_RESHAPES = frozenset({torch.ops.aten.view, torch.ops.aten._unsafe_view, torch.ops.aten.reshape,
                       torch.ops.aten.unsqueeze, torch.ops.aten.squeeze})


def _reshape_root(box):
    """The computed value a chain of reshapes starts from, where ``box`` is one; else None.

    Several reshapes of one value (q, k and v projections each viewing a norm's ``[B, T, D]``
    output as ``[B * T, D]``) then share one stored base rather than storing it once each."""
    b = box
    while b.view_of is not None:
        if b.node is None or getattr(b.node.target, "overloadpacket", None) not in _RESHAPES:
            return None
        b = b.view_of
    if b is box or b.node is None or b.buf is not None and b.buf.kind is not BufferKind.KERNEL:
        return None
    return b if _eager_strides(b.node) is not None else None


def _eager_strides(node):
    """The strides eager gives ``node``'s tensor (sympy), where dense and known; else None."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or not tuple(val.shape):
        return None
    if not all(isinstance(s, (int, torch.SymInt)) for s in val.stride()):
        return None
    return tuple(sympy.sympify(s.node.expr if isinstance(s, torch.SymInt) else s) for s in val.stride())


def _matrix_transpose(box) -> bool:
    """``box`` is a 2-D transpose (``t``, ``transpose``, ``permute``): valid on any strides."""
    return (box.node.target in (torch.ops.aten.t.default, torch.ops.aten.transpose.int, torch.ops.aten.permute.default)
            and len(box.shape) == 2 and box.view_of.node is not None)


def _replayable(box) -> bool:
    """A chain of views ending at a real tensor whose strides are eager's (an input,
    a constant or an ATen result), so that replaying the views eagerly succeeds."""
    for _ in range(64):
        if box.buf is not None:
            return box.buf.kind in (BufferKind.INPUT, BufferKind.CONST, BufferKind.EXTERN)
        if box.view_of is None or box.node is None:
            return False
        box = box.view_of
    return False


def _kernel_dtypes_ok(node) -> bool:
    vals = [node.meta.get("val")]
    for a in node.all_input_nodes:
        vals.append(a.meta.get("val"))
    for v in vals:
        for t in (v if isinstance(v, (tuple, list)) else (v,)):
            if isinstance(t, torch.Tensor) and t.dtype not in KERNEL_DTYPES:
                return False
    return True


def float_valued(e) -> bool:
    """Whether the size expression ``e`` has a float value (a SymFloat): a true division or a
    conversion to float anywhere outside an integer-valued function.

    >>> N = sympy.Symbol("N", integer=True)
    >>> float_valued(TrueDiv(4, N) * 2), float_valued(FloorDiv(N, 2) + 1), float_valued(N)
    (True, False, False)
    """
    if isinstance(e, (TrueDiv, ToFloat, sympy.Float)):
        return True
    if isinstance(e, (TruncToInt, FloorDiv, PyMod, sympy.Mod)) or not isinstance(e, sympy.Basic) or not e.args:
        return False
    return any(float_valued(a) for a in e.args)


def lower(tp) -> LoweredProgram:
    """Lower a :class:`~shapes.program.TracedProgram`; raises :class:`Unsupported`
    for graphs with data-dependent sizes (the runtime then runs them eagerly)."""
    for n in tp.graph.nodes:
        if n.meta.get("unbacked_bindings"):
            raise Unsupported("data-dependent sizes")
    return Lowerer(tp).run()
