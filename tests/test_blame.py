"""Blame typed and correct: symshape's limits are TracerLimitation, never "the program raised".

Each limitation case also runs eager at the traced sizes, to show eager does not raise there.
"""
import math

import pytest
import torch

import shapes
from shapes.errors import TraceError, TracerLimitation


def sizes_in_python(x):
    H, W = x.shape
    a = int(math.ceil(H / 2) * 2)  # MobileViT's patch rounding
    b = math.floor(W / 3)
    r = round(H / 4)  # ties to even: round(2.5) == 2
    y = x.new_zeros(a, b + r)
    if H / W > 0.5:
        y = y * 2
    return y, math.trunc(W / 2)


def test_size_arithmetic_on_symfloat_and_symbool_traces_and_runs_as_eager():
    tp = shapes.trace(sizes_in_python, "x: f32[H, W]", dims={"H": 10, "W": 7})
    x = torch.ones(10, 7)
    out, half = tp.run(x)
    ref, ref_half = sizes_in_python(x)
    torch.testing.assert_close(out, ref)
    assert half == ref_half == 3
    # round's tie is a decision of the trace: H = 10 gives 2.5 + 0.5, an integer
    assert any("0.5" in str(g.expr) for g in tp.guards)
    assert tp.failing_guards({"H": 9, "W": 7})  # 2.25: no tie, another path


def sym_ite_program(x):
    return x.new_zeros(torch.sym_ite(x.shape[0] > 2, x.shape[0], 3))


def test_torch_symbolic_code_failing_is_symshapes_limitation_naming_op_and_line():
    assert sym_ite_program(torch.ones(7)).shape == (7,)  # eager runs
    with pytest.raises(TracerLimitation) as ei:
        shapes.trace(sym_ite_program, "x: f32[H]", dims={"H": 7})
    assert not isinstance(ei.value, TraceError)
    msg = str(ei.value)
    assert "torch.sym_ite" in msg and f"{__file__}:" in msg and "not an error of the program" in msg


def test_a_loss_closing_over_modules_is_counted_not_blamed():
    head = torch.nn.Linear(8, 3)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())

    def step(x):
        return head(model(x)).sum()  # closes over a module whose parameters stay real

    step(torch.ones(8, 4)).backward()  # eager runs
    # Once reported as the program's "invalid gradient ... got meta" error; the captured
    # modules' tensors now go to meta for the trace, so the step is counted.
    r = shapes.count_flops(step, "x: f32[B, 4]", mode="train")
    assert r.evaluate({"B": 5}) > 0
    assert next(head.parameters()).device.type == "cpu"  # restored after the trace


def test_the_programs_own_error_is_still_the_programs():
    def f(x):
        return x.view(-1, 4)

    with pytest.raises(TraceError, match="the program raised"):
        shapes.trace(f, "x: f32[N]", dims={"N": (5, 5, 5)})
    with pytest.raises(RuntimeError):
        f(torch.ones(5))  # eager raises at the same size


def test_mobilevit_traces_at_symbolic_height_and_width():
    t = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = t.MobileViTConfig(image_size=32, patch_size=2, hidden_sizes=[16, 24, 32],
                            neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 48], num_attention_heads=2, num_labels=3)
    model = t.MobileViTForImageClassification(cfg).eval()

    def logits(px):
        return model(pixel_values=px).logits

    tp = shapes.trace(logits, "px: f32[B, 3, H, W]", dims={"B": 2, "H": 36, "W": 44})
    assert tp.output_shapes[0][1] == 3
    for B in (1, 3):
        x = torch.randn(B, 3, 36, 44)
        assert not tp.failing_guards({"B": B, "H": 36, "W": 44})
        with torch.no_grad():
            torch.testing.assert_close(tp.run(x), logits(x), atol=1e-4, rtol=1e-4)


def test_a_data_dependent_decision_inside_torchs_own_function_is_not_blamed_on_the_caller():
    """``gaussian_nll_loss`` checks ``torch.any(var < 0)``: a decision on data, asked by torch's
    own code.  No frame of the program asked, so the message names the torch function, never the
    line that called ``trace`` (it blamed that line, and read the condition's name off it), nor
    symshape's own file where the package was imported through a ``..`` path."""
    from shapes.data_dependent_error import DataDependentError
    with pytest.raises(DataDependentError) as e:
        shapes.trace(torch.nn.functional.gaussian_nll_loss, "x: f32[N]", "t: f32[N]", "v: f32[N]", dims={"N": 4})
    msg = str(e.value)
    assert "asked by torch.nn.functional.gaussian_nll_loss" in msg
    assert "test_blame.py" not in msg and "shapes.trace" not in msg and "<unknown>" not in msg


def test_engine_files_imported_through_a_dotted_path_are_still_the_engines():
    import os
    from shapes import provenance
    dotted = os.path.join(os.path.dirname(provenance.__file__), "..", "bench", "..", "shapes", "decide.py")
    assert provenance.is_engine_file(dotted)
    assert not provenance.is_engine_file(os.path.join(os.path.dirname(provenance.__file__), "..", "examples", "x.py"))
