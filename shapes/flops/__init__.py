"""Symbolic FLOP and memory-traffic counts (see :mod:`shapes.flops.report`).

Modules: :mod:`~shapes.flops.report` (:func:`count_flops`, :class:`FlopReport`),
:mod:`~shapes.flops.formulas` (per-op formulas, torch's conventions),
:mod:`~shapes.flops.tables` (text tables), :mod:`~shapes.flops.train`
(training steps: backward traced through autograd), :mod:`~shapes.flops.useful`
and :mod:`~shapes.flops.masks` (causal / triangular-masked attention at the
entries it keeps), :mod:`~shapes.flops.check` (prove a hand formula) and
:mod:`~shapes.flops.mfu` (MFU, the peak table).

Example::

    >>> import torch, shapes
    >>> shapes.flops.count_flops(torch.nn.Linear(64, 32), "x: f32[B, 64]").total
    4096*B
"""
from .costs import CostKind
from .report import FlopEvaluationError, FlopReport, FlopValues, ModuleCost, OpCost, count_flops

__all__ = ["count_flops", "FlopReport", "FlopEvaluationError", "FlopValues", "ModuleCost", "OpCost", "CostKind"]
