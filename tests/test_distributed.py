"""Sharded programs: symshape's symbolic world against real gloo runs on CPU (world sizes 1-4).

For each program, dinfer classifies (W, dims) once over the whole box; then every grid
point runs for real on W gloo processes, and at each point: dinfer's class says ok iff
every rank ran (else the same error type), the class's output shape evaluated there is
each rank's output shape, and the per-rank bytes of each collective kind (count_flops(..).comm,
evaluated there) equal the bytes measured in the real run (tests/dist_programs.py).

The programs are examples/sharded.py's: explicit collectives (traced with a symbolic W), and a
DTensor tensor-parallel plan and an FSDP2-wrapped GPT-2 from transformers (traced once per
world size and joined).
"""
import itertools
import math

import pytest
import sympy
import torch
import torch.distributed as dist

import shapes
from examples import sharded
from shapes.errors import TraceError, TracerLimitation
from validation import dinfer

from . import dist_programs as P
from .dist_programs import run_grid

# program -> (specs, dims box for dinfer, grid of dim points to run for real, a valid point for count_flops)
CASES = {
    "sp_mlp": (("x: f32[S, D]", "w1: f32[D, H]", "w2: f32[H, D]"),
               {"S": (1, 4), "D": (1, 8), "H": (1, 16)},
               [dict(S=s, D=3, H=h) for s in (1, 2) for h in (4, 6, 12)], dict(S=2, D=3, H=12)),
    "tp_attention": (("x: f32[B, T, E]", "wqkv: f32[E, 3*E]", "wo: f32[E, E]"),
                     {"B": (1, 2), "T": (1, 4), "E": (1, 32)},
                     [dict(B=1, T=t, E=e) for t in (1, 3) for e in (8, 12, 16)], dict(B=1, T=3, E=16)),
    "a2a_experts": (("x: f32[N, C]",), {"N": (1, 16), "C": (1, 4)},
                    [dict(N=n, C=2) for n in (4, 6, 12)], dict(N=12, C=2)),
    # built per world size: a DTensor plan (8 heads, width 16) and FSDP2 GPT-2 (n_positions 16)
    "tp_attention_plan": (("x: f32[B, T, 16]",), {"B": (1, 2), "T": (1, 4)},
                          [dict(B=1, T=3), dict(B=2, T=1)], dict(B=2, T=3)),
    "fsdp_gpt2": (("input_ids: i64[B, T]",), {"B": (1, 2), "T": (1, 24)},
                  [dict(B=1, T=5), dict(B=2, T=16), dict(B=1, T=17)], dict(B=2, T=5)),
    # the plan over the tp dim of a 2-D mesh (dp, tp): mesh shapes D x T with D*T = 1..4
    "tp_attention_2d": (("x: f32[B, S, 16]",), {"B": (1, 2), "S": (1, 3), "D": (1, 2), "T": (1, 4)},
                        [dict(B=2, S=3, D=d, T=t) for d in (1, 2) for t in (1, 2, 3, 4) if d * t <= 4],
                        dict(B=2, S=3)),
}
WORLD = (1, 4)
#: the world argument of each program: a world size's name, or a mesh's dims -> their sizes' names
WORLDS = {"tp_attention_2d": {"dp": "D", "tp": "T"}}


def _world(name):
    return WORLDS.get(name, "W")


def _world_box(name):
    return {} if name in WORLDS else {"W": WORLD}


def _program(name):
    return getattr(sharded, name)


def _input_shapes(specs, point):
    out = []
    for s in specs:
        dims = s.split("[")[1].rstrip("]").split(", ")
        out.append(tuple(int(eval(d, {}, dict(point))) for d in dims))
    return out


@pytest.fixture(scope="module")
def spaces():
    out = {}
    for name, (specs, box, _, _) in CASES.items():
        sp = dinfer(_program(name), *specs, world=_world(name), dims={**box, **_world_box(name)}, time_budget=300)
        assert sp.complete, (name, sp.reason)
        out[name] = sp
    return out


@pytest.fixture(scope="module")
def comm():
    """count_flops(world="W") of each program, at a valid point (the closed form holds on its path)."""
    out = {}
    for name, (specs, box, _, at) in CASES.items():
        dims = {k: (lo, hi, at[k]) if k in at else (lo, hi) for k, (lo, hi) in box.items()}
        world = {"W": (*WORLD, 2)} if name not in WORLDS else {}
        out[name] = shapes.count_flops(_program(name), *specs, world=_world(name), dims={**dims, **world})
    return out


