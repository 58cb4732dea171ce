"""A CI-sized subset of bench/diffusers_sweep.py: real diffusers models from tiny hand-written configs.

Each row traces with symshape and torch.export (Dim.AUTO) and compares eager at 3 sizes.
"""
import pytest

from tests.programs import load_bench

pytest.importorskip("diffusers")

diffusers_sweep = load_bench("diffusers_sweep")

# The cheap ones, each with a constraint eager enforces at one of its sizes: a VAE (none), the
# prior (its text length is fixed: S = 6), DiT (2x2 patches: an odd latent fails), Flux (packed
# latents with their position ids).
SUBSET = ["vae_tiny", "prior", "dit", "flux"]


@pytest.fixture(scope="module")
def rows():
    cases = {c.name: c for c in diffusers_sweep.CASES}
    return [diffusers_sweep.sweep_one(cases[name], timeout=240) for name in SUBSET]


def test_cases_cover_the_model_classes_people_compile():
    models = {c.model for c in diffusers_sweep.CASES}
    assert len(models) >= 10
    assert {"UNet2DConditionModel", "AutoencoderKL", "FluxTransformer2DModel", "SD3Transformer2DModel"} <= models


def test_subset_traces_and_runs_as_eager(rows):
    for r in rows:
        assert r.status == "ok", (r.model_type, r.status, r.note)
        assert len(r.sizes) == 3
        assert r.wrong_shapes == r.accepted_eager_fails == r.run_errors == r.mismatches == 0
        for point, eager, sym, _ in r.sizes:
            assert sym in ("= eager", "refused"), (r.model_type, point, eager, sym)
            if eager != "runs":
                assert sym == "refused"
    by_name = {r.model_type: r for r in rows}
    # the prior's fixed text length is a guard symshape finds, and the size that breaks it is refused
    assert "encoder_hidden_states.shape[1] == 6" in diffusers_sweep.GUARDS["prior"]
    assert [s for _, _, s, _ in by_name["prior"].sizes] == ["= eager", "= eager", "refused"]


def test_summary_says_symshape_traces_what_torch_export_traces(rows):
    text = diffusers_sweep.summary(rows)
    assert "torch.export traces but symshape does not: 0" in text
    assert "wrong shapes: 0; sizes accepted where eager fails: 0; .run errors where eager runs: 0" in text
