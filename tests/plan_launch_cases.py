"""BERT (with a padding mask) and GPT-2 compiled for Triton equal eager: fp32 and bf16, sizes with 1 and a prime.

Run as a script under ``TRITON_INTERPRET=1`` by ``tests/test_plan_launches.py`` (the interpreter
is chosen when triton is imported); prints ``RESULTS {json}``, one entry per case.
"""
import json
import sys

import torch

import compiler

SIZES = [(2, 8), (1, 13), (3, 1), (2, 7)]


class MaskedEncoder(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, ids, mask):
        return self.m(input_ids=ids, attention_mask=mask).last_hidden_state


class LMLogits(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, ids):
        return self.m(input_ids=ids, use_cache=False).logits


def bert():
    import transformers
    conf = transformers.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                                   max_position_embeddings=64, vocab_size=128)
    conf._attn_implementation = "sdpa"
    return MaskedEncoder(transformers.BertModel(conf, add_pooling_layer=False))


def gpt2():
    import transformers
    conf = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=64, vocab_size=128)
    conf._attn_implementation = "sdpa"
    return LMLogits(transformers.GPT2LMHeadModel(conf))


def inputs(name, b, t, g):
    ids = torch.randint(0, 128, (b, t), generator=g)
    if name == "gpt2":
        return [ids]
    mask = torch.ones(b, t, dtype=torch.long)
    mask[b // 2:, (3 * t) // 4 + 1:] = 0  # the second half of the batch padded at the end
    return [ids, mask]


def run_case(name, dtype) -> str:
    torch.manual_seed(0)
    dev = "cuda" if torch.cuda.is_available() else "cpu"  # on the CPU, under TRITON_INTERPRET=1
    model = (bert if name == "bert" else gpt2)().eval().to(dev, dtype)
    dt = {torch.float32: "f32", torch.bfloat16: "bf16"}[dtype]
    specs = ["ids: i64[B, T]", "mask: i64[B, T] in 0..1"] if name == "bert" else ["ids: i64[B, T]"]
    f = compiler.compile(model, *specs, target="triton", device=dev)
    tol = dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else dict(atol=3e-2, rtol=3e-2)
    g = torch.Generator().manual_seed(1)
    for b, t in SIZES:
        xs = [x.to(dev) for x in inputs(name, b, t, g)]
        with torch.no_grad():
            want = model(*xs)
            got = f(*xs)
        try:
            torch.testing.assert_close(got.float(), want.float(), **tol)
        except AssertionError as e:
            return f"{name} {dt} at B={b}, T={t}: {str(e).splitlines()[-1]}"
    return "ok"


CASES = [f"{m}_{d}" for m in ("bert", "gpt2") for d in ("f32", "bf16")]


def run_all() -> dict:
    out = {}
    for c in CASES:
        m, d = c.split("_")
        out[c] = run_case(m, {"f32": torch.float32, "bf16": torch.bfloat16}[d])
    return out


if __name__ == "__main__":
    print("RESULTS " + json.dumps(run_all()))
    sys.stdout.flush()
