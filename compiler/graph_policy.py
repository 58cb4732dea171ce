"""When a CUDA graph pays for a call: its host time against its GPU time, from closed forms.

A compiled program's call costs the host a launch or an ATen call per step (15 us a step on the
H100 machine's host: Whisper's encoder, 82 steps, 1.47 ms a call at B = 1 against 0.69 ms of GPU
time), and the GPU the program's FLOPs and bytes, which the engine has as closed forms in the
dims (:func:`shapes.flops.costs.count_graph`).  Where the GPU's estimated time is within
:data:`GPU_OVER_HOST` of the host's, the call is launch-bound and a graph (one replay, the
outputs copied out) is faster; where the GPU dominates, a graph saves nothing and its outputs'
copy and memory cost something (GPT-2's (1, 4096) logits: 411 MiB copied out, 0.81x).

Only programs whose graph replays are indistinguishable from their calls qualify: no input
mutated, no random numbers drawn, no output that is a view of an input (a replay's outputs are
copies).  :func:`graph_blocker` says which rule a program breaks.

Example::

    >>> import torch, shapes
    >>> tp = shapes.trace(lambda x, w: (x @ w).relu(), "x: f16[B, 64]", "w: f16[64, 64]")
    >>> cost = CallCost(tp, steps=2)
    >>> v = cost.verdict({"B": 8})
    >>> v.graph, v.host_s > v.gpu_s
    (True, True)
    >>> cost.verdict({"B": 10 ** 8}).graph
    False
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import sympy
import torch

from shapes.flops.costs import count_graph

from .exprs import compile_exprs

#: Host seconds per plan step (a Triton launch or an ATen call), on the H100 machine's host:
#: Whisper's encoder 1.47 ms for 82 steps, GPT-2 1.2-1.5 ms for 119 (session 13 and 14 profiles).
HOST_S_PER_STEP = 15e-6
#: Matmul throughput reached in half precision (H100: 990 TFLOP/s peak dense, ~600 reached on
#: transformer layers) and in float32 without TF32 (torch's default precision).
HALF_FLOPS_PER_S = 600e12
FLOAT_FLOPS_PER_S = 50e12
#: Memory bandwidth reached by elementwise and norm kernels (H100 HBM3: 3.35 TB/s peak).
BYTES_PER_S = 2.5e12
#: A graph where the GPU's estimate is under this many times the host's: a launch-bound call
#: gains the host time, a GPU-bound one loses little (its outputs' copy), so the rule leans to
#: graphs (Whisper at B = 4: GPU 1.8 ms estimated against 1.2 ms of host, 1.14x with a graph).
GPU_OVER_HOST = 1.5
#: The same for a program whose attention takes a mask the graph must keep: while a graph records,
#: SDPA may not choose cuDNN's kernel (:mod:`compiler.repeated_shapes`), and a masked call without
#: it runs the memory-efficient kernel (BERT at (1, 4096): 3.45 ms as a graph against 2.36 ms).
#: Only clearly launch-bound calls are worth that.
MASKED_GPU_OVER_HOST = 0.5


@dataclass(frozen=True, kw_only=True)
class GraphVerdict:
    """Whether a call at some sizes runs as a graph, with the estimates that decided it."""

    graph: bool
    gpu_s: float
    host_s: float
    #: Copying the outputs out of the graph's buffers (a replay's outputs are copies).
    copy_s: float = 0.0

    def text(self) -> str:
        """One line: the decision and its figures.

        >>> GraphVerdict(graph=True, gpu_s=4e-4, host_s=1.2e-3).text()
        'graph: GPU ~0.40 ms against host ~1.20 ms a call'
        """
        copy = f" + copy-out ~{self.copy_s * 1e3:.2f} ms" if self.copy_s >= 5e-6 else ""
        return (f"{'graph' if self.graph else 'no graph'}: GPU ~{self.gpu_s * 1e3:.2f} ms{copy} against host "
                f"~{self.host_s * 1e3:.2f} ms a call")


class CallCost:
    """A traced program's GPU time per call as a function of its dims, and its host time.

    ``steps``: the plan's steps (launches and ATen calls) a call makes; ``masks_kept``: whether
    its attention takes a mask the graph must keep (see :data:`MASKED_GPU_OVER_HOST`).
    """

    def __init__(self, tp, steps: int, masks_kept: bool = False):
        costs = count_graph(tp)
        syms = sorted(tp.env.symbols.items())
        self.names = [n for n, _ in syms]
        out = next(n for n in tp.graph.nodes if n.op == "output")
        out_bytes = sympy.Add(*[sympy.Mul(*[sympy.sympify(d) for d in a.meta["shape"]]) * a.meta["val"].dtype.itemsize
                                for a in out.args[0] if isinstance(a, torch.fx.Node)
                                and isinstance(a.meta.get("val"), torch.Tensor) and "shape" in a.meta])
        self._fn = compile_exprs([sympy.sympify(costs.total), sympy.sympify(costs.total_bytes), out_bytes],
                                 [s for _, s in syms])
        self.flops_per_s = HALF_FLOPS_PER_S if _half_precision(tp) else FLOAT_FLOPS_PER_S
        self.host_s = steps * HOST_S_PER_STEP
        self.factor = MASKED_GPU_OVER_HOST if masks_kept else GPU_OVER_HOST

    def verdict(self, sizes: dict) -> GraphVerdict:
        """The verdict at ``sizes`` (dim name -> int; dims the trace fixed need not be given)."""
        flops, nbytes, out_bytes = self._fn(*[int(sizes.get(n, 1)) for n in self.names])
        gpu = float(flops) / self.flops_per_s + float(nbytes) / BYTES_PER_S
        copy = 2 * float(out_bytes) / BYTES_PER_S
        return GraphVerdict(graph=gpu + copy < self.factor * self.host_s, gpu_s=gpu, host_s=self.host_s, copy_s=copy)


def masks_kept(variant) -> bool:
    """Whether a compiled variant's attention takes a mask that a graph must keep: an SDPA call
    with a mask, where the variant's masks are not all proven causal or absent at every size."""
    tp = variant.tp
    sdpa = torch.ops.aten.scaled_dot_product_attention.default
    masked = any(n.op == "call_function" and n.target is sdpa and (
        len(n.args) > 3 and n.args[3] is not None or n.kwargs.get("attn_mask") is not None) for n in tp.graph.nodes)
    return masked and not (getattr(variant, "masks", None) and getattr(variant, "all_proven", False))


