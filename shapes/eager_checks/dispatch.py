"""Which kernel an op runs while tracing, so that it is the one eager runs.

Under the Python dispatcher, torch registers Python meta kernels (often the
``torch._refs`` version of the op) for ops that eager never sends to a
kernel of their own: CompositeImplicitAutograd ops, which eager decomposes
into other ops.  Such a ref may take other arguments (``reduction`` as a
string where the op passes an int) or compute other shapes
(``nll_loss(reduction='none')``, ``fft`` with ``norm='ortho'``
specializing sizes through ``math.sqrt``).  The tracer therefore runs the
decomposition eager would run, as ``make_fx`` does; a few ops whose
decomposition checks the device of a tensor of indices get a decomposition
here that treats symshape's meta tensors as the CPU tensors they stand for.

C++ kernels that read a symbolic tensor's sizes as ints (``kron``,
``take_along_dim``, ``multi_dot``) reach the tracer as ``aten.size`` and
friends: their answer is the example sizes, each a specialization (as in
torch).

Example::

    >>> import torch
    >>> from shapes.eager_checks.dispatch import eager_decomposition
    >>> eager_decomposition(torch.ops.aten.nll_loss.default) is not None
    True
    >>> eager_decomposition(torch.ops.aten.mm.default) is None
    True
"""
from __future__ import annotations

import functools

import torch
from torch._C import DispatchKey
from torch.utils import _pytree as pytree

from .memory_format import adaptive_avg_pool2d

aten = torch.ops.aten
_has = torch._C._dispatch_has_kernel_for_dispatch_key

METADATA = {
    aten.size.default: lambda t: tuple(int(s) for s in t.size()),
    aten.stride.default: lambda t: tuple(int(s) for s in t.stride()),
    aten.storage_offset.default: lambda t: int(t.storage_offset()),
}


def _specialized(t):
    return torch.empty_strided([int(s) for s in t.shape], [int(s) for s in t.stride()], dtype=t.dtype,
                               device=t.device)


def run_meta(func, args, kwargs):
    """``func(*args, **kwargs)`` on meta tensors.

    A few C++ meta kernels read sizes as ints (``hash_tensor``,
    ``fractional_max_pool3d``).  On a tensor with symbolic sizes that read
    goes to Python, where no dispatch mode is active while the tracer runs
    the kernel, and torch fails with an INTERNAL ASSERT.  A functional op
    then runs on its inputs specialized to the example sizes (each size a
    specialization, as torch records for these ops); an op that changes its
    inputs (``resize_as_``) raises :class:`~shapes.errors.UnsupportedOpError`.
    """
    try:
        return func(*args, **kwargs)
    except RuntimeError as e:
        if "dispatch_on_subclass" not in str(e):
            raise
        if func._schema.is_mutable:
            from ..errors import UnsupportedOpError
            raise UnsupportedOpError(
                f"the kernel of {func} reads symbolic sizes as ints, which symshape cannot trace for "
                f"an op that changes its inputs; call it outside the traced program") from e
    args, kwargs = pytree.tree_map_only(torch.Tensor, _specialized, (args, kwargs))
    return func(*args, **kwargs)


def _tensor_split_tensor(self, tensor_indices_or_sections, dim=0):
    t = tensor_indices_or_sections
    if t.dtype != torch.long:
        raise RuntimeError(f"tensor_split expected tensor_indices_or_sections to have dtype of long, but got {t.dtype}")
    if t.dim() == 0:
        return aten.tensor_split.sections(self, t.item(), dim)
    if t.dim() != 1:
        raise RuntimeError("tensor_split expected tensor_indices_or_sections to be a zero-dimensional or "
                           f"one-dimensional tensor, but got a tensor with {t.dim()} dims")
    return aten.tensor_split.indices(self, [t[i].item() for i in range(t.shape[0])], dim)


def _narrow_tensor(self, dim, start, length):
    if start.dim() != 0 or start.dtype.is_floating_point or start.dtype.is_complex or start.dtype == torch.bool:
        raise RuntimeError("start must be an 0-dim integral Tensor.")
    return aten.narrow.default(self, dim, start.item(), length)


# Ops whose eager decomposition reads index values on the CPU (data_ptr, item<int64_t>):
# the same decomposition, with the values read as data-dependent sizes.
IMPLEMENTATIONS = {
    aten.narrow.Tensor: _narrow_tensor,
}

# Python kernels torch registers in front of the tracer (they run under the Python
# dispatcher before any dispatch mode sees the op), replaced while tracing:
# None removes one, so the op reaches the tracer whole, as eager runs it
# (applied by shapes.torch_patches.eager_kernels).
PY_KERNELS = {
    # The decomposition checks that the index tensor is on the CPU: a meta tensor stands for one.
    aten.tensor_split.tensor_indices_or_sections: {DispatchKey.CompositeImplicitAutograd: _tensor_split_tensor},
    # The decomposition calls _native_batch_norm_legit_no_training in eval mode, which returns
    # save_mean/save_invstd of size C where eager's CPU kernel returns empty ones.
    aten.native_batch_norm.default: {DispatchKey.CompositeImplicitAutograd: None, DispatchKey.Autograd: None},
    # Eager's C++ kernel asks suggest_memory_format through c10's SymInt operators, where a
    # layout-only `size > 1` cannot be told from a semantic one (see eager_checks.memory_format).
    aten.adaptive_avg_pool2d.default: {DispatchKey.CompositeImplicitAutograd: adaptive_avg_pool2d},
}


@functools.lru_cache(maxsize=None)
def _decomposes_in_eager(func) -> bool:
    name = func.name()
    if not _has(name, "CompositeImplicitAutograd"):
        return False
    # A kernel of its own for CPU (or for every backend) means eager runs it whole.
    return not (_has(name, "CPU") or _has(name, "CompositeExplicitAutograd"))


#: Composite ops kept whole in the graph: eager runs a fused kernel for them on real
#: devices (flash attention for CPU and CUDA), while their decomposition on meta tensors
#: is the unfused math path; FLOP counting and the compiler need the op itself.
KEEP_WHOLE = frozenset({aten.scaled_dot_product_attention.default})


def eager_decomposition(func):
    """The function to run instead of ``func``'s meta kernel, or None.

    It runs with the tracer's mode active, so the ops it calls are traced.
    """
    if func in KEEP_WHOLE:
        return None
    impl = IMPLEMENTATIONS.get(func)
    if impl is not None:
        return impl
    if isinstance(func, torch._ops.OpOverload) and _decomposes_in_eager(func):
        return func.decompose
    return None
