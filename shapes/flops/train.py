"""The training step that ``count_flops(mode="train")`` records: loss, backward, optimizer step.

The program's output is reduced to a loss (a scalar as is; another tensor is
summed; an object with a ``loss`` tensor, like a transformers ``ModelOutput``,
gives that), then ``loss.backward()`` runs inside the tracer's recording, so
torch's autograd itself emits the backward ATen ops on symbolic sizes.  No
FLOP is derived from the forward by a rule: the backward ops are counted by
the same formulas as the forward ones, and the totals equal
``FlopCounterMode`` around ``loss.backward()``.

Per module, a backward op is charged to the module whose forward op created
the autograd Node it runs in (the Node's sequence number links them), so a
module's FLOPs are its forward and its backward.  torch's ModuleTracker (which
FlopCounterMode uses) guesses from gradient hooks instead: it agrees on MLPs,
conv nets and GPT-2, but charges the backward of BERT's and T5's query/key/
value projections to their siblings, and its root entry has no backward ops.
Totals and per-op counts are equal in every case.

Ops outside any module (the loss's gradient seed, gradient accumulation, the
optimizer step) count in the totals and phases, not in a module.

Example::

    >>> import torch, shapes
    >>> r = shapes.count_flops(torch.nn.Linear(8, 4), "x: f32[B, 8]", mode="train")
    >>> r.total, r.phase_totals["forward"], r.phase_totals["backward"]
    (128*B, 64*B, 64*B)
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from ..errors import SpecError, UnsupportedOpError

#: Phases of a training step, in order (``meta["phase"]`` of the graph's nodes).
PHASES = ("forward", "backward", "optimizer")


def loss_of(out) -> torch.Tensor:
    """The loss a training step differentiates: ``out`` if a scalar, its sum if a
    tensor, ``out.loss`` / ``out["loss"]`` for a model output that carries one."""
    loss = out
    if not isinstance(out, torch.Tensor):
        loss = getattr(out, "loss", None)
        if loss is None and isinstance(out, dict):
            loss = out.get("loss")
        if not isinstance(loss, torch.Tensor):
            raise SpecError(
                f"mode='train' needs the program to return the loss (a tensor, or an object with a .loss "
                f"tensor); it returned a {type(out).__name__}: return the loss, e.g. "
                f"`return F.cross_entropy(logits.flatten(0, 1), labels.flatten())`")
    if not loss.dtype.is_floating_point and not loss.dtype.is_complex:
        raise SpecError(f"mode='train': the loss is a {loss.dtype} tensor, which has no gradient; "
                        f"return a floating-point loss")
    if not loss.requires_grad:
        raise SpecError("mode='train': the loss does not depend on anything that requires grad (no parameter "
                        "requires grad, and no input was named in requires_grad=...)")
    return loss if loss.dim() == 0 else loss.sum()


def training_step(optimizer: Optional[Callable] = None) -> Callable:
    """The ``backward`` hook for :func:`shapes.trace`: loss, ``loss.backward()``,
    then ``optimizer(params).step()`` when an optimizer factory is given
    (e.g. ``lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)``)."""

    def step(out: Any, params: dict, phase: Callable[[str], None]):
        loss = loss_of(out)
        phase("backward")
        loss.backward()
        if optimizer is not None:
            phase("optimizer")
            trainable = [p for p in params.values() if p.requires_grad]
            opt = optimizer(trainable)
            if not isinstance(opt, torch.optim.Optimizer):
                raise SpecError(f"optimizer must be a callable that takes the parameters and returns a "
                                f"torch.optim.Optimizer, e.g. lambda ps: torch.optim.SGD(ps, lr=0.1); it "
                                f"returned a {type(opt).__name__}")
            try:
                opt.step()
            except Exception as e:  # a symshape limitation, not the program's error: say which
                raise UnsupportedOpError(
                    f"the optimizer step of {type(opt).__name__} cannot be traced on meta tensors with "
                    f"symbolic sizes ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); optimizers "
                    f"that read their step count as a number (Adam, AdamW) do. Optimizer steps are 0 FLOPs by "
                    f"torch's convention: count without optimizer=, or with one that traces (SGD)") from e
        return loss.detach()

    return step


def default_requires_grad(program, specs) -> list:
    """Inputs that require grad by default: none for an nn.Module (its parameters
    do), the floating-point inputs of a plain function (it has no parameters)."""
    if isinstance(program, torch.nn.Module):
        return []
    from ..spec import parse_specs
    parsed, _ = parse_specs(specs)
    return [s.name for s in parsed if s.dtype.is_floating_point]


def check_requires_grad(names, specs) -> list:
    """``names`` as a list, each the name of a floating-point input (else a SpecError)."""
    from ..spec import parse_specs
    if isinstance(names, str):
        names = [names]
    parsed, _ = parse_specs(specs)
    by_name = {s.name: s for s in parsed}
    for n in names:
        s = by_name.get(n)
        if s is None:
            raise SpecError(f"requires_grad names {n!r}, which is not an input; the inputs are "
                            f"{', '.join(by_name) or '(none)'}")
        if not s.dtype.is_floating_point:
            raise SpecError(f"requires_grad: input {n!r} is {s.dtype}, which cannot require grad; "
                            f"only floating-point inputs can")
    return list(names)
