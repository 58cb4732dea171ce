"""Useful FLOPs (masked attention), FlopReport.check, FlopReport.mfu, and the CLI flags for them.

Useful counts are compared with formulas derived by hand in each test; totals
with FlopCounterMode on meta tensors.
"""
import copy
import json

import re

import pytest
import sympy
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

import shapes
from cli.main import main as cli_main
from shapes.errors import GuardViolation, SpecError
from shapes.flops.check import FormulaError
from tests import programs as P

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

L, D = 2, 64  # tiny_gpt2: 2 layers, n_embd 64, 4 heads, n_positions 128


@pytest.fixture(scope="module")
def gpt2():
    return P.tiny_gpt2()


@pytest.fixture(scope="module")
def gpt2_report(gpt2):
    return shapes.count_flops(gpt2, "ids: i64[B, T]")


def at(report, model, sizes, **kw):
    """The report's counts at ``sizes``; at size 1 (its own path today) a trace there."""
    try:
        return report.at(sizes)
    except GuardViolation:
        return shapes.count_flops(model, *[str(s) for s in report.traced.specs], dims=sizes, **kw).at(sizes)


def flop_counter_meta(model, ids):
    m = copy.deepcopy(model).to("meta")
    with FlopCounterMode(display=False) as c, torch.no_grad():
        m(ids)
    return c.get_total_flops()


@pytest.mark.parametrize("T", [1, 7, 128])
def test_causal_gpt2_useful_flops_equal_hand_formula(gpt2, gpt2_report, T):
    B = 2
    # Per layer: QKV, output projection and MLP: 2*B*T*D*(3D + D + 8D) = 24*B*T*D**2.  Attention:
    # Q @ K^T and P @ V each multiply-add D numbers per kept score entry per batch, and a causal
    # mask keeps T*(T+1)/2 of the T*T entries: 2 matmuls * 2*B*D*T*(T+1)/2.
    useful = L * (24 * B * T * D**2 + 2 * B * D * T * (T + 1))
    total = L * (24 * B * T * D**2 + 4 * B * D * T**2)
    v = at(gpt2_report, gpt2, {"B": B, "T": T})
    assert v.useful == useful
    assert v.flops == total == flop_counter_meta(gpt2, torch.zeros(B, T, dtype=torch.long, device="meta"))


def test_report_says_which_attention_was_halved_and_why(gpt2_report):
    r = gpt2_report
    assert len(r.masked_attention) == L
    for m in r.masked_attention:
        assert "scaled_dot_product_attention" in m.where  # the line that asked for it
        # transformers builds the causal mask with tril or, when exported, from arange comparisons
        assert "j <= i" in m.mask and ("aten.tril" in m.how or "aten.le" in m.how)
        assert sympy.simplify(m.fraction - (r.traced.symbol("T") + 1) / (2 * r.traced.symbol("T"))) == 0
    text = r.table()
    flat = " ".join(text.split())  # the table wraps long source lines
    assert "useful FLOPs" in flat and "T*(T + 1)/2 of T**2 score entries" in flat
    d = r.to_dict([{"B": 2, "T": 7}])
    assert d["at"][0]["useful_flops"] == L * (24 * 2 * 7 * D**2 + 2 * 2 * D * 7 * 8)
    assert len(d["masked_attention"]) == L


def _qkv(B, T):
    return [f"{n}: f32[{B}, 4, {T}, 16]" for n in "qkv"]


def arange_mask(q, k, v):
    T = q.shape[-2]
    keep = torch.arange(T, device=q.device)[:, None] >= torch.arange(T, device=q.device)[None, :]
    s = (q @ k.transpose(-2, -1)).masked_fill(~keep, float("-inf"))
    return s.softmax(-1) @ v


def triu_min_mask(q, k, v):
    T = q.shape[-2]
    drop = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    s = (q @ k.transpose(-2, -1)).masked_fill(drop, torch.finfo(q.dtype).min)
    return s.softmax(-1) @ v


