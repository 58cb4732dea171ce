"""Stand-in variants (compiler/codegen/stand_ins.py): while a call's own Triton variant builds, a
built variant that serves its sizes launches, and computes eager's results.

The interpreter cases run every kernel of real programs (a softmax over a symbolic row, a layer
norm over a fixed one, a column sum in tiles, a strided pointwise program) with its own variant's
build in flight, first with every other variant built (the closest one stands in), then with only
the general ones built (the ones built right after a first call's); the results are compared with
eager's.  The build-pool scenario (tests/build_pool_cases.py ``stand_ins``) checks the queue order
and the promotion on real worker builds.
"""
import threading
from concurrent.futures import Future

import pytest
import torch

from compiler.codegen.stand_ins import general_keys, serves, stand_in
from compiler.codegen.triton_classes import SizeClass
from tests import interpreted

pytestmark = pytest.mark.triton
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _sc(div=(), persistent=False):
    return SizeClass(frozenset(div), persistent)


def test_a_variant_serves_only_sizes_its_assumptions_hold_for():
    own = (_sc({"ks0", "ks1"}, True), 128)
    assert serves((_sc({"ks0"}, True), 128), own, row=100, tiled=False)
    assert serves((_sc((), True), 256), own, row=100, tiled=False)  # a larger persistent block
    assert serves((_sc((), False), 1024), own, row=100, tiled=False)  # looped: every row
    assert not serves((_sc({"ks2"}, True), 128), own, row=100, tiled=False)  # assumes ks2 % 16 == 0
    assert not serves((_sc((), True), 64), own, row=100, tiled=False)  # the row does not fit
    assert not serves((_sc((), True), 128), own, row=None, tiled=False)
    tile = (_sc({"ks0"}), (32, False))
    assert serves((_sc(), (32, False)), tile, row=500, tiled=True)
    assert not serves((_sc(), (64, False)), tile, row=500, tiled=True)  # another tile width
    assert not serves((_sc(), (32, True)), tile, row=500, tiled=True)  # a split needs a workspace


def test_the_closest_built_variant_stands_in_and_none_where_nothing_serves():
    keys = [(_sc(), 1024), (_sc({"ks0"}), 1024), (_sc((), True), 128), (_sc({"ks0"}, True), 128),
            (_sc((), True), 256)]
    own = (_sc({"ks0"}, True), 128)
    assert stand_in(keys, own, 100, False, lambda k: k != own) == (_sc((), True), 128)
    assert stand_in(keys, own, 100, False, lambda k: not k[0].persistent) == (_sc({"ks0"}), 1024)
    assert stand_in(keys, own, 100, False, lambda k: k == own) is None


def test_general_keys_are_the_variants_serving_every_call_of_their_block():
    symbolic_row = [(_sc(), 1024), (_sc((), True), 16), (_sc((), True), 32), (_sc({"ks0"}), 1024),
                    (_sc({"ks0"}, True), 16)]
    assert general_keys(symbolic_row, tiled=False) == [(_sc(), 1024)]
    fixed_row = [(_sc((), True), 64), (_sc({"ks0"}, True), 64)]
    assert general_keys(fixed_row, tiled=False) == [(_sc((), True), 64)]
    tiles = [(_sc(), (16, False)), (_sc(), (32, False)), (_sc({"ks0"}), (16, False)), (_sc(), (16, True))]
    assert general_keys(tiles, tiled=True) == [(_sc(), (16, False)), (_sc(), (32, False)), (_sc(), (16, True))]


# -- interpreter cases: every stand-in launched --------------------------------------------------

def _in_flight():
    """A build that has not finished (a worker's): done after 20 s so that a launch that waits for
    it (no stand-in found) ends; the cases count such waits and fail on them."""
    fut = Future()
    timer = threading.Timer(20.0, lambda: fut.done() or fut.set_result(None))
    timer.daemon = True
    timer.start()
    return fut


