"""Ops a target computes from its primitives, written once for every target (as Inductor's OpDecompositions).

A target states its primitives (:class:`Primitives`): how it spells ``exp``,
``log``, a select, the constants 1 and infinity, and which of ``log1p``,
``expm1``, ``tanh`` and ``sigmoid`` it has as precise functions of its own.
:func:`spellings` gives each composite op's spelling: the target's precise
function where it has one, else a formulation that stays precise near 0, never
``log(1 + x)`` (whose ``1 + x`` rounds to 1 for ``|x|`` below the epsilon, so
``log1p(1e-10)`` would be 0):

* ``log1p``: Kahan's ``log(u) * (x / (u - 1))`` with ``u = 1 + x`` (``x``
  where ``u`` rounds to 1, ``u`` where it overflows);
* ``expm1``: Kahan's ``(u - 1) * (x / log(u))`` with ``u = exp(x)`` (``x``
  where ``u`` rounds to 1, -1 and infinity at the ends);
* ``tanh``: ``-t / (t + 2)`` with ``t = expm1(-2|x|)``, sign restored
  (finite for every ``x``, precise near 0);
* ``sigmoid``: ``1 / (1 + exp(-x))``.

Example::

    >>> from compiler.ir import OpKind
    >>> p = Primitives(exp="tl.exp", log="tl.log", one="1.0", inf="_INF",
    ...                where=lambda c, a, b: f"tl.where({c}, {a}, {b})", sigmoid="tl.sigmoid")
    >>> spell = spellings(p)
    >>> spell[OpKind.SIGMOID](["x"], None, "tl.float32")
    'tl.sigmoid(x)'
    >>> spell[OpKind.LOG1P](["x"], None, "tl.float32")
    'tl.where((1.0 + x) == 1.0, x, tl.where((1.0 + x) == _INF, (1.0 + x), tl.log((1.0 + x)) * (x / ((1.0 + x) - 1.0))))'
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from ..ir import OpKind


@dataclass(frozen=True)
class Primitives:
    """What a target has: ``exp``/``log`` function names, ``where(cond, a, b)``, the constants
    ``one`` and ``inf`` (format strings over ``{t}``, the type name), and its own precise
    ``log1p``/``expm1``/``tanh``/``sigmoid`` functions where it has them (None: decomposed)."""

    exp: str
    log: str
    one: str
    inf: str
    where: Callable[[str, str, str], str]
    log1p: Optional[str] = None
    expm1: Optional[str] = None
    tanh: Optional[str] = None
    sigmoid: Optional[str] = None


def _log1p(p: Primitives, x: str, t: str) -> str:
    if p.log1p:
        return f"{p.log1p}({x})"
    one, inf = p.one.format(t=t), p.inf.format(t=t)
    u = f"({one} + {x})"
    return p.where(f"{u} == {one}", x, p.where(f"{u} == {inf}", u, f"{p.log}({u}) * ({x} / ({u} - {one}))"))


def _expm1(p: Primitives, x: str, t: str) -> str:
    if p.expm1:
        return f"{p.expm1}({x})"
    one, inf = p.one.format(t=t), p.inf.format(t=t)
    u = f"{p.exp}({x})"
    kahan = f"({u} - {one}) * ({x} / {p.log}({u}))"
    return p.where(f"{u} == {one}", x, p.where(f"({u} - {one}) == -{one}", f"-{one}",
                                                 p.where(f"{u} == {inf}", u, kahan)))


def _tanh(p: Primitives, x: str, t: str) -> str:
    if p.tanh:
        return f"{p.tanh}({x})"
    one = p.one.format(t=t)
    two = f"({one} + {one})"
    a = p.where(f"{x} < 0", f"-{x}", x)
    m = f"({_expm1(p, f'-{two} * {a}', t)})"
    pos = f"(-{m} / ({m} + {two}))"
    return p.where(f"{x} < 0", f"-{pos}", pos)


def _sigmoid(p: Primitives, x: str, t: str) -> str:
    if p.sigmoid:
        return f"{p.sigmoid}({x})"
    one = p.one.format(t=t)
    return f"{one} / ({one} + {p.exp}(-{x}))"


#: The composite ops and how each is computed from the primitives.
COMPOSITES = {OpKind.LOG1P: _log1p, OpKind.EXPM1: _expm1, OpKind.TANH: _tanh, OpKind.SIGMOID: _sigmoid}


def spellings(p: Primitives) -> dict:
    """The op-table entries (``(operands, op, type name) -> code``) of :data:`COMPOSITES` for ``p``."""
    return {k: (lambda a, v, t, _f=f: _f(p, a[0], t)) for k, f in COMPOSITES.items()}