def legacy_additive(q, k, v):
    # transformers' older causal mask: full(min) with 0 where col < row + 1, added to the scores
    T = q.shape[-2]
    mask = torch.full((T, T), torch.finfo(q.dtype).min, device=q.device)
    idx = torch.arange(T, device=q.device)
    mask = mask.masked_fill(idx < (idx + 1).view(T, 1), 0)
    return ((q @ k.transpose(-2, -1)) + mask[None, None]).softmax(-1) @ v


def triu_bias(q, k, v):
    T = q.shape[-2]
    bias = torch.triu(torch.full((T, T), float("-inf"), device=q.device), diagonal=1)
    return ((q @ k.transpose(-2, -1)) + bias).softmax(-1) @ v


def shifted_rows(q, k, v):
    # row index arange(T + 1)[1:] keeps j <= i + 1: one more entry per row, the last row clipped
    T = q.shape[-2]
    keep = torch.arange(T + 1, device=q.device)[1:, None] >= torch.arange(T, device=q.device)[None, :]
    return (q @ k.transpose(-2, -1)).masked_fill(~keep, float("-inf")).softmax(-1) @ v


def sdpa_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def sliding_band(q, k, v):
    T = q.shape[-2]
    i = torch.arange(T, device=q.device)
    keep = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - 4)
    s = (q @ k.transpose(-2, -1)).masked_fill(~keep, float("-inf"))
    return s.softmax(-1) @ v


def packed(q, k, v, seq):
    same = seq[:, None] == seq[None, :]
    s = (q @ k.transpose(-2, -1)).masked_fill(~same, float("-inf"))
    return s.softmax(-1) @ v


@pytest.mark.parametrize("fn", [arange_mask, triu_min_mask, legacy_additive, triu_bias, sdpa_causal,
                                P.CausalSelfAttention])
def test_triangular_masks_are_recognized(fn):
    program = fn() if isinstance(fn, type) else fn
    specs = ["x: f32[B, T, 32]"] if isinstance(fn, type) else _qkv("B", "T")
    r = shapes.count_flops(program, *specs)
    B, T = sympy.symbols("B T", integer=True, positive=True)
    bmm = 2 * B * 4 * 16 if not isinstance(fn, type) else 2 * B * 32  # per score entry, both matmuls alike
    attn_full = 2 * bmm * T**2
    attn_useful = 2 * bmm * T * (T + 1) / 2
    sub = {r.traced.symbol("B"): B, r.traced.symbol("T"): T}
    assert sympy.expand(r.total.xreplace(sub) - r.useful.xreplace(sub) - (attn_full - attn_useful)) == 0
    assert len(r.masked_attention) == 1 and not r.useful_notes


def test_training_step_halves_the_backward_attention_matmuls_too():
    r = shapes.count_flops(P.CausalSelfAttention(), "x: f32[B, T, 32]", mode="train")
    (m,) = r.masked_attention
    assert len(m.nodes) == 6  # Q @ K^T and P @ V, and two gradient matmuls of each
    T = r.traced.symbol("T")
    bmm_total = r.ops["aten.bmm"].flops  # all six are the attention's
    assert sympy.expand(r.total - r.useful - bmm_total * (1 - (T + 1) / (2 * T))) == 0


def test_unrecognized_and_data_dependent_masks_count_in_full_and_say_so():
    r = shapes.count_flops(packed, *_qkv("B", "T"), "seq: i64[T]")
    assert r.useful == r.total and not r.masked_attention
    assert "built from the input `seq`" in r.useful_notes[0] and "masked_fill" in r.useful_notes[0]
    assert "counted in full" in r.useful_notes[0]
    r = shapes.count_flops(sliding_band, *_qkv("B", "T"))
    assert r.useful == r.total and "band" in r.useful_notes[0]
    # The slice offset is read (j <= i + 1), and the clipped last row is not a closed form here.
    r = shapes.count_flops(shifted_rows, *_qkv("B", "T"))
    assert r.useful == r.total and "keeps j <= i + 1" in r.useful_notes[0]


