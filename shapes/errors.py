"""Errors symshape raises at the user: each says what, where, and how to fix."""
from __future__ import annotations


class SymshapeError(Exception):
    """Base of symshape's user-facing errors.

    ``env``: for an error raised while a program was traced, the trace's
    ShapeEnv as it stood (its records and axioms: the path to the error is a
    region of sizes, which ``validation.dinfer`` reports); None otherwise.
    """

    env = None

    def in_trace(self, env) -> "SymshapeError":
        """This error, raised while tracing with ``env`` (kept if already set); returns self."""
        if self.env is None:
            self.env = env
        return self


class SpecError(SymshapeError, ValueError):
    """A malformed input spec (``"x: f32[B, 768]"``) or dims argument."""


class TraceError(SymshapeError, RuntimeError):
    """The program raised while being traced.

    ``exc`` is the original exception, ``provenance`` the user line it came
    from, and ``path`` the guards recorded before it (the sizes for which
    the program takes the same path to the same error).  ``env`` is the
    trace's ShapeEnv as it stood: its ``records`` also hold the runtime
    asserts that passed before the error, and its axioms the assumptions
    (ranges, the 0/1 policy) the guards were simplified under.
    """

    def __init__(self, message, *, exc=None, provenance=None, path=(), env=None):
        super().__init__(message)
        self.exc = exc
        self.provenance = provenance
        self.path = tuple(path)
        self.env = env


class TracerLimitation(SymshapeError, NotImplementedError):
    """symshape itself cannot trace this yet: a limitation of the engine, never
    an error of the program.

    Tools tell it apart by type: dinfer, explain and flops say "symshape cannot
    trace this yet" instead of blaming the program.

    Example::

        >>> import shapes
        >>> from shapes.errors import TracerLimitation, UnsupportedOpError
        >>> issubclass(UnsupportedOpError, TracerLimitation)
        True
        >>> e = UnsupportedOpError("round() of a symbolic size is not supported")
        >>> str(e), e.detail
        ('symshape: round() of a symbolic size is not supported', 'round() of a symbolic size is not supported')
    """

    #: Whose limitation it is: every message says so, and raise sites do not write it.
    PREFIX = "symshape: "

    @property
    def detail(self) -> str:
        """The message without :attr:`PREFIX`: what symshape cannot do, and where."""
        return str(self.args[0]) if self.args else ""

    def __str__(self) -> str:
        return self.PREFIX + self.detail


class UnsupportedOpError(TracerLimitation):
    """A torch op symshape cannot model symbolically."""


class EngineFailure(TracerLimitation):
    """An unexpected exception inside symshape's own code while tracing.

    ``exc`` is the original exception; the trace stopped at the user line
    ``provenance``.
    """

    def __init__(self, message, *, exc=None, provenance=None, env=None):
        super().__init__(message)
        self.exc = exc
        self.provenance = provenance
        self.env = env


class UnhandledExprKind(TracerLimitation, TypeError):
    """An analysis or printer met an expression kind it has no rule for.

    ``kind`` is the :class:`shapes.expr_kinds.Kind` (None when the expression
    is of no kind the engine builds), ``analysis`` names the analysis, and
    ``expr`` is the expression.  It is a TypeError too, so the callers that
    fall back on "cannot bound / cannot decide" keep doing so.

    Example::

        >>> import sympy
        >>> from shapes.printers import to_triton
        >>> try:
        ...     to_triton(sympy.Symbol("N", integer=True) ** 9)
        ... except UnhandledExprKind as e:
        ...     print(e.kind.name, "|", e.analysis)
        POW | the Triton printer
    """

    def __init__(self, kind, analysis: str, expr, detail: str = ""):
        self.kind = kind
        self.analysis = analysis
        self.expr = expr
        what = f"expression kind {kind.name}" if kind is not None else f"expression type {type(expr).__name__}"
        super().__init__(
            f"{analysis} has no rule for {what}{f' ({detail})' if detail else ''} in `{expr}`. "
            f"This is a limitation of symshape, not an error of the program; please report it with this "
            f"expression.")


class AdapterGap(TracerLimitation, AttributeError):
    """torch asked symshape's ShapeEnv adapter for something it does not provide
    (an AttributeError too, so torch's ``hasattr`` probes keep working)."""


class RaisedForProgram:
    """Mixed into the exceptions the engine raises *for the program*: the error
    eager PyTorch raises at these sizes, so the tracer does not take it for an
    engine failure.  See :func:`program_error`."""


_FOR_PROGRAM: dict = {}


def program_error(exc_type: type, *args) -> BaseException:
    """``exc_type(*args)`` as raised for the program: an instance of a subclass of
    ``exc_type`` (so the program's ``except exc_type`` catches it, as in eager) and of
    :class:`RaisedForProgram`.

    >>> e = program_error(RuntimeError, "shape mismatch")
    >>> isinstance(e, RuntimeError), isinstance(e, RaisedForProgram), type(e).__name__, str(e)
    (True, True, 'RuntimeError', 'shape mismatch')
    """
    cls = _FOR_PROGRAM.get(exc_type)
    if cls is None:
        cls = _FOR_PROGRAM[exc_type] = type(exc_type.__name__, (exc_type, RaisedForProgram),
                                            {"__module__": exc_type.__module__, "__doc__": exc_type.__doc__})
    return cls(*args)


class GuardViolation(SymshapeError, AssertionError):
    """Real inputs violate a guard or runtime assert of a traced program."""

    def __init__(self, message, *, guard=None, values=None):
        super().__init__(message)
        self.guard = guard
        self.values = values or {}


class SizeConflict(GuardViolation):
    """One call's tensor sizes contradict its spec: a dim given two values (``B`` is 5 in one
    input and 0 in another), or a size other than the one the spec fixes.

    Where symshape's own caller made the tensors (AOTAutograd's saved activations), this says
    that torch's meta function and its kernel disagree on a size, not that the program erred.

    >>> isinstance(SizeConflict("dim s0 is 5 and 0 in one call"), GuardViolation)
    True
    """
