"""Symbolic FLOP and memory-traffic counts (see :mod:`shapes.flops.report`).

Modules: :mod:`~shapes.flops.report` (:func:`count_flops`, :class:`FlopReport`),
:mod:`~shapes.flops.formulas` (per-op formulas, torch's conventions) and
:mod:`~shapes.flops.tables` (text tables).

Example::

    >>> import torch, shapes
    >>> shapes.flops.count_flops(torch.nn.Linear(64, 32), "x: f32[B, 64]").total
    4096*B
"""
from .report import FlopEvaluationError, FlopReport, FlopValues, ModuleCost, OpCost, count_flops

__all__ = ["count_flops", "FlopReport", "FlopEvaluationError", "FlopValues", "ModuleCost", "OpCost"]