def test_unmasked_attention_is_not_touched():
    r = shapes.count_flops(P.tiny_bert(), "ids: i64[B, T]")
    assert r.useful == r.total and not r.masked_attention and not r.useful_notes


# --------------------------------------------------------------------------- check

TEXTBOOK = "L*(24*B*T*D**2 + 4*B*T**2*D)"
WRONG_ATTENTION = "L*(24*B*T*D**2 + 2*B*T**2*D)"  # the attention term off by a factor of 2


def test_check_proves_the_textbook_gpt2_formula(gpt2_report):
    res = gpt2_report.check(TEXTBOOK, consts={"L": L, "D": D})
    assert res.outcome == "equal" and bool(res)
    assert "simplifies to 0" in str(res)


def test_check_gives_the_smallest_counterexample_with_both_values(gpt2, gpt2_report):
    res = gpt2_report.check(WRONG_ATTENTION, consts={"L": L, "D": D})
    assert res.outcome == "different" and not res
    sizes = res.counterexample
    # The smallest sizes on the traced path: any B >= 1; T >= 2 (transformers branches on T > 1).
    assert sizes == {"B": 1, "T": 2}
    traced, formula = res.values
    assert traced == flop_counter_meta(gpt2, torch.zeros(1, 2, dtype=torch.long, device="meta"))
    assert formula == L * (24 * 1 * 2 * D**2 + 2 * 1 * 4 * D)
    assert f"the traced count is {traced} and the formula gives {formula}" in str(res)


def test_check_equal_on_a_region_and_unknown_names():
    r = shapes.count_flops(lambda a, b: a @ b, "a: f32[M, K]", "b: f32[K, N]")
    res = r.check("16*M*N")
    assert res.outcome == "equal_where" and res.region == "K == 8"
    assert res.counterexample is not None and res.values[0] != res.values[1]
    with pytest.raises(FormulaError, match="neither a dim of the program .M, K, N. nor a constant"):
        r.check("2*M*N*K*P")
    with pytest.raises(FormulaError, match="cannot parse"):
        r.check("2*M*N*")
    with pytest.raises(FormulaError, match="not arithmetic on sizes"):
        r.check("__import__('os')")
    with pytest.raises(FormulaError, match="is a dim of the program"):
        r.check("2*M*N*K", consts={"K": 3})


# --------------------------------------------------------------------------- MFU

def test_mfu_from_the_peak_table_and_numbers(gpt2_report):
    sizes = {"B": 8, "T": 128}
    m = gpt2_report.mfu(sizes, seconds=1e-3, peak_flops="h100-sxm")
    useful = gpt2_report.evaluate(sizes, expr=gpt2_report.useful)
    assert m.flops == useful and m.count == "useful"
    # The program is fp32: the peak is H100's fp32 rate, and the text says why (not bf16's 989.4e12).
    assert m.achieved == useful / 1e-3 and m.mfu == pytest.approx(useful / 1e-3 / 66.9e12)
    assert m.other_flops == gpt2_report.evaluate(sizes)
    assert "MFU" in str(m) and "h100-sxm fp32 (the program's dtype)" in str(m)
    assert gpt2_report.mfu(sizes, 1e-3, "h100-sxm:bf16").peak == 989.4e12
    assert re.search(r"^\d+(\.\d+)? [kMGTP]?FLOP at B=8", str(m)) and " 0.00" not in str(m).replace("in 0.001 s", "")
    t = gpt2_report.mfu(sizes, 1e-3, 312e12, count="total")
    assert t.flops == gpt2_report.evaluate(sizes) and t.peak == 312e12
    assert gpt2_report.mfu(sizes, 1e-3, "a100:tf32").peak == 156e12
    with pytest.raises(SpecError, match="unknown accelerator 'h1000'"):
        gpt2_report.mfu(sizes, 1e-3, "h1000")
    with pytest.raises(SpecError, match="no fp8 peak for a100"):
        gpt2_report.mfu(sizes, 1e-3, "a100:fp8")
    with pytest.raises(SpecError, match="seconds must be a positive number"):
        gpt2_report.mfu(sizes, 0, "a100")


