"""Column reductions (sums over a strided dim): symshape's tiled Triton kernels against the same
programs in one program per output (``SYMSHAPE_TILED_REDUCTIONS=0``'s form), eager and Inductor.

On a GPU: device µs per call (torch.profiler, kernels only, summed per call) for each shape,
side by side.  On the CPU: each program's kernels and the form the code generator chose.

Usage::

    python bench/column_reductions.py            # GPU: the table; CPU: the plan's forms
    python bench/column_reductions.py --sweep    # GPU: the tiled kernels under each tile config

Example::

    >>> [name for name, *_ in CASES][:2]
    ['colsum', 'colsum_wide']
"""
from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _colsum(x):
    return x.sum(0)


def _lnw(g, xhat):  # LayerNorm's weight and bias gradients
    return (g * xhat).sum(0), g.sum(0)


def _batch(x):  # a sum over the batch dim of [B, T, C]
    return x.sum(0)


def _meanvar(x):
    return x.float().mean(0), x.float().var(0)


def _ln6(*gx):  # six LayerNorms' weight and bias gradients, fused as in BERT's backward
    out = []
    for g, xhat in zip(gx[::2], gx[1::2]):
        out += [(g * xhat).sum(0), g.sum(0)]
    return tuple(out)


#: (name, program, specs, shapes of the inputs): BERT-base training's sizes (B*T = 4696, C = 768).
CASES = [
    ("colsum", _colsum, ["x: bf16[N, C]"], [(4696, 768)]),
    ("colsum_wide", _colsum, ["x: bf16[N, C]"], [(4696, 3072)]),
    ("ln_weight_grad", _lnw, ["g: bf16[N, C]", "xhat: bf16[N, C]"], [(4696, 768), (4696, 768)]),
    ("batch_sum", _batch, ["x: bf16[B, T, C]"], [(8, 587, 768)]),
    ("mean_var_f32", _meanvar, ["x: f32[N, C]"], [(4696, 768)]),
    ("colsum_odd", _colsum, ["x: bf16[N, C]"], [(1237, 771)]),
    # An LM head's bias gradient in fp32 training: a vocabulary of 8192 columns, 154 MB read.
    ("colsum_vocab_f32", _colsum, ["x: f32[N, V]"], [(4696, 8192)]),
    # BERT fp32 training's slowest kernel: 12 column sums over 768 outputs in one loop.
    ("ln6_grads_f32", _ln6, [f"{n}{i}: f32[N, C]" for i in range(6) for n in ("g", "xhat")], [(4696, 768)] * 12),
]

#: ``--sweep``'s tile configs: (name, TILE, XBLOCKS, SPLIT_PROGRAMS, launch options); TILE is the
#: elements of a tile for up to two accumulators (more get fewer, :func:`.tile_size`).
SWEEP = [
    ("default", 4096, (16, 32, 64), 264, {}),
    ("t4096 stages1", 4096, (16, 32, 64), 264, {"num_stages": 1}),
    ("t2048 w4", 2048, (16, 32, 64), 264, {"num_warps": 4}),
    ("t2048 w4 s528", 2048, (16, 32, 64), 528, {"num_warps": 4}),
    ("t1024 w4 s528", 1024, (16, 32, 64), 528, {"num_warps": 4}),
    ("t1024 w4 s1056", 1024, (16, 32, 64), 1056, {"num_warps": 4}),
    ("t1024 w2 s1056", 1024, (16, 32, 64), 1056, {"num_warps": 2}),
    ("t512 w4 s1056", 512, (16, 32, 64), 1056, {"num_warps": 4}),
    ("t2048 w4 x32+ s528", 2048, (32, 64, 128), 528, {"num_warps": 4}),
    ("t4096 w8 x64+ s528", 4096, (64, 128), 528, {}),
]


def _set_tiles(on: bool):
    from compiler.codegen import triton_tiles
    triton_tiles.ENABLED = on


def _compiled(fn, specs, tiles: bool):
    import compiler
    _set_tiles(tiles)
    try:
        return compiler.compile(fn, *specs, target="triton")
    finally:
        _set_tiles(True)


