"""Bicubic and bilinear resizing as two small matmuls: in training graphs, so the backward is two matmuls too,
and in the compiler's traces (:class:`ResizeAsMatmuls`), two ATen calls where torch's decomposition makes sixteen.

``F.interpolate(x, size=..., mode="bicubic")`` is separable: each output row is a
weighted sum of four input rows (clamped at the border), and each output column of
four input columns.  So ``out = Wh @ x @ Ww.T`` per (batch, channel) plane, where
``Wh`` is an ``(out_h, in_h)`` matrix of cubic-convolution weights (``A = -0.75``,
torch's) made from the sizes alone.  ``mode="bilinear"`` is the same with two taps
(weights ``1 - t`` and ``t``).

Under AOTAutograd the op is instead traced through torch's decomposition, registered
at the Autograd key (so a decomposition table cannot keep it whole): sixteen gathers
(bilinear: four) whose backward is as many ``index_put(accumulate=True)``.  HF ViT interpolates its
position embedding that way at every image size; on an H100 those ``index_put`` calls
cost 7 ms of host time per training step (a sort per call), in a step eager runs in
12 ms.  As matmuls the forward and backward are a few tiny GEMMs.

The weights are computed as eager computes them (``align_corners`` either way; the
source coordinate ``scale * (o + 0.5) - 0.5`` with ``scale = in / out``, clamped at 0
for bilinear and not for bicubic, as eager does), with the floor and the fraction taken
in exact integer arithmetic; half-precision inputs are resized in fp32 and rounded once, as eager's
kernels accumulate.  Only calls given ``size`` (not ``scale_factor``, whose source
coordinates use the factor itself) on 4-D floating tensors without antialiasing are
rewritten.

``mode="nearest"`` by a factor of 2, 4 or 8 (diffusers' ``Upsample2D``: ``scale_factor=2.0``)
is each pixel repeated, an expand and a reshape (:func:`nearest_repeat`), whose backward
is a block sum; exact, since for these factors eager's source index is ``o // f``.

Example::

    >>> import torch
    >>> import torch.nn.functional as F
    >>> x = torch.randn(2, 3, 5, 7)
    >>> got = separable_resize(x, (9, 4), mode="bicubic", align_corners=False)
    >>> torch.allclose(got, F.interpolate(x, size=(9, 4), mode="bicubic", align_corners=False), atol=1e-5)
    True
"""
from __future__ import annotations

import os

import torch
import torch.fx
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from shapes.creation import pass_through
from shapes.errors import program_error

from .eager_refusals import refuse_as_eager

_A = -0.75  # torch's cubic convolution constant (as in PIL and OpenCV's INTER_CUBIC)


def _near(x):
    """Cubic convolution weight at distance ``x`` in [0, 1]."""
    return ((_A + 2) * x - (_A + 3)) * x * x + 1


def _far(x):
    """Cubic convolution weight at distance ``x`` in [1, 2]."""
    return ((_A * x - 5 * _A) * x + 8 * _A) * x - 4 * _A


def resize_weights(in_size, out_size, *, mode: str, align_corners: bool, device=None,
                   dtype=torch.float32) -> torch.Tensor:
    """The ``(out_size, in_size)`` matrix (of ``dtype``) of ``mode``'s weights (``"bicubic"`` or
    ``"bilinear"``): row ``o`` holds output ``o``'s taps, clamped at the border (so a border
    input may take several).

    >>> w = resize_weights(4, 4, mode="bicubic", align_corners=False)
    >>> torch.allclose(w, torch.eye(4))
    True
    >>> resize_weights(2, 4, mode="bilinear", align_corners=False).tolist()
    [[1.0, 0.0], [0.75, 0.25], [0.25, 0.75], [0.0, 1.0]]
    """
    o = torch.arange(out_size, device=device)
    if align_corners:
        # source o * (in - 1) / (out - 1); one output reads input 0 (eager's scale 0)
        num, den = o * (in_size - 1), torch.sym_max(out_size - 1, 1)
    else:
        # source (o + 0.5) * in / out - 0.5 = ((2o + 1) * in - out) / (2 * out)
        num, den = (2 * o + 1) * in_size - out_size, 2 * out_size
        if mode == "bilinear":
            num = torch.clamp(num, min=0)  # eager clamps a linear source coordinate at 0
    base = torch.div(num, den, rounding_mode="floor")
    t = (num - base * den).to(dtype) / den
    if mode == "bicubic":
        taps = ((-1, _far(t + 1)), (0, _near(t)), (1, _near(1 - t)), (2, _far(2 - t)))
    elif mode == "bilinear":
        taps = ((0, 1 - t), (1, t))
    else:
        raise ValueError(f"resize_weights: mode {mode!r} is not separable here; use 'bicubic' or 'bilinear'")
    cols = torch.arange(in_size, device=device)
    w = None
    for offset, coeff in taps:
        tap = torch.clamp(base + offset, 0, in_size - 1)
        part = (tap[:, None] == cols[None, :]).to(dtype) * coeff[:, None]
        w = part if w is None else w + part
    return w


