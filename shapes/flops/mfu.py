"""Model FLOPs utilization: achieved FLOP/s over an accelerator's peak.

:meth:`FlopReport.mfu` divides the step's FLOPs at the given sizes by the
measured step time and by the peak.  It counts ``useful`` FLOPs by default
(causal attention at the entries it keeps, see :mod:`shapes.flops.useful`),
so a causal model cannot pass 100% by counting masked work; ``count="total"``
uses torch's FlopCounterMode convention instead.  For a training step, count
with ``mode="train"`` (forward + backward).

Peaks (FLOP/s, dense, no structured sparsity) from the vendors' datasheets,
by ``"name"`` or ``"name:dtype"`` (dtype defaults to bf16).  A name that is
not in the table is an error, never a guess; pass a number for anything else.

==================  ======  ======  ======  ======  ======
name                bf16    fp16    fp8     tf32    fp32
==================  ======  ======  ======  ======  ======
h100-sxm            989.4   989.4   1978.9  494.7   66.9
h100-pcie           756.5   756.5   1513    378     51.2
h200                989.4   989.4   1978.9  494.7   66.9
b200                2250    2250    4500    1100    -
a100                312     312     -       156     19.5
a10                 125     125     -       62.5    31.2
l4                  121     121     242.5   60      30.3
l40s                362.05  362.05  733     183     91.6
v100                -       125     -       -       15.7
mi300x              1307.4  1307.4  2614.9  653.7   163.4
tpu-v4              275     -       -       -       -
tpu-v5e             197     -       -       -       -
tpu-v5p             459     -       -       -       -
==================  ======  ======  ======  ======  ======

(TFLOP/s.  H100 SXM bf16 is 989.4 TFLOP/s dense, 1979 with 2:4 sparsity;
b200 is the HGX/DGX B200 at 1000 W; fp32 is the non-tensor-core rate
except on MI300X, whose matrix fp32 rate is listed.)

Example::

    >>> import torch, shapes
    >>> r = shapes.count_flops(torch.nn.Linear(4096, 4096, bias=False), "x: f32[N, 4096]")
    >>> m = r.mfu({"N": 65536}, seconds=0.01, peak_flops="h100-sxm:bf16")
    >>> round(m.mfu, 3)
    0.222
    >>> print(m)
    2.20 TFLOP at N=65536 in 0.01 s: 220 TFLOP/s achieved, MFU 22.2% of 989 TFLOP/s (h100-sxm bf16)
    >>> print(r.mfu({"N": 64}, seconds=0.001, peak_flops="h100-sxm"))  # the program's dtype: fp32
    2.15 GFLOP at N=64 in 0.001 s: 2.15 TFLOP/s achieved, MFU 3.2% of 66.9 TFLOP/s (h100-sxm fp32 (the program's dtype))
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional, Union

import torch

from ..errors import SpecError

_T = 10 ** 12

#: name -> dtype -> peak FLOP/s (dense).
PEAKS: dict[str, dict[str, float]] = {
    "h100-sxm": {"bf16": 989.4e12, "fp16": 989.4e12, "fp8": 1978.9e12, "tf32": 494.7e12, "fp32": 66.9e12},
    "h100-pcie": {"bf16": 756.5e12, "fp16": 756.5e12, "fp8": 1513e12, "tf32": 378e12, "fp32": 51.2e12},
    "h200": {"bf16": 989.4e12, "fp16": 989.4e12, "fp8": 1978.9e12, "tf32": 494.7e12, "fp32": 66.9e12},
    "b200": {"bf16": 2250e12, "fp16": 2250e12, "fp8": 4500e12, "tf32": 1100e12},
    "a100": {"bf16": 312e12, "fp16": 312e12, "tf32": 156e12, "fp32": 19.5e12},
    "a10": {"bf16": 125e12, "fp16": 125e12, "tf32": 62.5e12, "fp32": 31.2e12},
    "l4": {"bf16": 121e12, "fp16": 121e12, "fp8": 242.5e12, "tf32": 60e12, "fp32": 30.3e12},
    "l40s": {"bf16": 362.05e12, "fp16": 362.05e12, "fp8": 733e12, "tf32": 183e12, "fp32": 91.6e12},
    "v100": {"fp16": 125e12, "fp32": 15.7e12},
    "mi300x": {"bf16": 1307.4e12, "fp16": 1307.4e12, "fp8": 2614.9e12, "tf32": 653.7e12, "fp32": 163.4e12},
    "tpu-v4": {"bf16": 275e12},
    "tpu-v5e": {"bf16": 197e12},
    "tpu-v5p": {"bf16": 459e12},
}


#: torch dtypes -> the peak table's columns (fp32 matmuls: the non-tensor-core rate, as torch's default).
DTYPE_COLUMNS = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32",
                 "torch.float8_e4m3fn": "fp8", "torch.float8_e5m2": "fp8"}


def peak_of(peak: Union[str, float, int], dtype=None) -> tuple[float, str]:
    """``(FLOP/s, label)`` for a table name (``"h100-sxm"``, ``"a100:tf32"``) or a number.  A name
    without ``:dtype`` takes the column of ``dtype`` (the program's, a torch dtype), else bf16.

    >>> peak_of("h100-sxm", torch.float32)
    (66900000000000.0, "h100-sxm fp32 (the program's dtype)")
    """
    if isinstance(peak, bool):
        raise SpecError(f"peak_flops must be a FLOP/s number or an accelerator name, got {peak!r}")
    if isinstance(peak, (int, float)):
        if not peak > 0:
            raise SpecError(f"peak_flops must be positive, got {peak!r}")
        return float(peak), "the given peak"
    if not isinstance(peak, str):
        raise SpecError(f"peak_flops must be a FLOP/s number or an accelerator name, got {type(peak).__name__}")
    text = peak.strip().lower()
    try:
        return float(text), "the given peak"
    except ValueError:
        pass
    name, _, given = text.partition(":")
    column = DTYPE_COLUMNS.get(str(dtype)) if dtype is not None else None
    dtype = given or column or "bf16"
    table = PEAKS.get(name)
    if table is None:
        raise SpecError(f"unknown accelerator {peak!r}: the peak table has {', '.join(PEAKS)}; give the peak in "
                        f"FLOP/s instead (e.g. 989.4e12)")
    if dtype not in table:
        raise SpecError(f"no {dtype} peak for {name} in the table (it has {', '.join(table)}); give the peak in "
                        f"FLOP/s instead")
    return table[dtype], f"{name} {dtype}" + (" (the program's dtype)" if not given and column else "")


@dataclass
class MFU:
    """Achieved throughput and utilization of one measured step."""

    sizes: dict
    flops: int
    seconds: float
    peak: float
    peak_label: str
    count: str
    #: the other count (``total`` when ``count`` is ``useful``), when it differs
    other_flops: Optional[int] = None

    @property
    def achieved(self) -> float:
        """FLOP/s achieved."""
        return self.flops / self.seconds

    @property
    def mfu(self) -> float:
        return self.achieved / self.peak

    def __str__(self) -> str:
        at = ", ".join(f"{k}={v}" for k, v in self.sizes.items())
        s = (f"{flop_text(self.flops)} at {at} in {self.seconds:g} s: {flop_text(self.achieved)}/s achieved, "
             f"MFU {100 * self.mfu:.1f}% of {flop_text(self.peak)}/s ({self.peak_label})")
        if self.other_flops is not None:
            other = "total" if self.count == "useful" else "useful"
            s += (f"; counting {other} FLOPs ({flop_text(self.other_flops)}) it would be "
                  f"{100 * self.other_flops / self.seconds / self.peak:.1f}%")
        return s


def flop_text(n: float) -> str:
    """A FLOP count in the unit that reads best: 3 significant digits, k/M/G/T/P.

    >>> flop_text(1.34e9), flop_text(2.199e12), flop_text(512)
    ('1.34 GFLOP', '2.20 TFLOP', '512 FLOP')
    """
    for unit, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            v = n / scale
            return f"{v:.{max(0, 2 - int(math.floor(math.log10(abs(v)))))}f} {unit}FLOP"
    return f"{n:g} FLOP"


def mfu(report, sizes: Mapping, seconds: float, peak_flops, count: str = "useful") -> MFU:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
        raise SpecError(f"seconds must be a positive number (the measured step time), got {seconds!r}")
    if count not in ("useful", "total"):
        raise SpecError(f"count must be 'useful' or 'total', got {count!r}")
    peak, label = peak_of(peak_flops, getattr(report, "compute_dtype", None))
    useful = report.evaluate(sizes, expr=report.useful)
    total = report.evaluate(sizes)
    flops, other = (useful, total) if count == "useful" else (total, useful)
    return MFU(dict(sizes), flops, float(seconds), peak, label, count, other if other != flops else None)
