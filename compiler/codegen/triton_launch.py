"""One Triton kernel launch bound to its sizes: the compiled kernel's own launcher, called directly.

``JITFunction.__getitem__(grid)(...)`` re-derives on every call what a bound
launch already knows (the specialization key of every argument, the options,
the cache lookup, launch metadata for hooks): about 13 us per launch on the
H100 machine's host against under 6 us for the compiled kernel's launcher.
:func:`bind_launch` makes the first launch through the generic path (which
compiles or finds the kernel), keeps the :class:`CompiledKernel` it returns,
and launches later calls through ``kernel.run`` with the grid and size
arguments fixed.  The direct path is taken only while what the kernel was
specialized on still holds:

- every pointer that was 16-byte aligned at the first launch still is (Triton
  compiled the kernel assuming it; a view into the middle of a buffer may not be);
- the current CUDA device is the one the kernel was loaded on;
- no launch hook is installed (profilers such as proton set them).

The direct launch itself goes through torch's static CUDA launcher (the C++ launcher
Inductor's own kernels use) where it takes the kernel: 7.3 us per launch on the H100
machine's host against 12.4 us through the compiled kernel's Triton launcher
(``bench/launch_host.py``).  ``SYMSHAPE_STATIC_LAUNCH=0`` keeps Triton's launcher.

Otherwise, and wherever the feature is missing (the interpreter, a Triton
whose ``JITFunction.run`` returns no compiled kernel), the launch goes through
the generic path: correct everywhere, only slower.

Example (under ``TRITON_INTERPRET=1`` the generic path runs)::

    >>> calls = []
    >>> class Fake:
    ...     def run(self, *a, grid, warmup, **kw):
    ...         calls.append((a, grid, kw))
    >>> launch = bind_launch(Fake(), (4,), [7], {"BLOCK": 16, "num_warps": 4})
    >>> launch(["t0", "t1"]); launch(["t0", "t1"])
    >>> len(calls), calls[0][0], calls[0][1]
    (2, ('t0', 't1', 7), (4,))
"""
from __future__ import annotations

import os
import weakref

import torch

try:  # the hooks Triton's own launch passes to the launcher (HookChain in 3.6+, None before)
    from triton import knobs as _knobs
    _RUNTIME = _knobs.runtime
except (ImportError, AttributeError):  # pragma: no cover - an older Triton: no knobs, no direct path
    _RUNTIME = None

_get_device = getattr(torch._C, "_cuda_getDevice", None)
_get_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _no_hooks() -> bool:
    for h in (_RUNTIME.launch_enter_hook, _RUNTIME.launch_exit_hook):
        if h is not None and (getattr(h, "calls", None) or not hasattr(h, "calls")):
            return False
    return True


def _static_class():
    """torch's launcher of Triton-compiled CUDA kernels (Inductor's), or None where this torch has none."""
    if os.environ.get("SYMSHAPE_STATIC_LAUNCH", "1") == "0":
        return None
    try:
        from torch._inductor.runtime.static_triton_launcher import StaticallyLaunchedCudaKernel
    except ImportError:
        try:
            from torch._inductor.runtime.static_cuda_launcher import StaticallyLaunchedCudaKernel
        except ImportError:
            return None
    return StaticallyLaunchedCudaKernel


def _static_parts(kernel, n_args: int):
    """``(launch, function, num_warps, shared memory, argument types, scratch arguments)``: the
    kernel launched through torch's static CUDA launcher (one C++ call, about 5 us less host time
    per launch than Triton's launcher on the H100 machine), or None where it cannot take this
    kernel (launch hooks, scratch memory, clusters, TMA descriptors, another argument count)."""
    cls = _static_class()
    if cls is None:
        return None
    try:
        if not hasattr(kernel, "_cubin_path"):
            kernel._cubin_path = None  # read by the constructor; only its loader (not used here) needs a file
        sk = cls(kernel)
        launch = sk.C_impl._launch_kernel
    except (NotImplementedError, RuntimeError, AttributeError, KeyError, TypeError, ValueError, ImportError):
        return None
    scratch = (None,) * (int(bool(sk.has_global_scratch)) + int(bool(sk.has_profile_scratch)))
    if len(sk.arg_tys) != n_args:
        return None
    # Triton's own loaded function: the same binary, its shared-memory limit already set by Triton's loader.
    return launch, kernel.function, sk.num_warps, sk.shared, sk.arg_tys + "O" * len(scratch), scratch


def _direct_parts(kernel, tensors, n_args: int = -1):
    """``(run, function, packed metadata, indices to check for alignment, device, static)`` of a
    compiled kernel (``static``: :func:`_static_parts` for ``n_args`` arguments, or None), or None
    where this Triton offers no direct launch."""
    if _RUNTIME is None or _get_device is None or _get_stream is None:
        return None
    if hasattr(kernel, "result"):  # an asynchronous compile's future
        kernel = kernel.result()
    try:
        run, function, packed = kernel.run, kernel.function, kernel.packed_metadata
    except AttributeError:
        return None
    if function is None or not callable(run):
        return None
    aligned = tuple(i for i, t in enumerate(tensors) if t.data_ptr() % 16 == 0)
    static = _static_parts(kernel, n_args) if n_args >= 0 else None
    return run, function, packed, aligned, _get_device(), static