def test_module_table_has_intensity_formulas():
    r = shapes.count_flops(P.MLP(), "x: f32[B, T, 32]")
    text = r.module_table()
    assert "FLOP/byte" in text
    fc1 = r.by_module["fc1"]
    v = r.at({"B": 2, "T": 3}).by_module["fc1"]
    assert fc1.intensity.xreplace({r.traced.symbol("B"): 2, r.traced.symbol("T"): 3}) == sympy.Rational(*v)


# --------------------------------------------------------------------------- CLI

GPT2_FILE = """
import torch, transformers
transformers.logging.set_verbosity_error()
torch.manual_seed(0)
model = transformers.GPT2Model(transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=128,
                                                       vocab_size=100))

class LM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lm = transformers.GPT2LMHeadModel(model.config)

    def forward(self, ids, labels):
        return self.lm(input_ids=ids, labels=labels).loss

lm = LM()
"""


@pytest.fixture(scope="module")
def gpt2_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("flops") / "gpt2prog.py"
    p.write_text(GPT2_FILE)
    return str(p)


def test_cli_check_equal_and_different(gpt2_file, capsys):
    assert cli_main(["flops", f"{gpt2_file}:model", "-i", "ids: i64[B, T]", "--check", TEXTBOOK,
                     "--const", "L=2,D=64"]) == 0
    assert "equal: " in capsys.readouterr().out
    assert cli_main(["flops", f"{gpt2_file}:model", "-i", "ids: i64[B, T]", "--check", WRONG_ATTENTION,
                     "--const", "L=2", "--const", "D=64", "--json"]) == 1
    d = json.loads(capsys.readouterr().out)
    assert d["check"]["outcome"] == "different" and d["check"]["counterexample"] == {"B": 1, "T": 2}


def test_cli_train_and_mfu(gpt2_file, capsys):
    assert cli_main(["flops", f"{gpt2_file}:lm", "-i", "ids: i64[B, T]", "-i", "labels: i64[B, T]", "--train",
                     "--at", "B=4,T=64", "--mfu", "step_s=0.002,peak=a100"]) == 0
    out = capsys.readouterr().out
    assert "training step (forward + backward)" in out and "backward" in out
    assert "MFU: " in out and "a100 fp32 (the program's dtype)" in out and "FLOP/s achieved" in out


@pytest.mark.parametrize("argv, message", [
    (["--mfu", "step_s=0.1,peak=h100-sxm"], "--mfu needs the sizes"),
    (["--at", "B=2,T=4", "--mfu", "step_s=0.1,peak=tpu9"], "unknown accelerator"),
    (["--at", "B=2,T=4", "--mfu", "peak=a100"], "--mfu needs step_s"),
    (["--check", "2*B", "--const", "L=twelve"], "bad constant"),
    (["--const", "L=2"], "--const names constants for --check"),
    (["--check", "2*B*T*Q"], "neither a dim"),
])
def test_cli_errors_are_one_line(gpt2_file, capsys, argv, message):
    assert cli_main(["flops", f"{gpt2_file}:model", "-i", "ids: i64[B, T]", *argv]) != 0
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_frozen_attention_does_not_borrow_other_backward_matmuls():
    # q, k, v need no grad, so the attention's matmuls create no autograd Node; the projection
    # just before it does (its addmm is the last Node created).  Only the forward attention
    # matmuls may be counted at the causal fraction, not that addmm's gradient matmul.
    class Frozen(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(16, 16)

        def forward(self, q, k, v):
            z = self.proj(q.reshape(-1, 16))
            y = sdpa_causal(q, k, v)
            return z.sum() + y.sum()

    r = shapes.count_flops(Frozen(), *_qkv("B", "T"), mode="train")
    (m,) = r.masked_attention
    assert len(m.nodes) == 2 and all(n.meta["phase"] == "forward" for n in m.nodes)
    assert r.ops["aten.mm"].flops == r.useful_by_op["aten.mm"]
