"""Sharded programs: symshape's symbolic world against real gloo runs on CPU (world sizes 1-4).

For each program, dinfer classifies (W, dims) once over the whole box; then every grid
point runs for real on W gloo processes, and at each point: dinfer's class says ok iff
every rank ran (else the same error type), the class's output shape evaluated there is
each rank's output shape, and the per-rank bytes of each collective kind (count_flops(..).comm,
evaluated there) equal the bytes measured by wrapping the collectives in the real run.
"""
import itertools

import pytest
import sympy
import torch
import torch.distributed as dist

import shapes
from shapes.errors import TraceError, TracerLimitation
from validation import dinfer

from . import dist_programs as P
from .dist_programs import run_grid

# program -> (specs, dims box for dinfer, grid of dim points to run for real)
CASES = {
    "sp_mlp": (("x: f32[S, D]", "w1: f32[D, H]", "w2: f32[H, D]"),
               {"S": (1, 4), "D": (1, 8), "H": (1, 16)},
               [dict(S=s, D=3, H=h) for s in (1, 2) for h in (4, 6, 12)]),
    "tp_attention": (("x: f32[B, T, E]", "wqkv: f32[E, 3*E]", "wo: f32[E, E]"),
                     {"B": (1, 2), "T": (1, 4), "E": (1, 32)},
                     [dict(B=1, T=t, E=e) for t in (1, 3) for e in (8, 12, 16)]),
    "a2a_experts": (("x: f32[N, C]",), {"N": (1, 16), "C": (1, 4)},
                    [dict(N=n, C=2) for n in (4, 6, 12)]),
}
WORLD = (1, 4)


def _input_shapes(specs, point):
    out = []
    for s in specs:
        dims = s.split("[")[1].rstrip("]").split(", ")
        out.append(tuple(int(eval(d, {}, dict(point))) for d in dims))
    return out


@pytest.fixture(scope="module")
def spaces():
    out = {}
    for name, (specs, box, _) in CASES.items():
        sp = dinfer(getattr(P, name), *specs, world="W", dims={**box, "W": WORLD}, time_budget=120)
        assert sp.complete, (name, sp.reason)
        out[name] = sp
    return out


@pytest.fixture(scope="module")
def comm():
    """count_flops(world="W") of each program, at a valid point (the closed form holds on its path)."""
    at = {"sp_mlp": dict(S=2, D=3, H=12, W=2), "tp_attention": dict(B=1, T=3, E=16, W=2),
          "a2a_experts": dict(N=12, C=2, W=2)}
    out = {}
    for name, (specs, box, _) in CASES.items():
        dims = {k: (lo, hi, at[name][k]) for k, (lo, hi) in box.items()}
        out[name] = shapes.count_flops(getattr(P, name), *specs, world="W", dims={**dims, "W": (*WORLD, 2)})
    return out


def test_rules_read_as_expected(spaces):
    assert spaces["sp_mlp"].summary.valid_iff == "H % W == 0"
    assert spaces["tp_attention"].summary.valid_iff == "E % 8 == 0 and W != 3"
    assert spaces["a2a_experts"].summary.valid_iff == "N % W == 0"


@pytest.mark.parametrize("W", range(WORLD[0], WORLD[1] + 1))
def test_agrees_with_gloo(W, spaces, comm):
    cases, where = [], []
    for name, (specs, _, grid) in CASES.items():
        for point in grid:
            cases.append((name, _input_shapes(specs, point)))
            where.append((name, point))
    results = run_grid(W, cases)
    for i, (name, point) in enumerate(where):
        at = {**point, "W": W}
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
            assert comm[name].comm.evaluate({**at, "rank": rank}) == sent, (name, at, rank)
