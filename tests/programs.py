"""Programs the engine's tests (and other test modules) trace.

Each is small, deterministic, and exercises one family of shape behaviour.
"""
import importlib.util
import itertools
import os
import sys
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from examples import mlp as examples_mlp
from shapes.spec import parse_spec

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_bench(name: str):
    """``bench/<name>.py`` loaded as module ``name`` (registered in ``sys.modules``: its dataclasses
    look their module up there), for tests that run a CI-sized subset of a bench script."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "bench", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def load_zoo(module_name: str = "shape_zoo"):
    """``examples/shape_zoo.py`` (programs with known valid input sizes), loaded as ``module_name``."""
    spec = importlib.util.spec_from_file_location(module_name, os.path.join(ROOT, "examples", "shape_zoo.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def instance(program):
    """A zoo entry's callable: a module class is built (seed 0) in eval mode."""
    if isinstance(program, type):
        torch.manual_seed(0)
        return program().eval()
    return program


def grid(dims):
    """Every point of the box ``{name: (lo, hi)}``, as dicts."""
    names = list(dims)
    for vals in itertools.product(*[range(lo, hi + 1) for lo, hi in dims.values()]):
        yield dict(zip(names, vals))


def real_inputs(specs, point) -> list:
    """CPU tensors of the specs' sizes at ``point``: random floats, zero integers."""
    inputs = []
    for s in specs:
        p = parse_spec(s)
        shape = [point[d] if isinstance(d, str) else d for d in p.dims]
        if p.dtype.is_floating_point:
            inputs.append(torch.randn(shape, dtype=p.dtype))
        else:
            inputs.append(torch.zeros(shape, dtype=p.dtype))
    return inputs


def eager_error(program, inputs) -> Optional[str]:
    """None if ``program(*inputs)`` runs in eager PyTorch, else the exception type's name."""
    try:
        with torch.no_grad():
            program(*inputs)
    except Exception as e:  # noqa: BLE001 - eager's verdict, whatever it raises
        return type(e).__name__
    return None


def eager_runs(program, specs, point) -> bool:
    """Run on real CPU tensors of these sizes; any exception means the program does not run."""
    return eager_error(program, real_inputs(specs, point)) is None


class MLP(examples_mlp.MLP):
    """The README's MLP block (``examples/mlp.py``), smaller."""

    def __init__(self, d=32, hidden=64):
        super().__init__(d, hidden)


class CausalSelfAttention(nn.Module):
    """Hand-written causal attention that views into heads."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.heads = heads

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        hd = C // self.heads
        q = q.view(B, T, self.heads, hd).transpose(1, 2)
        k = k.view(B, T, self.heads, hd).transpose(1, 2)
        v = v.view(B, T, self.heads, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / hd ** 0.5)
        mask = torch.tril(torch.ones(T, T, device=x.device, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class SDPABlock(nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.heads = heads

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.reshape(B, T, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y.transpose(1, 2).reshape(B, T, C)


class ConvPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, kernel_size=3)

    def forward(self, x):
        return F.max_pool2d(F.relu(self.conv(x)), 2)


def cat_last(a, b):
    return torch.cat([a, b], dim=1)


def broadcast_outer(a, b):
    return a + b


def flatten_heads(x):
    B = x.shape[0]
    return x.reshape(B, -1).flatten().view(-1, 4)


def branch_on_size(x):
    if x.shape[0] > 16:
        return x.sum(0)
    return x.mean(0)


def view_by_8(x):
    return x.view(-1, 8)


def matmul(a, b):
    return a @ b


def add_same(a, b):
    return a + b


def nonzero_slice(x, mask):
    n = mask.nonzero().shape[0]
    return x[:n]


def nonzero_split(x, mask):
    n = mask.nonzero().shape[0]
    return x.split(n)


def nonzero_slice_checked(x, mask):
    n = mask.nonzero().shape[0]
    torch._check(n <= x.shape[0])
    return x[:n] * 2


def nonzero_branch(x, mask):
    n = mask.nonzero().shape[0]
    if n > 2:
        return x
    return -x


def raises_on_small(x):
    if x.shape[0] < 4:
        raise ValueError("need at least 4 rows")
    return x * 2


def tiny_gpt2():
    """transformers' GPT2Model from a small config (no download)."""
    import transformers
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=128, vocab_size=100)
    return transformers.GPT2Model(cfg).eval()


def tiny_bert():
    """transformers' BertModel from a small config (no download)."""
    import transformers
    torch.manual_seed(0)
    cfg = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                  intermediate_size=128, vocab_size=100, max_position_embeddings=128)
    return transformers.BertModel(cfg).eval()
