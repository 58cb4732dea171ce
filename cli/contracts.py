"""Shape contracts: what a program promises about its input sizes, as TOML.

A contract file is a standalone ``symshape.toml`` (entries under
``[[contract]]``) or a ``pyproject.toml`` (entries under
``[[tool.symshape.contract]]``).  Each entry names a program and states
expectations that ``symshape check`` proves or refutes::

    [[contract]]
    name = "mlp"
    program = "examples/mlp.py:MLP"        # FILE.py:NAME or package.module:NAME
    inputs = ["x: f32[B, T, 64]"]
    dims = { B = "1..64", T = "1..4096" }  # LO..HI, or an int pins the dim
    valid = true                           # every size in the ranges runs; or a region: "T <= 128"
    no_specialization = true               # no dim is fixed to a constant by the trace
    max_guards = 0                         # guards (recompile conditions) at most
    flops = "1024*B*T*(...)"               # proved equal to the symbolic FLOP count
    output = ["B", "T", 64]                # the output shape (a list of these for several)

A sharded program (one that calls ``torch.distributed``, see :mod:`shapes.distributed`)
names its world size with ``world = "W"`` (its range in ``dims``, like any dim) and may
state the bytes each rank sends per collective kind, proved like ``flops``::

    world = "W"
    dims = { S = "1..64", W = "1..8" }
    comm = { all_gather = "4*D*S*(W - 1)" } # per rank, ring convention (shapes.flops.comm)

A program on a device mesh (a ``shapes.distributed.per_world`` factory taking the mesh's sizes
by dim) names each dim's size instead, with their ranges in ``dims``::

    mesh = { dp = "D", tp = "T" }
    dims = { B = "1..8", D = "1..2", T = "1..4" }

``output``, ``valid`` and ``flops`` are proved for every class of sizes
dinfer finds in the ranges (a formula that differs in one class fails with
a point of that class).  ``no_specialization`` and ``max_guards`` are about
the trace at the example sizes (>= 2 where the ranges allow): sizes 0 and 1
taking their own path under PyTorch's 0/1 policy do not count.

``factory = true`` says NAME is a function that builds the model (called
with no arguments, or with the table ``factory_args`` as keywords).
Program paths are relative to the contract file's folder.

Example::

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "symshape.toml").write_text('''
    ... [[contract]]
    ... name = "mlp"
    ... program = "m.py:f"
    ... inputs = ["x: f32[B, 8]"]
    ... dims = { B = "1..64" }
    ... max_guards = 0
    ... ''')
    >>> [c] = load_contracts(d / "symshape.toml")
    >>> c.name, c.dims, c.expectations
    ('mlp', {'B': (1, 64)}, {'max_guards': 0})
"""
from __future__ import annotations

import importlib
import importlib.util
import math
import os
import re
import sys
import tomllib
from typing import Optional

from shapes.enums import TextEnum
from validation.contracts.contract import EXPECTATIONS, Contract, toml_value  # noqa: F401  (re-exported)

from .args import BoundsError, parse_bounds
from .loader import CliError, as_program, exec_user_file, load_program

_KEYS = {"name", "program", "factory", "factory_args", "inputs", "dims", "world", "mesh", *EXPECTATIONS}


def default_contract_file(cwd: str = ".") -> str:
    """``symshape.toml`` if present, else ``pyproject.toml`` when it has ``[tool.symshape]``."""
    for name in ("symshape.toml", "pyproject.toml"):
        p = os.path.join(cwd, name)
        if os.path.isfile(p):
            if name == "pyproject.toml":
                try:
                    with open(p, "rb") as f:
                        if "symshape" not in tomllib.load(f).get("tool", {}):
                            continue
                except tomllib.TOMLDecodeError:
                    pass  # reported by load_contracts with the position
            return p
    raise CliError("no contract file: give one (symshape check FILE) or create symshape.toml, or "
                   "[tool.symshape] in pyproject.toml")