#: Direct-launch parts per (JIT function, options, integer argument types, tensor dtypes): the
#: kernel Triton compiled for one binding serves every other binding with the same key.  Size
#: arguments are ``do_not_specialize``: Triton keys its compiled kernels on their type (i32 or
#: i64 by value) and not on their values, so a new size (a new binding) needs no generic launch
#: to find the kernel.  The dtypes belong to the key: one kernel source serves float16 and
#: bfloat16 buffers alike (a load's type is its pointer's), and Triton compiles a binary for
#: each; a bfloat16 launch of the float16 binary read every value wrong.
_SHARED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _int_types(args) -> tuple:
    """Triton's type for each integer argument (``i32`` within 32 bits, else wider).

    >>> _int_types([5, 2 ** 40, 1.5])
    ('i32', 'i64', None)
    """
    return tuple(("i32" if -2 ** 31 <= a < 2 ** 31 else "i64") if isinstance(a, int) else None for a in args)


def bind_launch(fn, grid, args, options):
    """``launch(tensors)`` for JIT function ``fn`` at a fixed ``grid``, size ``args`` and
    ``options`` (constexprs and ``num_warps``): direct through the compiled kernel's
    launcher after the first call where that is safe (see the module docstring); a binding
    of ``fn`` at other sizes with the same options and argument types starts direct."""
    g0 = grid[0]
    g1 = grid[1] if len(grid) > 1 else 1
    g2 = grid[2] if len(grid) > 2 else 1
    constexprs = tuple(v for k, v in options.items() if k != "num_warps" and k != "num_stages")
    tail = (*args, *constexprs)
    key = (tuple(options.items()), _int_types(args))
    try:
        shared = _SHARED.setdefault(fn, {})
    except TypeError:  # not weak-referenceable: no sharing
        shared = {}
    direct = None
    tried = False

    static_tail = None

    def launch(tensors):
        nonlocal direct, tried, static_tail, key
        d = direct
        if d is None and not tried:
            # A binding's buffers keep their dtypes (one kernel of one compiled variant): the
            # shared parts are looked up once, at the first launch, where the dtypes are known.
            key = (*key, tuple(getattr(t, "dtype", None) for t in tensors))
            d = direct = shared.get(key)
            tried = d is not None
        if d is not None:
            run, function, packed, aligned, dev, static = d
            for i in aligned:
                if tensors[i].data_ptr() & 15:
                    break
            else:
                if _get_device() == dev and _no_hooks():
                    if static is not None:
                        if static_tail is None:
                            static_tail = (*args, *static[5])
                        static[0](static[1], g0, g1, g2, static[2], static[3], static[4], (*tensors, *static_tail),
                                  _get_stream(dev))
                    else:
                        run(g0, g1, g2, _get_stream(dev), function, packed, None, None, None, *tensors, *tail)
                    return
        kernel = fn.run(*tensors, *args, grid=grid, warmup=False, **options)
        if not tried:
            tried = True
            direct = _direct_parts(kernel, tensors, len(tensors) + len(args))
            if direct is not None:
                shared.setdefault(key, direct)

    return launch


class Launcher:
    """Launches of JIT function ``fn`` at fixed ``options``, the grid and size arguments given
    at each call: :func:`bind_launch` without a binding per size.  A decode step's kernels that
    see the growing cache length (:mod:`compiler.piecewise`'s eager segments, the decode
    attention) meet a new size at every token: binding each (a plan, a closure, the shared
    cache's weak-key lookup) cost about 25 us per kernel on the H100 machine's host, more than
    the launch.  The direct path and its checks are :func:`bind_launch`'s, per integer
    argument types (a size past 32 bits is another binary).  A Launcher serves one kernel of one
    compiled variant, whose buffers keep their dtypes, so its parts need no dtype in their key.

    >>> calls = []
    >>> class Fake:
    ...     def run(self, *a, grid, warmup, **kw):
    ...         calls.append((a, grid, kw))
    >>> launch = Launcher(Fake(), {"BLOCK": 16, "num_warps": 4})
    >>> launch(["t0"], (4,), [7]); launch(["t0"], (2,), [9])
    >>> [(c[0], c[1], c[2]["BLOCK"]) for c in calls]
    [(('t0', 7), (4,), 16), (('t0', 9), (2,), 16)]
    """

    __slots__ = ("fn", "options", "constexprs", "parts")

    def __init__(self, fn, options):
        self.fn = fn
        self.options = dict(options)
        self.constexprs = tuple(v for k, v in options.items() if k != "num_warps" and k != "num_stages")
        self.parts: dict = {}  # integer argument types -> direct parts, or None (no direct launch)

    def __call__(self, tensors, grid, args):
        types = _int_types(args)
        d = self.parts.get(types)
        if d is not None:
            run, function, packed, aligned, dev, static = d
            for i in aligned:
                if tensors[i].data_ptr() & 15:
                    break
            else:
                if _get_device() == dev and _no_hooks():
                    g1 = grid[1] if len(grid) > 1 else 1
                    g2 = grid[2] if len(grid) > 2 else 1
                    if static is not None:
                        static[0](static[1], grid[0], g1, g2, static[2], static[3], static[4],
                                  (*tensors, *args, *static[5]), _get_stream(dev))
                    else:
                        run(grid[0], g1, g2, _get_stream(dev), function, packed, None, None, None, *tensors, *args,
                            *self.constexprs)
                    return
        kernel = self.fn.run(*tensors, *args, grid=grid, warmup=False, **self.options)
        if types not in self.parts:
            self.parts[types] = _direct_parts(kernel, tensors, len(tensors) + len(args))


__all__ = ["bind_launch", "Launcher"]
