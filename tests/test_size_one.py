"""Size 1 is a size (issue 11): one answer for every size where the program behaves the same.

References: FlopCounterMode on meta tensors, eager PyTorch on real tensors at
every grid point (grids include 0 and 1), and translation validation of every
size-oblivious decision.
"""
import itertools

import pytest
import torch
import torch.nn as nn
from torch.utils.flop_counter import FlopCounterMode

import shapes
from shapes.spec import parse_spec
from tests.programs import tiny_gpt2
from tests.programs import eager_runs, grid, instance
from tests.test_dinfer import zoo
from validation import dinfer

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

pytestmark = pytest.mark.translation_validation


def meta_flops(program, specs, point):
    """FlopCounterMode's count for one run on meta tensors (None if the program raises)."""
    if isinstance(program, nn.Module):
        import copy
        program = copy.deepcopy(program).to("meta")
    inputs = []
    for s in specs:
        p = parse_spec(s)
        shape = [point[d] if isinstance(d, str) else d for d in p.dims]
        inputs.append(torch.zeros(shape, dtype=p.dtype, device="meta"))
    try:
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            program(*inputs)
    except Exception:
        return None
    return counter.get_total_flops()


def bmm_chain(a, b, c):
    return torch.bmm(torch.bmm(a, b), c)


def tiny_vit():
    torch.manual_seed(0)
    cfg = transformers.ViTConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                                 image_size=16, patch_size=8)
    return transformers.ViTModel(cfg).eval()


def tiny_t5_encoder():
    torch.manual_seed(0)
    cfg = transformers.T5Config(d_model=16, d_ff=32, num_layers=1, num_heads=2, d_kv=8, vocab_size=50)
    return transformers.T5EncoderModel(cfg).eval()


# name -> (model, specs, grid): every point, 1 included, is compared with FlopCounterMode.
FLOP_MODELS = {
    "vit": (tiny_vit, ["pixel_values: f32[B, 3, 16, 16]"], {"B": [1, 2, 3]}),
    "t5_encoder": (tiny_t5_encoder, ["input_ids: i64[B, T]"], {"B": [1, 2], "T": [1, 2, 5]}),
    "bmm_chain": (lambda: bmm_chain, ["a: f32[B, M, K]", "b: f32[B, K, N]", "c: f32[B, N, P]"],
                  {"B": [1, 2], "M": [1, 3], "K": [1, 2], "N": [1, 2], "P": [1, 3]}),
    "gpt2": (tiny_gpt2, ["ids: i64[B, T]"], {"B": [1, 2], "T": [1, 2, 7]}),
}


# -- acceptance 1: one count for every size >= 1 ------------------------------------------------


@pytest.mark.parametrize("name", list(FLOP_MODELS))
def test_count_flops_at_every_size_equals_flop_counter_mode(name):
    make, specs, axes = FLOP_MODELS[name]
    model = make()
    report = shapes.count_flops(model, *specs)
    assert report.traced.validation_report.ok  # every size-oblivious decision proven by Z3
    # No guard mentions B == 1, K == 1 (...): layout-only questions took none.
    assert not any(g.expr.has(report.traced.symbol(n)) for g in report.traced.guards for n in axes if n != "T")
    for values in itertools.product(*axes.values()):
        point = dict(zip(axes, values))
        expected = meta_flops(model, specs, point)
        assert expected is not None and report.evaluate(point) == expected, point


def test_gpt2_at_one_token_is_a_piecewise_count():
    # transformers branches on T == 1 (single-query attention): a second path, not a refusal.
    report = shapes.count_flops(tiny_gpt2(), "ids: i64[B, T]")
    pw = report.piecewise()
    assert len(pw) == 2 and str(pw).startswith("T >= 2: ") and "; T == 1: " in str(pw)
    assert report.evaluate({"B": 3, "T": 1}) == meta_flops(tiny_gpt2(), ["ids: i64[B, T]"], {"B": 3, "T": 1})


# -- acceptance 2: (x @ y) @ z over six dims ------------------------------------------------------


def chain(x, y, z):
    return (x @ y) @ z


def test_dinfer_matmul_chain_six_dims_complete_and_exact():
    specs = ["x: f32[A, B]", "y: f32[C, D]", "z: f32[E, F]"]
    dims = {n: (1, 4) for n in "ABCDEF"}
    space = dinfer(chain, *specs, dims=dims)
    assert space.complete and not space.overlaps and len(space.classes) == 3
    for point in grid(dims):
        assert space.classify(point).ok == eager_runs(chain, specs, point), point


# -- acceptance 4: brute force over grids with 0 and 1 ---------------------------------------------


def _with_zero(dims):
    return {n: (0, hi) for n, (lo, hi) in dims.items()}