def separable_resize(x: torch.Tensor, size, *, mode: str = "bicubic", align_corners: bool = False) -> torch.Tensor:
    """``F.interpolate(x, size=size, mode=mode, align_corners=align_corners)`` for a 4-D ``x``
    and ``mode`` ``"bicubic"`` or ``"bilinear"``, as ``Wh @ x @ Ww.T`` (autocast off: eager's
    op runs in the input's precision).

    >>> x = torch.randn(1, 2, 3, 3)
    >>> separable_resize(x, (5, 6), mode="bilinear").shape
    torch.Size([1, 2, 5, 6])
    """
    out_h, out_w = size
    refusal = _eager_refusal(x, out_h, out_w)
    if refusal is not None:  # the matmuls would return an empty tensor where eager raises
        return refuse_as_eager(x, refusal, lambda: F.interpolate(x, size=(out_h, out_w), mode=mode,
                                                          align_corners=align_corners))
    with torch.autocast(x.device.type, enabled=False):
        xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        kw = dict(mode=mode, align_corners=align_corners, device=x.device, dtype=xf.dtype)
        wh = resize_weights(x.shape[-2], out_h, **kw)
        ww = resize_weights(x.shape[-1], out_w, **kw)
        out = torch.matmul(torch.matmul(wh, xf), ww.t())
    return out.to(x.dtype)


_ARG_NAMES = ("input", "size", "scale_factor", "mode", "align_corners", "recompute_scale_factor", "antialias")


def _eager_refusal(x, out_h, out_w):
    """Eager's message where its 2-D upsampling refuses these sizes (an empty input or output plane,
    then no channels; a batch of 0 is accepted), else None.  On symbolic sizes each comparison is a
    guard of the trace."""
    n, c, h, w = x.shape
    if not (h > 0 and w > 0 and out_h > 0 and out_w > 0):
        return (f"Input and output sizes should be greater than 0, but got input (H: {h}, W: {w}) "
                f"output (H: {out_h}, W: {out_w})")
    if not c > 0:
        return f"Non-empty 4D data tensor expected but got a tensor with sizes [{n}, {c}, {h}, {w}]"
    return None


def _by_name(args, kwargs) -> dict:
    """An ``F.interpolate`` call's arguments by name (positional ones named as the function does)."""
    return {**dict(zip(_ARG_NAMES, args)), **kwargs}


def _call_args(node) -> dict:
    return _by_name(node.args, node.kwargs)


def _float_input(kw) -> bool:
    x = kw.get("input")
    v = x.meta.get("example_value") if isinstance(x, torch.fx.Node) else x
    return isinstance(v, torch.Tensor) and v.dim() == 4 and v.dtype.is_floating_point


def _weighted(kw) -> bool:
    """A bicubic or bilinear call given its output size: rewritable as :func:`separable_resize`."""
    size = kw.get("size")
    if isinstance(size, torch.fx.Node):  # x.shape[-2:] of another tensor: a torch.Size at trace time
        size = size.meta.get("example_value")
    return (kw.get("mode") in ("bicubic", "bilinear") and not kw.get("antialias", False)
            and kw.get("scale_factor") is None and isinstance(size, (tuple, list)) and len(size) == 2
            and _float_input(kw))


def _repeat_factors(kw):
    """``(fh, fw)`` for a nearest call by a power-of-two factor (2, 4 or 8) per dim, else None.

    Eager picks input ``o >> 1`` at twice the size, else ``floor(o * (1 / f))`` in float:
    for these factors ``1 / f`` is exact, so both are ``o // f``."""
    f = kw.get("scale_factor")
    if kw.get("mode") != "nearest" or kw.get("size") is not None or not _float_input(kw):
        return None
    fs = tuple(f) if isinstance(f, (tuple, list)) else (f, f)
    if len(fs) != 2 or any(isinstance(v, bool) or not isinstance(v, (int, float)) or v not in (2, 4, 8) for v in fs):
        return None
    return tuple(int(v) for v in fs)


def nearest_repeat(x: torch.Tensor, factors) -> torch.Tensor:
    """``F.interpolate(x, scale_factor=factors, mode="nearest")`` for a 4-D ``x`` and integer
    factors, as each pixel repeated ``fh x fw`` times (an expand and a reshape): its backward
    sums each block, where torch's decomposition makes an ``index_put(accumulate=True)``.

    >>> x = torch.randn(1, 2, 3, 5)
    >>> torch.equal(nearest_repeat(x, (2, 4)), F.interpolate(x, scale_factor=(2, 4), mode="nearest"))
    True
    """
    fh, fw = factors
    n, c, h, w = x.shape
    refusal = _eager_refusal(x, h * fh, w * fw)
    if refusal is not None:  # the expand would return an empty tensor where eager raises
        return refuse_as_eager(x, refusal, lambda: F.interpolate(x, scale_factor=(float(fh), float(fw)), mode="nearest"))
    return x[:, :, :, None, :, None].expand(n, c, h, fh, w, fw).reshape(n, c, h * fh, w * fw)


