"""Launches per call of BERT's Triton plan, and BERT/GPT-2 equal to eager with the fused mask.

BERT's extended attention mask (``transformers.masking_utils``: ``mask[batch_idx, kv_idx]`` with
both indices from ``arange``) and the clone of its embeddings were ATen calls and kernels of
their own: four ``arange``, an ``index``, a copy kernel, a kernel per step of the mask, and three
launches per run converting the mask to its additive form.  With ``arange`` as a value of the loop
index (:mod:`compiler.index_lowering`) the mask is one kernel reading the input mask, which also
stores the additive form (:func:`compiler.shared_masks.add_additive_forms`), and the clone is its
source's tensor.  The plan is made on the CPU
(planning needs no GPU); the results are checked under ``TRITON_INTERPRET=1`` in a subprocess.
"""
import json
import os
import subprocess
import sys

import pytest
import torch

import compiler
from compiler.wrapper import ExternStep, KernelStep, plan_launches
from tests import plan_launch_cases as cases

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _plan(model, *specs):
    return compiler.compile(model.eval(), *specs, target="triton", device="cpu").variants[0].plan


def _aten(plan) -> list:
    return [getattr(s.target, "__name__", str(s.target)).split(".")[0] for s in plan if isinstance(s, ExternStep)]


def test_bert_plan_makes_its_mask_in_one_kernel_and_launches_at_most_28_per_call():
    torch.manual_seed(0)
    plan = _plan(cases.bert().to(torch.bfloat16), "ids: i64[B, T]", "mask: i64[B, T] in 0..1")
    aten = _aten(plan)
    # 2 layers: 12 addmm + 2 SDPA + 2 contiguous + 6 norm/GELU kernels; embeddings: 3 embedding + 1 gather
    # + their norm kernel; the mask and its additive form: 1 kernel.  Before: 39 (4 arange, index, clone, 2 more
    # mask kernels, the additive form's 3 launches at run time).
    assert plan_launches(plan) <= 28, (plan_launches(plan), aten)
    assert "arange" not in aten and "index" not in aten
    assert sum(isinstance(s, KernelStep) for s in plan) == 8
    # The shared mask's additive form is stored by the kernel that makes the mask (no conversion at run time).
    sdpa = [s for s in plan if isinstance(s, ExternStep) and s.target.__name__ == "sdpa_shared_mask"]
    assert len(sdpa) == 2 and all("additive" in s.kwargs for s in sdpa)
    made = [{a.name for a in s.allocs} for s in plan if isinstance(s, KernelStep)]
    assert {sdpa[0].args[4].name, sdpa[0].kwargs["additive"].name} in made


def test_gpt2_plan_makes_no_arange_launch():
    torch.manual_seed(0)
    plan = _plan(cases.gpt2().to(torch.bfloat16), "ids: i64[B, T]")
    assert "arange" not in _aten(plan) and plan_launches(plan) <= 34


def test_an_index_read_from_memory_stays_aten_and_raises_like_eager():
    f = compiler.compile(lambda m, i: m[i] * 2, "m: f32[N, 4]", "i: i64[K]")
    assert any(getattr(s, "target", None) is torch.ops.aten.index.Tensor for s in f.variants[0].plan)
    m = torch.randn(5, 4)
    torch.testing.assert_close(f(m, torch.tensor([4, 0, 2])), m[torch.tensor([4, 0, 2])] * 2)
    with pytest.raises(IndexError):
        f(m, torch.tensor([0, 5, 1]))


def test_an_index_proved_in_range_is_a_load_and_equals_eager():
    def shifted(m):
        b = torch.arange(m.shape[0])
        return m[b[:, None], torch.arange(m.shape[1] - 1)[None, :] + 1] * 2
    f = compiler.compile(shifted, "m: f32[B, T]")
    assert not any(isinstance(s, ExternStep) and s.target is torch.ops.aten.index.Tensor for s in f.variants[0].plan)
    for b, t in [(3, 5), (1, 2), (2, 13)]:
        m = torch.randn(b, t)
        torch.testing.assert_close(f(m), shifted(m))


@pytest.mark.triton
def test_bert_and_gpt2_equal_eager_under_the_interpreter():
    if torch.cuda.is_available():
        results = cases.run_all()
    else:
        env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "plan_launch_cases.py")],
                           capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
        line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULTS ")]
        assert line, f"the cases did not run:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
        results = json.loads(line[-1][len("RESULTS "):])
    assert results == {c: "ok" for c in cases.CASES}, results
