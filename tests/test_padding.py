"""The padding analysis against brute force: pad with random values, compare the kept outputs of eager."""
import pytest
import torch
from torch.utils import _pytree as pytree

import shapes
from compiler.padding import analyze_padding
from shapes.spec import parse_spec
from tests.padding_programs import CASES

DIMS = {"T": (1, 128), "B": (1, 64)}


def _inputs(specs, sizes, gen):
    out = []
    for s in specs:
        shape = [sizes[d] if isinstance(d, str) else d for d in s.dims]
        if s.dtype.is_floating_point:
            out.append(torch.randn(shape, generator=gen, dtype=s.dtype))
        else:
            out.append(torch.randint(0, 100, shape, generator=gen, dtype=s.dtype))
    return out


def brute_force_pads(program, specs, dim, points=({"B": 2, "T": 5}, {"B": 3, "T": 2}), extras=(1, 3)) -> bool:
    """True when padding ``dim`` with random values never changed a kept output position."""
    specs = [parse_spec(s) for s in specs]
    gen = torch.Generator().manual_seed(0)
    for real in points:
        for extra in extras:
            big_sizes = dict(real, **{dim: real[dim] + extra})
            big = _inputs(specs, big_sizes, gen)
            small = [t[tuple(slice(0, real[d]) if isinstance(d, str) else slice(None) for d in s.dims)]
                     for t, s in zip(big, specs)]
            with torch.no_grad():
                want, got = pytree.tree_leaves(program(*small)), pytree.tree_leaves(program(*big))
            for a, b in zip(want, got):
                if tuple(a.shape) != tuple(b.shape[:a.dim()]) and a.dim() != b.dim():
                    return False
                kept = b[tuple(slice(0, n) for n in a.shape)]
                if not torch.allclose(a, kept, atol=1e-5, rtol=1e-4):
                    return False
    return True


def _verdict(report, dim):
    v = report.by_dim[dim]
    if v.safe:
        return "pads"
    return "mixes" if any(r.kind == "mixes" for r in v.reasons) else "not_proved"


@pytest.mark.parametrize("name", sorted(CASES))
def test_verdict_matches_brute_force(name):
    make, specs, expected = CASES[name]
    program = make()
    if isinstance(program, torch.nn.Module):
        program.eval()
    tp = shapes.trace(program, *specs, dims={k: v for k, v in DIMS.items() if any(k in s for s in specs)})
    report = analyze_padding(tp)
    for dim, want in expected.items():
        got = _verdict(report, dim)
        assert got == want, f"{name}: {dim} {got}, expected {want}:\n{report.text()}"
        if got == "pads":
            assert brute_force_pads(program, specs, dim), f"{name}: {dim} proved safe but padding changed outputs"
        elif got == "mixes":
            assert not brute_force_pads(program, specs, dim), f"{name}: {dim} said to mix but padding is exact"
            assert all(r.where and r.why and r.fix for r in report.by_dim[dim].reasons)


def test_reasons_name_the_user_line_and_the_mask():
    make, specs, _ = CASES["mean_over_t"]
    report = analyze_padding(shapes.trace(make(), *specs))
    (r,) = report.by_dim["T"].reasons
    assert r.op == "aten.mean.dim" and "padding_programs.py" in r.where and "x.mean(1)" in r.where
    assert "true length" in r.fix
    make, specs, _ = CASES["softmax_over_t"]
    (r,) = analyze_padding(shapes.trace(make(), *specs)).by_dim["T"].reasons
    assert "-inf" in r.fix and "torch.softmax(x, dim=1)" in r.where


def test_sum_over_zeroed_padding_is_safe_and_over_raw_padding_is_not():
    def zeroed(x):
        return (x * torch.zeros_like(x)).sum(1)

    report = analyze_padding(shapes.trace(zeroed, "x: f32[B, T, 4]"))
    assert report.by_dim["T"].safe and brute_force_pads(zeroed, ["x: f32[B, T, 4]"], "T")
    report = analyze_padding(shapes.trace(lambda x: x.sum(1), "x: f32[B, T, 4]"))
    assert not report.by_dim["T"].safe and "zeros at the padded positions" in report.by_dim["T"].reasons[0].fix


def test_size_used_as_a_value_is_not_proved():
    def scaled(x):
        return x / x.shape[1]

    v = analyze_padding(shapes.trace(scaled, "x: f32[B, T]")).by_dim["T"]
    assert not v.safe and v.reasons[0].kind == "not_proved" and not brute_force_pads(scaled, ["x: f32[B, T]"], "T")


def test_unknown_op_is_never_safe():
    def sort_rows(x):
        return x.sort(dim=1).values

    v = analyze_padding(shapes.trace(sort_rows, "x: f32[B, T]")).by_dim["T"]
    assert not v.safe and "aten.sort" in v.reasons[0].op


def test_dims_that_pad_alone_are_checked_together():
    def bt(q, k, v):
        import torch.nn.functional as F
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    specs = ["q: f32[B, 2, T, 16]", "k: f32[B, 2, T, 16]", "v: f32[B, 2, T, 16]"]
    report = analyze_padding(shapes.trace(bt, *specs))
    assert report.by_dim["B"].safe and report.by_dim["T"].safe
    assert report.safe_dims == ["B", "T"]
    assert report.joint.safe


def test_random_values_and_sized_fills_are_not_proved():
    v = analyze_padding(shapes.trace(lambda x: x + torch.randn(x.shape[1]), "x: f32[B, T]")).by_dim["T"]
    assert not v.safe and v.reasons[0].kind == "not_proved"
    v = analyze_padding(shapes.trace(lambda x: x * torch.scalar_tensor(x.shape[1]), "x: f32[B, T]")).by_dim["T"]
    assert not v.safe
