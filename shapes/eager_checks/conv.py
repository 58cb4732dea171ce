"""The shape checks of eager's convolution (``check_shape_forward`` in ATen).

torch's meta kernel for ``aten.convolution`` checks the input channels and
the output size but not the bias size, the divisibility of the weight by
``groups``, nor, on some versions, that the kernel fits in every padded
spatial dim.  Each condition here is eager's, with eager's message.

Example::

    >>> import sympy, torch
    >>> from shapes.eager_checks.conv import convolution_checks
    >>> x, w, b = torch.empty(1, 4, 9), torch.empty(6, 2, 3), torch.empty(5)
    >>> [m for c, m in convolution_checks(x, w, b, [1], [0], [1], False, [0], 2) if c is sympy.false]
    ['Given weight of size [6, 2, 3], expected bias to be 1-dimensional with 6 elements, but got bias of size [5] instead']
"""
from __future__ import annotations

import sympy
import torch

from ..functions import PyMod


def size_expr(x):
    return x.node.expr if isinstance(x, torch.SymInt) else sympy.Integer(int(x))


def _seq(v, n):
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return v * n if len(v) == 1 else v


def sizes_of(t) -> str:
    return "[" + ", ".join(str(size_expr(s)) for s in t.shape) + "]"


def convolution_checks(x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    """[(condition, message)] eager requires of ``aten.convolution`` arguments."""
    nsp = w.dim() - 2
    if nsp <= 0 or x.dim() != w.dim():
        return []  # ranks are static: the meta kernel reports them
    g = size_expr(groups)
    out_ch = size_expr(w.shape[0])
    ws = sizes_of(w)
    checks = [
        (sympy.Ge(out_ch, g), f"Given groups={g}, expected weight to be at least {g} at dimension 0, "
                              f"but got weight of size {ws} instead"),
        (sympy.Eq(PyMod(out_ch, g), 0), f"Given groups={g}, expected weight to be divisible by {g} at "
                                        f"dimension 0, but got weight of size [{ws}] instead"),
    ]
    c_in = size_expr(x.shape[1])
    if not transposed:
        want = size_expr(w.shape[1]) * g
        checks.append((sympy.Eq(c_in, want), f"Given groups={g}, weight of size {ws}, expected input{sizes_of(x)} "
                                             f"to have {want} channels, but got {c_in} channels instead"))
        if bias is not None:
            checks.append(_bias_check(bias, out_ch, f"Given weight of size {ws}"))
        pad, dil = _seq(padding, nsp), _seq(dilation, nsp)
        for i in range(nsp):
            size = size_expr(x.shape[2 + i]) + 2 * size_expr(pad[i])
            kernel = size_expr(dil[i]) * (size_expr(w.shape[2 + i]) - 1) + 1
            checks.append((sympy.Ge(size, kernel),
                           f"Calculated padded input size per channel: {size} in spatial dim {i}. Kernel size: "
                           f"{kernel}. Kernel size can't be greater than actual input size"))
    else:
        checks.append((sympy.Eq(c_in, out_ch), f"Given transposed=1, weight of size {ws}, expected input"
                                               f"{sizes_of(x)} to have {out_ch} channels, but got {c_in} channels "
                                               f"instead"))
        if bias is not None:
            checks.append(_bias_check(bias, size_expr(w.shape[1]) * g, f"Given transposed=1, weight of size {ws}"))
    return checks


def _bias_check(bias, want, prefix):
    if bias.dim() != 1:
        return (sympy.false, f"{prefix}, expected bias to be 1-dimensional with {want} elements, but got bias of "
                             f"size {sizes_of(bias)} instead")
    return (sympy.Eq(size_expr(bias.shape[0]), want), f"{prefix}, expected bias to be 1-dimensional with {want} "
                                               f"elements, but got bias of size {sizes_of(bias)} instead")


def checks(args, kwargs):
    """The checks of an ``aten.convolution.default`` call."""
    if len(args) < 9:
        return []
    return convolution_checks(*args[:9])
