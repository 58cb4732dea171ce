"""Training programs for the backend's training path: gradients compared with eager.

Each case builds a model, its inputs at a size, and a loss; :func:`check` runs
training steps through ``torch.compile(backend="symshape", dynamic=True)`` and
eagerly on a copy, at several sizes (1 and a prime among them), and compares
the loss, every parameter's gradient, the buffers (BatchNorm's running stats)
and the parameters after an SGD step (momentum; AdamW would turn round-off in near-zero gradients into full steps) taken outside the compiled region.  A
symshape fallback (``TrainingFallback``) is an error here, and a new size
after the first two must not make dynamo compile again.

Run as a script (``python tests/train_cases.py [case ...]``, under
``TRITON_INTERPRET=1`` for the Triton target on a CPU) it prints ``RESULTS``
and a JSON dict: case -> "ok" or the failure.
"""
from __future__ import annotations

import copy
import json
import os
import sys
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

VOCAB = 96


@dataclass
class TrainCase:
    """A model, inputs at a size, and the loss of one training step."""

    build: Callable[[], nn.Module]
    inputs: Callable[[int, torch.Generator], tuple]
    sizes: tuple = (1, 7, 13, 24)
    loss: Callable = None
    atol: float = 2e-5
    rtol: float = 1e-4
    autocast: object = None  # a dtype: run the step under torch.autocast
    train: bool = True
    extra: dict = field(default_factory=dict)


def _sum_loss(out):
    if not isinstance(out, torch.Tensor):
        out = out[0]
    w = torch.linspace(-1, 1, out.shape[-1], device=out.device, dtype=torch.float32)
    return (out.float() * w).pow(2).mean() + out.float().mean()


def _ids(T, g, B=2):
    return (torch.randint(0, VOCAB, (B, T), generator=g),)


def _t():
    import transformers
    torch.manual_seed(0)
    return transformers


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 8)

    def forward(self, x):
        return self.b(F.gelu(self.a(x)))


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        h = F.relu(self.bn(self.c1(x)))
        h = F.silu(self.c2(h)) + h
        return self.fc(h.mean((2, 3)))


class DropoutNet(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.a, self.d, self.b = nn.Linear(16, 64), nn.Dropout(p), nn.Linear(64, 16)

    def forward(self, x):
        return self.b(self.d(F.relu(self.a(x))))


class BatchNormNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.bn, self.b = nn.Linear(12, 16), nn.BatchNorm1d(16), nn.Linear(16, 4)

    def forward(self, x):  # x: [B, T, 12]; BatchNorm over the 16 channels of B*T rows
        h = self.a(x).transpose(1, 2)
        return self.b(torch.tanh(self.bn(h)).transpose(1, 2))


class Attention(nn.Module):
    """Hand-written causal attention with LayerNorm and a no_grad statistic."""

    def __init__(self):
        super().__init__()
        self.ln, self.qkv, self.o = nn.LayerNorm(32), nn.Linear(32, 96), nn.Linear(32, 32)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln(x)).split(32, -1)
        q, k, v = (t.view(B, T, 4, 8).transpose(1, 2) for t in (q, k, v))
        a = (q @ k.transpose(-1, -2)) / 8 ** 0.5
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        a = a.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (a @ v).transpose(1, 2).reshape(B, T, C)
        with torch.no_grad():
            scale = 1 + x.abs().mean()  # no gradient flows through the scale
        return x + self.o(y) / scale


class LMHead(nn.Module):
    """Embedding, a block, and cross-entropy over the vocabulary: the loss inside the graph."""

    def __init__(self):
        super().__init__()
        self.emb, self.fc, self.head = nn.Embedding(VOCAB, 32), nn.Linear(32, 32), nn.Linear(32, VOCAB)

    def forward(self, ids):
        h = torch.tanh(self.fc(self.emb(ids)))
        logits = self.head(h)
        return F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()) if ids.shape[1] > 1 else \
            logits.float().logsumexp(-1).mean()


def _gpt2():
    t = _t()
    return t.GPT2Model(t.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=4, n_positions=64,
                                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))


def _llama():
    t = _t()
    return t.LlamaModel(t.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))


class _Bert(nn.Module):
    def __init__(self):
        super().__init__()
        t = _t()
        self.m = t.BertModel(t.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                          intermediate_size=64, max_position_embeddings=64,
                                          hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))

    def forward(self, ids, mask):
        return self.m(input_ids=ids, attention_mask=mask).last_hidden_state


