"""Where a decision came from: the user's frame and the torch op that asked.

The engine never trusts the ``file``/``line`` torch passes to ``guard_bool``
(C++ passes its own source location); it walks the Python stack instead and
takes the innermost frame that belongs to neither torch, sympy nor symshape.
"""
from __future__ import annotations

import functools
import importlib.metadata
import linecache
import os
import sys
import tomllib
from dataclasses import dataclass, field
from typing import Optional

import sympy
import torch

_PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_DISTRIBUTION = "symshape"


def engine_packages() -> tuple[str, ...]:
    """symshape's top-level packages, read where they are declared: ``pyproject.toml`` in a
    source tree, the installed distribution's metadata otherwise.

    >>> "shapes" in engine_packages() and "cli" in engine_packages()
    True
    """
    pyproject = os.path.join(_PKG_ROOT, "pyproject.toml")
    names: list = []
    if os.path.exists(pyproject):
        with open(pyproject, "rb") as f:
            meta = tomllib.load(f)
        if meta.get("project", {}).get("name") == _DISTRIBUTION:
            names = meta.get("tool", {}).get("setuptools", {}).get("packages", [])
    if not names:
        try:
            names = (importlib.metadata.distribution(_DISTRIBUTION).read_text("top_level.txt") or "").split()
        except importlib.metadata.PackageNotFoundError:
            names = []  # neither a source tree nor installed: only this package is known
    top = {n.split(".")[0] for n in names} | {__name__.split(".")[0]}
    return tuple(sorted(top))


_ENGINE_DIRS = tuple(os.path.join(_PKG_ROOT, p) + os.sep for p in engine_packages())
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_SYMPY_DIR = os.path.dirname(os.path.abspath(sympy.__file__)) + os.sep
_STDLIB_DIR = os.path.dirname(os.path.abspath(os.__file__)) + os.sep
_LIBRARY_DIRS = (_TORCH_DIR, _SYMPY_DIR)


# torch files whose frames are plumbing, never "the op that asked".
_TORCH_PLUMBING = tuple(
    os.path.join(os.path.dirname(os.path.abspath(torch.__file__)), p)
    for p in ("__init__.py", "fx/experimental/sym_node.py", "fx/experimental/symbolic_shapes.py",
              "_ops.py", "utils/_python_dispatch.py", "_dispatch", "utils/_pytree.py", "_prims_common/wrappers.py",
              "overrides.py", "_tensor.py", "_compile.py", "utils/_contextlib.py")
)


@functools.lru_cache(maxsize=4096)
def _normal(filename: str) -> str:
    """``filename`` without ``..`` or ``.`` parts: a package imported through a path such as
    ``bench/..`` (a script that put its parent on ``sys.path``) names its files so, and they
    are still the engine's or a library's, never the program's.

    >>> _normal("/a/bench/../shapes/decide.py")
    '/a/shapes/decide.py'
    """
    return os.path.normpath(filename) if os.sep + "." in filename else filename


def is_engine_file(filename: str) -> bool:
    return _normal(filename).startswith(_ENGINE_DIRS)


def is_library_file(filename: str) -> bool:
    filename = _normal(filename)
    if filename.startswith(_LIBRARY_DIRS) or filename.startswith("<frozen"):
        return True
    # The standard library (contextlib, functools, ...) is never "user code",
    # but site-packages is: transformers' modeling files are where users look.
    # Pure plumbing packages (decorator wrappers) are skipped like the stdlib.
    if os.path.basename(filename) in _PLUMBING_FILES:
        return True
    return filename.startswith(_STDLIB_DIR) and "site-packages" not in filename


_PLUMBING_FILES = frozenset({"typing_extensions.py"})


@dataclass(frozen=True)
class Provenance:
    """The user source line and the op behind a guard or decision.

    ``op`` is the ATen op being traced when torch itself asked (for example
    ``aten.view.default``), the innermost torch Python function when the
    question came from torch's Python code outside dispatch (for example
    ``torch.nn.functional.pad``), or ``None`` when the user's own code asked
    (``if x.shape[0] > 16``).  ``from_user`` is True in that last case.
    """

    filename: str = "<unknown>"
    lineno: int = 0
    code: str = ""
    function: str = ""
    op: Optional[str] = None
    stack: tuple = field(default=(), compare=False)

    @property
    def from_user(self) -> bool:
        return self.op is None

    def location(self) -> str:
        """``file:line``, or, where no frame of the program asked (the program is torch's own
        function), the torch function that did.

        >>> Provenance(filename="m.py", lineno=3).location(), Provenance(op="torch.nn.functional.pad").location()
        ('m.py:3', 'torch.nn.functional.pad (no line of the program)')
        """
        if not self.lineno:
            return f"{self.op or 'torch'} (no line of the program)"
        return f"{self.filename}:{self.lineno}"

    def line(self) -> str:
        """:meth:`location` and the line's code, for messages that name the op themselves.

        >>> Provenance(filename="m.py", lineno=3, code="y = x.view(-1)").line(), Provenance(op="torch.cdist").line()
        ('m.py:3 (`y = x.view(-1)`)', 'torch.cdist (no line of the program)')
        """
        return self.location() + (f" (`{self.code}`)" if self.code else "")

    def __str__(self) -> str:
        if not self.lineno:
            return self.location()
        where = f"{self.filename}:{self.lineno}"
        if self.code:
            where += f" `{self.code}`"
        if self.op:
            where += f" (in {self.op})"
        return where


#: Code objects of the engine's frames that run a traced program (the tracer registers its own):
#: frames outside one are whoever asked for the trace, never the program's source.
_BOUNDARIES: set = set()


def program_boundary(code) -> None:
    """Register ``code`` (an engine function's ``__code__``) as where traced programs run: a
    question asked inside it is never blamed on a frame outside it (a script's ``trace(...)``
    line when the program is torch's own function).

    >>> program_boundary(program_boundary.__code__); program_boundary.__code__ in _BOUNDARIES
    True
    """
    _BOUNDARIES.add(code)


def capture(current_op: Optional[str] = None, *, stack_depth: int = 6) -> Provenance:
    """Provenance of the caller: innermost non-library, non-engine frame inside the program run."""
    f = sys._getframe(1)
    user = None
    torch_fn = None
    stack = []
    while f is not None:
        if f.f_code in _BOUNDARIES:
            break
        fn = _normal(f.f_code.co_filename)
        if is_engine_file(fn):
            pass
        elif is_library_file(fn):
            if (user is None and torch_fn is None and fn.startswith(_TORCH_DIR)
                    and not fn.startswith(_TORCH_PLUMBING)):
                torch_fn = _torch_function_name(fn, f.f_code.co_name)
        else:
            if user is None:
                user = f
            if len(stack) < stack_depth:
                stack.append(f"{fn}:{f.f_lineno} in {f.f_code.co_name}")
        f = f.f_back
    if user is None:
        return Provenance(op=current_op or torch_fn)
    code = linecache.getline(user.f_code.co_filename, user.f_lineno).strip()
    op = current_op if current_op is not None else torch_fn
    return Provenance(
        filename=user.f_code.co_filename,
        lineno=user.f_lineno,
        code=code,
        function=user.f_code.co_name,
        op=op,
        stack=tuple(stack),
    )


def _torch_function_name(filename: str, func: str) -> str:
    rel = filename[len(_TORCH_DIR):]
    mod = rel[:-3] if rel.endswith(".py") else rel
    mod = mod.replace(os.sep, ".")
    if mod.endswith(".__init__"):
        mod = mod[: -len(".__init__")]
    return f"torch.{mod}.{func}" if mod else f"torch.{func}"
