"""One contract entry as data: the program it names, its input specs and dims, what it expects.

Reading and writing contract files (TOML) is the CLI's (:mod:`cli.contracts`); the
record and the TOML text of one value live here, because the findings' fixes are
written in that text.

Example::

    >>> c = Contract(name="rows", program="m.py:f", inputs=["x: f32[B, 8]"], dims={"B": (1, 64)},
    ...              expectations={"max_guards": 0})
    >>> c.name, toml_value(["B", 8]), toml_value({"B": "1..64"})
    ('rows', '["B", 8]', '{ B = "1..64" }')
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Optional

#: The expectations a contract entry may state, in the order they are checked.
EXPECTATIONS = ("output", "valid", "no_specialization", "max_guards", "flops", "comm")


@dataclass(kw_only=True)
class Contract:
    """One entry of a contract file (see :mod:`cli.contracts` for the keys); built by keyword."""

    name: str
    program: str
    inputs: list
    dims: dict
    expectations: dict
    factory: bool = False
    factory_args: dict = field(default_factory=dict)
    base_dir: str = "."
    source: str = ""      # the contract file
    line: int = 0         # the entry's line in it (its ``name =``)
    #: the world size's dim name for a sharded program, or a device mesh's dims -> their sizes' names
    world: Optional[object] = None


def toml_value(v) -> str:
    """``v`` as a TOML value (what a contract file holds and a fix suggests).

    >>> toml_value(True), toml_value(float("inf")), toml_value('a "b"')
    ('true', '"inf"', '"a \\\\"b\\\\""')
    """
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float) and v == math.inf:
        return '"inf"'
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_key(k)} = {toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def _key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else toml_value(k)
