"""Launching Triton kernels: the size class of each call picks a compiled variant, grid and blocks.

:class:`SizeClassLauncher` is what a compiled program calls per kernel; the
kernel's source comes from :class:`~compiler.codegen.triton.TritonTarget`
(rows, flat blocks, or tiles of :mod:`.triton_tiles`), its classes from
:mod:`.triton_classes`, and a launch at fixed sizes is bound once
(:func:`~compiler.codegen.triton_launch.bind_launch`).

Example::

    >>> Grid.TILES.value, _warps(4096)
    ('tiles', 8)
"""
from __future__ import annotations

import os

import sympy
import torch

from shapes.enums import TextEnum

from ..exprs import compile_exprs
from .skeleton import KernelGen
from .triton_classes import GENERIC, PERSISTENT_MAX, SizeClass, alignment_symbols, capped_alignment, pow2_block, reachable_classes, row_blocks
from .stand_ins import builds_ready, building, may_stand_in, stand_in
from .triton_build import WAITS, wait_built
from .triton_launch import Launcher, bind_launch
from . import triton_tiles
from .triton_tiles import split_count, tile_blocks, tile_size, vector_indexes

_pow2 = pow2_block

class Grid(TextEnum):
    """How a kernel's programs cover its work: one per block of elements (``FLAT``), one per
    row (``ROWS``), or one per ``XBLOCK`` rows in tiles (``TILES``, :mod:`.triton_tiles`)."""

    FLAT = "flat"
    ROWS = "rows"
    TILES = "tiles"


def _warps(block) -> int:
    return 4 if block <= 1024 else 8 if block <= 4096 else 16