def _half_precision(tp) -> bool:
    """Whether the program's weights (else its inputs) are mostly half precision."""
    vals = [n.meta.get("val") for n in tp.graph.nodes if n.op == "get_attr"] or [
        n.meta.get("val") for n in tp.graph.nodes if n.op == "placeholder"]
    half = sum(v.numel() for v in vals if isinstance(v, torch.Tensor) and v.dtype in (torch.float16, torch.bfloat16)
               and _static_numel(v))
    full = sum(v.numel() for v in vals if isinstance(v, torch.Tensor) and v.dtype == torch.float32
               and _static_numel(v))
    return half > full


def _static_numel(v) -> bool:
    return all(isinstance(d, int) for d in v.shape)


def _draws(node) -> bool:
    """Whether a seeded op draws random numbers at this call: attention and dropout with a
    probability of 0 (or dropout out of training) do not."""
    schema = node.target._schema
    given = dict(zip([a.name for a in schema.arguments], node.args)) | dict(node.kwargs)
    for name in ("dropout_p", "p"):
        if any(a.name == name for a in schema.arguments):
            p = given.get(name, next(a.default_value for a in schema.arguments if a.name == name))
            if given.get("train", True) is False or (isinstance(p, (int, float)) and p == 0):
                return False
    return True


def state_blocker(tp) -> Optional[str]:
    """Why a replay of ``tp`` would not do what a call does to state outside its outputs (it
    mutates a tensor, or draws random numbers: a replay draws the recorded ones again), or None.

    >>> import torch, shapes
    >>> state_blocker(shapes.trace(lambda x: torch.nn.functional.dropout(x, 0.5), "x: f32[N]"))
    'it draws random numbers (aten.native_dropout.default)'
    """
    for n in tp.graph.nodes:
        if n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload):
            continue
        if n.target._schema.is_mutable:
            return f"it mutates a tensor ({n.target})"
        if torch.Tag.nondeterministic_seeded in n.target.tags and _draws(n):
            return f"it draws random numbers ({n.target})"
    return None


def graph_blocker(tp) -> Optional[str]:
    """Why replays of ``tp`` would differ from its calls, or ``None`` where they would not.

    >>> import torch, shapes
    >>> graph_blocker(shapes.trace(lambda x: x * 2, "x: f32[N]")) is None
    True
    >>> graph_blocker(shapes.trace(lambda x: x.t(), "x: f32[N, 2]"))
    'an output is a view of an input (a replay returns a copy)'
    """
    why = state_blocker(tp)
    if why is not None:
        return why
    out = next(n for n in tp.graph.nodes if n.op == "output")
    for a in out.args[0]:
        while isinstance(a, torch.fx.Node) and a.op == "call_function" and isinstance(
                a.target, torch._ops.OpOverload) and a.target.is_view:
            a = a.args[0]
        if isinstance(a, torch.fx.Node) and a.op in ("placeholder", "get_attr"):
            return "an output is a view of an input (a replay returns a copy)"
    return None


__all__ = ["CallCost", "GraphVerdict", "graph_blocker", "state_blocker", "masks_kept", "HOST_S_PER_STEP", "GPU_OVER_HOST",
           "MASKED_GPU_OVER_HOST"]
