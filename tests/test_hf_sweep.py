"""A CI-sized subset of bench/hf_sweep.py: real transformers architectures from tiny derived configs.

Each row traces with symshape and torch.export (Dim.AUTO) and compares eager at 3 sizes.
"""
import pytest

from tests.programs import load_bench

pytest.importorskip("transformers")

hf_sweep = load_bench("hf_sweep")

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


def test_rows_merge_from_shards(rows, tmp_path, capsys):
    # A whole-registry run is split with --shard K/N, each process writing OUT.jsonl;
    # --merge makes the one table and summary from them.
    archs = hf_sweep.architectures()
    args = lambda k: hf_sweep.argparse.Namespace(only=None, shuffle=0, shard=f"{k}/2", limit=None)  # noqa: E731
    halves = [hf_sweep.select(list(archs), args(k)) for k in (0, 1)]
    assert sorted(halves[0] + halves[1]) == sorted(archs) and not set(halves[0]) & set(halves[1])
    paths = []
    for k, part in enumerate((rows[:3], rows[3:])):
        paths.append(tmp_path / f"s{k}.jsonl")
        paths[-1].write_text("".join(hf_sweep.json.dumps(hf_sweep.asdict(r)) + "\n" for r in part))
    assert hf_sweep.main(["--merge", *map(str, paths), "--out", str(tmp_path / "all.txt")]) == 0
    merged = (tmp_path / "all.txt").read_text()
    assert hf_sweep.summary(sorted(rows, key=lambda r: r.model_type)) in merged
    assert all(r.model_type in merged for r in rows) and "per size" in merged
    capsys.readouterr()


def test_a_config_whose_tiny_widths_break_it_is_built_at_its_own_widths():
    # LiLT ties its layout embedding sizes to hidden_size in ways the tiny config breaks
    # (eager raises at the example); shrinking depth, vocabulary and experts only builds it.
    archs = {a[0]: a for a in hf_sweep.architectures()}
    _, cname, mname = archs["lilt"]
    row = hf_sweep.Row(model_type="lilt")
    built = hf_sweep.build(row, hf_sweep._cls(cname), hf_sweep._cls(mname), timeout=120)
    assert built is not None, row
    model, cfg, _, prog, ex = built
    assert row.config == "depth only" and cfg.num_hidden_layers == 1 and cfg.hidden_size > hf_sweep.HIDDEN
    assert sum(p.numel() for p in model.parameters()) <= hf_sweep.MAX_PARAMS
    assert prog(*ex).shape[:2] == ex[0].shape
