"""A sharded step's time from its counts: FLOPs at a given FLOP/s, communication at a given link bandwidth.

:meth:`FlopReport.roofline` evaluates a ``count_flops(..., world="W")`` report at
given sizes and world size and bounds the step time by its two resources:

* compute: the busiest rank's FLOPs / ``peak_flops`` (FLOP/s of one device);
* communication: the bytes a rank sends (:mod:`shapes.flops.comm`: ring
  algorithms, averaged over ranks) / ``link_bytes_per_s`` (one device's link
  bandwidth, in the convention of nccl-tests' "bus bandwidth").

``step_s`` is their sum (no overlap), ``overlapped_s`` their maximum (perfect
overlap); the truth lies between.  Two utilizations, each stated:

* **per device**: the busiest rank's FLOPs / (``step_s`` * ``peak``);
* **global**: the whole job's FLOPs / (``W`` * ``peak`` * ``step_s``), where the
  job's FLOPs are ``model_flops`` when given (the unsharded step's, e.g.
  ``count_flops`` of the one-device program: replicated work then lowers it),
  else the sum of every rank's FLOPs (each rank evaluated where the count depends on its rank).

Example::

    >>> import torch.distributed as dist, shapes
    >>> def f(x, w):
    ...     y = x @ w
    ...     dist.all_reduce(y)
    ...     return y
    >>> r = shapes.count_flops(f, "x: f32[N, K]", "w: f32[K, M]", world="W", dims={"W": (1, 8)})
    >>> s = r.roofline({"N": 4096, "K": 4096, "M": 4096, "W": 8}, peak_flops=1e14, link_bytes_per_s=1e11)
    >>> print(s)
    8 devices at N=4096, K=4096, M=4096, W=8: compute 1.37 ms (137 GFLOP per device at 100 TFLOP/s (the given peak)), comm 1.17 ms (117 MB per rank at 100 GB/s); step 2.55 ms serial, 1.37 ms overlapped; MFU per device 53.9%, global 53.9% (sum of the ranks' FLOPs) at the serial step
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Mapping, Optional

import sympy

from ..errors import SpecError
from .mfu import flop_text, peak_of


@dataclass(kw_only=True)
class StepRoofline:
    """The bounds of one sharded step (see the module doc for each convention)."""

    sizes: dict
    world: int
    flops_per_device: int       # the busiest rank's
    flops_global: int           # the job's (model_flops, or the ranks' sum)
    global_source: str
    comm_bytes: Fraction        # each rank sends (ring, averaged over ranks)
    peak: float
    peak_label: str
    link_bytes_per_s: float

    @property
    def compute_s(self) -> float:
        return self.flops_per_device / self.peak

    @property
    def comm_s(self) -> float:
        return float(self.comm_bytes) / self.link_bytes_per_s

    @property
    def step_s(self) -> float:
        """Compute then communication, no overlap."""
        return self.compute_s + self.comm_s

    @property
    def overlapped_s(self) -> float:
        """Communication hidden under compute (or the reverse): the larger of the two."""
        return max(self.compute_s, self.comm_s)

    def mfu_per_device(self, seconds: Optional[float] = None) -> float:
        """The busiest device's FLOPs over its peak for the step (``step_s`` unless given)."""
        return self.flops_per_device / ((seconds or self.step_s) * self.peak)

    def mfu_global(self, seconds: Optional[float] = None) -> float:
        """The job's FLOPs over every device's peak for the step (``step_s`` unless given)."""
        return self.flops_global / ((seconds or self.step_s) * self.peak * self.world)

    def __str__(self) -> str:
        at = ", ".join(f"{k}={v}" for k, v in self.sizes.items())
        return (f"{self.world} devices at {at}: compute {self.compute_s * 1e3:.3g} ms ({flop_text(self.flops_per_device)} "
                f"per device at {flop_text(self.peak)}/s ({self.peak_label})), comm {self.comm_s * 1e3:.3g} ms "
                f"({_bytes_text(self.comm_bytes)} per rank at {_bytes_text(self.link_bytes_per_s)}/s); step "
                f"{self.step_s * 1e3:.3g} ms serial, {self.overlapped_s * 1e3:.3g} ms overlapped; MFU per device "
                f"{100 * self.mfu_per_device():.1f}%, global {100 * self.mfu_global():.1f}% ({self.global_source}) "
                f"at the serial step")


def _bytes_text(n) -> str:
    n = float(n)
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}B"
    return f"{n:g} B"


def _value(expr, sizes: dict) -> Fraction:
    e = sympy.sympify(expr)
    subs = {}
    for s in e.free_symbols:
        if s.name not in sizes:
            raise SpecError(f"the roofline needs a value for {s.name} (give it in sizes)")
        subs[s] = sizes[s.name]
    v = sympy.nsimplify(e.subs(subs)) if subs else e
    if v.has(sympy.nan) or not v.is_Rational:
        raise SpecError(f"the count {expr} has no value at {sizes} (the program may raise there)")
    return Fraction(int(v.p), int(v.q))


def roofline(report, sizes: Mapping, peak_flops, link_bytes_per_s: float, world_name: str = "W",
             model_flops=None) -> StepRoofline:
    """:class:`StepRoofline` of ``report`` at ``sizes`` (the world size included, by its name)."""
    if isinstance(link_bytes_per_s, bool) or not isinstance(link_bytes_per_s, (int, float)) or \
            not link_bytes_per_s > 0:
        raise SpecError(f"link_bytes_per_s must be a positive number, got {link_bytes_per_s!r}")
    sizes = dict(sizes)
    world = report.traced.world
    names = [v for _, v, _ in world.mesh] if world is not None and world.mesh else [
        world.name if world is not None else world_name]
    for name in names:
        if name not in sizes:
            raise SpecError(f"give the world size {name} in sizes")
    W = math.prod(int(sizes[n]) for n in names)  # a mesh's devices: the product of its dims
    peak, label = peak_of(peak_flops, getattr(report, "compute_dtype", None))
    per_rank = [_value(report.total, {**sizes, "rank": r}) for r in range(W)]
    comm = max(_value(report.comm.total, {**sizes, "rank": r}) for r in range(W))
    if model_flops is not None:
        total, source = Fraction(model_flops), "the given model FLOPs"
    else:
        total, source = sum(per_rank, Fraction(0)), "sum of the ranks' FLOPs"
    return StepRoofline(sizes=sizes, world=W, flops_per_device=int(max(per_rank)), flops_global=int(total),
                        global_source=source, comm_bytes=comm, peak=peak, peak_label=label,
                        link_bytes_per_s=float(link_bytes_per_s))
