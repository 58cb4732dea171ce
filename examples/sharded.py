"""Sharded steps with explicit torch.distributed collectives (run them with torchrun, or trace
them with ``--world W=1..8``: one process, the world size a symbol)."""
import torch
import torch.distributed as dist
import torch.nn.functional as F

N_HEADS = 8


def sp_mlp(x, w1, w2):
    """Sequence-parallel MLP: all-gather the sequence, column- then row-parallel linear, reduce-scatter."""
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
    """Tensor-parallel causal self-attention: 8 heads split over the ranks, one all-reduce."""
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
