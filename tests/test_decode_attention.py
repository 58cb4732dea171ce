"""The decode-step attention kernel (compiler/codegen/decode_attention.py) against ATen's SDPA.

Without CUDA the kernel cases run on the CPU under TRITON_INTERPRET=1 in one subprocess
(this file run as a script: the interpreter is chosen when triton is imported); with CUDA
in-process.  Sizes include 1 and primes, and lengths over several key blocks.
"""
import os
import sys

import pytest
import torch
import torch.nn.functional as F

from tests import interpreted

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# name: (B, H, Hk, S, D, dtype, layout, scale); layout "bhsd" (contiguous), "bshd" (K/V a
# transposed view, as a [B, S, Hk, D] projection reshaped), "cat" (K/V a cache grown by cat)
CASES = {
    "f32_S1": (1, 4, 2, 1, 16, "float32", "bhsd", None),
    "f32_mha_S37": (2, 4, 4, 37, 64, "float32", "bhsd", None),
    "f16_gqa_S131": (1, 8, 2, 131, 64, "float16", "bhsd", None),
    "bf16_gqa_D40_S67": (1, 4, 1, 67, 40, "bfloat16", "bhsd", None),
    "f32_bshd_scale_S97": (3, 2, 2, 97, 32, "float32", "bshd", 0.3),
    "f16_cat_S64": (1, 4, 2, 64, 64, "float16", "cat", None),
    "f32_B2_S2_D8": (2, 6, 3, 2, 8, "float32", "bhsd", None),
    "f16_gqa_S293_big_blocks": (1, 4, 2, 293, 64, "float16", "cat", None),
}
TOL = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


def make(case, device):
    B, H, Hk, S, D, dt, layout, scale = CASES[case]
    dtype = getattr(torch, dt)
    g = torch.Generator().manual_seed(sum(map(ord, case)))
    q = torch.randn(B, H, 1, D, generator=g).to(device, dtype)
    if layout == "bshd":
        k, v = (torch.randn(B, S, Hk, D, generator=g).to(device, dtype).transpose(1, 2) for _ in range(2))
    elif layout == "cat":
        k, v = (torch.cat([torch.randn(B, Hk, S - 1, D, generator=g), torch.randn(B, Hk, 1, D, generator=g)], 2)
                .to(device, dtype) for _ in range(2))
    else:
        k, v = (torch.randn(B, Hk, S, D, generator=g).to(device, dtype) for _ in range(2))
    return q, k, v, scale, H != Hk


def run_case(case, device) -> str:
    from compiler.codegen.decode_attention import decode_attention, decode_eligible
    q, k, v, scale, gqa = make(case, device)
    if not decode_eligible(q, k, v, None, 0.0, False, gqa):
        return "not eligible"
    got = decode_attention(q, k, v, scale, gqa)
    # SDPA's function in fp64: the kernel's error against it, and eager's own, in the case's dtype.
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), scale=scale, enable_gqa=gqa)
    eager = F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=gqa)
    if got.shape != eager.shape or got.dtype != eager.dtype:
        return f"shape/dtype {tuple(got.shape)} {got.dtype} vs {tuple(eager.shape)} {eager.dtype}"
    # Flash's layout: the merged-heads copy after it is free.
    if not got.transpose(1, 2).is_contiguous():
        return f"layout: strides {got.stride()}"
    err = (got.double() - ref).abs().max().item()
    eager_err = (eager.double() - ref).abs().max().item()
    if not torch.isfinite(got).all() or err > TOL[CASES[case][5]] + eager_err:
        return f"error {err:.3g} (eager's {eager_err:.3g})"
    return "ok"


def run_into(device) -> str:
    """The kernel writing into a given buffer (a CUDA graph's input, compiler.piecewise.into_graph)."""
    from compiler.codegen.decode_attention import decode_attention, writing_into
    q, k, v, scale, gqa = make("f16_gqa_S131", device)
    dest = torch.full((1, 1, 8, 64), float("nan"), dtype=torch.float16, device=device).transpose(1, 2)
    with writing_into(dest):
        got = decode_attention(q, k, v, scale, gqa)
        again = decode_attention(q, k, v, scale, gqa)  # the buffer is taken once
    if got is not dest or again is dest:
        return "not written into the buffer once"
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), enable_gqa=gqa)
    err = (dest.double() - ref).abs().max().item()
    return "ok" if err < 4e-3 and torch.equal(dest, again) else f"error {err:.3g}"


def run_warm(device) -> str:
    """Both block configurations compile at the first call (no compile stall when the cache
    grows past BIG_FROM keys)."""
    from compiler.codegen import decode_attention as da
    da.warm(torch.float32, torch.device(device), 24)  # runs both configurations (the kernel itself)
    return "ok" if (torch.float32, torch.device(device), 24) in da._WARM else "not warmed"


def run_all(device) -> dict:
    out = {}
    for case in list(CASES) + ["into", "warm"]:
        try:
            out[case] = run_into(device) if case == "into" else run_warm(device) if case == "warm" else \
                run_case(case, device)
        except Exception as e:  # noqa: BLE001 - a case's failure is its result (the script's boundary)
            out[case] = f"{type(e).__name__}: {e}"
    return out


@pytest.fixture(scope="module")
def results():
    if torch.cuda.is_available():
        return run_all("cuda")
    return interpreted.script_results(os.path.abspath(__file__))


@pytest.mark.parametrize("case", list(CASES) + ["into", "warm"])
def test_decode_kernel_equals_sdpa(results, case):
    assert results[case] == "ok", results[case]