def _bert_inputs(T, g):
    ids = torch.randint(0, VOCAB, (2, T), generator=g)
    mask = torch.ones(2, T, dtype=torch.int64)
    mask[0, : T // 3] = 0
    return ids, mask


class _ViT(nn.Module):
    def __init__(self):
        super().__init__()
        t = _t()
        self.m = t.ViTModel(t.ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=1,
                                        num_attention_heads=4, intermediate_size=64, hidden_dropout_prob=0.0,
                                        attention_probs_dropout_prob=0.0))

    def forward(self, x):
        return self.m(pixel_values=x).last_hidden_state


class _ViTSizes(_ViT):
    """A ViT at varying image sizes: the position embedding interpolated, sides that are not
    multiples of the patch (their rows and columns past the last patch left out)."""

    def forward(self, x):
        return self.m(pixel_values=x, interpolate_pos_encoding=True).last_hidden_state


CASES = {
    "mlp": TrainCase(build=MLP, inputs=lambda n, g: (torch.randn(n, 16, generator=g),)),
    "convnet": TrainCase(build=ConvNet, inputs=lambda n, g: (torch.randn(2, 3, n + 2, n + 2, generator=g),),
                         sizes=(1, 5, 6, 9)),
    "attention": TrainCase(build=Attention, inputs=lambda n, g: (torch.randn(2, n, 32, generator=g),)),
    "lm_head": TrainCase(build=LMHead, inputs=_ids, loss=lambda o: o),
    "dropout_p0": TrainCase(build=lambda: DropoutNet(0.0), inputs=lambda n, g: (torch.randn(n, 16, generator=g),)),
    "batchnorm": TrainCase(build=BatchNormNet, inputs=lambda n, g: (torch.randn(3, n, 12, generator=g),),
                           sizes=(1, 5, 8, 11)),
    "autocast_bf16": TrainCase(build=MLP, inputs=lambda n, g: (torch.randn(n, 16, generator=g),),
                               autocast=torch.bfloat16, atol=2e-2, rtol=2e-2),
    "gpt2": TrainCase(build=_gpt2, inputs=_ids, loss=lambda o: _sum_loss(o.last_hidden_state)),
    "llama_gqa": TrainCase(build=_llama, inputs=_ids, loss=lambda o: _sum_loss(o.last_hidden_state)),
    "bert_mask": TrainCase(build=_Bert, inputs=_bert_inputs),
    "vit": TrainCase(build=_ViT, inputs=lambda n, g: (torch.randn(n, 3, 32, 32, generator=g),), sizes=(1, 2, 3, 5)),
    "vit_sizes": TrainCase(build=_ViTSizes, inputs=lambda n, g: (torch.randn(2, 3, 8 * n + 3, 8 * n + n % 5, generator=g),),
                           sizes=(1, 2, 3, 5)),
}


def _close(a, b, c: TrainCase, what: str):
    if a is None or b is None:
        assert a is None and b is None, f"{what}: one is None"
        return
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} vs eager {tuple(b.shape)}"
    err = (a.float() - b.float()).abs().max().item() if a.numel() else 0.0
    tol = c.atol + c.rtol * (b.float().abs().max().item() if b.numel() else 0.0)
    assert err <= tol, f"{what}: max error {err:.3g} > {tol:.3g}"


