"""Sharded steps: explicit torch.distributed collectives (run them with torchrun, or trace them with
``--world W=1..8``: one process, the world size a symbol), and a DTensor tensor-parallel plan and an
FSDP2-wrapped GPT-2 (traced once per world size: ``tp_attention_plan``, ``fsdp_gpt2``).

tests/test_distributed.py runs these same programs on real gloo processes."""
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


def a2a_experts(x):
    """Expert-parallel dispatch: tokens to their expert's rank and back (functional all-to-all)."""
    import torch.distributed._functional_collectives as funcol
    y = funcol.all_to_all_single(x, None, None, dist.group.WORLD)
    y = funcol.all_reduce(y * 2, "sum", dist.group.WORLD)
    return funcol.all_to_all_single(y, None, None, dist.group.WORLD)


# -- DTensor and FSDP2: built for the world they run in (traced once per world size) --------------

class Attention(torch.nn.Module):
    """Causal self-attention with 8 heads and separate q, k, v, o projections (a tensor-parallel plan's target)."""

    def __init__(self, width: int = 16, heads: int = N_HEADS):
        super().__init__()
        self.q, self.k, self.v, self.o = (torch.nn.Linear(width, width) for _ in range(4))
        self.head_dim = width // heads

    def forward(self, x):
        B, T, _ = x.shape
        # -1: the heads this rank holds (its shard of the q, k, v columns).
        q, k, v = (m(x).view(B, T, -1, self.head_dim).transpose(1, 2) for m in (self.q, self.k, self.v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(a.transpose(1, 2).reshape(B, T, -1))


def make_tp_attention():
    """The attention block under a DTensor tensor-parallel plan: q, k, v column-parallel, o row-parallel."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    torch.manual_seed(0)
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    plan = {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(), "o": RowwiseParallel()}
    return parallelize_module(Attention(), mesh, plan)


def make_tp_attention_2d(dp: int, tp: int):
    """The attention block on a 2-D mesh ``(dp, tp)``: the same plan over the ``tp`` dim, data parallel over ``dp``
    (each ``dp`` group runs its own batch; the forward step communicates within its ``tp`` group only)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    torch.manual_seed(0)
    mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
    plan = {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(), "o": RowwiseParallel()}
    return parallelize_module(Attention(), mesh["tp"], plan)


def make_fsdp_gpt2():
    """A tiny GPT-2 from transformers, each block and the whole model wrapped by FSDP2's ``fully_shard``."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_head=2, n_embd=16, vocab_size=48, n_positions=16, bos_token_id=0,
                     eos_token_id=0)
    model = GPT2LMHeadModel(cfg).eval()
    # An explicit CPU mesh: without one, fully_shard takes the accelerator where there is one,
    # and these gloo ranks hold CPU inputs.
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for block in model.transformer.h:
        fully_shard(block, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def _per_world(factory):
    from shapes.distributed import per_world
    return per_world(factory)


#: The same, as symshape traces them: built inside each world size's (fake) process group.
tp_attention_plan = _per_world(make_tp_attention)
tp_attention_2d = _per_world(make_tp_attention_2d)
fsdp_gpt2 = _per_world(make_fsdp_gpt2)