def test_only_sdpa_calls_of_the_same_function_are_taken():
    from compiler.codegen.decode_attention import decode_eligible
    q, k = torch.randn(1, 4, 1, 16), torch.randn(1, 2, 5, 16)
    assert decode_eligible(q, k, k, None, 0.0, False, True)
    assert not decode_eligible(q, k, k, torch.ones(1, 5, dtype=torch.bool), 0.0, False, True)  # a mask
    assert not decode_eligible(q, k, k, None, 0.1, False, True)  # dropout
    assert not decode_eligible(q, k, k, None, 0.0, True, True)  # causal, top-left: one key only
    assert not decode_eligible(q, k, k, None, 0.0, False, False)  # 4 heads over 2 without GQA: SDPA's error
    assert not decode_eligible(torch.randn(1, 4, 2, 16), k, k, None, 0.0, False, True)  # two queries
    assert not decode_eligible(q, k[:, :, :0], k[:, :, :0], None, 0.0, False, True)  # no key
    assert not decode_eligible(q, k.half(), k.half(), None, 0.0, False, True)  # mixed dtypes
    assert not decode_eligible(q, torch.randn(1, 2, 16, 5).transpose(2, 3), k, None, 0.0, False, True)
    assert not decode_eligible(q, torch.randn(1, 3, 5, 16), torch.randn(1, 3, 5, 16), None, 0.0, False, True)
    with torch.enable_grad():
        assert not decode_eligible(q.requires_grad_(), k, k, None, 0.0, False, True)


def test_attention_written_into_the_next_graphs_buffer():
    # compiler.piecewise.into_graph: where the decode kernel does not run (here: the CPU), SDPA's
    # result is copied into the buffer; the segment returns the buffer itself either way.
    import compiler
    from compiler.piecewise import PiecewiseRun, Recorded, into_graph

    def step(q, k, v, w):
        a = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        return (a.transpose(1, 2).reshape(1, 1, 64) @ w).tanh()

    f = compiler.compile(step, "q: f32[1, 4, 1, 16]", "k: f32[1, 2, S, 16]", "v: f32[1, 2, S, 16]",
                         "w: f32[64, 64]", target="triton")
    v = f.variants[0]
    pw = PiecewiseRun(v, {v.tp.env.symbols["S"]}, capture=False)
    (att, nxt) = [n for n in range(len(pw.segments) - 1)
                  if not pw.segments[n].graphed and pw.segments[n + 1].graphed][:1] * 2
    nxt += 1
    name = next(r for r in pw.segments[nxt].reads if r in pw.segments[att].writes)
    args = [torch.randn(1, 4, 1, 16), torch.randn(1, 2, 7, 16), torch.randn(1, 2, 7, 16), torch.randn(64, 64)]
    sizes = v.sizes_at(tuple(f.bind(args)[i] for i in v.sym_index), classify=False)
    seg = pw.segments[att]
    env = dict(zip(pw.input_names, args))
    env.update(zip(pw.const_names, v.consts(torch.device("cpu"))))
    for s in pw.segments[:att]:
        env.update(zip(s.writes, s.fn([env[r] for r in s.reads], sizes, (), [], None)))
    ins = [env[r] for r in seg.reads]
    plain = dict(zip(seg.writes, seg.fn(ins, sizes, (), [], None)))[name]
    dest = torch.full_like(plain, float("nan"))
    rec = Recorded(None, [dest if r == name else None for r in pw.segments[nxt].reads],
                   [r == name for r in pw.segments[nxt].reads], [], [])
    fn = into_graph(seg, pw.segments[nxt].reads, rec)
    got = dict(zip(seg.writes, fn(ins, sizes, (), [], None)))[name]
    assert got is dest and torch.equal(dest, plain)
    assert into_graph(seg, pw.segments[nxt].reads, rec, returned={name}) is None  # the caller's: never a graph's
    rec.copied = [False] * len(rec.copied)  # nothing copied into the graph: nothing to write into
    assert into_graph(seg, pw.segments[nxt].reads, rec) is None


def test_sdpa_on_the_cpu_is_atens():
    from compiler.codegen.triton import _sdpa, sdpa_without_cudnn
    q, k = torch.randn(1, 4, 1, 16), torch.randn(1, 2, 9, 16)
    assert torch.equal(sdpa_without_cudnn(q, k, k, enable_gqa=True), _sdpa(q, k, k, enable_gqa=True))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="profiles CUDA kernels")
def test_backend_decode_runs_the_kernel_and_equals_eager():
    import transformers
    from torch.profiler import ProfilerActivity, profile

    import compiler
    from tests.attention_models import tiny_llama_lm
    torch._dynamo.reset()
    compiler.register()
    model = tiny_llama_lm().cuda()
    opt = torch.compile(model, backend="symshape", dynamic=True, options={"cuda_graphs": True})
    prompt = torch.randint(0, 128, (1, 11), generator=torch.Generator().manual_seed(3)).cuda()
    toks = {}
    with torch.no_grad():
        for name, fn in (("eager", model), ("symshape", opt)):
            cache = transformers.DynamicCache()
            out = fn(input_ids=prompt, past_key_values=cache, use_cache=True)
            got = [int(out.logits[:, -1].argmax(-1))]
            with profile(activities=[ProfilerActivity.CUDA]) as p:
                for _ in range(12):
                    out = fn(input_ids=torch.tensor([[got[-1]]], device="cuda"), past_key_values=cache,
                             use_cache=True)
                    got.append(int(out.logits[:, -1].argmax(-1)))
            toks[name] = got
            names = [e.key for e in p.key_averages()]
    assert toks["symshape"] == toks["eager"]
    assert any("_decode_kernel" in n for n in names), names
    assert not [n for n in names if "flash" in n.lower() or "fmha" in n.lower()], names


if __name__ == "__main__":
    interpreted.print_results(run_all("cpu"))