def test_rules_read_as_expected(spaces):
    assert spaces["sp_mlp"].summary.valid_iff == "H % W == 0"
    assert spaces["tp_attention"].summary.valid_iff == "E % 8 == 0 and W != 3"
    assert spaces["a2a_experts"].summary.valid_iff == "N % W == 0"
    # DTensor shards width 16 unevenly over 3 ranks (6, 6, 4 columns): the row-parallel o projection fails.
    assert spaces["tp_attention_plan"].summary.valid_iff == "W != 3"
    assert spaces["fsdp_gpt2"].summary.valid_iff == "T <= 16"
    assert spaces["fsdp_gpt2"].world_method == "traced per world size W=1..4, joined"
    assert spaces["sp_mlp"].world_method == "symbolic world size W"
    # the rule over the mesh sizes: the tp dim must not be 3, whatever dp is
    assert spaces["tp_attention_2d"].summary.valid_iff == "T != 3"
    assert spaces["tp_attention_2d"].world_method == "traced per mesh dp=D in 1..2, tp=T in 1..4, joined"


def test_joined_counts_read_as_expected(comm):
    assert comm["tp_attention_plan"].world_method == "traced per world size W=1..4, joined (raises at W=3: left out)"
    assert str(comm["tp_attention_plan"].comm.by_kind["all_reduce"]) == "128*B*T*(W - 1)/W"
    # FSDP2 pads each parameter's dim 0 to ceiling(rows / W) per rank: the closed form from the parameters'
    # shapes, kept because it equals the traced bytes at W = 1..4 (the gloo runs check them again)
    assert str(comm["fsdp_gpt2"].comm.by_kind["all_gather"]) == \
        "8*(W - 1)*(143*ceiling(16/W) + 9*ceiling(48/W) + 17*ceiling(64/W))"
    # on the 2-D mesh the all-reduce runs in the tp group: its size is T, not the world's D*T
    assert str(comm["tp_attention_2d"].comm.by_kind["all_reduce"]) == "128*B*S*(T - 1)/T"


@pytest.mark.parametrize("W", range(WORLD[0], WORLD[1] + 1))
def test_agrees_with_gloo(W, spaces, comm):
    cases, where = [], []
    for name, (specs, _, grid, _) in CASES.items():
        for point in grid:
            mesh = {dim: point[size] for dim, size in WORLDS[name].items()} if name in WORLDS else {}
            if mesh and math.prod(mesh.values()) != W:
                continue  # this mesh shape runs on another number of processes
            cases.append((name, _input_shapes(specs, point), mesh))
            where.append((name, point))
    results = run_grid(W, cases)
    for i, (name, point) in enumerate(where):
        at = {**point, "W": W} if name not in WORLDS else dict(point)
        cls = spaces[name].classify(at)
        assert cls is not None, (name, at)
        for rank in range(W):
            outcome, shape, sent = results[rank][i]
            assert cls.outcome() == outcome, (name, at, rank, cls.describe(), shape)
            if outcome != "ok":
                continue
            subs = {sympy.Symbol(k, integer=True): v for k, v in {**at, "rank": rank}.items()}
            (traced_shape,) = cls.output_shapes
            assert tuple(int(sympy.sympify(d).subs(subs)) for d in traced_shape) == shape, (name, at, rank)
            # bytes per kind; a kind that moves 0 bytes (one rank) is the same as none issued
            want = {k: v for k, v in comm[name].comm.evaluate({**at, "rank": rank}).items() if v}
            assert want == {k: v for k, v in sent.items() if v}, (name, at, rank)


# -- one process: checks, limitations -------------------------------------------------------

def _gather(x, out):
    dist.all_gather_into_tensor(out, x)
    return out


