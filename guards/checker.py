"""Check real inputs against a traced program's guards and say which fail.

Example::

    >>> import torch, shapes
    >>> from guards.checker import check
    >>> tp = shapes.trace(lambda x: x if x.shape[0] > 16 else -x, "x: f32[B]", dims={"B": 32})
    >>> [r.rendered for r in check(tp, torch.zeros(4))]
    ['x.shape[0] > 16']
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Union

import sympy

from shapes.guard import Guard
from .render import render_guard


@dataclass(frozen=True)
class FailedGuard:
    guard: Guard
    rendered: str        # in the user's terms
    in_dims: str         # in dim names
    values: dict

    def __str__(self) -> str:
        at = ", ".join(f"{k}={v}" for k, v in self.values.items())
        return (f"{self.rendered}  ({self.in_dims}) fails at {at}: {self.guard.kind.value} from "
                f"{self.guard.filename}:{self.guard.lineno} `{self.guard.code}`")


def check_sizes(traced, sizes: Mapping[Union[str, sympy.Symbol], int]) -> list[FailedGuard]:
    """Guards, specializations and runtime asserts over input dims that fail at ``sizes``."""
    names = {(k if isinstance(k, str) else k.name): v for k, v in sizes.items()}
    missing = [n for n in traced.hints if n not in names]
    if missing:
        raise ValueError(f"no value given for dim(s) {', '.join(missing)}; the program's dims are "
                         f"{', '.join(traced.hints)}")
    out = []
    for g in traced.failing_guards(names):
        out.append(FailedGuard(g, render_guard(g, traced.env), render_guard(g, traced.env, user_terms=False),
                               dict(names)))
    return out


def check(traced, *tensors) -> list[FailedGuard]:
    """Bind real tensors to the program's dims and return the failing guards."""
    vals = traced.bind_sizes(tensors)
    return check_sizes(traced, {s.name: v for s, v in vals.items()})
