"""Why ``backend="symshape"`` costs more per call than ``compiler.compile`` on the same model.

Issue #28: on the H100 the backend ran Mistral, Gemma and ViT at up to 2x compile's time per
call though both run symshape's plans.  Per model (:mod:`bench.gpu_models`'s cases; tiny configs
on the CPU, real ones on CUDA) this builds both from the same module and prints, side by side:

* what the backend is handed: dynamo's graph inputs (tensors, of them parameters and 0-dim
  scalars -- Python floats dynamo turns into tensors at every call under ``dynamic=True`` --
  and SymInts);
* the plans: kernel launches and ATen calls per steady-state call (sizes-only masks
  classified, the steps that only made dropped masks left out), SDPA calls, materialized
  masks and which of them are proved (:mod:`compiler.mask_proofs`);
* host microseconds per call, measured in interleaved rounds in one process: ``compile``,
  ``backend``, ``backend_inner`` (what the backend returned, called with the arguments dynamo
  passed it: no frame, no guards) and ``dynamo_only`` (dynamo's frame, guards and argument
  building; the graph's outputs cached), so ``backend ~ backend_inner + dynamo_only``;
* ``inductor_dyn`` (``torch.compile(dynamic=True)``, Inductor) and ``inductor_inner`` (its compiled
  graph called with the arguments dynamo passed it), the same split for the reference;
* on CUDA, the device synchronizations one call makes (``torch.cuda.set_sync_debug_mode``).

Usage::

    OMP_NUM_THREADS=1 python bench/backend_gap.py --only mistral,gemma,llama          # CPU, C++ target
    python bench/backend_gap.py --only mistral,gemma,llama --point 4x128             # CUDA, Triton

Example (the median)::

    >>> _median([3.0, 1.0, 2.0])
    2.0
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import compiler  # noqa: E402
from compiler.backend import symshape_backend  # noqa: E402
from compiler.wrapper import ExternStep, KernelStep  # noqa: E402

MODES = ["compile", "backend", "backend_inner", "dynamo_only", "inductor_dyn", "inductor_inner"]
#: ATen calls that make no kernel launch (views, metadata): left out of "ATen calls".
_VIEWS = ("view", "reshape", "unsqueeze", "squeeze", "transpose", "permute", "expand", "t.default", "detach",
          "_unsafe_view", "slice", "select", "alias", "as_strided", "unflatten")


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def _name(target) -> str:
    return str(getattr(target, "__name__", target))


def plan_stats(cp) -> dict:
    """Per steady-state call of the CompiledProgram ``cp`` at its one bound shape: kernels,
    ATen calls (views left out), SDPA calls, and the masks (sizes-only, proved)."""
    (v, sizes, _, _, _), = list(cp._bound.values())[:1]
    classes = tuple(sizes[len(sizes) - len(v.masks):]) if v.masks else ()
    plan, skip = v.plan_at(classes) if v.masks else (v.plan, frozenset())
    steps = [s for i, s in enumerate(plan) if i not in skip]
    kernels = sum(isinstance(s, KernelStep) for s in steps)
    externs = [_name(s.target) for s in steps if isinstance(s, ExternStep)]
    aten = [e for e in externs if not any(k in e for k in _VIEWS)]
    return {"kernels": kernels, "aten": len(aten), "views": len(externs) - len(aten),
            "sdpa": sum("sdpa" in e or "attention" in e for e in externs),
            "masks": len(v.masks), "proved": sum(c is not None for c in v.proven),
            "classes": ",".join(getattr(c, "name", str(c)) for c in classes) or "-"}


def build(case, small, device, dtype):
    """(module, specs, inputs, {mode: fn}, backend info) for one model at one point."""
    torch.manual_seed(0)
    prog = case.make(small).eval().to(device, dtype)
    short = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32"}[dtype]
    specs = tuple(s.replace("{dt}", short) for s in case.specs)
    target = "triton" if device == "cuda" else "cpp"
    seen = {}

    def backend(gm, example_inputs, **kw):
        run = symshape_backend(gm, example_inputs, **kw)
        seen.setdefault("runs", []).append(run)
        seen["inputs"] = example_inputs
        ph = [n for n in gm.graph.nodes if n.op == "placeholder"]
        seen["params"] = sum("_parameters_" in n.name or "_buffers_" in n.name for n in ph)

        def keep(*args):  # the real call path, args kept for backend_inner
            seen["args"] = args
            seen.setdefault("tls", tls_state())
            return run(*args)
        keep.compiled = run.compiled
        return keep

    out = []

    def cached(gm, example_inputs, **kw):
        run = symshape_backend(gm, example_inputs, **kw)

        def first_outputs(*args):
            if not out:
                out.append(run(*args))
            return out[0]
        return first_outputs

    def inductor(gm, example_inputs, **kw):  # Inductor dynamic, its compiled graph kept for inductor_inner
        from torch._inductor.compile_fx import compile_fx
        fn = compile_fx(gm, example_inputs)

        def keep(*args):
            seen["ind_args"] = args
            return fn(*args)
        seen["ind_fn"] = fn
        return keep

    fns = {"compile": compiler.compile(prog, *specs, target=target),
           "inductor_dyn": torch.compile(type(prog)(prog.m), backend=inductor, dynamic=True),
           # Dynamo caches per code object: each torch.compile mode gets its own wrapper module.
           "backend": torch.compile(type(prog)(prog.m), backend=backend, dynamic=True, options={"target": target}),
           "dynamo_only": torch.compile(type(prog)(prog.m), backend=cached, dynamic=True,
                                        options={"target": target})}
    return prog, specs, fns, seen


def tls_state() -> tuple:
    """What decides how much each ATen call costs the host: dispatch keys included and
    excluded, torch function and dispatch modes, autocast, grad mode."""
    C = torch._C
    return (str(C._dispatch_tls_local_include_set()), str(C._dispatch_tls_local_exclude_set()),
            C._len_torch_function_stack(), C._len_torch_dispatch_stack(), torch.is_autocast_enabled("cuda"),
            torch.is_autocast_enabled("cpu"), torch.is_grad_enabled(), torch.is_inference_mode_enabled())


def profile_top(fn, args, calls=50, top=14) -> str:
    """cProfile of ``calls`` calls, the functions with the most own time."""
    import cProfile
    import io
    import pstats
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(calls):
        fn(*args)
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(top)
    return "\n".join(ln[:150] for ln in s.getvalue().splitlines()[4:] if ln.strip())


def guard_us(opt_mod, args, n=200) -> float:
    """Microseconds dynamo spends checking the guards of ``opt_mod``'s compiled frame at ``args``
    (the cache entry whose guards pass; NaN where torch's private cache API differs)."""
    try:
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list
        mod = opt_mod._orig_mod
        code = type(mod).forward.__code__
        f_locals = dict(zip(code.co_varnames[:code.co_argcount], (mod, *args)))
        for entry in _debug_get_cache_entry_list(code):
            check = entry.guard_manager.check
            if check(f_locals):
                t0 = time.perf_counter()
                for _ in range(n):
                    check(f_locals)
                return (time.perf_counter() - t0) / n * 1e6
    except (AttributeError, ImportError, TypeError):
        pass
    return float("nan")


def measure(fn, args, device, n) -> float:
    """Host us per call: the mean of ``n`` back-to-back calls after a sync (the fastest of 3)."""
    best = float("inf")
    for _ in range(3):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn(*args)
        t = (time.perf_counter() - t0) / n * 1e6
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, t)
    return best


