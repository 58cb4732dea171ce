"""Conv nets from transformers with symbolic B, H, W (issue 11, acceptance 3).

Layout-only questions (contiguity, strides, broadcasting steps that both
branches settle alike) take no guard, so symshape records no more guards and
asserts than torch.export with dynamic dims, and its accepted sizes are
exactly eager's on a grid (torch.export's, which specialize 0/1 and some
intermediate sizes, are a subset).  About 1 to 2 minutes on 2 cores.
"""
import itertools

import pytest
import torch
from torch.export import Dim, export

import shapes

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()
T = transformers

NETS = {
    "resnet": lambda: T.ResNetModel(T.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1])),
    "convnext": lambda: T.ConvNextModel(T.ConvNextConfig(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2)),
    "convnextv2": lambda: T.ConvNextV2Model(T.ConvNextV2Config(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2)),
    "regnet": lambda: T.RegNetModel(T.RegNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                                                   groups_width=8)),
    "segformer": lambda: T.SegformerModel(T.SegformerConfig(
        num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16], num_attention_heads=[1, 2],
        mlp_ratios=[2, 2], patch_sizes=[7, 3], strides=[4, 2])),
    "poolformer": lambda: T.PoolFormerModel(T.PoolFormerConfig(
        depths=[1, 1], hidden_sizes=[8, 16], num_encoder_blocks=2, patch_sizes=[7, 3], strides=[4, 2],
        padding=[2, 1])),
    "mobilenet_v1": lambda: T.MobileNetV1Model(T.MobileNetV1Config(depth_multiplier=0.25, min_depth=4,
                                                                   tf_padding=False)),
    "mobilenet_v2": lambda: T.MobileNetV2Model(T.MobileNetV2Config(depth_multiplier=0.25, min_depth=4,
                                                                   tf_padding=False)),
}

SPEC = "pixel_values: f32[B, 3, H, W]"
GRID = {"B": [1, 2], "H": [1, 2, 5, 16, 33], "W": [1, 3, 8, 32]}


def exported(model):
    """torch.export with B, H, W dynamic: (guards + asserts, a predicate accepting (B, H, W))."""
    d = Dim.DYNAMIC
    ep = export(model, (), {"pixel_values": torch.randn(2, 3, 64, 96)},
                dynamic_shapes={"pixel_values": {0: d, 2: d, 3: d}}, strict=False)
    ph = next(n for n in ep.graph.nodes if n.op == "placeholder" and n.name.endswith("pixel_values"))
    sizes = ph.meta["val"].shape
    env = sizes[0].node.shape_env
    syms = {k: sizes[i].node.expr for k, i in (("B", 0), ("H", 2), ("W", 3))}
    count = len(env.guards) + sum(len(v) for v in env.deferred_runtime_asserts.values())
    ranges = {k: ep.range_constraints[s] for k, s in syms.items()}

    def accepts(point):
        subs = {syms[k]: v for k, v in point.items()}
        if any(not (r.lower <= point[k] <= r.upper) for k, r in ranges.items()):
            return False
        return all(bool(g.expr.xreplace(subs)) for g in env.guards)
    return count, accepts


def eager_runs(model, point):
    try:
        with torch.no_grad():
            model(torch.randn(point["B"], 3, point["H"], point["W"]))
    except Exception:
        return False
    return True


@pytest.mark.parametrize("name", list(NETS))
def test_no_more_records_than_torch_export_and_eager_sizes(name):
    torch.manual_seed(0)
    model = NETS[name]().eval()
    tp = shapes.trace(model, SPEC, dims={"H": 64, "W": 96})
    ours = len(tp.guards) + len(tp.runtime_asserts)
    theirs, export_accepts = exported(model)
    assert ours <= theirs, (ours, theirs, [str(g.expr) for g in tp.records])
    for values in itertools.product(*GRID.values()):
        point = dict(zip(GRID, values))
        accepted = not tp.failing_guards(point)
        if export_accepts(point):
            assert accepted, point  # every size torch.export accepts, symshape accepts
        # Accepted exactly where the traced path is eager's: eager runs there (the other
        # sizes either fail in eager or take another path; no accepted size fails).
        if accepted:
            assert eager_runs(model, point), point
    assert not tp.failing_guards({"B": 1, "H": 64, "W": 96})  # a batch of one is on this trace
