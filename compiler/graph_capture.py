"""Recording CUDA graphs that share one memory pool and one capture stream, with what each keeps.

Every graph of a :class:`~compiler.cuda_graphs.GraphedProgram` is recorded by one
:class:`GraphRecorder`: on one capture stream (PyTorch keeps a cuBLAS workspace,
32 MiB on Hopper, per stream that ever ran a matmul, for the life of the
process, so a fresh stream per graph held a workspace per graph) into one
memory pool (what one graph frees at the end of its recording, its
intermediates, the next graph's recording reuses; only the outputs stay
allocated).  The warm-up runs that compile kernels before recording run on the
same stream, and their tensors are freed before recording starts.

Example (on a CUDA machine)::

    rec = GraphRecorder()
    x = torch.zeros(8, device="cuda")
    graph, outputs, kept = rec.record(lambda: [x * 2], x.device)
    graph.replay()            # outputs[0] now holds x * 2
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.utils import _pytree as pytree

from . import cublas_warm


@dataclass
class CaptureCost:
    """What recording one graph cost in GPU memory, in bytes.

    ``kept``: allocated bytes the graph keeps alive after its recording (its
    outputs, and a workspace a library allocated while recording);
    ``pool_growth``: bytes the shared pool and the allocator's reserve grew by
    (intermediates that no earlier graph's freed memory could hold).
    """

    kept: int = 0
    pool_growth: int = 0


class GraphRecorder:
    """Records graphs on one capture stream into one shared memory pool; see the module docstring."""

    def __init__(self, warmups: int = 2):
        self.warmups = warmups
        self.pool = None
        self.stream = None
        self.recorded = 0

    def record(self, run: Callable[[], Any], device) -> tuple:
        """Warm ``run`` up, record it, and return ``(graph, output leaves, CaptureCost)``.

        ``run`` reads its inputs from buffers that stay in place (the caller's
        static inputs); it runs ``warmups`` times first, so that kernels compile and
        libraries set up outside the recording.
        """
        if self.stream is None:
            self.stream = torch.cuda.Stream(device)
            self.pool = torch.cuda.graph_pool_handle()
        current = torch.cuda.current_stream(device)
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            for _ in range(self.warmups):
                out = run()
                del out  # freed before recording: the recording may reuse it
        current.wait_stream(self.stream)
        torch.cuda.synchronize(device)
        # torch.cuda.graph empties the allocator's cache on entry anyway (so the warm-up's cached
        # blocks go back): emptied here first, the reserve before and after compare like with like.
        torch.cuda.empty_cache()
        allocated, reserved = torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device)
        graph = torch.cuda.CUDAGraph()
        # No cuBLAS warm-up launches from its thread while recording (compiler.cublas_warm).
        with cublas_warm.exclusive(), torch.cuda.graph(graph, pool=self.pool, stream=self.stream):
            out = run()
        torch.cuda.synchronize(device)
        leaves = pytree.tree_leaves(out)
        cost = CaptureCost(kept=max(0, torch.cuda.memory_allocated(device) - allocated),
                           pool_growth=max(0, torch.cuda.memory_reserved(device) - reserved))
        self.recorded += 1
        return graph, leaves, cost


__all__ = ["GraphRecorder", "CaptureCost"]