def _table(path: str, data: dict) -> list:
    if os.path.basename(path) == "pyproject.toml" or "tool" in data:
        entries = data.get("tool", {}).get("symshape", {}).get("contract")
        where = "[[tool.symshape.contract]]"
    else:
        entries = data.get("contract")
        where = "[[contract]]"
    if entries is None:
        raise CliError(f"{path} has no contract entries: add {where} tables")
    if not isinstance(entries, list):
        raise CliError(f"{path}: {where} must be an array of tables (write [[...]], not [...])")
    return entries


def parse_dims(value, where: str) -> dict:
    """``{B = "1..64", T = 16}`` -> ``{"B": (1, 64), "T": 16}`` (a bare int pins the dim)."""
    if not isinstance(value, dict):
        raise CliError(f"{where}: dims must be a table like {{ B = \"1..64\" }}")
    out = {}
    for k, v in value.items():
        if isinstance(v, bool):
            raise CliError(f"{where}: dims.{k} = {v!r} is not a range")
        if isinstance(v, int):
            if v < 0:
                raise CliError(f"{where}: dims.{k} = {v} is negative")
            out[k] = v
            continue
        empty = f"{where}: dims.{k} = {v!r} is an empty or negative range"
        expected = f"{where}: dims.{k} = {v!r}: expected \"LO..HI\" (e.g. \"1..64\"), [LO, HI] or an int"
        if isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            lo, hi = v
        elif isinstance(v, str) and ".." in v:
            try:
                lo, hi = parse_bounds(v)  # the one parser of --dim's ranges too
            except BoundsError as e:
                raise CliError(expected if e.malformed else empty) from None
        else:
            raise CliError(expected)
        if lo < 0 or lo > hi:
            raise CliError(empty)
        out[k] = (lo, hi)
    return out


