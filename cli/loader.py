"""Load ``path/to/file.py:NAME`` and trace it for the CLI.

NAME may be a function, an nn.Module instance, or an nn.Module subclass that
can be constructed without arguments.  This module imports torch: the
subcommands import it inside ``run`` (see :mod:`cli.main`).
"""
from __future__ import annotations

import contextlib
import importlib.util
import inspect
import math
import os
import sys

import torch

from guards.render import short_path
from shapes.errors import SpecError, SymshapeError
from shapes.spec import parse_sizes

from .args import world_options

#: Seconds the search for sizes that run may take when the example sizes fail.
SEARCH_BUDGET_S = 30.0


class CliError(SymshapeError):
    """A user error the CLI reports as one line."""


def exec_user_file(spec, path: str):
    """Run the user's file ``path`` as the module of ``spec`` (its folder first on ``sys.path``,
    as ``python path`` would); whatever its top level raises is a one-line :class:`CliError`.

    >>> import importlib.util, tempfile, os
    >>> d = tempfile.mkdtemp(); p = os.path.join(d, "bad.py"); _ = open(p, "w").write("1 / 0")
    >>> exec_user_file(importlib.util.spec_from_file_location("bad_mod", p), p)
    Traceback (most recent call last):
    ...
    cli.loader.CliError: importing ... raised ZeroDivisionError: division by zero
    """
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # the user's file failed to import
        raise CliError(f"importing {path} raised {type(e).__name__}: {e}") from e
    finally:
        sys.path.pop(0)
    return module


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
    module = exec_user_file(spec, path)
    if not hasattr(module, name):
        avail = [n for n, v in vars(module).items() if not n.startswith("_") and (
            inspect.isfunction(v) or isinstance(v, torch.nn.Module) or
            (inspect.isclass(v) and issubclass(v, torch.nn.Module))) and getattr(v, "__module__", mod_name) == mod_name]
        hint = f"; it defines: {', '.join(avail)}" if avail else ""
        raise CliError(f"{path} has no name {name!r}{hint}")
    return as_program(getattr(module, name), name, f"{name} in {path}",
                      "expose an instance or a function instead")


def as_program(obj, name: str, what: str, advice: str):
    """``obj`` as something to trace: an nn.Module class is constructed (no arguments) and set to
    eval mode; anything else must be callable.  ``what`` names it in errors, ``advice`` says what
    to do when the class cannot be constructed.

    >>> import torch
    >>> as_program(torch.nn.ReLU, "ReLU", "ReLU", "").training
    False
    """
    import torch
    if inspect.isclass(obj):
        if not issubclass(obj, torch.nn.Module):
            raise CliError(f"{what} is a class but not an nn.Module")
        try:
            obj = obj()
        except TypeError as e:
            raise CliError(f"cannot construct {name}() without arguments ({e}); {advice}") from e
    if not callable(obj):
        raise CliError(f"{what} is a {type(obj).__name__}, not a function or nn.Module")
    if isinstance(obj, torch.nn.Module):
        obj.eval()
    return obj


def parse_point(text: str) -> dict:
    """``"B=1,T=7"`` -> ``{"B": 1, "T": 7}`` (see :func:`shapes.spec.parse_sizes`)."""
    return parse_sizes(text)


def trace_for(program, specs, dims, points=(), kwargs=None, progress=None, search_sizes: bool = True,
              **trace_kwargs):
    """Trace at the default example sizes; if the program raises there and the
    user gave concrete points (``--at``), trace at the first point where it runs
    instead, so a report about those sizes is still possible; else (``search_sizes``)
    search for sizes that run (dinfer's search) and trace there.  The trace then
    carries ``searched_note``: which sizes failed and which were used.  A failure
    everywhere raises the first error, saying that no size that runs was found.
    ``trace_kwargs`` go to :func:`shapes.trace`."""
    from shapes import TraceError, trace

    def trace_at(d):
        return trace(program, *specs, dims=d, kwargs=kwargs, progress=progress, **trace_kwargs)

    try:
        return trace_at(dims)
    except TraceError as first:
        for pt in points:
            try:
                return trace_at(_hinted(dims, pt))
            except TraceError:
                continue
        if not search_sizes or first.exc is None:
            raise
        tp = _trace_where_it_runs(program, specs, dims, kwargs, first, trace_at)
        if tp is None:
            raise
        return tp


def _hinted(dims, pt) -> dict:
    """``dims`` with the example size of each dim of ``pt`` set to its value there."""
    hinted = dict(dims or {})
    for name, v in pt.items():
        cur = hinted.get(name)
        if isinstance(cur, tuple) and len(cur) >= 2:
            hinted[name] = (cur[0], cur[1], v)
        elif cur is None or not isinstance(cur, int):
            hinted[name] = (1, math.inf, v) if cur is None else cur
    return hinted


