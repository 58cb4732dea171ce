"""Kernel builds in worker processes (compiler.codegen.build_pool, triton_build): compiled for
an H100 target with Triton's bundled ptxas, so they run without a GPU.

Each scenario (tests/build_pool_cases.py) runs in its own process with a fresh Triton cache.
"""
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.triton
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(name, tmp_path, **env_extra):
    # SYMSHAPE_WARM_CLASSES=0: each scenario drives its own pool.  On a CUDA machine compile()
    # would first hand every class to the process-wide pool, whose pending builds the scenario's
    # checks would then see (the H100 run of split_builds found the current class still pending).
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TRITON_CACHE_DIR=str(tmp_path / "triton"), SYMSHAPE_CACHE=str(tmp_path / "symshape"),
               SYMSHAPE_WARM_CLASSES="0", **env_extra)
    env.pop("TRITON_INTERPRET", None)
    os.makedirs(env["TRITON_CACHE_DIR"], exist_ok=True)
    r = subprocess.run([sys.executable, "-m", "tests.build_pool_cases", name], capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=600)
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, f"{name} did not finish:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return json.loads(line[-1][len("RESULT "):]), r


def test_workers_build_every_class_and_the_parent_only_loads_them(tmp_path):
    got, _ = _run("program_builds", tmp_path)
    assert got["failed"] == 0, got["errors"]
    assert got["aligned"] and got["submitted"] == got["classes"] >= 2, got
    assert got["first_is_queued_first"], "the current sizes' variant must be the next job to run"
    # Every class loads a binary from the workers' cache entries: nothing compiled twice.
    assert got["loaded_cubins"] and all(got["loaded_cubins"]), got
    assert got["new_cache_files"] == 0, got
    assert got["forgot_current"] and len(got["pending_after_plan"]) == got["classes"] - 1, got


def test_the_current_sizes_build_here_and_the_rest_in_workers(tmp_path):
    got, _ = _run("split_builds", tmp_path)
    assert not got["errors"], got["errors"]
    assert got["n"] == got["classes"] and got["now_not_pending"] and got["now_in_parent"], got
    assert got["later_pending"] == got["classes"] - got["kernels"] > 0, got  # one class per kernel now
    assert got["new_cache_files"] == 0, got


def test_tiled_kernels_and_their_partials_build_in_workers(tmp_path):
    got, _ = _run("tiled_builds", tmp_path)
    assert not got["errors"] and got["failed"] == 0, got
    assert got["tiled"] >= 1 and got["split_jobs"] >= 1, got  # a split variant: two builds under one key
    assert got["n"] == got["classes"], got
    assert got["new_cache_files"] == 0, got  # the parent compiled nothing itself
    assert got["waits"]["taken"] == 0, got


def test_an_urgent_job_runs_next_and_a_job_is_submitted_once(tmp_path):
    got, _ = _run("urgent_first", tmp_path)
    assert not got["errors"], got
    assert got["order"][0] == 128 and got["order"][1] == 64, got["order"]
    assert sorted(got["order"]) == [64, 128, 256, 512, 1024] and got["same_future"], got


def test_exiting_while_builds_run_ends_the_workers_cleanly(tmp_path):
    got, r = _run("exit_while_building", tmp_path)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    for pid in got["pids"]:
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z", pid
    # The cache the killed builds left is sound: a new pool builds (or finds) everything.
    again, _ = _run("urgent_first", tmp_path)
    assert not again["errors"], again


def test_an_idle_pool_ends_its_workers_and_a_closed_pool_answers_its_waiters(tmp_path):
    got, _ = _run("idle_pool_ends", tmp_path)
    assert got["first_ok"] and got["broken"] and got["broken"].startswith("idle"), got
    assert all(got["gone"]), got
    assert all(got["answered"]), got  # queued jobs fail at close, so no waiter hangs


def test_a_dead_worker_fails_its_jobs_instead_of_hanging(tmp_path):
    got, _ = _run("worker_dies", tmp_path)
    assert got["errors"][0] and "exited" in got["errors"][0], got
    assert all(got["errors"]) and got["broken"] and "stopped" in got["late"], got


def test_threads_where_asked_for(monkeypatch):
    from compiler.codegen import triton_build
    monkeypatch.setenv("SYMSHAPE_BUILD_PROCESSES", "0")
    pool, why = triton_build.process_pool()
    assert pool is None and "SYMSHAPE_BUILD_PROCESSES=0" in why


def test_a_job_no_worker_started_is_taken_back(tmp_path):
    got, _ = _run("take_back", tmp_path)
    assert got["taken"] and not got["taken_running"] and got["queued_after"] == 2, got
    assert "taken back" in got["error"] and got["others_ok"], got


def test_a_bad_idle_time_names_the_variable(monkeypatch):
    from compiler.codegen import build_pool
    monkeypatch.setenv("SYMSHAPE_BUILD_IDLE_S", "2min")
    with pytest.raises(ValueError, match="SYMSHAPE_BUILD_IDLE_S='2min' is not a number of seconds"):
        build_pool.idle_seconds()
    monkeypatch.setenv("SYMSHAPE_BUILD_IDLE_S", "-5")
    assert build_pool.idle_seconds() == 0.0


def test_finished_builds_are_loaded_in_the_background_before_any_launch(tmp_path):
    got, _ = _run("preloads", tmp_path)
    assert not got["errors"] and not got["preload_errors"], got
    assert got["drained"] and got["submitted"] == got["classes"] == got["preloads"], got
    assert all(got["loaded"]), got


def test_preloading_is_off_with_symshape_preload_0(tmp_path):
    got, _ = _run("preloads", tmp_path, SYMSHAPE_PRELOAD="0")
    assert got["preloads"] == 0 and not any(got["loaded"]), got


def test_a_variant_traced_ahead_queues_its_builds_behind_the_first_variants(tmp_path):
    got, _ = _run("branch_variant_behind", tmp_path, SYMSHAPE_BUILD_WORKERS="1")
    assert got["variants"] == 2 and got["workers"] == 1, got
    assert got["first_queued"] and got["ahead_queued"], got
    assert got["behind"], got


def test_a_pool_is_replaced_when_the_triton_cache_dir_changes(tmp_path, monkeypatch):
    """Workers write the Triton cache of the environment they started in: after
    ``$TRITON_CACHE_DIR`` changes, their builds would land where no launch looks (the CUDA run of
    test_host_launchers_are_built_ahead... compiled two launchers in the main thread after other
    tests had started the pool), so the process gets a new pool and the old one ends."""
    from compiler.codegen import build_pool
    target = ("cuda", 90, 32)
    monkeypatch.setenv("SYMSHAPE_BUILD_WORKERS", "1")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "a"))
    a = build_pool.pool_for(target)
    try:
        assert build_pool.pool_for(target) is a and a.cache_dir == str(tmp_path / "a")
        monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "b"))
        b = build_pool.pool_for(target)
        assert b is not a and b.cache_dir == str(tmp_path / "b"), (a, b)
        assert a.broken and not a.workers, a.broken
        assert build_pool.pool_for(target) is b
    finally:
        build_pool.current_pool().close()