def resize_as_matmuls(gm: torch.fx.GraphModule) -> int:
    """Rewrite ``gm``'s (a dynamo graph's) bicubic and bilinear ``F.interpolate`` calls as
    :func:`separable_resize`, and nearest ones by 2, 4 or 8 as :func:`nearest_repeat`;
    returns how many."""
    n = 0
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is not F.interpolate:
            continue
        kw = _call_args(node)
        factors = _repeat_factors(kw)
        if factors is not None:
            node.target, node.args, node.kwargs = nearest_repeat, (kw["input"], factors), {}
        elif _weighted(kw):
            size = kw["size"]
            node.target = separable_resize
            node.args = (kw["input"], size if isinstance(size, torch.fx.Node) else tuple(size))
            node.kwargs = {"mode": kw["mode"], "align_corners": bool(kw.get("align_corners") or False)}
        else:
            continue
        n += 1
    if n:
        gm.recompile()
    return n


#: The largest input plane (``in_h * in_w``, at the example sizes) resized as two matmuls: their
#: multiply-adds per output grow with the input's sides where torch's gathers read 16 (bicubic) or
#: 4 taps, so a small grid (a ViT's 14 x 14 or a DINOv2's 37 x 37 position embedding, at any output
#: size) is rewritten and an image (96 x 96 and up) keeps torch's op.
MAX_MATMUL_PLANE = 64 * 64


def _example(v):
    """A size's example value (a SymInt's hint), or None where it has none."""
    return v.node.hint if isinstance(v, torch.SymInt) else int(v)


def _small_plane(x) -> bool:
    """Whether ``x``'s plane is small enough for :func:`separable_resize` at the example sizes (a
    choice of speed, not of values: no guard is recorded)."""
    ih, iw = _example(x.shape[2]), _example(x.shape[3])
    return ih is not None and iw is not None and ih * iw <= MAX_MATMUL_PLANE


def _resized(kw: dict):
    """The output of an ``F.interpolate`` call (its arguments by name) as :func:`nearest_repeat` or
    :func:`separable_resize`, or None where neither applies."""
    x, factors = kw.get("input"), _repeat_factors(kw)
    if factors is not None:
        out = (x.shape[2] * factors[0], x.shape[3] * factors[1])
    elif _weighted(kw) and _small_plane(x):
        out = tuple(kw["size"])
    else:
        return None
    # torch's decomposition, which the trace would record, lacks eager's size checks: raise as eager does.
    refusal = _eager_refusal(x, *out)
    if refusal is not None:
        raise program_error(RuntimeError, refusal)
    if factors is not None:
        return nearest_repeat(x, factors)
    return separable_resize(x, out, mode=kw["mode"], align_corners=bool(kw.get("align_corners") or False))


class ResizeAsMatmuls(TorchFunctionMode):
    """While symshape traces a program for the compiler (``shapes.trace(..., function_modes=...)``):
    the ``F.interpolate`` calls :func:`resize_as_matmuls` rewrites in dynamo's graphs run as
    :func:`separable_resize` or :func:`nearest_repeat`, so the trace holds two small matmuls (or an
    expand) where torch's decomposition of bicubic resizing records sixteen gathers, each an ATen
    launch (HF ViT's position embedding at every image size but its own).  Only a small input plane
    (:data:`MAX_MATMUL_PLANE`) is rewritten: a large image keeps torch's op.
    ``rewritten`` counts them.
    ``$SYMSHAPE_RESIZE_REWRITE=0`` turns the rewrite off (:func:`resize_modes` gives no mode).

    >>> import shapes
    >>> tp = shapes.trace(lambda x: F.interpolate(x, size=(7, 9), mode="bicubic"), "x: f32[B, 2, H, W]",
    ...                   dims={"H": 5, "W": 6}, function_modes=(ResizeAsMatmuls(),))
    >>> any("index" in str(n.target) for n in tp.graph.nodes), tp.output_shapes
    (False, [(B, 2, 7, 9)])
    """

    def __init__(self):
        super().__init__()
        self.rewritten = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.interpolate:
            out = _resized(_by_name(args, kwargs))
            if out is not None:
                self.rewritten += 1
                return out
        return pass_through(func, args, kwargs)


def resize_modes() -> tuple:
    """The ``function_modes`` the compiler traces with: a :class:`ResizeAsMatmuls`, unless
    ``$SYMSHAPE_RESIZE_REWRITE`` is ``0``.

    >>> [type(m).__name__ for m in resize_modes()]
    ['ResizeAsMatmuls']
    """
    return () if os.environ.get("SYMSHAPE_RESIZE_REWRITE", "1") == "0" else (ResizeAsMatmuls(),)


__all__ = ["separable_resize", "resize_weights", "nearest_repeat", "resize_as_matmuls", "ResizeAsMatmuls",
           "resize_modes"]
