"""Every form of ``F.scaled_dot_product_attention``, compiled and compared with eager.

Shared by tests/test_attention_forms.py (C++ target in-process; Triton target in a
``TRITON_INTERPRET=1`` subprocess on CPU, in-process on CUDA).  Each form is a small
program around one SDPA call, with pointwise ops before and after it so that the
compiled plan has kernels on both sides of the fused call.

``python tests/attention_forms.py TARGET [FORM ...]`` prints one ``RESULTS {json}`` line.
"""
import json
import os
import sys
import traceback
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
# fp32 against eager's own kernel; half types: the compiled program may round its
# pointwise ops once where eager rounds twice.
TOL = {"f32": (2e-5, 2e-5), "f16": (4e-3, 4e-3), "bf16": (3e-2, 3e-2)}


@dataclass
class Form:
    """One SDPA form: ``fn(q, k, v, *extra)``, its extra inputs' specs, and the sizes to run."""

    name: str
    fn: object
    heads: tuple = (4, 4)          # query heads, key/value heads
    extra: tuple = ()              # specs of extra inputs, with {dt} for the dtype
    cross: bool = False            # key length S independent of T
    sizes: list = field(default_factory=lambda: [(1, 1, 1), (2, 5, 5), (3, 7, 7), (1, 13, 13)])

    def specs(self, dt):
        hq, hk = self.heads
        s = "S" if self.cross else "T"
        return (f"q: {dt}[B, {hq}, T, 8]", f"k: {dt}[B, {hk}, {s}, 8]", f"v: {dt}[B, {hk}, {s}, 8]",
                *(e.format(dt=dt, s=s) for e in self.extra))

    def inputs(self, B, T, S, dtype, gen, device=None):
        device = device or DEVICE
        hq, hk = self.heads
        mk = lambda *shape: torch.randn(*shape, generator=gen).to(dtype).to(device)  # noqa: E731
        out = [mk(B, hq, T, 8), mk(B, hk, S, 8), mk(B, hk, S, 8)]
        for e in self.extra:
            e = e.format(dt="f32", s="S" if self.cross else "T")
            shape = [{"B": B, "T": T, "S": S}[d.strip()] if d.strip() in "BTS" else int(d)
                     for d in e.split("[")[1].rstrip("]").split(",")]
            if e.split(":")[1].strip().startswith("bool"):
                m = torch.rand(*shape, generator=gen) > 0.3
                m[..., 0] = True  # every row keeps an entry (no NaN rows in eager either)
                out.append(m.to(device))
            else:
                m = torch.randn(*shape, generator=gen).to(dtype)
                m[torch.rand(*shape, generator=gen) > 0.7] = float("-inf")
                m[..., 0] = 0.0
                out.append(m.to(device))
        return out


def _around(y):
    return (y * 2.0 + 1.0).transpose(1, 2)


FORMS = [
    Form("plain", lambda q, k, v: _around(F.scaled_dot_product_attention(q * 1.0, k, v))),
    Form("causal", lambda q, k, v: _around(F.scaled_dot_product_attention(q, k + 0.5, v, is_causal=True))),
    Form("scale", lambda q, k, v: _around(F.scaled_dot_product_attention(q, k, v, scale=0.3, dropout_p=0.0))),
    Form("bool_mask_bcast_heads", lambda q, k, v, m: _around(F.scaled_dot_product_attention(q, k, v, attn_mask=m)),
         extra=("m: bool[B, 1, T, {s}]",), cross=True, sizes=[(1, 1, 1), (2, 5, 3), (3, 7, 11)]),
    Form("float_mask_2d", lambda q, k, v, m: _around(F.scaled_dot_product_attention(q, k, v, attn_mask=m)),
         extra=("m: {dt}[T, {s}]",), cross=True, sizes=[(1, 1, 1), (2, 5, 3), (3, 7, 11)]),
    Form("float_mask_full", lambda q, k, v, m: _around(F.scaled_dot_product_attention(q, k, v, attn_mask=m * 1.0)),
         extra=("m: {dt}[B, 4, T, T]",)),
    Form("gqa", lambda q, k, v: _around(F.scaled_dot_product_attention(q, k, v, enable_gqa=True)),
         heads=(4, 2)),
    Form("gqa_causal", lambda q, k, v: _around(F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                              enable_gqa=True)), heads=(6, 2)),
    Form("gqa_bool_mask", lambda q, k, v, m: _around(F.scaled_dot_product_attention(q, k, v, attn_mask=m,
                                                                                    enable_gqa=True)),
         heads=(4, 1), extra=("m: bool[B, 1, T, T]",)),
    Form("cross", lambda q, k, v: _around(F.scaled_dot_product_attention(q, k, v)), cross=True,
         sizes=[(1, 1, 1), (2, 5, 1), (3, 1, 7), (2, 11, 13)]),
]
BY_NAME = {f.name: f for f in FORMS}


