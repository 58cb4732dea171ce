"""Stand-in variants: a kernel's built variant launched while the variant of a call's own size class builds.

Every size class of a Triton kernel is built ahead, in worker processes
(:mod:`.triton_build`), but a call at a new size may come before its class
is ready: the bench of real models calls each new size right after the
first call returns, and the H100 runs of session 22 show first calls at a
new size of 160-375 ms, about half of it spent waiting for builds still
running (3.2 s for 13 builds over one run), the rest compiling classes taken
back from the queue.  Yet the kernel is right at every size in several of its
classes: a class only *assumes* things about the sizes, and a class that
assumes less serves sizes of a class that assumes more.

- A class's ``div16`` sizes are passed divided by 16 (Triton then proves
  alignment): a class whose ``div16`` is a subset of the call's is right.
- A persistent class (the row in one block of ``BLOCK``) is right for every
  row of at most ``BLOCK``; a looped class for every row.
- A tiled kernel's key also fixes its tile width and split: only classes
  with the same ones stand in.

:func:`stand_in` picks, among the variants already built, the one closest
to the call's own (same block first, then the most alignment); the launch
runs it and the call's own variant is moved to the front of the build queue.
Later calls at that size launch their own variant once it is built.  The
classes that can stand in for every size (:func:`general_keys`) are built
right after the first call's, ahead of the others.

Results are the same numbers up to rounding (another block shape may sum in
another order).  With ``torch.use_deterministic_algorithms(True)``, or while
a CUDA graph records (the graph would keep the stand-in), a call waits for
its own variant as before.

Example::

    >>> from compiler.codegen.triton_classes import SizeClass
    >>> keys = [(SizeClass(frozenset(), True), 128), (SizeClass(frozenset({"ks0"}), True), 128),
    ...         (SizeClass(frozenset(), False), 1024)]
    >>> want = (SizeClass(frozenset({"ks0"}), True), 128)
    >>> stand_in(keys, want, row=100, tiled=False, ready=lambda k: k != want)
    (SizeClass(div16=frozenset(), persistent=True), 128)
    >>> stand_in(keys, (SizeClass(frozenset(), True), 256), row=200, tiled=False, ready=lambda k: True)
    (SizeClass(div16=frozenset(), persistent=False), 1024)
"""
from __future__ import annotations

from typing import Callable, Optional

import torch


def builds_ready(pending: dict, key) -> bool:
    """Whether the variant ``key`` of a launcher (``pending``: its builds still tracked,
    :mod:`.triton_build`) can launch without waiting: no build of it tracked (built, or built by
    the launch itself), or every one finished without an error."""
    got = pending.get(key)
    return got is None or all(fut.done() and fut.exception() is None for _, _, fut in got)


def building(pending: dict, key) -> bool:
    """Whether a build of the variant ``key`` is still running or queued (a finished one, failed
    or not, is the launch's to load or compile: :func:`~.triton_build.wait_built`)."""
    return any(not fut.done() for _, _, fut in pending.get(key, ()))


def may_stand_in() -> bool:
    """Whether a call may launch a stand-in now: not under deterministic algorithms, and not while
    a CUDA graph records on the current stream."""
    if torch.are_deterministic_algorithms_enabled():
        return False
    return not (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


def serves(key, want, row, tiled: bool) -> bool:
    """Whether the variant ``key`` computes the same results as ``want`` at a call whose sizes pick
    ``want`` (``row``: the call's row length, where the kernel reduces rows)."""
    (sc, block), (own, own_block) = key, want
    if not sc.div16 <= own.div16:
        return False
    if tiled:
        return block == own_block
    if sc.persistent:
        return row is not None and 0 < row <= block
    return True


def stand_in(keys, want, row, tiled: bool, ready: Callable) -> Optional[tuple]:
    """The key among ``keys`` (a launcher's ``(size class, block)`` variants) to launch for a call
    whose own variant ``want`` is not ready: one that :func:`serves` it and is ``ready(key)``,
    the closest to ``want`` (same block and persistence, then the most sizes aligned); ``None``
    where no built variant serves."""
    best, score = None, None
    for key in keys:
        if key == want or not serves(key, want, row, tiled) or not ready(key):
            continue
        s = (key[1] == want[1] and key[0].persistent == want[0].persistent, len(key[0].div16))
        if score is None or s > score:
            best, score = key, s
    return best


def general_keys(keys, tiled: bool) -> list:
    """The keys among ``keys`` that serve every call of their block: no size assumed a multiple of
    16 and, where rows have persistent blocks of several sizes, the looped variant (a fixed row
    has one persistent block, which serves it).  Built right after a first call's own variants."""
    persistent_blocks = {block for sc, block in keys if sc.persistent}
    looped = any(not sc.persistent for sc, _ in keys)
    out = []
    for sc, block in keys:
        if sc.div16:
            continue
        if not tiled and sc.persistent and (len(persistent_blocks) > 1 or looped):
            continue
        out.append((sc, block))
    return out


__all__ = ["builds_ready", "building", "general_keys", "may_stand_in", "serves", "stand_in"]
