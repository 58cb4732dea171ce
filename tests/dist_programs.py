"""The gloo harness for tests/test_distributed.py: the programs of examples/sharded.py, run for real.

``run_grid(W, cases)`` starts ``W`` gloo processes on 127.0.0.1 and runs every case on each rank,
recording the outcome, the output shape and the bytes each collective kind sent.  The bytes are
measured under a dispatch mode that sees every collective op torch runs (``c10d.*`` from
``torch.distributed``, ``_c10d_functional.*`` from DTensor and funcol, FSDP2's all-gathers), by
:func:`shapes.flops.comm.bytes_sent`'s convention.

Every error case of these programs fails on every rank before any collective (an ``assert`` on the
sizes, funcol's split check, DTensor's sharding propagation, GPT-2's position embedding), so no rank
waits in a collective that another left: there is no retry, and a gloo timeout turns a hang into a
failure rather than a stuck test.
"""
from __future__ import annotations

import datetime
import os
import pickle
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils._python_dispatch import TorchDispatchMode

from examples import sharded

PROGRAMS = {"sp_mlp": sharded.sp_mlp, "tp_attention": sharded.tp_attention, "a2a_experts": sharded.a2a_experts}
#: programs built for their world: name -> factory (run on each rank: build, then call).
FACTORIES = {"tp_attention_plan": sharded.make_tp_attention, "fsdp_gpt2": sharded.make_fsdp_gpt2,
             "tp_attention_2d": sharded.make_tp_attention_2d}
#: integer inputs (token ids) and their upper bound
TOKENS = {"fsdp_gpt2": 48}


class CollectiveBytes(TorchDispatchMode):
    """Counts the bytes each collective op sends per rank, by kind, as the ops run (``self.sent``)."""

    def __init__(self):
        super().__init__()
        self.sent: dict = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        from shapes.distributed import Collective
        from shapes.flops.comm import bytes_sent
        kind = Collective.of(func)
        if kind is not None:
            hit = Collective.input_of(_Call(func, args))
            ts = hit if isinstance(hit, (list, tuple)) else [hit]
            n = sum(t.numel() * t.element_size() for t in ts)
            self.sent[kind.value] = self.sent.get(kind.value, 0) + bytes_sent(kind, n, _size(func, args))
        return func(*args, **(kwargs or {}))


class _Call:
    """What Collective.input_of reads of an FX node: the target and the arguments."""

    def __init__(self, target, args):
        self.target, self.args = target, args


def _size(func, args) -> int:
    import torch.distributed.distributed_c10d as c10d
    for a in args:
        if isinstance(a, torch.ScriptObject):
            return dist.ProcessGroup.unbox(a).size()
    for a in args[1:]:
        if isinstance(a, str) and a not in ("sum", "avg", "product", "min", "max"):
            return c10d._resolve_process_group(a).size()
    raise AssertionError(f"no group in the arguments of {func}")


def _inputs(name, shapes_):
    if name in TOKENS:
        return [torch.randint(0, TOKENS[name], s) for s in shapes_]
    return [torch.randn(s) for s in shapes_]


def _run_case(name, shapes_, mesh):
    torch.manual_seed(0)  # every rank the same inputs (a tensor-parallel plan's input is replicated)
    args = _inputs(name, shapes_)
    program = FACTORIES[name](**mesh) if name in FACTORIES else PROGRAMS[name]
    counter = CollectiveBytes()
    try:
        with counter:
            out = program(*args)
            out = getattr(out, "logits", out)
            if hasattr(out, "wait"):
                out = out.wait()
            out = out.full_tensor() if hasattr(out, "full_tensor") else out
        return ("ok", tuple(out.shape), dict(counter.sent))
    except Exception as e:  # the program's error, as each rank sees it
        return (type(e).__name__, str(e).splitlines()[0][:200] if str(e) else "", dict(counter.sent))


def _worker(rank, W, store, cases, outdir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=store, rank=rank, world_size=W,
                            timeout=datetime.timedelta(seconds=120))
    results = []
    for name, shapes_, mesh in cases:
        results.append(_run_case(name, shapes_, mesh))
        dist.barrier()
    with open(os.path.join(outdir, f"{rank}.pkl"), "wb") as f:
        pickle.dump(results, f)
    dist.destroy_process_group()


def _collect(worker, W, args_after_store):
    with tempfile.TemporaryDirectory() as d:
        # A file store in this group's own folder: a TCP port picked free and then released could be
        # taken by another group before the ranks bind it (seen once under a full suite's load:
        # a barrier met another group's messages, "Split sizes doesn't match total dim 0 size").
        store = "file://" + os.path.join(d, "store")
        mp.spawn(worker, args=(W, store, *args_after_store, d), nprocs=W, join=True)
        out = []
        for r in range(W):
            with open(os.path.join(d, f"{r}.pkl"), "rb") as f:
                out.append(pickle.load(f))
        return out


def run_grid(W, cases):
    """Run ``cases`` (program name, input shapes, mesh sizes by dim or {}) on ``W`` gloo ranks; return
    results[rank][case]."""
    return _collect(_worker, W, (cases,))


def _traced_worker(rank, W, store, name, specs, shapes_, outdir):
    import shapes
    dist.init_process_group("gloo", init_method=store, rank=rank, world_size=W,
                            timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(rank)
    args = [torch.randn(s) for s in shapes_]
    tp = shapes.trace(PROGRAMS[name], *specs, world="W", dims={"W": (1, 8)})
    got = tp.run(*[a.clone() for a in args])
    want = PROGRAMS[name](*[a.clone() for a in args])
    with open(os.path.join(outdir, f"{rank}.pkl"), "wb") as f:
        pickle.dump(bool(torch.allclose(got, want, atol=1e-5)), f)
    dist.destroy_process_group()


def run_traced(W, name, specs, shapes_):
    """Trace ``name`` on each of ``W`` gloo ranks, run the traced graph there; whether it equals eager, per rank."""
    return _collect(_traced_worker, W, (name, specs, shapes_))
