"""The user's names for data-dependent values: never the engine's ``u0``.

A value a program reads from tensor data (``.item()``, the length of
``nonzero``) is a symbol ``u0``, ``u1``, ... inside the engine; a person
knows it by the variable it was assigned to (``k`` for ``k = y.item()``,
``idx.shape[0]`` for ``idx = torch.nonzero(m)``) or the expression that
read it (``x.sum().item()`` in ``if x.sum().item() > 0:``).

Example::

    >>> from shapes.data_names import name_from_source
    >>> from shapes.symbols import DataRead, DataSource, UnbackedKind
    >>> def read(what, code):
    ...     kind = UnbackedKind.INT if what.is_value else UnbackedKind.SIZE
    ...     return name_from_source(DataSource(kind=kind, read=what, code=code), "u0")
    >>> read(DataRead.ITEM, "if x.sum().item() > 0:"), read(DataRead.ITEM, "n = x.sum().long().item()")
    ('x.sum().item()', 'n')
    >>> read(DataRead.NONZERO, "idx = torch.nonzero(x)"), read(DataRead.NONZERO, "n = m.nonzero().shape[0]")
    ('idx.shape[0]', 'n')
    >>> read(DataRead.ALLCLOSE, "if torch.allclose(a, b):"), name_from_source(None, "u3")
    ('torch.allclose(a, b)', 'data_value_3')
    >>> read(DataRead.TRUTH, "if x.sum() > 0:")  # a tensor's truth: torch._check takes a bool
    'bool(x.sum() > 0)'
"""
from __future__ import annotations

import ast
import re
from typing import Mapping, Optional

from .symbols import DataRead, DataSource, UnbackedKind

_ASSIGN = re.compile(r"^\s*([A-Za-z_]\w*)\s*=\s*(.+?)\s*$")
_READS = (".item()", ".tolist()", ".nonzero()")


def _operand_before(code: str, end: int) -> str:
    """The Python operand that ends at ``code[end]``: names, calls, subscripts, attributes."""
    i, depth = end, 0
    while i > 0:
        ch = code[i - 1]
        if ch in ")]":
            depth += 1
        elif ch in "([":
            if depth == 0:
                break
            depth -= 1
        elif depth == 0 and not (ch.isalnum() or ch in "_."):
            break
        i -= 1
    return code[i:end]


def name_from_source(source: Optional[DataSource], fallback: str) -> str:
    """A Python name for the data-dependent value that ``source`` produced (see the module doc)."""
    code = source.code.strip() if source is not None else ""
    a = _ASSIGN.match(code)
    is_value = source is not None and source.read is not None and source.read.is_value
    if a and "," not in a.group(1) and "==" not in code.split("=", 1)[1][:1]:
        rhs = a.group(2).strip()
        is_size = re.search(r"\.shape\[-?\d+\]$|\.size\(-?\d*\)$|^len\(|\.numel\(\)$", rhs)
        return a.group(1) if is_value or is_size else f"{a.group(1)}.shape[0]"
    if a:
        code = a.group(2)
    for kw in ("return ", "if ", "elif ", "while ", "assert "):
        if code.startswith(kw):
            code = code[len(kw):].rstrip(":").strip()
    for r in _READS:  # the read inside a larger expression: x.sum().item() in "x.sum().item() > 0"
        j = code.find(r)
        if j >= 0 and is_value and code[j + len(r):].strip():
            return _operand_before(code, j + len(r))
    truth = source is not None and (source.read is DataRead.TRUTH
                                    or (source.read is DataRead.ITEM and source.kind is UnbackedKind.BOOL))
    if code and truth and not code.startswith("bool("):
        # The branch tested a tensor's truth: torch._check needs a Python bool, not a tensor.
        return f"bool({code})"
    if code:
        return _as_operand(code) if is_value else f"len({code})"
    return f"data_value_{fallback.lstrip('u')}"


def _as_operand(code: str) -> str:
    """``code`` as one operand: the name stands inside larger conditions (``(x.sum() > 0) == 1``;
    unparenthesized it would read as a chained comparison)."""
    try:
        node = ast.parse(code, mode="eval").body
    except SyntaxError:
        return f"({code})"
    return code if isinstance(node, (ast.Name, ast.Call, ast.Attribute, ast.Subscript, ast.Constant)) else f"({code})"


def distinct_names(sources: Mapping) -> dict:
    """Each data-dependent symbol of ``sources`` (symbol -> DataSource, in creation order) -> a
    name of its own.

    Names read off the user's lines can collide: ``lens = m.sum(1).tolist()`` reads one value
    per row, all assigned to ``lens``, and a loop reads a new ``n = x.item()`` each time round.
    One name for two values would print ``lens + T > lens + T`` for a condition between two
    different values (a true-looking tautology the trace calls undecidable).  So the values of
    one ``.tolist()`` line are its elements ``lens[0]``, ``lens[1]``, ... (in the order the
    trace read them), and any other clash falls back to the engine-neutral ``data_value_K``,
    which the messages explain by where it was read.

    >>> from shapes.symbols import DataRead, DataSource, UnbackedKind
    >>> import sympy
    >>> src = DataSource(kind=UnbackedKind.INT, read=DataRead.ITEM, filename="f.py", lineno=3,
    ...                  code="lens = m.sum(1).tolist()")
    >>> u0, u1, u2 = sympy.symbols("u0 u1 u2")
    >>> distinct_names({u0: src, u1: src})
    {u0: 'lens[0]', u1: 'lens[1]'}
    >>> loop = DataSource(kind=UnbackedKind.INT, read=DataRead.ITEM, filename="f.py", lineno=5, code="n = x.item()")
    >>> distinct_names({u0: loop, u1: loop, u2: src})
    {u0: 'data_value_0', u1: 'data_value_1', u2: 'lens'}
    """
    names = {u: name_from_source(source, u.name) for u, source in sources.items()}
    by_name: dict = {}
    for u, name in names.items():
        by_name.setdefault(name, []).append(u)
    for name, us in by_name.items():
        if len(us) < 2:
            continue
        lines = {(sources[u].filename, sources[u].lineno, sources[u].code) if sources[u] is not None else None
                 for u in us}
        one_tolist = len(lines) == 1 and None not in lines and name.isidentifier() and ".tolist()" in next(iter(lines))[2]
        for i, u in enumerate(us):
            names[u] = f"{name}[{i}]" if one_tolist else f"data_value_{u.name.lstrip('u')}"
    return names


def data_name(env, u) -> str:
    """The user's name for the data-dependent symbol ``u`` of ``env``."""
    names = data_names(env)
    return names[u] if u in names else name_from_source(None, u.name)


def data_names(env) -> dict:
    """Every data-dependent symbol of ``env`` -> the user's name for it (one name per symbol)."""
    return distinct_names(env.unbacked)
