"""Real transformers models whose compiled plans must call fused attention.

Tiny configs built as tests/zoo_models.py builds them (no download), plus the forms
the zoo lacks: Mistral with a sliding window, the Whisper encoder alone.  Shared by
tests/test_attention_plans.py and bench/cpu_models.py.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from tests import zoo_models as Z


@dataclass
class PlanCase:
    """A model, its input specs, the dims to trace at and how many attention calls it makes."""

    name: str
    build: object
    specs: tuple
    layers: int = 2
    dims: dict = None

    def module(self):
        return Z.Wrapped(self.build().eval(), [s.split(":")[0].strip() for s in self.specs],
                         {"use_cache": False} if self.decoder else {})

    @property
    def decoder(self):
        return self.name.split("+")[0] in ("llama", "qwen2", "mistral_sw", "gemma", "gpt2")

    def inputs(self, sizes, seed=0):
        return Z.ZooCase(self.name, self.build, self.specs).inputs(sizes, seed)


class Logits(torch.nn.Module):
    """A causal LM's logits from ``ids`` with no cache (bench/gpu_models.py's LMLogits)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, ids):
        return self.m(input_ids=ids, use_cache=False).logits


def tiny_llama_lm():
    """A 2-layer GQA ``LlamaForCausalLM`` on SDPA (4 heads, 2 KV heads, d=64), seeded, in eval mode."""
    t = Z._t()
    conf = t.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    conf._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return t.LlamaForCausalLM(conf).eval()


def greedy_tokens_eager_and_backend(model, prompt_len: int, steps: int, seed: int) -> dict:
    """Greedy decoding with transformers' ``DynamicCache`` (a prompt of ``prompt_len`` random ids, then
    ``steps`` tokens one at a time), by ``model`` in eager and through ``backend="symshape"`` with CUDA
    graphs: ``{"eager": tokens, "symshape": tokens, "graphed": the GraphedPrograms this call made}``
    (programs of earlier tests may still be alive in this process: tests inspect only these)."""
    import transformers

    import compiler
    from compiler.backend import graphed_programs
    torch._dynamo.reset()
    before = {id(gp) for gp in graphed_programs()}
    compiler.register()  # backend="symshape" from this tree, whether or not the entry point is installed
    opt = torch.compile(model, backend="symshape", dynamic=True, options={"cuda_graphs": True})
    prompt = torch.randint(0, 128, (1, prompt_len), generator=torch.Generator().manual_seed(seed))
    toks = {}
    with torch.no_grad():
        for name, fn in (("eager", model), ("symshape", opt)):
            cache = transformers.DynamicCache()
            out = fn(input_ids=prompt, past_key_values=cache, use_cache=True)
            got = [int(out.logits[:, -1].argmax(-1))]
            for _ in range(steps):
                out = fn(input_ids=torch.tensor([[got[-1]]]), past_key_values=cache, use_cache=True)
                got.append(int(out.logits[:, -1].argmax(-1)))
            toks[name] = got
    toks["graphed"] = [gp for gp in graphed_programs() if id(gp) not in before]
    return toks


def mistral_sliding_window():
    t = Z._t()
    return t.MistralModel(t.MistralConfig(**Z._DEC, num_key_value_heads=2, sliding_window=4))


def whisper_encoder():
    return Z.whisper().get_encoder()


_IDS_MASK = ("input_ids: i64[B, T]", "attention_mask: i64[B, T] in 0..1")

CASES = [
    PlanCase("llama", Z.llama, _IDS_MASK),
    PlanCase("qwen2", Z.qwen2, _IDS_MASK),
    PlanCase("mistral_sw", mistral_sliding_window, _IDS_MASK),
    PlanCase("gemma", Z.gemma, _IDS_MASK),
    PlanCase("gpt2", Z.gpt2, Z.IDS),
    PlanCase("bert+mask", Z.bert, _IDS_MASK),
    PlanCase("vit", Z.vit, ("pixel_values: f32[B, 3, 32, 32]",)),
    PlanCase("whisper_encoder", whisper_encoder, ("input_features: f32[B, 8, 32]",)),
]
BY_NAME = {c.name: c for c in CASES}


def last_hidden(out):
    """The tensor a model returns first (``last_hidden_state`` of a ModelOutput)."""
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "last_hidden_state"):
        return out.last_hidden_state
    return out[0]
