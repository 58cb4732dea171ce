"""A CI-sized subset of bench/hf_sweep.py: real transformers architectures from tiny derived configs.

Each row traces with symshape and torch.export (Dim.AUTO) and compares eager at 3 sizes.
"""
import importlib.util
import os
import sys

import pytest

pytest.importorskip("transformers")

_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "hf_sweep.py")
_spec = importlib.util.spec_from_file_location("hf_sweep", _PATH)
hf_sweep = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("hf_sweep", hf_sweep)  # dataclasses look their module up there
_spec.loader.exec_module(hf_sweep)

# One per family: decoder, MoE decoder, encoder, encoder-decoder, vision, audio.
SUBSET = ["llama", "qwen2_moe", "bert", "t5", "vit", "wav2vec2"]


@pytest.fixture(scope="module")
def rows():
    archs = {a[0]: a for a in hf_sweep.architectures()}
    return [hf_sweep.sweep_one(*archs[mt], timeout=240) for mt in SUBSET]


def test_registry_is_enumerated_from_transformers():
    archs = hf_sweep.architectures()
    assert len(archs) > 300 and {"llama", "bert", "vit"} <= {a[0] for a in archs}


def test_subset_traces_and_runs_as_eager(rows):
    for r in rows:
        assert r.status == "ok", (r.model_type, r.status, r.note)
        assert r.symshape == "traced"
        assert len(r.sizes) == 3
        assert r.wrong_shapes == r.accepted_eager_fails == r.run_errors == r.mismatches == 0
        # every size either runs equal to eager or is refused by a guard; never run where eager fails
        for point, eager, sym, _ in r.sizes:
            assert sym in ("= eager", "refused"), (r.model_type, point, eager, sym)
            if eager != "runs":
                assert sym == "refused"
    assert sum(s == "= eager" for r in rows for _, _, s, _ in r.sizes) >= 2 * len(rows)


def test_symshape_traces_what_torch_export_traces(rows):
    assert not [r.model_type for r in rows if r.export == "traced" and r.symshape != "traced"]
    text = hf_sweep.summary(rows)
    assert "torch.export traces but symshape does not: 0" in text