def _run_with_builds_in_flight(f, args, ref, pool, building) -> tuple:
    """Call ``f(*args)`` with the builds of ``building(launcher, own key, keys)`` in flight in every
    launcher; ``(stand-ins launched, waits, stand-in bindings)``; the outputs must equal ``ref``."""
    from compiler.codegen import triton_build
    v = f.variants[0]
    values = f.bind(args)
    kvals = tuple(values[i] for i in v.sym_index)
    for _, ln in _launchers(v):
        ln.plans.clear()
        ln.bound.clear()
        own = ln.class_at(kvals)
        keys = ln.classes()
        ln.pending = {k: [(pool, ("stand-in test", k), _in_flight())] for k in building(ln, own, keys, kvals)}
    f._bound.clear()
    before = dict(triton_build.WAITS)
    # A shape's first call plans its launches unbound; its second binds them (a stand-in's
    # binding launches its own variant once that is built: the third call, builds done).
    outs = [f(*args), f(*args)]
    for _, ln in _launchers(v):
        ln.pending = {}
    outs.append(f(*args))
    stood_in = [ln for ln in f._bound.values() for ln in (ln[2] or ()) if type(ln).__name__ == "_StandInLaunch"]
    assert all(ln.own is not None for ln in stood_in), "a stand-in binding kept its stand-in after the build"
    for out in outs:
        got = out if isinstance(out, torch.Tensor) else out[0]
        assert got.shape == ref.shape and torch.allclose(got, ref, atol=1e-5, rtol=1e-4), (got - ref).abs().max()
    return (triton_build.WAITS["stand_ins"] - before["stand_ins"], triton_build.WAITS["n"] - before["n"],
            len(stood_in))


def _launchers(v):
    return [(names, ln) for names, ln in v.launchers.values() if hasattr(ln, "class_at")]


def _servable(ln, own, kvals):
    """Whether some other variant of ``ln`` serves a call whose own variant is ``own``."""
    w = ln.work_fn(*kvals)
    row = w[ln.nwork] if len(w) > ln.nwork else None
    tiled = ln.tiled
    return any(k != own and serves(k, own, row, tiled) for k in ln.classes())


def _check_program(prog, spec, shapes, dims=None):
    import compiler
    from compiler.codegen.build_pool import BuildPool
    f = compiler.compile(prog, *spec, dims=dims, target="triton", cuda_graphs=False)
    pool = BuildPool(("cuda", 90, 32), workers=1, idle_s=0)
    try:
        total = bindings = 0
        for shape in shapes:
            args = tuple(torch.randn(*s, device=DEVICE) for s in shape)
            ref = prog(*args)
            # Every other variant built: the closest one stands in.
            n, waits, b = _run_with_builds_in_flight(
                f, args, ref, pool, lambda ln, own, keys, kv: [own] if _servable(ln, own, kv) else [])
            assert waits == 0, f"a launch waited at {shape}"
            total, bindings = total + n, bindings + b
            # Only the general variants built.
            n, waits, b = _run_with_builds_in_flight(
                f, args, ref, pool, lambda ln, own, keys, kv: [k for k in keys if k not in general_keys(
                    keys, ln.tiled)])
            assert waits == 0, f"a launch waited at {shape} with the general variants built"
            total, bindings = total + n, bindings + b
        assert total > 0 and bindings > 0, f"{total} launches and {bindings} bindings stood in"
    finally:
        pool.close()
    return "ok"


def case_softmax_over_a_symbolic_row():
    return _check_program(lambda x: torch.softmax(x * 2, -1) + 1, ["x: f32[B, N]"],
                          [[(3, 40)], [(2, 48)], [(5, 7)], [(1, 300)]])


def case_layer_norm_over_a_fixed_row():
    # The first 48 of W columns: W in the kernel's indexes makes its alignment pick a class.
    w = torch.randn(48, device=DEVICE)
    return _check_program(lambda x: torch.nn.functional.layer_norm(x[..., :48], (48,), w) * 3, ["x: f32[B, T, W]"],
                          [[(2, 16, 64)], [(3, 5, 50)], [(1, 33, 96)]], dims={"W": 64})


def case_column_sums_in_tiles():
    return _check_program(lambda x: (x * x).sum(0), ["x: f32[N, M]"], [[(37, 40)], [(64, 48)], [(5, 300)]])


def case_strided_pointwise():
    return _check_program(lambda x, y: x[:, ::2] * 2 + y, ["x: f32[B, 2*T]", "y: f32[B, T]"],
                          [[(3, 32), (3, 16)], [(2, 18), (2, 9)], [(4, 64), (4, 32)]])


def test_build_pool_queues_general_variants_next_and_promotes_a_stood_in_build(tmp_path):
    from tests.test_build_pool import _run
    got, _ = _run("stand_ins", tmp_path)
    assert not got["errors"], got["errors"]
    assert got["general_right_after_current"], got
    assert got["stood_in"] == got["general"] and not got["own"], got
    assert got["own_promoted"], got
    assert got["own_after_drain"], got


results, test_stand_in_case = interpreted.case_tests(globals(), __file__)


if __name__ == "__main__":
    interpreted.print_results(interpreted.run_cases(globals()))