def test_all_gather_size_check_is_a_runtime_assert_on_the_users_line():
    tp = shapes.trace(_gather, "x: f32[S, 4]", "out: f32[M, 4]", world="W",
                      dims={"W": (1, 8), "S": (1, 64, 8), "M": (1, 512, 16)})
    [a] = [g for g in tp.runtime_asserts if "M" in str(g.expr)]
    assert str(a.expr) == "Eq(M, S*W)"
    assert a.provenance.code == "dist.all_gather_into_tensor(out, x)"
    with pytest.raises(TraceError) as e:
        shapes.trace(_gather, "x: f32[S, 4]", "out: f32[M, 4]", world="W",
                     dims={"W": (1, 8, 2), "S": (1, 64, 8), "M": (1, 512, 17)})
    assert isinstance(e.value.exc, RuntimeError) and "allgather" in str(e.value.exc)


def test_world_size_is_a_symbol_with_the_given_range():
    tp = shapes.trace(lambda x: x.view(dist.get_world_size(), -1), "x: f32[N]", world="W", dims={"W": (2, 4)})
    assert [str(s) for s in tp.output_shapes[0]] == ["W", "(N//W)"]
    assert tp.world.name == "W" and tp.world.rank is None
    assert not dist.is_initialized()  # the stand-in is gone after the trace


def _allgather_list(x):
    outs = [torch.empty_like(x) for _ in range(2)]
    dist.all_gather(outs, x)
    return outs[0]


def _avg(x):
    dist.all_reduce(x, op=dist.ReduceOp.AVG)
    return x


def _subgroup(x):
    dist.all_reduce(x, group=object())
    return x


def _mesh(x):
    from torch.distributed.device_mesh import init_device_mesh
    init_device_mesh("cpu", (dist.get_world_size(),))
    return x


def test_a_mesh_needs_the_program_built_per_world_size():
    """A program that builds a device mesh under a symbolic world says how to trace it, typed."""
    from shapes.distributed import NeedsConcreteWorld
    with pytest.raises(NeedsConcreteWorld, match="per world size"):
        shapes.trace(_mesh, "x: f32[N]", world="W", dims={"W": (1, 8)})


def _split_a2a(x):
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x, [1, 1], [1, 1])
    return out


@pytest.mark.parametrize("program, names", [(_allgather_list, "all_gather"), (_avg, "AVG"),
                                            (_subgroup, "subgroups"),
                                            (_split_a2a, "split sizes")])
def test_what_is_not_modeled_raises_a_typed_limitation(program, names):
    with pytest.raises(TracerLimitation, match=names):
        shapes.trace(program, "x: f32[N]", world="W", dims={"W": (1, 8)})


def test_dinfer_requires_a_rank_condition_of_every_rank():
    def uneven(x):
        # rank r takes rows r*2 .. r*2+2: fits for every rank iff N >= 2*W
        return x.narrow(0, dist.get_rank() * 2, 2)
    sp = dinfer(uneven, "x: f32[N]", world="W", dims={"W": (1, 4), "N": (1, 16)})
    assert sp.complete
    for W, N in itertools.product(range(1, 5), range(1, 17)):
        # eager's narrow raises on the last rank when its rows run past N
        assert sp.classify(W=W, N=N).ok == (N >= 2 * W), (W, N)


@pytest.mark.parametrize("W", [2])
def test_traced_graph_runs_on_real_ranks(W):
    """The graph symshape records runs under a real gloo job (its collectives are the real ones) and
    equals eager on every rank."""
    res = P.run_traced(W, "sp_mlp", ("x: f32[S, D]", "w1: f32[D, H]", "w2: f32[H, D]"),
                       [(3, 4), (4, 8), (8, 4)])
    assert res == [True] * W


# -- contracts -----------------------------------------------------------------------------

_CONTRACT = '''
[[contract]]
name = "sp_mlp"
program = "{root}/examples/sharded.py:sp_mlp"
inputs = ["x: f32[S, D]", "w1: f32[D, H]", "w2: f32[H, D]"]
world = "W"
dims = {{ S = "1..16", D = "1..16", H = "1..64", W = "1..8" }}
valid = "H % W == 0"
comm = {{ all_gather = "4*D*S*(W - 1)", reduce_scatter = "{rs}" }}
'''


def _check_contract(template, tmp_path, capsys, **fields):
    """Write a contract from its template beside the repository's examples, run `symshape check` on it,
    and return (exit code, printed report)."""
    import os
    from cli.main import main
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = tmp_path / "symshape.toml"
    path.write_text(template.format(root=root, **fields))
    rc = main(["check", str(path)])
    return rc, capsys.readouterr().out


