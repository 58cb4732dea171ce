"""Tensors of a trace report the device the program will run on (shapes/devices.py).

transformers' MoE routing branches on the device (``.float()`` on the CPU,
``.int()`` elsewhere) before ``torch.histc``, which has no int kernel on the
CPU: traced on bare meta tensors, the graph took the non-CPU path and failed
at every size on the CPU.
"""
import pytest
import torch

import shapes
from shapes.devices import DeviceMismatch
from tests.attention_models import Logits


def routing(x):
    counts = torch.histc(x.float() if x.device.type in ("cpu", "mps") else x.int(), bins=4, min=0, max=3)
    return counts + x.shape[0]


def test_a_branch_on_the_device_is_recorded_and_run_checks_it():
    tp = shapes.trace(routing, "x: i64[N]")
    assert tp.device == torch.device("cpu")
    [read] = tp.device_reads
    assert read.what == "Tensor.device" and read.provenance.filename == __file__
    assert "x.device.type" in read.provenance.code
    x = torch.tensor([0, 1, 1, 3, 2])
    torch.testing.assert_close(tp.run(x), routing(x))  # eager's CPU path: float histc
    assert tp.output_shapes == [(4,)]
    assert tp.outputs()[0].dtype == torch.float32
    with pytest.raises(DeviceMismatch, match="traced for cpu"):
        tp.run(torch.zeros(3, dtype=torch.int64, device="meta"))


def test_device_chooses_the_path_and_is_reported_while_kernels_see_meta():
    seen = {}

    def f(x):
        seen["device"], seen["is_cuda"] = x.device, x.is_cuda
        y = torch.arange(x.shape[0], device=x.device)  # made on the reported device
        seen["y"] = y.device
        return routing(x) if x.is_cuda else x + y

    tp = shapes.trace(f, "x: i64[N]", device="cuda")
    assert seen == {"device": torch.device("cuda", 0), "is_cuda": True, "y": torch.device("cuda", 0)}
    assert tp.outputs()[0].dtype == torch.int32  # the int histc path eager takes on CUDA
    tp = shapes.trace(f, "x: i64[N]")
    assert seen["device"] == torch.device("cpu") and seen["is_cuda"] is False
    x = torch.arange(5)
    torch.testing.assert_close(tp.run(x), f(x))


def test_a_program_that_never_reads_the_device_runs_anywhere():
    tp = shapes.trace(lambda x: x * 2, "x: f32[N]")
    assert tp.device_reads == []
    assert tp.run(torch.ones(2, device="meta")).device.type == "meta"


def test_bad_device_is_a_spec_error():
    with pytest.raises(shapes.SpecError, match="not one a program runs on"):
        shapes.trace(lambda x: x, "x: f32[N]", device="meta")


def test_outside_a_trace_tensors_report_their_own_device():
    shapes.trace(routing, "x: i64[N]")
    assert torch.empty(1, device="meta").device.type == "meta" and torch.empty(1, device="meta").is_meta


def _moe(kind):
    from transformers import MixtralConfig, MixtralForCausalLM, Qwen2MoeConfig, Qwen2MoeForCausalLM
    torch.manual_seed(0)
    common = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, num_experts_per_tok=2, max_position_embeddings=64)
    if kind == "qwen2_moe":
        return Qwen2MoeForCausalLM(Qwen2MoeConfig(**common, moe_intermediate_size=16, num_experts=4,
                                                  shared_expert_intermediate_size=16)).eval()
    return MixtralForCausalLM(MixtralConfig(**common, num_local_experts=4)).eval()




@pytest.mark.parametrize("kind", ["qwen2_moe", "mixtral"])
def test_moe_runs_as_eager_on_the_cpu_at_every_size_the_guards_accept(kind):
    model = Logits(_moe(kind))
    tp = shapes.trace(model, "ids: i64[B, T]", dims={"B": 2, "T": 5})
    assert any("modeling_" in r.provenance.filename for r in tp.device_reads)
    accepted = 0
    for B in (1, 2, 3):
        for T in (1, 2, 7, 64, 65):
            ids = torch.randint(0, 96, (B, T), generator=torch.Generator().manual_seed(B * 100 + T))
            try:
                ref = model(ids)
            except Exception:
                ref = None
            if tp.failing_guards({"B": B, "T": T}):
                continue
            assert ref is not None, f"guards accept B={B}, T={T} where eager fails"
            torch.testing.assert_close(tp.run(ids), ref, atol=1e-5, rtol=1e-5)
            accepted += 1
    assert accepted >= 4


def test_cli_device_option_chooses_the_path_and_says_what_it_assumed(capsys):
    from cli.main import main
    target = f"{__file__}:routing"
    assert main(["trace", target, "-i", "x: i64[N]", "-q"]) == 0
    out = capsys.readouterr().out
    assert "out: f32[4]" in out and "device: cpu (assumed: the program read it at 1 place(s)" in out
    assert main(["trace", target, "-i", "x: i64[N]", "-q", "--device", "cuda"]) == 0
    out = capsys.readouterr().out
    assert "out: i32[4]" in out and "device: cuda:0" in out
    assert main(["explain", target, "-i", "x: i64[N]", "-q"]) == 0
    assert "device:     cpu, assumed: the program read it" in capsys.readouterr().out