@pytest.mark.parametrize("name,program,specs,dims", zoo.CASES, ids=[c[0] for c in zoo.CASES])
def test_dinfer_programs_over_grids_with_zero_and_one(name, program, specs, dims):
    program = instance(program)
    dims = {n: (0, min(hi, 8)) for n, (lo, hi) in dims.items()}
    space = dinfer(program, *specs, dims=dims)
    assert space.complete, space.reason
    for point in grid(dims):
        c = space.classify(point)
        assert c is not None and c.ok == eager_runs(program, specs, point), (point, c)


def _flop_cases():
    from tests import test_flops as TF
    for name, (make, spec, _, _, _) in TF.CASES.items():
        yield name, make, [spec]
    for name, (fn, specs) in TF.MATMUL_FORMS.items():
        yield name, (lambda fn=fn: fn), list(specs)


@pytest.mark.parametrize("name,make,specs", list(_flop_cases()), ids=[c[0] for c in _flop_cases()])
def test_flops_programs_over_grids_with_zero_and_one(name, make, specs):
    torch.manual_seed(0)
    program = make()
    if isinstance(program, nn.Module):
        program = program.eval()
    names = []
    for s in specs:
        for d in parse_spec(s).dims:
            if isinstance(d, str) and d not in names:
                names.append(d)
    report = shapes.count_flops(program, *specs, dims={n: (0, 64) for n in names})
    # Spatial dims of the conv net below its kernel make eager raise; keep the grid small.
    axis = [0, 1, 2, 5] if len(names) <= 3 else [0, 1, 3]
    for values in itertools.product(*[axis] * len(names)):
        point = dict(zip(names, values))
        expected = meta_flops(program, specs, point)
        if expected is None:  # eager raises here: no count, and symshape must say so
            with pytest.raises(shapes.GuardViolation):
                report.evaluate(point)
        else:
            assert report.evaluate(point) == expected, point


def test_piece_conditions_are_simplified_without_changing_their_meaning():
    # simplify_conjunction puts fixed dims into the other conditions and drops what the ranges
    # decide: on every point of the declared ranges the conjunction must read the same.
    import random

    import sympy

    from shapes.conditions import simplify_conjunction
    from shapes.functions import FloorDiv, PyMod
    from shapes.value_ranges import ValueRange
    B, T = sympy.symbols("B T", integer=True)
    pool = [sympy.Eq(T, 1), sympy.Eq(B * T, B), sympy.Ne(PyMod(T, 64), 0), sympy.Ge(T, 2), sympy.Le(B, 3),
            sympy.Ne(T, 64), sympy.Eq(FloorDiv(B * T, B), T), sympy.Gt(B * T, 4), sympy.Eq(B, 2), sympy.Lt(T, B)]
    ranges = {B: ValueRange(1, 6), T: ValueRange(1, 70)}
    rng = random.Random(0)
    for _ in range(60):
        conds = rng.sample(pool, rng.randint(1, 4))
        out = simplify_conjunction(conds, ranges)
        for b in range(1, 7):
            for t in (1, 2, 3, 4, 5, 6, 63, 64, 65, 70):
                at = {B: sympy.Integer(b), T: sympy.Integer(t)}
                assert bool(sympy.And(*conds).xreplace(at)) == bool(sympy.And(*out).xreplace(at)), (conds, out, b, t)


def _group_norm_after_attention(x, w, b):
    # channels-last strides, as a UNet's group_norm meets them after an attention block
    n, c, h, wd = x.shape
    y = (x.permute(0, 2, 3, 1).reshape(n, h * wd, c) @ torch.eye(c)).reshape(n, h, wd, c).permute(0, 3, 1, 2)
    return torch.nn.functional.group_norm(y, 2, w, b)


def test_group_norm_layout_questions_guard_no_size_and_its_semantic_checks_stay():
    # C++ group_norm's suggest_memory_format asked B > 1, H > 1, W > 1 through SymInt.h: B = 1
    # (a UNet's usual batch) was refused where eager runs.
    tp = shapes.trace(_group_norm_after_attention, "x: f32[B, C, H, W]", "w: f32[C]", "b: f32[C]",
                      dims={"B": 2, "C": 4, "H": 5, "W": 6})
    texts = list(map(str, tp.guards))
    assert not any(t in s for s in texts for t in ("B > 1", "H > 1", "W > 1")), texts
    for B, C, H, W in [(1, 4, 5, 6), (1, 2, 1, 1), (3, 6, 1, 7), (2, 4, 5, 1), (1, 3, 2, 2), (1, 2, 1, 1)]:
        x, w, b = torch.randn(B, C, H, W), torch.randn(C), torch.randn(C)
        try:
            ref = _group_norm_after_attention(x, w, b)
        except (RuntimeError, ValueError):
            ref = None
        failing = tp.failing_guards({"B": B, "C": C, "H": H, "W": W})
        if ref is None:
            assert failing, (B, C, H, W)  # C odd, or one value per group: eager raises, the guards refuse
        else:
            assert not failing, (B, C, H, W, failing)
            torch.testing.assert_close(tp.run(x, w, b), ref)