@pytest.mark.parametrize("rs, rc", [("4*D*S*(W - 1)", 0), ("4*D*S*W", 1)])
def test_check_proves_a_sharded_contract(rs, rc, tmp_path, capsys):
    got, out = _check_contract(_CONTRACT, tmp_path, capsys, rs=rs)
    assert got == rc, out
    assert ("reduce_scatter sends 4*D*S*(W - 1) bytes per rank" in out) == (rc == 1), out


def test_roofline_of_the_tp_plan(comm):
    """The step bound from the joined counts: compute at the peak plus the bytes a rank sends at the link rate."""
    from fractions import Fraction
    s = comm["tp_attention_plan"].roofline({"B": 8, "T": 1024, "W": 4}, peak_flops=1e12, link_bytes_per_s=1e9)
    flops, sent = 64 * 8 * 1024 * (1024 + 32) // 4, Fraction(128 * 8 * 1024 * 3, 4)
    assert (s.world, s.flops_per_device, s.comm_bytes) == (4, flops, sent)
    assert s.step_s == pytest.approx(flops / 1e12 + float(sent) / 1e9)
    assert s.overlapped_s == pytest.approx(float(sent) / 1e9)
    assert s.mfu_per_device() == pytest.approx(flops / 1e12 / s.step_s)
    assert s.mfu_global() == pytest.approx(4 * flops / (4 * 1e12 * s.step_s))
    # with the unsharded step's FLOPs given, global MFU counts those instead
    one = comm["tp_attention_plan"].roofline({"B": 8, "T": 1024, "W": 4}, 1e12, 1e9, model_flops=2 * flops)
    assert one.mfu_global() == pytest.approx(2 * flops / (4 * 1e12 * one.step_s))


_PLAN_CONTRACT = '''
[[contract]]
name = "tp_plan"
program = "{root}/examples/sharded.py:tp_attention_plan"
inputs = ["x: f32[B, T, 16]"]
world = "W"
dims = {{ B = "1..2", T = "1..4", W = "1..4" }}
valid = "W != 3"
comm = {{ all_reduce = "{ar}" }}
'''


@pytest.mark.parametrize("ar, rc", [("128*B*T*(W - 1)/W", 0), ("64*B*T*(W - 1)", 1)])
def test_check_proves_a_per_world_contract(ar, rc, tmp_path, capsys):
    got, out = _check_contract(_PLAN_CONTRACT, tmp_path, capsys, ar=ar)
    assert got == rc, out
    assert "the region W != 3 is accepted" in out, out
    assert ("all_reduce sends" in out) == (rc == 1), out


_MESH_CONTRACT = '''
[[contract]]
name = "tp_plan_2d"
program = "{root}/examples/sharded.py:tp_attention_2d"
inputs = ["x: f32[B, S, 16]"]
mesh = {{ dp = "D", tp = "T" }}
dims = {{ B = "1..2", S = "1..2", D = "1..2", T = "1..2" }}
valid = true
comm = {{ all_reduce = "128*B*S*(T - 1)/T" }}
'''


def test_check_proves_a_mesh_contract(tmp_path, capsys):
    rc, out = _check_contract(_MESH_CONTRACT, tmp_path, capsys)
    assert rc == 0, out
    assert "bytes per rank of all_reduce proved equal" in out, out


def _colwise_local():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module
    lin = torch.nn.Linear(4, 4)
    return parallelize_module(lin, init_device_mesh("cpu", (dist.get_world_size(),)), ColwiseParallel())


def test_ranks_whose_outputs_differ_are_no_class():
    """4 output columns over 3 ranks are 2, 2 and 0 local columns: each rank runs, with its own shape, which
    one class (one output shape) cannot say; dinfer says so instead of answering for rank 0 only."""
    from shapes.distributed import per_world
    sp = dinfer(per_world(_colwise_local), "x: f32[B, 4]", world="W", dims={"B": (1, 2), "W": (2, 3)})
    assert sp.classify(B=2, W=2).outcome() == "ok"
    bad = sp.classify(B=2, W=3)
    assert bad.outcome() != "ok" and "differ from rank 0's" in bad.message, bad.describe()