class _Recording(KernelGen):
    """A kernel generator that keeps every size and index expression it prints."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.seen: list = []

    def expr(self, e) -> str:
        self.seen.append(e)
        return super().expr(e)

    def index(self, e) -> str:
        self.seen.append(e)
        return super().index(e)


class SizeClassLauncher:
    """``launch(tensors, sizes)`` for one kernel: a compiled check on the sizes picks the
    kernel variant of their size class (built once per class, cached on disk by content),
    never a retrace.  ``variants`` maps each size class seen to its compiled kernel.

    The classes (:mod:`.triton_classes`): the divisibility by 16 of each size symbol that
    decides some alignment of the kernel (``aligned``), and for reductions whose row
    length is one expression, persistent (row <= PERSISTENT_MAX, block = the next power
    of two) or looped.  :meth:`warm_jobs` compiles every class the kernel can meet."""

    def __init__(self, target, module, kernel, lp, kind, work, block, rowlen, dtypes=(), fn_base=None):
        self.target, self.kernel, self.lp, self.kind, self.block = target, kernel, lp, kind, block
        #: The name of the kernel's functions in its sources (a digest of the source: kernels
        #: computing the same thing share it, and their builds).
        self.fn_base = fn_base or kernel.name
        sym_names = target.sym_names(lp)
        self.names = [sym_names[s] for s in lp.symbols]
        # A tiled kernel's row length is its reduced dim, which a split cuts (:func:`.split_count`).
        exprs = list(work) + ([rowlen] if rowlen is not None else [])
        self.split = kind is Grid.TILES and rowlen is not None
        #: A tiled kernel's elements per tile, once: it walks every reduction body (a plan per new size).
        self.tile = tile_size(kernel) if kind is Grid.TILES else None
        self.work_fn = compile_exprs(exprs, lp.symbols)
        self.nwork = len(work)
        #: The launch's output counts (expressions): where all are numbers, a tiled kernel's XBLOCK is fixed.
        self.work = tuple(work)
        self.dtypes = list(dtypes)
        self.variants = {GENERIC: getattr(module, self.fn_base)}
        #: The file and module name a loaded variant's function lives in (the generic one: the
        #: program's module), for a worker to build that very function (Triton's key holds both).
        self._files = {GENERIC: (module.__file__, module.__name__)}
        #: A splittable tiled kernel's partial-results kernel per size class.
        self.parts = {GENERIC: getattr(module, self.fn_base + "_part", None)}
        self.plans: dict = {}
        self.bound: dict = {}
        #: (class, BLOCK) -> a build still running in a worker (:mod:`.triton_build`): the first
        #: launch of that variant waits for it, so that it loads the binary instead of compiling.
        self.pending: dict = {}
        # (id of the variant, options) -> Launcher (launch_at): ids, as a JITFunction
        # hashes through a lock.
        self._launchers: dict = {}
        #: (divisibility flags of the aligned sizes, persistent) -> (class, kernel, indices passed
        #: divided by 16): a new size of a known class (every decode step) binds without sets.
        self._by_flags: dict = {}
        g = _Recording(target, kernel, lp, sym_names)
        target.kernel_source(g)
        seen = g.seen if kind is not Grid.TILES else vector_indexes(kernel, g.seen)
        aligned = alignment_symbols(seen, set(lp.symbols))
        #: The size names whose divisibility by 16 picks a class (the others never do).
        self.aligned = [sym_names[s] for s in lp.symbols if s in aligned]
        self.rowlen = rowlen if kind is Grid.ROWS else None
        #: One row of a size-dependent length (a loss summed over every token): always looped.
        #: Its persistent blocks (one per power of two up to PERSISTENT_MAX, times the alignment
        #: classes: 44 builds for GPT-2's training loss) would buy nothing for a single program.
        self.loop_only = (self.rowlen is not None and not sympy.sympify(self.rowlen).is_Integer
                          and all(sympy.sympify(w) == 1 for w in work))
        # Each aligned name doubles the classes: a ViT backward kernel reading 17 saved sizes
        # had 2**17 * 4 of them, and enumerating them to build ahead never ended.  Past the cap,
        # the names used in the fewest index expressions stop picking a class: a size outside
        # ``aligned`` is only not assumed a multiple of 16 (the kernel is right for every value).
        self.aligned = capped_alignment(self.aligned, g.seen, sym_names, len(self.classes(aligned=[])))
        self._aidx = tuple(i for i, n in enumerate(self.names) if n in self.aligned)

    @property
    def tiled(self) -> bool:
        """Whether the kernel is a tiled reduction (its stand-ins must share tile width and split)."""
        return self.kind is Grid.TILES

    def size_class(self, sizes, row) -> SizeClass:
        div = frozenset(n for n, v in zip(self.names, sizes) if v % 16 == 0 and n in self.aligned)
        return SizeClass(div, self.kind is Grid.ROWS and not self.loop_only and row is not None
                         and 0 < row <= PERSISTENT_MAX)

    def classes(self, aligned=None) -> list:
        """``[(size class, BLOCK)]``: every class (and persistent block) a call can meet;
        for a tiled kernel ``(size class, XBLOCK)``, each width a launch may pick.  Over the
        size names ``aligned`` (default: the kernel's :attr:`aligned`)."""
        aligned = self.aligned if aligned is None else aligned
        if self.kind is Grid.TILES:  # (XBLOCK, split): a split launch has XBLOCK 16 (few outputs)
            widths = triton_tiles.XBLOCKS
            outputs = [sympy.sympify(w) for w in self.work]
            if outputs and all(w.is_Integer for w in outputs):  # a fixed output count: one width
                widths = (tile_blocks(int(max(outputs)), self.tile)[0],)
            keys = [(xb, False) for xb in widths] + ([(triton_tiles.XBLOCKS[0], True)] if self.split else [])
            return [(sc, key) for sc in reachable_classes(aligned, None) for key in keys]
        if self.loop_only:
            return [(sc, self.block) for sc in reachable_classes(aligned, None)]
        blocks = row_blocks(self.rowlen, self.lp.symbols)
        out = []
        for sc in reachable_classes(aligned, blocks):
            if not sc.persistent and blocks is None and self.rowlen is not None:
                fixed = int(sympy.sympify(self.rowlen))
                if 0 < fixed <= PERSISTENT_MAX:
                    out.append((SizeClass(sc.div16, True), _pow2(fixed, PERSISTENT_MAX)))
                    continue
            if sc.persistent:
                out += [(sc, b) for b in blocks]
            else:
                out.append((sc, self.block))
        return out

    def warm_jobs(self, classes=None) -> list:
        """One ``job()`` per class of :meth:`classes` (or of ``classes``): compile it (a Triton
        warm-up, no launch; a split tiled kernel: both of its kernels)."""
        def job(sc, block):
            opts = self._options(block)
            ptrs, sizes = list(self.dtypes), [3] * len(self.names)
            if not self.split:
                return [lambda: self.kernel_for(sc).warmup(*ptrs, *sizes, grid=(1,), **opts)]
            # The workspace argument: float32 partials, or the first buffer where there are none.
            ws = torch.float32 if opts["SPLIT"] else ptrs[0]
            out = [lambda: self.kernel_for(sc).warmup(*ptrs, ws, *sizes, 3, 3, grid=(1,), **opts)]
            if opts["SPLIT"]:
                part = {k: v for k, v in opts.items() if k != "SPLIT"}
                out.append(lambda: self.part_for(sc).warmup(*ptrs, ws, *sizes, 3, 3, grid=(1, 1), **part))
            return out
        return [j for sc, b in (self.classes() if classes is None else classes) for j in job(sc, b)]

    @property
    def process_buildable(self) -> bool:
        """Whether a build worker (:mod:`.build_worker`) can build this kernel's variants (every
        kernel can: a tiled one as its kernel and, where it splits, its partials kernel)."""
        return True

    def build_payloads(self, classes=None) -> list:
        """``[((class, BLOCK), payload)]`` for a build worker (:mod:`.build_worker`): the variant's
        module file, its function and the warm-up's arguments, for ``classes`` (default: all).
        A split tiled variant has two entries under its key (its kernel, its partials kernel),
        with the arguments :meth:`warm_jobs` warms them with."""
        out = []
        for sc, block in classes if classes is not None else self.classes():
            path, mod = self.variant_file(sc)
            ptrs = [("dtype", str(d).rsplit(".", 1)[-1]) for d in self.dtypes]
            sizes = [3] * len(self.names)
            opts = self._options(block)
            name = self.fn_base + sc.suffix
            if not self.split:
                out.append(((sc, block), (path, mod, name, ptrs + sizes,
                                          {"grid": (1,), **opts})))
                continue
            ws = ("dtype", "float32") if opts["SPLIT"] else ptrs[0]  # float32 partials, or the first buffer
            args = ptrs + [ws] + sizes + [3, 3]
            out.append(((sc, block), (path, mod, name, args, {"grid": (1,), **opts})))
            if opts["SPLIT"]:
                part = {k: v for k, v in opts.items() if k != "SPLIT"}
                out.append(((sc, block), (path, mod, name + "_part", args, {"grid": (1, 1), **part})))
        return out

    def class_at(self, sizes) -> tuple:
        """The key of :meth:`classes` a launch at ``sizes`` uses: ``(size class, BLOCK)``, or
        for a tiled kernel ``(size class, (XBLOCK, split))``."""
        w = self.work_fn(*sizes)
        row = w[self.nwork] if len(w) > self.nwork else None
        sc = self.size_class(sizes, row)
        if self.kind is Grid.TILES:
            n = max(w[:self.nwork])
            xb, block = tile_blocks(n, self.tile)
            if not self.split:
                return sc, (xb, False)
            splits, _ = split_count(n, row, block, xb)
            return sc, (xb, splits > 1)
        if self.kind is not Grid.FLAT and sc.persistent:
            return sc, _pow2(row, PERSISTENT_MAX)
        return sc, self.block

    def variant_file(self, sc: SizeClass) -> tuple:
        """``(path, module name)`` of the file holding class ``sc``'s variant, its source generated
        once: the build's submission, the preload thread's load and a launch meeting the class
        share it (a persistent variant's source takes ~90 ms of sympy on the GPU host's CPU, and
        it was made again at each of them)."""
        got = self._files.get(sc)
        if got is None:
            got = self._files.setdefault(sc, self._write_variant(sc))
        elif not os.path.exists(got[0]):  # its cache directory was emptied since: written again
            got = self._files[sc] = self._write_variant(sc)
        return got

    def _write_variant(self, sc: SizeClass) -> tuple:
        return self.target.module_file(self.target.variant_source(self.kernel, self.lp, sc, self.fn_base))

    def kernel_for(self, sc: SizeClass):
        fn = self.variants.get(sc)
        if fn is None:
            mod = self.target.load_module(*self.variant_file(sc))
            # setdefault: the preload thread (.preload) and a launch making it at once get one function.
            fn = self.variants.setdefault(sc, getattr(mod, self.fn_base + sc.suffix))
            self.parts.setdefault(sc, getattr(mod, self.fn_base + sc.suffix + "_part", None))
        return fn

    def part_for(self, sc: SizeClass):
        self.kernel_for(sc)
        return self.parts[sc]

    def __call__(self, tensors, sizes):
        plan = self.plans.get(sizes)
        if plan is None:
            plan, own = self._plan(sizes)
            if own and len(self.plans) < 4096:  # sizes seen repeat: one dict lookup per call
                self.plans[sizes] = plan
        fn, grid, args, opts = plan
        if grid[0] > 0:
            if self.split:
                fn(tensors, lambda f, g, t, a, o: f[g](*t, *a, **o))
                return
            fn[grid](*tensors, *args, **opts)

    def bind(self, sizes):
        """``launch(tensors)`` at these sizes: the variant, grid and arguments fixed, and
        after its first launch straight through the compiled kernel's launcher
        (:func:`~compiler.codegen.triton_launch.bind_launch`)."""
        got = self.bound.get(sizes)
        if got is None:
            (fn, grid, args, opts), own = self._plan(sizes)
            if not own:  # a stand-in (:mod:`.stand_ins`): this size's own variant once it is built
                return _StandInLaunch(self, sizes)
            if grid[0] <= 0:
                got = _no_launch
            elif self.split:
                got = _bound_split(fn)
            else:
                got = bind_launch(fn, grid, args, opts)
            if len(self.bound) < 4096:
                self.bound[sizes] = got
        return got

    def launch_at(self, tensors, sizes):
        """Launch at ``sizes`` without a binding (:class:`~compiler.codegen.triton_launch.Launcher`):
        for kernels that meet a new size at nearly every call (a decode step's, which see the
        cache length), where a binding would serve one call and be dropped."""
        fn, grid, args, opts = self.plan(sizes)
        if grid[0] <= 0:
            return
        if self.split:  # two kernels and a workspace: through each kernel's Launcher
            fn(tensors, lambda f, g, t, a, o: self._launcher(f, o)(t, g, a))
            return
        self._launcher(fn, opts)(tensors, grid, args)

    def _launcher(self, fn, opts) -> Launcher:
        key = (id(fn), tuple(opts.items()))
        got = self._launchers.get(key)
        if got is None:
            got = self._launchers[key] = Launcher(fn, opts)
        return got

    def _options(self, block) -> dict:
        """The launch's constexprs and warps: ``block`` is BLOCK, or a tiled kernel's (XBLOCK, split)."""
        if self.kind is Grid.TILES:
            tile = self.tile
            xb, split = block
            opts = {"BLOCK": tile // xb, "XBLOCK": xb, "num_warps": _warps(tile), **triton_tiles.TILE_OPTIONS}
            return {**opts, "SPLIT": split} if self.split else opts
        return {"BLOCK": block, "num_warps": _warps(block)}

    def plan(self, sizes):
        """(kernel, grid, size arguments, launch options) at these sizes."""
        return self._plan(sizes)[0]

    def own_ready(self, sizes) -> bool:
        """Whether the variant of these sizes' own class can launch without waiting for a build."""
        return not self.pending or not building(self.pending, self.class_at(sizes))

    def _plan(self, sizes):
        """``(plan, own)``: :meth:`plan`, and whether it launches the sizes' own variant (else a
        built variant stands in while it builds, :mod:`.stand_ins`)."""
        w = self.work_fn(*sizes)
        row = w[self.nwork] if len(w) > self.nwork else None
        flags = (tuple(sizes[i] % 16 == 0 for i in self._aidx),
                 self.kind is Grid.ROWS and not self.loop_only and row is not None and 0 < row <= PERSISTENT_MAX)
        got = self._by_flags.get(flags)
        if got is None:
            sc = self.size_class(sizes, row)
            got = self._by_flags[flags] = (sc, self.kernel_for(sc),
                                           frozenset(i for i, n in enumerate(self.names) if n in sc.div16))
        sc, fn, div = got
        n = max(w[:self.nwork])
        if self.kind is Grid.TILES:
            xb, block = tile_blocks(n, self.tile)
            grid = ((n + xb - 1) // xb,)
            splits, chunk = split_count(n, row, block, xb) if self.split else (1, 0)
            key = (sc, (xb, splits > 1))
        else:
            if self.kind is Grid.FLAT:
                key, n = (sc, self.block), (n + self.block - 1) // self.block
            else:
                key = (sc, _pow2(row, PERSISTENT_MAX) if sc.persistent else self.block)
            grid = (n,)
        own = True
        if self.pending:
            alt = self._stand_in(key, row)
            if alt is not None:
                own, key, sc, fn = False, alt, alt[0], self.kernel_for(alt[0])
                div = frozenset(i for i, m in enumerate(self.names) if m in sc.div16)
            else:
                wait_built(self.pending, key)
        args = [v // 16 if i in div else v for i, v in enumerate(sizes)] if div else list(sizes)
        opts = self._options(key[1])
        if self.kind is not Grid.TILES or not self.split:
            return (fn, grid, args, opts), own
        part = self.part_for(sc) if splits > 1 else None
        return (_SplitLaunch(fn, part, grid, args + [splits, chunk], opts, len(self.kernel.reductions) * splits * n),
                grid, args, opts), own

    def _stand_in(self, key, row):
        """A built variant to launch for a call whose own variant ``key`` is still building (its
        build moved to the front of the queue), or ``None`` (the call waits, as before)."""
        if not building(self.pending, key) or not may_stand_in():
            return None
        keys = self.__dict__.get("_keys")
        if keys is None:
            keys = self._keys = self.classes()
        alt = stand_in(keys, key, row, self.tiled, lambda k: builds_ready(self.pending, k))
        if alt is not None:
            WAITS["stand_ins"] += 1
            for pool, job_key, fut in self.pending.get(key, ()):
                if not fut.done():
                    pool.promote(job_key)
        return alt


def _no_launch(tensors):
    """An empty grid: nothing to launch."""


class _StandInLaunch:
    """A bound launch at ``sizes`` whose own variant was still building when it was bound: each
    call launches a stand-in (:mod:`.stand_ins`) until the own variant is built, then binds that
    one and launches it from then on."""

    def __init__(self, launcher, sizes):
        self.launcher, self.sizes, self.own = launcher, sizes, None

    def __call__(self, tensors):
        if self.own is None:
            if not self.launcher.own_ready(self.sizes):
                self.launcher(tensors, self.sizes)
                return
            self.own = self.launcher.bind(self.sizes)
        self.own(tensors)


class _SplitLaunch:
    """A splittable tiled kernel's launch at fixed sizes: with ``part`` (a split), partial results
    per chunk of rows into a fresh float32 workspace, then the main kernel combining them; without,
    the main kernel alone (the first buffer stands in for the workspace it does not read)."""

    def __init__(self, fn, part, grid, args, opts, ws_elems):
        self.fn, self.part, self.grid, self.args, self.opts, self.ws_elems = fn, part, grid, args, opts, ws_elems
        self.part_opts = {k: v for k, v in opts.items() if k != "SPLIT"}
        self.part_grid = (grid[0], args[-2])

    def __call__(self, tensors, launch):
        """``launch(fn, grid, tensors, args, options)`` for each kernel, in order."""
        if self.part is None:
            launch(self.fn, self.grid, list(tensors) + [tensors[0]], self.args, self.opts)
            return
        ws = torch.empty(self.ws_elems, dtype=torch.float32, device=tensors[0].device)
        launch(self.part, self.part_grid, list(tensors) + [ws], self.args, self.part_opts)
        launch(self.fn, self.grid, list(tensors) + [ws], self.args, self.opts)


def _bound_split(sl: _SplitLaunch):
    """``launch(tensors)`` for a :class:`_SplitLaunch`, each kernel through :func:`bind_launch`."""
    main = bind_launch(sl.fn, sl.grid, sl.args, sl.opts)
    part = bind_launch(sl.part, sl.part_grid, sl.args, sl.part_opts) if sl.part is not None else None

    def launch(tensors):
        if part is None:
            main(list(tensors) + [tensors[0]])
            return
        ws = torch.empty(sl.ws_elems, dtype=torch.float32, device=tensors[0].device)
        part(list(tensors) + [ws])
        main(list(tensors) + [ws])
    return launch
