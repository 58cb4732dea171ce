"""The compiled plan of every real model in the suite calls fused attention and
materializes no attention scores (issue 28, acceptance 2).

Each model (tests/attention_models.py: HF Llama, Qwen2 (GQA), Mistral with a sliding
window, Gemma, GPT-2, BERT with an attention mask, ViT, the Whisper encoder) is compiled
for the C++ target; its plan makes one ``scaled_dot_product_attention`` call per layer and
allocates no buffer of the scores' shape (heads x L x S), and it equals eager.  On CUDA a
profiler run of the Triton-target program shows a fused attention kernel.
"""
import pytest
import torch

import compiler
from tests import attention_forms as AF
from tests import attention_models as AM

pytest.importorskip("transformers")


@pytest.mark.parametrize("case", AM.CASES, ids=lambda c: c.name)
def test_plan_calls_fused_attention_and_materializes_no_scores(case):
    m = case.module()
    f = compiler.compile(m, *case.specs, dims=case.dims, target="cpp")
    # Every variant: the general one and those traced ahead for the sizes 1 the model branches on.
    for v in f.variants:
        facts = AF.plan_facts(v)
        assert facts == {"sdpa_calls": case.layers, "scores": []}
        assert v.fused_attention == 0  # kept whole by the tracer: nothing to fuse back
        # Repeated K/V (transformers' repeat_kv) become enable_gqa calls on the CPU: no K/V copies;
        # every model merges its heads back with a copy that ATen's fused output makes free.
        gqa = case.layers if case.name in ("llama", "qwen2", "mistral_sw", "gemma") else 0
        one_query = v.tp.hints.get("T") == 1  # traced ahead for T == 1: the heads merge as a view
        assert v.sdpa_calls == {"gqa": gqa, "merged_heads": 0 if one_query else case.layers}
    with torch.no_grad():
        for B, T in ((2, 7), (1, 5)) if "T" in " ".join(case.specs) else ((2, 0), (3, 0)):
            ins = case.inputs({"B": B, "T": T})
            torch.testing.assert_close(AM.last_hidden(f(*ins)), AM.last_hidden(m(*ins)), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("case", AM.CASES, ids=lambda c: c.name)
def test_eager_attention_is_fused_back_into_sdpa(case):
    # attn_implementation="eager": matmul, scale, additive float mask (or none), fp32 softmax,
    # matmul; GQA through repeat_kv.  The compiler rewrites each into one SDPA call.
    m = case.module()
    for mod in m.modules():
        if hasattr(mod, "config"):
            mod.config._attn_implementation = "eager"
    f = compiler.compile(m, *case.specs, dims=case.dims, target="cpp")
    for v in f.variants:
        assert v.fused_attention == case.layers
        assert AF.plan_facts(v) == {"sdpa_calls": case.layers, "scores": []}
    with torch.no_grad():
        ins = case.inputs({"B": 2, "T": 7})
        torch.testing.assert_close(AM.last_hidden(f(*ins)), AM.last_hidden(m(*ins)), atol=1e-5, rtol=1e-5)


def test_the_check_sees_materialized_scores():
    # A control: hand-written attention with an anti-causal mask is not rewritten, so its plan
    # allocates scores (B, H, T, T); plan_facts must report them.
    def prog(q, k, v):
        T = q.shape[-2]
        s = (q @ k.transpose(-2, -1)).masked_fill(torch.ones(T, T, dtype=torch.bool).tril(-1), float("-inf"))
        return torch.softmax(s, -1) @ v

    f = compiler.compile(prog, "q: f32[B, 4, T, 8]", "k: f32[B, 4, T, 8]", "v: f32[B, 4, T, 8]", target="cpp")
    facts = AF.plan_facts(f.variants[0])
    assert facts["sdpa_calls"] == 0
    calls = [s for s in f.variants[0].lp.items if getattr(s, "target", None) in (torch.ops.aten.bmm.default,)]
    assert calls  # scores come from a bmm
    B, T = f.variants[0].tp.symbol("B"), f.variants[0].tp.symbol("T")
    shapes_ = [tuple(b.shape) for b in f.variants[0].lp.buffers.values()]
    assert (B, 4, T, T) in shapes_ or (B * 4, T, T) in shapes_


_FUSED = ("flash", "fmha", "cudnn", "efficient_attention", "attention_kernel", "sdpa")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", ["llama", "gpt2", "bert+mask"])
def test_cuda_profile_runs_a_fused_attention_kernel(name):
    case = AM.BY_NAME[name]
    m = case.module().cuda().half()
    f = compiler.compile(m, *case.specs, dims=case.dims, target="triton")
    # T within the zoo configs' positions (GPT-2 and BERT have 40).
    ins = [t.cuda() for t in case.inputs({"B": 2, "T": 32})]
    with torch.no_grad():
        f(*ins)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            f(*ins)
            torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert any(any(k in n.lower() for k in _FUSED) for n in kernels), kernels
    assert not any("softmax" in n.lower() for n in kernels), kernels
