"""Host microseconds per call of the steps a compiled program's run is made of, on CUDA.

A host-bound call (a 4-layer model at a few hundred tokens) spends its time launching: each
Triton kernel, ATen view and buffer allocation costs microseconds of Python and driver time.
This prints, per step kind, symshape's way next to the reference ways, in one process:

* a Triton kernel launch: ``kernel[grid](...)`` (Triton's JIT path), symshape's bound launch
  (:func:`compiler.codegen.triton_launch.bind_launch`, through torch's static CUDA launcher
  unless ``SYMSHAPE_STATIC_LAUNCH=0``), torch's ``StaticallyLaunchedCudaKernel.run`` and its
  C++ launch called directly (what Inductor's wrappers call);
* a view: ``reshape``, ``transpose`` and ``_reinterpret_tensor`` (the direct view);
* an allocation: ``torch.empty_strided`` and ``_empty_strided_cuda``.

Usage::

    python bench/launch_host.py            # CUDA only
    SYMSHAPE_STATIC_LAUNCH=0 python bench/launch_host.py

Example (the timer)::

    >>> us_per_call(lambda: None, n=10) >= 0
    True
"""
from __future__ import annotations

import os
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def us_per_call(fn, n: int = 20000) -> float:
    """Mean host microseconds of ``n`` back-to-back calls (after 200 warm-up calls)."""
    for _ in range(min(n, 200)):
        fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    us = (time.perf_counter() - t0) / n * 1e6
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return us


def main() -> None:
    if not torch.cuda.is_available():
        print("bench/launch_host.py measures CUDA launches: no GPU here")
        return
    import triton
    import triton.language as tl

    from compiler.codegen.triton_launch import bind_launch

    @triton.jit
    def add(x, y, out, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = i < n
        tl.store(out + i, tl.load(x + i, mask=m) + tl.load(y + i, mask=m), mask=m)

    n = 4096
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    o = torch.empty_like(x)
    grid = (triton.cdiv(n, 1024),)
    kernel = add.run(x, y, o, n, grid=grid, warmup=False, BLOCK=1024)
    rows = [("launch", "Triton JIT kernel[grid](...)", us_per_call(lambda: add[grid](x, y, o, n, BLOCK=1024)))]
    launch = bind_launch(add, grid, [n], {"BLOCK": 1024, "num_warps": 4})
    launch([x, y, o])
    static = os.environ.get("SYMSHAPE_STATIC_LAUNCH", "1") != "0"
    rows.append(("launch", f"symshape bound launch ({'static' if static else 'Triton'} launcher)",
                 us_per_call(lambda: launch([x, y, o]))))
    try:
        from torch._inductor.runtime.static_triton_launcher import StaticallyLaunchedCudaKernel
    except ImportError:
        StaticallyLaunchedCudaKernel = None
    if StaticallyLaunchedCudaKernel is not None:
        if not getattr(kernel, "_cubin_path", None):  # Inductor writes the cubin to a file; do the same
            path = os.path.join(tempfile.mkdtemp(), "add.cubin")
            with open(path, "wb") as f:
                f.write(kernel.asm["cubin"])
            kernel._cubin_path = path
        sk = StaticallyLaunchedCudaKernel(kernel)
        sk.load_kernel(torch.cuda.current_device())
        stream = torch.cuda.current_stream().cuda_stream
        scratch = (None,) * (int(bool(sk.has_global_scratch)) + int(bool(sk.has_profile_scratch)))
        tys, args = sk.arg_tys + "O" * len(scratch), (x, y, o, n, *scratch)
        c_launch, fn, warps, shared = sk.C_impl._launch_kernel, sk.function, sk.num_warps, sk.shared
        rows.append(("launch", "torch StaticallyLaunchedCudaKernel.run", us_per_call(
            lambda: sk.run(grid[0], 1, 1, stream, x, y, o, n))))
        rows.append(("launch", "torch static launcher, C++ call", us_per_call(
            lambda: c_launch(fn, grid[0], 1, 1, warps, shared, tys, args, stream))))
    o.zero_()
    launch([x, y, o])
    torch.cuda.synchronize()
    assert torch.equal(o, x + y), "the bound launch computed a wrong sum"
    from torch._C._dynamo.guards import _empty_strided_cuda, _reinterpret_tensor
    z = torch.randn(8, 64, device="cuda")
    rows += [("view", "reshape", us_per_call(lambda: z.reshape([2, 4, -1, 16]))),
             ("view", "transpose", us_per_call(lambda: z.transpose(0, 1))),
             ("view", "_reinterpret_tensor (symshape, Inductor)",
              us_per_call(lambda: _reinterpret_tensor(z, (2, 4, 4, 16), (256, 64, 16, 1), 0))),
             ("alloc", "torch.empty_strided", us_per_call(lambda: torch.empty_strided(
                 (2, 4, 4, 16), (256, 64, 16, 1), device="cuda", dtype=torch.float16))),
             ("alloc", "_empty_strided_cuda (symshape, Inductor)",
              us_per_call(lambda: _empty_strided_cuda((2, 4, 4, 16), (256, 64, 16, 1), torch.float16)))]
    print(f"{torch.cuda.get_device_name()} torch={torch.__version__} triton={triton.__version__}: host us per call")
    print(f"  {'step':<7} {'way':<48} {'us':>7}")
    for kind, way, us in rows:
        print(f"  {kind:<7} {way:<48} {us:7.2f}")


if __name__ == "__main__":
    main()