def print_forms():
    """Each case's kernels and their grid form (no launch: the CPU needs no GPU for this)."""
    import shapes
    from compiler.codegen.triton import TRITON
    from compiler.lowering import lower
    from compiler.scheduler import schedule
    for name, fn, specs, _ in CASES:
        lp = lower(shapes.trace(fn, *specs))
        _, meta = TRITON.generate(lp, schedule(lp))
        forms = ", ".join(f"{k}: {m[0].value} over {m[1]}" for k, (_, m, _fn) in meta.items())
        print(f"{name:16s} {forms}")


def device_us(fn, args, reps=20) -> float:
    """Device µs per call: every CUDA kernel's time under torch.profiler, summed, over ``reps``."""
    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn(*args)
        torch.cuda.synchronize()
    total = sum(getattr(e, "device_time", 0) or e.cuda_time for e in prof.events()
                if e.device_type == torch.autograd.DeviceType.CUDA)
    return total / reps


def _err(got, want) -> float:
    got = got if isinstance(got, (tuple, list)) else [got]
    want = want if isinstance(want, (tuple, list)) else [want]
    return max(((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-6)).item()
               for a, b in zip(got, want))


def main():
    if not torch.cuda.is_available():
        print("no CUDA: the kernel forms symshape's code generator picks")
        print_forms()
        return
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; device µs per call (profiler, kernels only)")
    print(f"{'case':16s} {'shapes':22s} {'tiled':>8s} {'rows':>8s} {'eager':>8s} {'inductor':>9s}  rel.err tiled/rows")
    for name, fn, specs, shp in CASES:
        g = torch.Generator(device="cuda").manual_seed(0)
        dt = torch.float32 if "f32" in specs[0] else torch.bfloat16
        args = [torch.randn(*s, device="cuda", generator=g).to(dt) for s in shp]
        want = fn(*args)
        tiled, rows = _compiled(fn, specs, True), _compiled(fn, specs, False)
        torch._dynamo.reset()
        ind = torch.compile(fn, dynamic=True)
        us = [device_us(f, args) for f in (tiled, rows, fn, ind)]
        errs = f"{_err(tiled(*args), want):.1e}/{_err(rows(*args), want):.1e}"
        print(f"{name:16s} {str(shp[0]):22s} {us[0]:8.1f} {us[1]:8.1f} {us[2]:8.1f} {us[3]:9.1f}  {errs}")


def _configure(tile, xblocks, split, opts):
    from compiler.codegen import triton_tiles
    triton_tiles.TILE, triton_tiles.XBLOCKS, triton_tiles.SPLIT_PROGRAMS = tile, xblocks, split
    triton_tiles.TILE_OPTIONS.clear()
    triton_tiles.TILE_OPTIONS.update(opts)


def sweep():
    """Each case's tiled kernels under every :data:`SWEEP` config, beside eager and Inductor."""
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; device µs per call (profiler, kernels only)")
    names = [c[0] for c in SWEEP]
    print(f"{'config':20s} " + " ".join(f"{n[:16]:>16s}" for n, *_ in CASES))
    rows = {n: [] for n in names + ["eager", "inductor"]}
    for name, fn, specs, shp in CASES:
        g = torch.Generator(device="cuda").manual_seed(0)
        dt = torch.float32 if "f32" in specs[0] else torch.bfloat16
        args = [torch.randn(*s, device="cuda", generator=g).to(dt) for s in shp]
        want = fn(*args)
        for cname, *cfg in SWEEP:
            _configure(*cfg)
            f = _compiled(fn, specs, True)
            err = _err(f(*args), want)
            rows[cname].append(f"{device_us(f, args):7.1f}" + ("!" if err > 1e-2 else " ") + f"{err:7.0e}")
        _configure(*SWEEP[0][1:])
        torch._dynamo.reset()
        rows["eager"].append(f"{device_us(fn, args):7.1f}        ")
        rows["inductor"].append(f"{device_us(torch.compile(fn, dynamic=True), args):7.1f}        ")
    for n, cells in rows.items():
        print(f"{n:20s} " + " ".join(f"{c:>16s}" for c in cells))


if __name__ == "__main__":
    sweep() if "--sweep" in sys.argv[1:] else main()