def syncs(fn, args) -> int:
    """Device synchronizations one call makes (CUDA only)."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            fn(*args)
        return sum("synchroniz" in str(x.message) for x in w)
    finally:
        torch.cuda.set_sync_debug_mode(0)


def run_model(case, point, device, dtype, small, rounds, n, profile=False):
    prog, specs, fns, seen = build(case, small, device, dtype)
    g = torch.Generator().manual_seed(1)
    args = case.inputs(*point, device, dtype, g, small)
    with torch.no_grad():
        ref = prog(*args)
        ok = {}
        for m in ("compile", "backend", "dynamo_only", "inductor_dyn"):
            for _ in range(3):  # the shape's third call: sizes-only masks classified
                got = fns[m](*args)
            # max|out - ref| / max|ref| (bench/gpu_models.py's error): logits reach ~10^2 in half types.
            err = ((got.float() - ref.float()).abs().max() / ref.float().abs().max().clamp_min(1e-30)).item()
            ok[m] = err <= (2e-2 if dtype != torch.float32 else 1e-5)
        run = seen["runs"][-1]
        inner_args = seen["args"]
        fns["backend_inner"] = lambda *_: run(*inner_args)
        ind_fn, ind_args = seen["ind_fn"], seen["ind_args"]
        fns["inductor_inner"] = lambda *_: ind_fn(*ind_args)
        us = {m: [] for m in MODES}
        for r in range(rounds):
            order = MODES if r % 2 == 0 else MODES[::-1]  # neither mode always runs right after the other
            for m in order:
                us[m].append(measure(fns[m], args, device, n))
        sync = {m: syncs(fns[m], args) for m in MODES} if device == "cuda" else {}
        tls_same = seen["tls"] == tls_state()
        guards = guard_us(fns["backend"], args)
        prof = {m: profile_top(fns[m], args) for m in ("compile", "backend_inner", "backend")} if profile else {}
    ex = seen["inputs"]
    tensors = [e for e in ex if isinstance(e, torch.Tensor)]
    info = {"graphs": len(seen["runs"]), "inputs": len(ex), "tensors": len(tensors), "params": seen["params"],
            "scalars": sum(t.dim() == 0 and t.device.type == "cpu" for t in tensors),
            "symints": sum(isinstance(e, torch.SymInt) for e in ex)}
    stats = {"compile": plan_stats(fns["compile"]), "backend": plan_stats(run.compiled)}
    info["tls_same"], info["guard_us"] = tls_same, guards
    return {m: _median(v) for m, v in us.items()}, stats, info, ok, sync, prof


def main(argv=None):
    import gpu_models as gm
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="mistral,gemma,llama")
    ap.add_argument("--point", default="", help="BxT (default: 2x8 on the CPU, 4x128 on CUDA)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("-n", type=int, default=0, help="calls per timing (default 50 CPU, 100 CUDA)")
    ap.add_argument("--profile", action="store_true", help="cProfile of compile, backend_inner and backend calls")
    a = ap.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    small = device == "cpu"
    point = tuple(int(x) for x in (a.point or ("2x8" if small else "4x128")).split("x"))
    n = a.n or (50 if small else 100)
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    print(f"{name} torch={torch.__version__} {'tiny configs fp32, C++ target' if small else 'Triton target'}, "
          f"B,T={point}; host us per call: median of {a.rounds} interleaved rounds (each the best of 3 x {n} calls)")
    for k, cname in enumerate(a.only.split(",")):
        case = next(c for c in gm.CASES if c.name == cname)
        dtype = torch.float32 if small else (torch.float16, torch.bfloat16)[k % 2]
        t0 = time.perf_counter()
        us, stats, info, ok, sync, prof = run_model(case, point, device, dtype, small, a.rounds, n, a.profile)
        print(f"\n{cname} {str(dtype)[6:]} ({time.perf_counter() - t0:.0f}s): dynamo graphs {info['graphs']}, "
              f"graph inputs {info['inputs']} = {info['tensors']} tensors ({info['params']} parameters/buffers, "
              f"{info['scalars']} 0-dim CPU scalars made per call) + {info['symints']} SymInts")
        print("  host us/call  " + "  ".join(f"{m}={us[m]:.1f}" for m in MODES)
              + f"   backend-compile={us['backend'] - us['compile']:+.1f}   (dynamo's guard check alone: "
              f"{info['guard_us']:.1f})")
        if sync:
            print("  syncs/call    " + "  ".join(f"{m}={sync[m]}" for m in MODES))
        print("  matches eager " + "  ".join(f"{m}={v}" for m, v in ok.items())
              + f"   dispatch/autocast/grad state inside the backend's call as outside: {info['tls_same']}")
        for m, s in stats.items():
            print(f"  plan {m:<8} kernels={s['kernels']} aten={s['aten']} views={s['views']} sdpa={s['sdpa']} "
                  f"masks={s['masks']} proved={s['proved']} classes={s['classes']}")
        for m, text in prof.items():
            print(f"  ---- cProfile {m}, 50 calls ----\n{text}")


if __name__ == "__main__":
    main()
