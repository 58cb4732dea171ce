"""symshape's engine: ShapeEnv, symbolic sizes torch accepts, and the tracer.

Example::

    >>> import torch
    >>> import shapes
    >>> tp = shapes.trace(lambda x: x.view(-1, 8), "x: f32[N]")
    >>> tp.output_shapes
    [((N//8), 8)]
"""
from .env import DataDependentError, ShapeEnv
from .flops import FlopReport, count_flops
from .errors import GuardViolation, SpecError, SymshapeError, TraceError, TracerLimitation, UnsupportedOpError
from .guard import Decision, Guard, GuardKind, LogEntry, StepKind
from .program import TracedProgram
from .provenance import Provenance
from .spec import Dim, InputSpec, parse_spec
from .tracer import trace
from .paths import TracedPaths, trace_paths
from .value_ranges import ValueRange, bound

__all__ = [
    "trace", "ShapeEnv", "TracedProgram", "Guard", "GuardKind", "Decision", "LogEntry", "StepKind", "Provenance",
    "Dim", "InputSpec", "parse_spec", "ValueRange", "bound", "DataDependentError", "GuardViolation",
    "SpecError", "SymshapeError", "TraceError", "TracerLimitation", "UnsupportedOpError", "count_flops", "FlopReport",
    "trace_paths", "TracedPaths",
]