def check(name: str, target: str, device: str = "cpu", sizes=None) -> dict:
    """Run ``CASES[name]``'s training steps compiled and eager; raise AssertionError on a difference.

    Returns the backend's counters for the run (graphs dynamo compiled, and after which size)."""
    import compiler
    from compiler.training import TrainingFallback
    c = CASES[name]
    torch.manual_seed(0)
    ref = c.build().to(device).train(c.train)
    mine = copy.deepcopy(ref)
    compiler.register()
    torch._dynamo.reset()
    f = torch.compile(mine, backend="symshape", dynamic=True, options={"target": target})
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    opt_mine = torch.optim.SGD(mine.parameters(), lr=0.05, momentum=0.9)
    loss_fn = c.loss or _sum_loss
    g = torch.Generator().manual_seed(1)
    graphs = []
    stats0 = dict(compiler.BACKEND_STATS)
    amp = (torch.autocast(device_type=device, dtype=c.autocast) if c.autocast is not None else None)
    for n in sizes or c.sizes:
        args = tuple(a.to(device) for a in c.inputs(n, g))
        losses = []
        for model in (f, ref):
            with warnings.catch_warnings():
                warnings.simplefilter("error", TrainingFallback)
                if amp is not None:
                    with torch.autocast(device_type=device, dtype=c.autocast):
                        loss = loss_fn(model(*args))
                else:
                    loss = loss_fn(model(*args))
                loss.backward()
            losses.append(loss.detach())
        _close(losses[0], losses[1], c, f"loss at size {n}")
        for (pn, p), q in zip(mine.named_parameters(), ref.parameters()):
            _close(p.grad, q.grad, c, f"grad of {pn} at size {n}")
        for (bn, b), r in zip(mine.named_buffers(), ref.buffers()):
            _close(b, r, c, f"buffer {bn} at size {n}")
        opt_mine.step(), opt_ref.step(), opt_mine.zero_grad(), opt_ref.zero_grad()
        for (pn, p), q in zip(mine.named_parameters(), ref.parameters()):
            _close(p.detach(), q.detach(), c, f"{pn} after an SGD step at size {n}")
        graphs.append(compiler.BACKEND_STATS["graphs"] - stats0["graphs"])
    compiled = compiler.BACKEND_STATS["train_graphs"] - stats0["train_graphs"]
    assert compiled >= 2, f"no training graph reached symshape ({compiled})"
    # Dynamo compiles once for size 1 (it specializes 0/1) and once for the others.
    firsts = [g for n, g in zip(sizes or c.sizes, graphs) if n != 1]
    assert firsts[-1] == firsts[0], f"dynamo compiled again at a new size: graphs after each size {graphs}"
    return {"graphs": graphs, "train_graphs": compiled}


def case_dropout_stats(target: str, device: str = "cpu"):
    """Dropout p=0.3 compiled: outputs scaled by 1/(1-p) where kept, zero where dropped,
    the dropped fraction within 5 standard errors of p, and two calls draw different masks."""
    import compiler
    from compiler.training import TrainingFallback
    p = 0.3

    class D(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(64))
            self.d = nn.Dropout(p)

        def forward(self, x):
            return self.d(x * self.w)

    m = D().to(device).train()
    compiler.register()
    torch._dynamo.reset()
    f = torch.compile(m, backend="symshape", dynamic=True, options={"target": target})
    before = compiler.BACKEND_STATS["train_graphs"]
    total = kept = 0
    masks = []
    for n in (31, 64, 97, 128):
        x = torch.ones(n, 64, device=device)
        with warnings.catch_warnings():
            warnings.simplefilter("error", TrainingFallback)
            y = f(x)
            y.sum().backward()
        nz = y != 0
        assert torch.allclose(y[nz], torch.full_like(y[nz], 1 / (1 - p))), "kept units not scaled by 1/(1-p)"
        # d(sum y)/dw_j = sum over rows kept of 1/(1-p): the backward used the forward's mask.
        want = nz.float().sum(0) / (1 - p)
        assert torch.allclose(m.w.grad, want, atol=1e-4), "the backward's mask is not the forward's"
        m.zero_grad()
        total += nz.numel()
        kept += nz.sum().item()
        masks.append(nz[:31])
    frac = 1 - kept / total
    se = (p * (1 - p) / total) ** 0.5
    assert abs(frac - p) < 5 * se, f"dropped fraction {frac:.4f}, p={p} (5 s.e. = {5 * se:.4f})"
    assert not torch.equal(masks[0], masks[1]), "two steps drew the same dropout mask"
    assert compiler.BACKEND_STATS["train_graphs"] > before, "the dropout step did not reach symshape"
    torch.manual_seed(123)
    a = f(torch.ones(40, 64, device=device))
    torch.manual_seed(123)
    b = f(torch.ones(40, 64, device=device))
    assert torch.equal(a, b), "the compiled dropout does not follow torch's RNG (same seed, other mask)"
    return {"dropped": frac}


def run_all(names=None, target="triton", device="cpu"):
    results = {}
    for n in names or list(CASES) + ["dropout_stats"]:
        try:
            if n == "dropout_stats":
                case_dropout_stats(target, device)
            else:
                check(n, target, device)
            results[n] = "ok"
        except Exception:  # noqa: BLE001 -- the script reports every case's outcome
            results[n] = traceback.format_exc()[-3000:]
    return results


if __name__ == "__main__":
    print("RESULTS " + json.dumps(run_all(sys.argv[1:] or None)))