def check(form: Form, target: str, dt: str):
    """Compile ``form`` once for ``target`` at dtype ``dt``; every size equals eager; one
    trace; the plan calls SDPA once and allocates no attention scores."""
    import compiler
    dtype = DTYPES[dt]
    f = compiler.compile(form.fn, *form.specs(dt), dims={"T": 5, "B": 2, **({"S": 6} if form.cross else {})},
                         target=target)
    gen = torch.Generator().manual_seed(0)
    atol, rtol = TOL[dt]
    with torch.no_grad():
        for B, T, S in form.sizes:
            ins = form.inputs(B, T, S, dtype, gen, device="cpu" if target == "cpp" else None)
            out, ref = f(*ins), form.fn(*ins)
            assert out.shape == ref.shape and out.dtype == ref.dtype, (out.shape, ref.shape, out.dtype, ref.dtype)
            assert torch.allclose(out.float(), ref.float(), atol=atol, rtol=rtol, equal_nan=True), (
                form.name, dt, (B, T, S), (out.float() - ref.float()).abs().max().item())
    # One trace, plus one per pattern of size-1 dims (the compiler's 0/1 policy).
    ones = {tuple(d == 1 for d in size) for size in form.sizes}
    assert f.stats["traces"] <= len(ones | {(False,) * 3}), f.stats
    for v in f.variants:
        facts = plan_facts(v)
        assert facts["sdpa_calls"] == 1 and not facts["scores"], (form.name, facts)
    return f


def plan_facts(variant) -> dict:
    """What a compiled variant does for attention: its fused SDPA calls, and the buffers it
    allocates whose last two dims are a query length by a key length (scores)."""
    sdpa = torch.ops.aten.scaled_dot_product_attention.default
    calls = [s for s in variant.lp.items if getattr(s, "target", None) is sdpa]
    seq, masks = set(), set()
    for s in calls:
        args = list(s.args) + [s.kwargs.get("attn_mask")]
        q, k = variant.lp.buffers[args[0].value], variant.lp.buffers[args[1].value]
        seq.add((q.shape[-2], k.shape[-2]))
        masks.update(a.value for a in args[3:] if getattr(a, "value", None) in variant.lp.buffers)
    scores = []
    for b in variant.lp.buffers.values():
        shape = tuple(b.shape)
        # A score tensor has heads (> 1) before its (L, S) dims; a mask with one head, or the
        # mask the program passes (eager materializes it too), is not one.
        if len(shape) >= 3 and (shape[-2], shape[-1]) in seq and shape[-3] != 1 and b.name not in masks \
                and str(b.kind).split(".")[-1].lower() != "input":
            scores.append((b.name, shape))
    return {"sdpa_calls": len(calls), "scores": scores}


def run_all(target, names=None, dtypes=("f32", "f16", "bf16")):
    results = {}
    for form in FORMS:
        if names and form.name not in names:
            continue
        for dt in dtypes:
            key = f"{form.name}-{dt}"
            try:
                check(form, target, dt)
                results[key] = "ok"
            except Exception:
                results[key] = traceback.format_exc()[-3000:]
    return results


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    print("RESULTS " + json.dumps(run_all(sys.argv[1], sys.argv[2:] or None)))
