"""Checks eager kernels make that some torch versions' meta kernels do not.

The tracer trusts meta kernels for shape errors.  Where a meta kernel is more
permissive than the eager kernel, a trace would accept sizes that fail at
run time.  torch 2.11's convolution meta, for example, only requires *some*
output spatial size to be positive, while the eager kernel requires the
(padded) input to be at least as large as the dilated kernel in *every*
spatial dim.  Each check here states the eager requirement; the tracer
asserts it (a runtime assert with the user's line) and raises like eager when
it fails at the example sizes.  Where the meta kernel already checks the same
thing, the engine decides the second check statically and records nothing.
"""
from __future__ import annotations

import sympy
import torch

aten = torch.ops.aten


def _e(x):
    return x.node.expr if isinstance(x, torch.SymInt) else sympy.Integer(int(x))


def _seq(v, n):
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return v * n if len(v) == 1 else v


def checks(func, args):
    """[(condition, message)] the eager kernel of ``func`` requires of these args."""
    if func is aten.convolution.default and len(args) >= 7 and not args[6]:
        x, w = args[0], args[1]
        nsp = w.dim() - 2
        if nsp <= 0 or x.dim() < nsp:
            return []
        pad, dil = _seq(args[4], nsp), _seq(args[5], nsp)
        out = []
        for i in range(nsp):
            size = _e(x.shape[x.dim() - nsp + i]) + 2 * _e(pad[i])
            kernel = _e(dil[i]) * (_e(w.shape[2 + i]) - 1) + 1
            out.append((sympy.Ge(size, kernel),
                        f"convolution: padded input size {size} in spatial dim {i} is smaller than the "
                        f"(dilated) kernel size {kernel}; kernel size can't be greater than actual input size"))
        return out
    return []
