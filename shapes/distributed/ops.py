"""The collectives as graph ops: ``symshape_c10d::*``, with the world size a SymInt argument.

torch's own collective ops take the group size as a plain ``int`` (or none:
the process group knows it), so a symbolic world size cannot flow through
them.  These ops can: each takes the tensor a rank contributes and ``world``
(``SymInt``), and returns what the collective gives that rank.  Their meta
kernels compute the output shape from ``world``; their CPU kernels run the
real collective on the default process group, so a traced graph runs under
a real ``gloo`` job too.

The size checks (``W * x.shape[0]`` rows for an all-gather output, ...) are
not here but where the program calls the collective
(:mod:`shapes.distributed.world`): there they become runtime asserts on the
user's line.

Example::

    >>> import torch
    >>> from shapes.distributed import ops
    >>> ops.Collective.ALL_GATHER.op(torch.empty(3, 2, device="meta"), 4).shape
    torch.Size([12, 2])
    >>> ops.Collective.of(torch.ops.symshape_c10d.reduce_scatter.default)
    <Collective.REDUCE_SCATTER: 'reduce_scatter'>
"""
from __future__ import annotations

import enum
from typing import Optional

import torch

LIBRARY = "symshape_c10d"

_lib = torch.library.Library(LIBRARY, "DEF")
_lib.define("all_reduce(Tensor x, SymInt world) -> Tensor")
_lib.define("all_gather(Tensor x, SymInt world) -> Tensor")
_lib.define("reduce_scatter(Tensor x, SymInt world) -> Tensor")
_lib.define("all_to_all(Tensor x, SymInt world) -> Tensor")
_lib.define("broadcast(Tensor x, SymInt world, int src) -> Tensor")


class Collective(enum.Enum):
    """The collective kinds symshape records (one graph op each)."""

    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"
    BROADCAST = "broadcast"

    @property
    def op(self):
        """The ``torch.ops.symshape_c10d`` overload of this kind."""
        return getattr(torch.ops.symshape_c10d, self.value).default

    @classmethod
    def of(cls, target) -> Optional["Collective"]:
        """The kind whose op ``target`` is (an FX node's target): ours, or torch's own collective ops
        as DTensor and FSDP2 issue them (:data:`TORCH_OPS`); None for any other target."""
        for k in cls:
            if target is k.op:
                return k
        hit = _torch_ops().get(target)
        return hit[0] if hit is not None else None

    @staticmethod
    def input_of(node):
        """The argument of a collective node that holds what the rank contributes (a node, or a list of them)."""
        hit = _torch_ops().get(node.target)
        return node.args[hit[1] if hit is not None else 0]

    @staticmethod
    def group_name_of(node) -> Optional[str]:
        """The group name a ``_c10d_functional`` node names (None for other ops)."""
        if getattr(node.target, "namespace", None) != "_c10d_functional":
            return None
        for a in node.args[1:]:
            if isinstance(a, str) and a not in ("sum", "avg", "product", "min", "max", "premul_sum"):
                return a
        return None


#: torch's collective ops (namespace, name) -> (kind, index of the argument the rank contributes).
TORCH_OPS = {
    ("_c10d_functional", "all_reduce"): ("ALL_REDUCE", 0), ("_c10d_functional", "all_reduce_"): ("ALL_REDUCE", 0),
    ("_c10d_functional", "all_gather_into_tensor"): ("ALL_GATHER", 0),
    ("_c10d_functional", "reduce_scatter_tensor"): ("REDUCE_SCATTER", 0),
    ("_c10d_functional", "all_to_all_single"): ("ALL_TO_ALL", 0),
    ("_c10d_functional", "broadcast"): ("BROADCAST", 0), ("_c10d_functional", "broadcast_"): ("BROADCAST", 0),
    ("c10d", "allreduce_"): ("ALL_REDUCE", 0), ("c10d", "_allgather_base_"): ("ALL_GATHER", 1),
    ("c10d", "_reduce_scatter_base_"): ("REDUCE_SCATTER", 1), ("c10d", "alltoall_base_"): ("ALL_TO_ALL", 1),
    ("c10d", "broadcast_"): ("BROADCAST", 0),
}
_RESOLVED: dict = {}


def _torch_ops() -> dict:
    """:data:`TORCH_OPS` by op overload (those this torch has)."""
    if not _RESOLVED:
        for (ns, name), (kind, arg) in TORCH_OPS.items():
            packet = getattr(getattr(torch.ops, ns), name, None)
            if packet is not None:
                _RESOLVED[packet.default] = (Collective[kind], arg)
    return _RESOLVED


# -- meta kernels: the shape each rank gets ------------------------------------------------

def _same(x, world, src=0):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _gather_meta(x, world):
    return x.new_empty((world * x.shape[0], *x.shape[1:]))


def _scatter_meta(x, world):
    # The caller has asserted x.shape[0] % world == 0 (gloo's check) on the user's line.
    return x.new_empty((x.shape[0] // world, *x.shape[1:]))


for _name, _fn in (("all_reduce", _same), ("all_gather", _gather_meta), ("reduce_scatter", _scatter_meta),
                   ("all_to_all", _same), ("broadcast", _same)):
    _lib.impl(_name, _fn, "Meta")


# -- CPU kernels: the real collective, on the default process group ------------------------

def _group_size(world):
    import torch.distributed as dist
    if not dist.is_initialized() or dist.get_world_size() != world:
        raise RuntimeError(f"symshape_c10d: the graph was run with world size {world} but the default process "
                           f"group has {dist.get_world_size() if dist.is_initialized() else 'none'}")
    return dist


def _all_reduce_cpu(x, world):
    out = x.clone(memory_format=torch.contiguous_format)
    _group_size(world).all_reduce(out)
    return out


def _all_gather_cpu(x, world):
    out = x.new_empty((world * x.shape[0], *x.shape[1:]))
    _group_size(world).all_gather_into_tensor(out, x.contiguous())
    return out


def _reduce_scatter_cpu(x, world):
    out = x.new_empty((x.shape[0] // world, *x.shape[1:]))
    _group_size(world).reduce_scatter_tensor(out, x.contiguous())
    return out


def _all_to_all_cpu(x, world):
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    _group_size(world).all_to_all_single(out, x.contiguous())
    return out


def _broadcast_cpu(x, world, src):
    out = x.clone(memory_format=torch.contiguous_format)
    _group_size(world).broadcast(out, src=src)
    return out


for _name, _fn in (("all_reduce", _all_reduce_cpu), ("all_gather", _all_gather_cpu),
                   ("reduce_scatter", _reduce_scatter_cpu), ("all_to_all", _all_to_all_cpu),
                   ("broadcast", _broadcast_cpu)):
    _lib.impl(_name, _fn, "CPU")
