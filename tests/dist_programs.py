"""Sharded programs for tests/test_distributed.py, and the gloo harness that runs them for real.

Each program is one step as every rank runs it (Megatron-style explicit collectives).
``run_grid(W, cases)`` starts ``W`` gloo processes on 127.0.0.1 and runs every case on
each rank, recording the outcome, the output shape and the bytes each collective
kind sent (by wrapping the collectives, with :func:`shapes.flops.comm.bytes_sent`'s convention).
"""
from __future__ import annotations

import os
import socket
import tempfile
import pickle

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

N_HEADS = 8


def sp_mlp(x, w1, w2):
    """Sequence-parallel MLP: gather the sequence, column- then row-parallel linear, reduce-scatter."""
    W, r = dist.get_world_size(), dist.get_rank()
    assert w1.shape[1] % W == 0, "the hidden size must divide by the world size"
    full = x.new_empty(W * x.shape[0], x.shape[1])
    dist.all_gather_into_tensor(full, x)
    h = w1.shape[1] // W
    y = torch.relu(full @ w1.narrow(1, r * h, h))
    z = y @ w2.narrow(0, r * h, h)
    out = z.new_empty(x.shape)
    dist.reduce_scatter_tensor(out, z)
    return out


def tp_attention(x, wqkv, wo):
    """Tensor-parallel causal self-attention, 8 heads split over the ranks, all-reduce at the end."""
    W, r = dist.get_world_size(), dist.get_rank()
    B, T, E = x.shape
    assert N_HEADS % W == 0, "the heads must divide by the world size"
    assert E % N_HEADS == 0, "the width must divide by the heads"
    hl, hd = N_HEADS // W, E // N_HEADS
    el = hl * hd
    wl = wqkv.view(E, 3, E).narrow(2, r * el, el).reshape(E, 3 * el)
    q, k, v = (x @ wl).view(B, T, 3, hl, hd).permute(2, 0, 3, 1, 4).unbind(0)
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    y = a.transpose(1, 2).reshape(B, T, el) @ wo.narrow(0, r * el, el)
    dist.all_reduce(y)
    return y


def a2a_experts(x):
    """Expert-parallel dispatch: tokens to their expert's rank and back (functional all-to-all)."""
    import torch.distributed._functional_collectives as funcol
    y = funcol.all_to_all_single(x, None, None, dist.group.WORLD)
    y = funcol.all_reduce(y * 2, "sum", dist.group.WORLD)
    return funcol.all_to_all_single(y, None, None, dist.group.WORLD)


PROGRAMS = {"sp_mlp": sp_mlp, "tp_attention": tp_attention, "a2a_experts": a2a_experts}

_WRAPPED = {"all_reduce": "all_reduce", "all_gather_into_tensor": "all_gather",
            "reduce_scatter_tensor": "reduce_scatter", "all_to_all_single": "all_to_all", "broadcast": "broadcast"}


def _wrap_collectives(sent):
    """Count what each collective sends, by the convention of shapes.flops.comm (bytes of the input)."""
    from shapes.distributed import Collective
    from shapes.flops.comm import bytes_sent
    W = dist.get_world_size()
    for fn, kind in _WRAPPED.items():
        orig = getattr(dist, fn)

        def wrapped(*a, _orig=orig, _kind=Collective(kind), _fn=fn, **k):
            t = a[1] if _fn in ("all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single") else a[0]
            sent[_kind.value] = sent.get(_kind.value, 0) + bytes_sent(_kind, t.numel() * t.element_size(), W)
            return _orig(*a, **k)
        setattr(dist, fn, wrapped)
        setattr(dist.distributed_c10d, fn, wrapped)
    import torch.distributed._functional_collectives as funcol
    for fn, kind in {"all_reduce": "all_reduce", "all_gather_tensor": "all_gather",
                     "reduce_scatter_tensor": "reduce_scatter", "all_to_all_single": "all_to_all",
                     "broadcast": "broadcast"}.items():
        orig = getattr(funcol, fn)

        def fwrapped(t, *a, _orig=orig, _kind=Collective(kind), **k):
            sent[_kind.value] = sent.get(_kind.value, 0) + bytes_sent(_kind, t.numel() * t.element_size(), W)
            return _orig(t, *a, **k)
        setattr(funcol, fn, fwrapped)


def _worker(rank, W, port, cases, outdir):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=W)
    _wrap_collectives(sent := {})
    results = []
    for name, shapes_ in cases:
        torch.manual_seed(0)
        args = [torch.randn(s) for s in shapes_]
        sent.clear()
        try:
            out = PROGRAMS[name](*args)
            if hasattr(out, "wait"):
                out = out.wait()
            results.append(("ok", tuple(out.shape), dict(sent)))
        except Exception as e:  # the program's error, as each rank sees it
            results.append((type(e).__name__, str(e).splitlines()[0][:200], dict(sent)))
        dist.barrier()
    with open(os.path.join(outdir, f"{rank}.pkl"), "wb") as f:
        pickle.dump(results, f)
    dist.destroy_process_group()


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _spawn(worker, W, args_for_port, attempts: int = 3):
    """``mp.spawn`` on a fresh port, again (up to ``attempts``) when a rank is killed by a signal:
    where one rank raises and another is still inside a collective, gloo's C++ at times aborts
    the process (``terminate called without an active exception``) instead of raising. A run
    that completes is compared in full, so a retry hides no disagreement."""
    for attempt in range(attempts):
        try:
            mp.spawn(worker, args=args_for_port(_free_port()), nprocs=W, join=True)
            return
        except mp.ProcessExitedException:
            if attempt == attempts - 1:
                raise


def run_grid(W, cases):
    """Run ``cases`` (program name, input shapes) on ``W`` gloo ranks; return results[rank][case]."""
    with tempfile.TemporaryDirectory() as d:
        _spawn(_worker, W, lambda port: (W, port, cases, d))
        out = []
        for r in range(W):
            with open(os.path.join(d, f"{r}.pkl"), "rb") as f:
                out.append(pickle.load(f))
        return out


def _traced_worker(rank, W, port, name, specs, shapes_, outdir):
    import shapes
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=W)
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
    with tempfile.TemporaryDirectory() as d:
        _spawn(_traced_worker, W, lambda port: (W, port, name, specs, shapes_, d))
        out = []
        for r in range(W):
            with open(os.path.join(d, f"{r}.pkl"), "rb") as f:
                out.append(pickle.load(f))
        return out
