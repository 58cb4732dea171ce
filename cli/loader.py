"""Load ``path/to/file.py:NAME`` and parse ``--dim`` / ``--at`` arguments for the CLI.

NAME may be a function, an nn.Module instance, or an nn.Module subclass that
can be constructed without arguments.
"""
from __future__ import annotations

import importlib.util
import inspect
import math
import os
import re
import sys

import torch

from shapes.errors import SymshapeError
from shapes.spec import parse_sizes


class CliError(SymshapeError):
    """A user error the CLI reports as one line."""


def load_program(target: str):
    """Return the callable named by ``FILE.py:NAME``."""
    if ":" not in target:
        raise CliError(f"expected FILE.py:NAME (for example examples/mlp.py:MLP), got {target!r}")
    path, name = target.rsplit(":", 1)
    if not os.path.isfile(path):
        raise CliError(f"no such file: {path}")
    if not name.isidentifier():
        raise CliError(f"{name!r} is not a Python name (in {target!r})")
    mod_name = f"_symshape_user_{abs(hash(os.path.abspath(path)))}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise CliError(f"cannot import {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # the user's file failed to import
        raise CliError(f"importing {path} raised {type(e).__name__}: {e}") from e
    finally:
        sys.path.pop(0)
    if not hasattr(module, name):
        avail = [n for n, v in vars(module).items() if not n.startswith("_") and (
            inspect.isfunction(v) or isinstance(v, torch.nn.Module) or
            (inspect.isclass(v) and issubclass(v, torch.nn.Module))) and getattr(v, "__module__", mod_name) == mod_name]
        hint = f"; it defines: {', '.join(avail)}" if avail else ""
        raise CliError(f"{path} has no name {name!r}{hint}")
    obj = getattr(module, name)
    if inspect.isclass(obj):
        if not issubclass(obj, torch.nn.Module):
            raise CliError(f"{name} in {path} is a class but not an nn.Module")
        try:
            obj = obj()
        except TypeError as e:
            raise CliError(f"cannot construct {name}() without arguments ({e}); expose an instance or a function "
                           f"instead") from e
    if not callable(obj):
        raise CliError(f"{name} in {path} is a {type(obj).__name__}, not a function or nn.Module")
    if isinstance(obj, torch.nn.Module):
        obj.eval()
    return obj


_RANGE = re.compile(r"^\s*([A-Za-z_]\w*)\s*=\s*(-?\d+)\s*(?:\.\.\s*(-?\d+|inf)?)?\s*$")


def parse_dim_args(items) -> dict:
    """``["B=1..4096", "T=8"]`` -> ``{"B": (1, 4096), "T": 8}`` (a single value is an example size)."""
    out = {}
    for item in items or []:
        for part in item.split(","):
            if not part.strip():
                continue
            m = _RANGE.match(part)
            if not m:
                raise CliError(f"bad --dim {part!r}: expected NAME=LO..HI (a range) or NAME=N (an example size)")
            name, lo, hi = m.group(1), int(m.group(2)), m.group(3)
            if ".." in part:
                hi_v = math.inf if hi in (None, "inf") else int(hi)
                if lo < 0 or lo > hi_v:
                    raise CliError(f"bad --dim {part!r}: empty or negative range")
                out[name] = (lo, hi_v)
            else:
                out[name] = lo
    return out


def parse_point(text: str) -> dict:
    """``"B=1,T=7"`` -> ``{"B": 1, "T": 7}`` (see :func:`shapes.spec.parse_sizes`)."""
    return parse_sizes(text)


def trace_for(program, specs, dims, points=(), **trace_kwargs):
    """Trace at the default example sizes; if the program raises there and the
    user gave concrete points (``--at``), trace at the first point where it runs
    instead, so a report about those sizes is still possible.  ``trace_kwargs``
    go to :func:`shapes.trace`."""
    from shapes import TraceError, trace

    try:
        return trace(program, *specs, dims=dims, **trace_kwargs)
    except TraceError as first:
        for pt in points:
            hinted = dict(dims or {})
            for name, v in pt.items():
                cur = hinted.get(name)
                if isinstance(cur, tuple) and len(cur) >= 2:
                    hinted[name] = (cur[0], cur[1], v)
                elif cur is None:
                    hinted[name] = v
            try:
                return trace(program, *specs, dims=hinted, **trace_kwargs)
            except TraceError:
                continue
        raise first
