"""Proofs and searches over traced programs: dinfer, translation validation, Z3, fuzzing.

The public face:

* :func:`dinfer` -> :class:`InputSpace` (its :class:`ShapeClass` es, each with
  a :class:`Status`): the input sizes a program accepts, split into classes.
* :func:`validate` / :func:`validate_env` -> :class:`ValidationReport`: the
  engine's decision log replayed with Z3 (:class:`UnsoundStep` when a step is
  wrong); :class:`TranslationValidator` checks while tracing.
* :class:`Z3Translator` (engine expressions as Z3 terms) and :func:`evaluate`
  (at concrete sizes, with Python semantics).
* :func:`run_fuzz` -> :class:`FuzzResult`: range analysis and static decisions
  against brute force and Z3.
* :mod:`validation.opinfo`: conformance with torch on its operator corpus
  (imported on its own: it loads torch's test corpus).

Example::

    >>> import validation
    >>> space = validation.dinfer(lambda x: x.view(-1, 2), "x: f32[N]", dims={"N": (1, 8)})
    >>> space.summary.valid_iff
    'N % 2 == 0'
"""
from .concrete import evaluate
from .dinfer import dinfer
from .fuzz import FuzzResult, run_fuzz
from .input_space import InputSpace, ShapeClass, Status
from .translation import TranslationValidator, UnsoundStep, ValidationReport, validate, validate_env
from .z3_translate import UntranslatableExpression, Z3Translator

__all__ = [
    "dinfer", "InputSpace", "ShapeClass", "Status",
    "validate", "validate_env", "ValidationReport", "UnsoundStep", "TranslationValidator",
    "Z3Translator", "UntranslatableExpression", "evaluate",
    "run_fuzz", "FuzzResult",
]