def _trace_where_it_runs(program, specs, dims, kwargs, first, trace_at):
    """The trace at sizes dinfer's search finds to run, with a note saying so; None if none is found."""
    from shapes import TraceError
    from validation.dinfer import sizes_that_run

    fn = with_arguments(program, kwargs) if kwargs else program
    try:
        point = sizes_that_run(fn, *specs, dims=dims, time_budget=SEARCH_BUDGET_S)
    except (TraceError, SpecError):
        point = None
    where = getattr(first, "provenance", None)
    failed = f"{type(first.exc).__name__}" + (f" at {short_path(where.filename)}:{where.lineno}"
                                               if where is not None and getattr(where, "filename", None) else "")
    if point is None:
        first.args = (f"{first.args[0] if first.args else first}; searching the dim ranges for {SEARCH_BUDGET_S:g} s "
                      f"found no sizes that run",)
        return None
    tp = trace_at(_hinted(dims, point))
    tp.searched_note = (f"the example sizes raise {failed}; traced at sizes that run, found by searching "
                        f"the dim ranges: " + ", ".join(f"{k}={v}" for k, v in point.items()))
    return tp


def trace_target(args, status, points=(), trace_options=None):
    """Load ``args.target`` and trace it with ``args.input``/``dim``/``arg``, showing progress on ``status``;
    then say what translation validation proved, if it ran.  ``trace_options(program)`` gives
    further keyword arguments of :func:`shapes.trace` (e.g. a training step's)."""
    status.phase(f"loading {args.target}")
    prog = load_program(args.target)
    status.phase(f"tracing {args.target}")
    extra = trace_options(prog) if trace_options is not None else {}
    if getattr(args, "device", None) is not None:
        extra = {**extra, "device": args.device}
    dims, world = world_options(args)
    if world is not None:
        extra = {**extra, "world": world}
    with guarded_run(args.target, getattr(args, "trace_timeout", None)):
        tp = trace_for(prog, args.input, dims, points, kwargs=args.arg, progress=status.ops, **extra)
    note = getattr(tp, "searched_note", None)
    if note:
        print(f"note: {note}", file=sys.stderr)
    report_validation(tp, status)
    return prog, tp


@contextlib.contextmanager
def guarded_run(target: str, seconds):
    """Run the user's program with ``--trace-timeout`` (a timeout no ``except`` in the program
    swallows) and with its exits turned into one-line errors: ``sys.exit`` and ``os._exit`` inside
    the program would otherwise end symshape silently."""
    from validation.dinfer.limits import TraceTimeout, time_limit

    real_exit = os._exit

    def no_exit(code=0):
        raise _ProgramExit(code, "os._exit")
    os._exit = no_exit
    try:
        with (time_limit(seconds) if seconds else contextlib.nullcontext()):
            yield
    except TraceTimeout:
        raise CliError(f"{target} ran longer than --trace-timeout {seconds:g} s while traced (a loop that "
                       f"never ends?); raise --trace-timeout if it is just slow") from None
    except SystemExit as e:
        raise CliError(f"{target} called sys.exit({e.code!r}) while traced; symshape needs the program to "
                       f"return") from None
    except _ProgramExit as e:
        raise CliError(f"{target} called {e.how}({e.code!r}) while traced; symshape needs the program to "
                       f"return") from None
    finally:
        os._exit = real_exit


class _ProgramExit(BaseException):
    """The program asked the process to end (``os._exit``): not an ``Exception``, so the
    program's own handlers do not swallow it."""

    def __init__(self, code, how):
        super().__init__(code)
        self.code, self.how = code, how


def report_validation(tp, status) -> None:
    """With ``SYMSHAPE_TRANSLATION_VALIDATION=1``: say on stderr that Z3 replayed the trace's decision
    log and what it proved (an unsound step has already raised in the tracer)."""
    report = getattr(tp, "validation_report", None)
    if report is None:
        return
    lines = str(report).splitlines()
    verdict = ("each one follows from the input ranges and the program's checks" if report.ok and not report.unknown
               else "NOT every step was proven")
    status.print(f"{lines[0]}; {verdict}")
    for line in lines[1:]:
        status.print(f"  {line}")


def with_arguments(program, kwargs):
    """``program`` with the ``--arg`` values bound by keyword (for commands that call it many times)."""
    if not kwargs:
        return program
    import functools

    fn = program.forward if isinstance(program, torch.nn.Module) else program
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        params = None
    if params is not None and not any(p.kind is p.VAR_KEYWORD for p in params):
        takes = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        unknown = [k for k in kwargs if k not in takes]
        if unknown:
            raise CliError(f"--arg {unknown[0]}: {getattr(fn, '__qualname__', fn)} has no parameter named "
                           f"{unknown[0]!r} (its parameters: {', '.join(p.name for p in params) or 'none'})")
    return functools.partial(program, **kwargs)
