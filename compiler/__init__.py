"""symshape's dynamic-shape compiler: traced graphs -> fused C++/Triton kernels.

Sizes are run-time arguments: one compiled artifact serves every size that
satisfies the trace's guards.

``torch.compile(model, backend="symshape")`` finds the backend through the
package's entry point; importing this package registers nothing.

Example::

    >>> import torch, compiler
    >>> f = compiler.compile(lambda x: torch.nn.functional.gelu(x) + 1, "x: f32[N, 8]")
    >>> x = torch.randn(5, 8)
    >>> torch.allclose(f(x), torch.nn.functional.gelu(x) + 1, atol=1e-6)
    True
"""
from .runtime import STATS, CompiledProgram
from .cuda_graphs import GraphedProgram, compile
from .backend import BACKEND_STATS, register, symshape_backend

__all__ = ["compile", "CompiledProgram", "GraphedProgram", "STATS", "BACKEND_STATS", "symshape_backend", "register"]
