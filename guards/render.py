"""Render guard expressions as Python, in dim names or in the user's terms.

Example::

    >>> import sympy
    >>> from guards.render import to_python
    >>> B = sympy.Symbol("B", integer=True)
    >>> to_python(sympy.Eq(B % 8, 0))
    'B % 8 == 0'
    >>> to_python(B > 16, names={B: "x.shape[0]"})
    'x.shape[0] > 16'
    >>> to_python(B - 1 < 128)
    'B - 1 < 128'
    >>> to_python(sympy.Or(sympy.Eq(B, 1), sympy.Eq(B, 4)))
    'B in (1, 4)'
"""
from __future__ import annotations

import os
import re
from typing import Mapping, Optional

import sympy

# to_python is the engine's printer for people (errors, dinfer, flops, the CLI use it too).
from shapes.printers import PythonPrinter, same_symbol, to_python  # noqa: F401

from shapes.data_names import data_names

from .for_people import people_conjunction, people_dnf


def source_names(env) -> dict:
    """Symbol -> the first user-visible place it came from (``x.shape[0]``); data-dependent
    values by the user's names for them (``x.sum().item()``, never ``u0``)."""
    out = dict(data_names(env))
    for s, srcs in env.sources.items():
        if srcs:
            out[s] = str(srcs[0])
    return out


def render_guard(guard, env, *, user_terms: bool = True) -> str:
    """A guard's condition in the user's terms (``x.shape[0] > 16``) or dim names (``B > 16``),
    solved per dim for people (``x.shape[2] // 2 >= 2`` reads ``x.shape[2] >= 4``)."""
    names = source_names(env) if user_terms else data_names(env)
    return people_conjunction([guard.expr], names, always="True", never="False")


def render_conjunction(conds, names: Optional[Mapping] = None) -> str:
    """Conditions joined by ``and``; a lower and an upper bound on one symbol read as
    one chained comparison (``2 <= N <= 8``).

    Example::

        >>> N, M = sympy.symbols("N M", integer=True)
        >>> render_conjunction([sympy.Ge(N, 2), sympy.Le(N, 8), sympy.Eq(M % 2, 0)])
        '2 <= N <= 8 and M % 2 == 0'
        >>> render_conjunction([])
        'True'
    """
    conds = [c for c in conds if c is not sympy.true]
    if not conds:
        return "True"
    # Solved per dim for people (H // 2 >= 1 is H >= 2; 64 <= C <= 64 is C == 64).
    return people_conjunction(conds, names, always="True", never="False")


def render_dnf(dnf, names: Optional[Mapping] = None) -> str:
    """A disjunction of conjunctions (``[(a, b), (c,)]``) as Python: ``(a and b) or c``.

    Example::

        >>> H, W = sympy.symbols("H W", integer=True)
        >>> render_dnf([(sympy.Le(H, 7),), (sympy.Le(W, 7),)])
        'H <= 7 or W <= 7'
        >>> render_dnf([])
        'False'
    """
    dnf = list(dnf)
    if not dnf:
        return "False"
    if any(len(d) == 0 for d in dnf):
        return "True"
    return people_dnf(dnf, names, always="True", never="False")


def _split_top(s: str, sep: str) -> Optional[list]:
    """``s`` split at ``sep`` outside parentheses, or None when it is not there."""
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return parts if len(parts) > 1 else None


def clean_message(msg: str) -> str:
    """An error message from torch with its symbolic sizes in Python syntax.

    torch joins a shape's sizes with ``x`` (``(4x6x6)``); with symbolic sizes that
    reads like a product (``(4xH - 2xW - 2)``), so such tuples are written with
    commas, and any sympy text left is rewritten (``Eq(a, b)`` as ``a == b``).

    Example::

        >>> clean_message("Given input size: (4x(H - 2)x(W - 2)). Calculated output size: (4x3x3).")
        'Given input size: (4, H - 2, W - 2). Calculated output size: (4, 3, 3).'
        >>> clean_message("Expected Eq((N % 8), 0) and Ne(A, 1)")
        'Expected N % 8 == 0 and A != 1'
    """
    out, i = "", 0
    while i < len(msg):
        if msg[i] != "(":
            out += msg[i]
            i += 1
            continue
        depth, j = 0, i
        while j < len(msg):
            depth += msg[j] == "("
            depth -= msg[j] == ")"
            if depth == 0:
                break
            j += 1
        inner = msg[i + 1:j]
        parts = _split_top(inner, "x")
        if parts and all(_SIZE_TEXT.match(p.strip()) for p in parts) and any(
                p.strip().isdigit() for p in parts):
            out += "(" + ", ".join(_unparen(p.strip()) for p in parts) + ")"
        else:
            out += "(" + clean_message(inner) + (")" if j < len(msg) else "")
        i = j + 1
    return _sympy_calls(out)


_SIZE_TEXT = re.compile(r"^[\w(][\w\s+\-*/%()]*$")


def _unparen(s: str) -> str:
    if s.startswith("(") and s.endswith(")") and _split_top(s[1:-1], ")") is None:
        return s[1:-1]
    return s


def _sympy_calls(s: str) -> str:
    """``Eq(a, b)`` / ``Ne(a, b)`` / ``Mod(a, b)`` / ``floor(a)`` in text, as Python."""
    ops = {"Eq": "==", "Ne": "!=", "Mod": "%", "Lt": "<", "Le": "<=", "Gt": ">", "Ge": ">="}
    pat = re.compile(r"\b(Eq|Ne|Mod|Lt|Le|Gt|Ge|floor)\(")
    while True:
        m = pat.search(s)
        if not m:
            return s
        start, depth, j = m.end(), 1, m.end()
        while j < len(s) and depth:
            depth += s[j] == "("
            depth -= s[j] == ")"
            j += 1
        inner = s[start:j - 1]
        if m.group(1) == "floor":
            rep = f"math.floor({inner})"
        else:
            args = _split_top(inner, ",")
            if not args or len(args) != 2:
                return s
            a, b = (x.strip() for x in args)
            rep = f"{_unparen(a)} {ops[m.group(1)]} {_unparen(b)}"
            if m.group(1) == "Mod":
                rep = f"({rep})"
        s = s[:m.start()] + rep + s[j:]


def short_path(filename: str) -> str:
    """A path for reading: relative to the working directory when under it,
    from ``site-packages/`` on for installed libraries.

    >>> short_path("/usr/lib/python3/site-packages/torch/nn/functional.py")
    'site-packages/torch/nn/functional.py'
    """
    if not filename or filename.startswith("<"):
        return filename or "<unknown>"
    i = filename.rfind("site-packages" + os.sep)
    if i >= 0:
        return filename[i:]
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    # Outside the working directory an absolute path reads better than ../..
    return filename if rel.startswith(".." + os.sep) else rel