def load_contracts(path) -> list:
    """Read and validate the entries of a contract file (a list of :class:`Contract`)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise CliError(f"cannot read contract file {path}: {e.strerror}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise CliError(f"{path} is not valid TOML: {e}") from None
    text = raw.decode("utf-8")
    out, seen = [], set()
    for i, e in enumerate(_table(path, data)):
        where = f"{path}: contract entry {i + 1}"
        if not isinstance(e, dict):
            raise CliError(f"{where} is not a table")
        unknown = sorted(set(e) - _KEYS)
        if unknown:
            raise CliError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(_KEYS))}")
        name = e.get("name")
        if not isinstance(name, str) or not name:
            raise CliError(f"{where} has no name = \"...\"")
        where = f"{path}: contract {name!r}"
        if name in seen:
            raise CliError(f"{where} is defined twice")
        seen.add(name)
        prog = e.get("program")
        if not isinstance(prog, str) or ":" not in prog:
            raise CliError(f"{where}: program must be \"FILE.py:NAME\" or \"module:NAME\"")
        inputs = e.get("inputs")
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not inputs or not all(isinstance(s, str) for s in inputs):
            raise CliError(f"{where}: inputs must be a list of specs like [\"x: f32[B, T, 768]\"]")
        exp = {k: e[k] for k in EXPECTATIONS if k in e}
        _check_expectations(exp, where)
        fargs = e.get("factory_args", {})
        if not isinstance(fargs, dict):
            raise CliError(f"{where}: factory_args must be a table")
        world = e.get("world")
        if world is not None and (not isinstance(world, str) or not world.isidentifier()):
            raise CliError(f"{where}: world must name the world size's dim, like world = \"W\"")
        mesh = e.get("mesh")
        if mesh is not None:
            if world is not None:
                raise CliError(f"{where}: give world or mesh, not both (a mesh's sizes multiply to the world's)")
            if not isinstance(mesh, dict) or not mesh or not all(
                    isinstance(k, str) and k.isidentifier() and isinstance(v, str) and v.isidentifier()
                    for k, v in mesh.items()):
                raise CliError(f"{where}: mesh must map each mesh dim to its size's name, like "
                               f"mesh = {{ dp = \"D\", tp = \"T\" }}")
            world = dict(mesh)
        if "comm" in exp and world is None:
            raise CliError(f"{where}: comm needs world = \"W\" (the world size's dim) or a mesh")
        m = re.search(r'^\s*name\s*=\s*["\']' + re.escape(name) + r'["\']', text, re.M)
        out.append(Contract(name=name, program=prog, inputs=list(inputs), dims=parse_dims(e.get("dims", {}), where),
                            expectations=exp, factory=bool(e.get("factory", False) or fargs), factory_args=fargs,
                            base_dir=os.path.dirname(os.path.abspath(path)), source=path,
                            line=text.count("\n", 0, m.start()) + 1 if m else 1, world=world))
    return out


def _check_expectations(exp: dict, where: str):
    if not exp:
        raise CliError(f"{where} states no expectation; give one of {', '.join(EXPECTATIONS)}")
    v = exp.get("valid")
    if v is not None and not isinstance(v, (bool, str)):
        raise CliError(f"{where}: valid must be true or a condition string like \"T <= 128\"")
    if "no_specialization" in exp and not isinstance(exp["no_specialization"], bool):
        raise CliError(f"{where}: no_specialization must be true or false")
    mg = exp.get("max_guards")
    if mg is not None and (isinstance(mg, bool) or not isinstance(mg, int) or mg < 0):
        raise CliError(f"{where}: max_guards must be a non-negative integer")
    fl = exp.get("flops")
    if fl is not None and not isinstance(fl, (str, int)):
        raise CliError(f"{where}: flops must be a formula string like \"2*B*T*768\"")
    cm = exp.get("comm")
    if cm is not None and (not isinstance(cm, dict) or not all(isinstance(v, (str, int)) for v in cm.values())):
        raise CliError(f"{where}: comm must be a table of collective kind = formula, like "
                       f"{{ all_reduce = \"8*N*(W - 1)/W\" }}")
    o = exp.get("output")
    if o is not None:
        shapes = o if o and all(isinstance(s, list) for s in o) else [o]
        if not isinstance(o, list) or not all(isinstance(d, (int, str)) and not isinstance(d, bool)
                                              for s in shapes for d in s):
            raise CliError(f"{where}: output must be a shape like [\"B\", \"T\", 768] or a list of shapes")


# --------------------------------------------------------------------------- programs


class TargetKind(TextEnum):
    """How a program target is named: ``FILE.py:NAME`` or ``module:NAME``."""

    FILE = "file"
    MODULE = "module"


def resolve_target(target: str, roots, restrict: bool = True) -> tuple:
    """``(kind, absolute file, NAME)`` for ``FILE.py:NAME`` or ``module:NAME`` looked up under ``roots``.

    ``kind`` is a :class:`TargetKind`; the file is None when no root holds it.
    With ``restrict`` (the server) paths never leave the roots: ``..`` and
    symlinks are resolved first; without it (the CLI, running the user's own
    contract) a FILE is relative to the first root or absolute.
    """
    if ":" not in target:
        raise CliError(f"expected FILE.py:NAME or module:NAME, got {target!r}")
    left, name = target.rsplit(":", 1)
    if not name.isidentifier():
        raise CliError(f"{name!r} is not a Python name (in {target!r})")
    is_file = left.endswith(".py") or "/" in left or os.sep in left
    if not is_file and not all(p.isidentifier() for p in left.split(".")):
        raise CliError(f"{left!r} is neither a FILE.py nor a dotted module name (in {target!r})")
    for root in roots:
        root = os.path.realpath(root)
        if is_file:
            cands = [os.path.join(root, left)]
        else:
            rel = os.path.join(*left.split("."))
            cands = [os.path.join(root, rel + ".py"), os.path.join(root, rel, "__init__.py")]
        for c in cands:
            real = os.path.realpath(c)
            if (not restrict or os.path.commonpath([real, root]) == root) and os.path.isfile(real):
                return (TargetKind.FILE if is_file else TargetKind.MODULE), real, name
    return (TargetKind.FILE if is_file else TargetKind.MODULE), None, name


def load_target(target: str, roots, factory: bool = False, factory_args: Optional[dict] = None,
                restrict: bool = True):
    """Import the program ``target`` names (inside ``roots``), building it when ``factory``."""
    kind, path, name = resolve_target(target, roots, restrict)
    if path is None:
        where = " or ".join(os.path.abspath(r) for r in roots)
        raise CliError(f"{target}: no such {kind.value} under {where}")
    if factory:
        make = _import_name(kind, target, path, name, roots)
        if not callable(make):
            raise CliError(f"factory {target} is not callable")
        try:
            obj = make(**(factory_args or {}))
        except Exception as e:  # the user's factory raised: their error, said as a CLI error
            raise CliError(f"factory {target}() raised {type(e).__name__}: {e}") from e
        if not callable(obj):
            raise CliError(f"factory {target}() returned a {type(obj).__name__}, not a function or nn.Module")
        if hasattr(obj, "eval") and hasattr(obj, "training"):
            obj.eval()
        return obj
    if kind is TargetKind.FILE:
        return load_program(f"{path}:{name}")
    obj = _import_name(kind, target, path, name, roots)
    return _as_program(obj, name, target)


def _import_name(kind, target, path, name, roots):
    if kind is TargetKind.FILE:
        # A fresh module per load (like the loader), taking NAME as it is (a factory).
        mod_name = f"_symshape_user_{abs(hash(path))}"
        module = exec_user_file(importlib.util.spec_from_file_location(mod_name, path), path)
    else:
        modname = target.rsplit(":", 1)[0]
        added = [os.path.realpath(r) for r in roots]
        sys.path[:0] = added
        try:
            module = importlib.import_module(modname)
        except Exception as e:  # the user's module failed to import
            raise CliError(f"importing {modname} raised {type(e).__name__}: {e}") from e
        finally:
            del sys.path[:len(added)]
    if not hasattr(module, name):
        raise CliError(f"{target}: the module has no name {name!r}")
    return getattr(module, name)


def _as_program(obj, name, target):
    return as_program(obj, name, target, "use factory = true with a function that builds it")


# --------------------------------------------------------------------------- writing


def dims_to_toml(dims: dict) -> dict:
    """``{"B": (1, 64), "T": 16}`` -> ``{"B": "1..64", "T": 16}``."""
    return {k: (v if isinstance(v, int) else f"{v[0]}..{'inf' if v[1] == math.inf else v[1]}")
            for k, v in dims.items()}


def render_entries(contracts, table: str) -> str:
    """The TOML text of ``contracts`` as ``[[table]]`` arrays (one per entry)."""
    blocks = []
    for c in contracts:
        lines = [f"[[{table}]]", f"name = {toml_value(c.name)}", f"program = {toml_value(c.program)}"]
        if c.factory:
            lines.append("factory = true")
        if c.factory_args:
            lines.append(f"factory_args = {toml_value(c.factory_args)}")
        lines.append(f"inputs = {toml_value(c.inputs)}")
        if c.dims:
            lines.append(f"dims = {toml_value(dims_to_toml(c.dims))}")
        for k in EXPECTATIONS:
            if k in c.expectations:
                lines.append(f"{k} = {toml_value(c.expectations[k])}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")


def write_contracts(path: str, contracts) -> None:
    """Replace the contract entries in ``path`` (other tables of a pyproject.toml are kept)."""
    path = os.fspath(path)
    pyproject = os.path.basename(path) == "pyproject.toml"
    table = "tool.symshape.contract" if pyproject else "contract"
    body = render_entries(contracts, table)
    old = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
    lines = old.splitlines(keepends=True)
    out, inserted, skipping = [], False, False
    for ln in lines:
        m = _HEADER.match(ln)
        if m:
            skipping = m.group(1) == table or m.group(1).startswith(table + ".")
            if skipping and not inserted:
                out.append(body)
                inserted = True
        if not skipping:
            out.append(ln)
    if not inserted:
        if out and not "".join(out).endswith("\n\n"):
            out.append("\n" if "".join(out).endswith("\n") else "\n\n")
        out.append(body)
    text = "".join(out)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
