"""``symshape serve``: the real server on a free loopback port, every endpoint, misbehaving programs,
the token, and the web page in headless Chromium (Playwright driving Debian's chromium).

The answers are compared with the engine run in this process and with eager
PyTorch on real tensors (FlopCounterMode for FLOPs).  One server serves the
whole module (about 20 s to start on a busy machine); the tests take about
a minute in all.
"""
import os
import shutil
import time

import pytest
import torch

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from cli.serve.launch import request, running_server  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKEN = "test-token-123456"
ROWS = {"program": "tests/serve_programs.py:rows_of_four", "inputs": ["x: f32[N]"], "dims": {"N": "1..64"}}
GRID = {"program": "tests/serve_programs.py:grid", "inputs": ["x: f32[H, W]"], "dims": {"H": "1..24", "W": "1..24"}}


@pytest.fixture(scope="module")
def server():
    with running_server(ROOT, timeout=120, workers=2, memory_mb=1024, token=TOKEN) as url:
        yield url


def call(url, method, path, body=None, token=TOKEN, timeout=120):
    status, answer, _ = request(url, method, path, body, token=token, timeout=timeout)
    assert answer is not None, f"{method} {path} answered {status} without JSON"
    return status, answer


def post(url, path, body, **kw):
    return call(url, "POST", path, body, **kw)


def _eager_ok(fn, *shapes):
    try:
        fn(*[torch.randn(*s) for s in shapes])
        return True
    except Exception:
        return False


# --------------------------------------------------------------------------- endpoints


def test_health_examples_and_openapi(server):
    st, h = call(server, "GET", "/api/health")
    assert st == 200 and h["ok"] and h["workers"] == 2 and h["roots"] == [os.path.realpath(ROOT)]
    st, ex = call(server, "GET", "/api/examples")
    names = {e["name"] for e in ex["examples"]}
    assert {"mlp", "gpt2", "pad_to_multiple"} <= names
    assert next(e for e in ex["examples"] if e["name"] == "mlp")["program"] == "examples/mlp.py:MLP"
    st, spec = call(server, "GET", "/openapi.json")
    assert st == 200
    for p in ("/api/trace", "/api/explain", "/api/dinfer", "/api/flops", "/api/check", "/api/classify", "/api/map"):
        assert "post" in spec["paths"][p], p


def test_trace_matches_the_engine_and_is_cached(server):
    import shapes
    from guards.render import to_python
    from tests import serve_programs as SP
    st, r = post(server, "/api/trace", GRID)
    assert st == 200 and r["cached"] is False, r
    tp = shapes.trace(SP.grid, "x: f32[H, W]", dims={"H": (1, 24), "W": (1, 24)})
    assert r["result"]["output_shapes"] == [[to_python(e) for e in s] for s in tp.output_shapes]
    # Each condition as people read it (solved per dim: W // 2 != 0 is W >= 2).
    from guards.render import render_guard
    assert [(g["expr"], g["line"]) for g in r["result"]["guards"]] == \
        [(render_guard(g, tp.env, user_terms=False), g.lineno) for g in tp.records]
    assert all(g["file"] == "tests/serve_programs.py" for g in r["result"]["guards"])
    st, again = post(server, "/api/trace", GRID)
    assert st == 200 and again["cached"] is True and again["result"] == r["result"]


def test_explain(server):
    st, r = post(server, "/api/explain", dict(ROWS, at={"N": 6}))
    assert st == 200
    rep = r["result"]
    assert rep["at"]["verdict"] == "runtime_error"
    assert any(e["expr"] == "N % 4 == 0" and e["source"]["line"] == 10 for e in rep["records"])


def test_dinfer_and_classify_agree_with_eager(server):
    from tests import serve_programs as SP
    st, r = post(server, "/api/dinfer", GRID)
    assert st == 200 and r["result"]["complete"], r
    assert r["result"]["valid_iff"]
    for h, w in [(1, 2), (3, 4), (3, 5), (8, 2), (24, 24), (5, 1)]:
        st, c = post(server, "/api/classify", dict(GRID, sizes={"H": h, "W": w}))
        assert st == 200, c
        res = c["result"]
        assert res["valid"] == _eager_ok(SP.grid, (h, w)), (h, w, res)
        if not res["valid"]:
            assert res["error"]["file"] == "tests/serve_programs.py" and res["error"]["line"] > 0
            assert res["error"]["type"] in res["reason"]


def test_classify_names_the_failing_guard(server):
    st, c = post(server, "/api/classify", dict(ROWS, sizes={"N": 6}))
    assert st == 200 and c["result"]["valid"] is False
    [g] = c["result"]["failing_guards"]
    assert g["expr"] == "N % 4 == 0" and g["line"] == 10 and "view" in g["code"]


def test_map_cells_match_eager(server):
    from tests import serve_programs as SP
    st, r = post(server, "/api/map", dict(GRID, x="W", y="H", cells=12))
    assert st == 200, r
    m = r["result"]
    assert m["xs"] == sorted(m["xs"]) and len(m["cells"]) == len(m["ys"]) and len(m["cells"][0]) == len(m["xs"])
    ok = {c["index"]: c["ok"] for c in m["classes"]}
    for j, h in enumerate(m["ys"]):
        for i, w in enumerate(m["xs"]):
            assert ok[m["cells"][j][i]] == _eager_ok(SP.grid, (h, w)), (h, w)


def test_flops_match_flop_counter(server):
    from torch.utils.flop_counter import FlopCounterMode

    from tests import serve_programs as SP
    q = {"program": "tests/serve_programs.py:matmul", "inputs": ["a: f32[M, K]", "b: f32[K, N]"],
         "points": [{"M": 3, "K": 5, "N": 7}, {"M": 64, "K": 2, "N": 9}]}
    st, r = post(server, "/api/flops", q)
    assert st == 200, r
    assert r["result"]["formula"] == "2*K*M*N"
    for v in r["result"]["values"]:
        s = v["sizes"]
        with FlopCounterMode(display=False) as fc:
            SP.matmul(torch.randn(s["M"], s["K"]), torch.randn(s["K"], s["N"]))
        assert v["flops"] == fc.get_total_flops()


def test_check_endpoint(server):
    q = {"program": "examples/mlp.py:MLP", "inputs": ["x: f32[B, T, 64]"], "dims": {"B": "1..8", "T": "1..64"},
         "output": ["B", "T", 64], "valid": True, "flops": "65536*B*T", "max_guards": 0}
    st, r = post(server, "/api/check", q)
    assert st == 200 and r["result"]["ok"], r
    st, r = post(server, "/api/check", dict(q, flops="1000*B*T"))
    assert st == 200 and not r["result"]["ok"]
    [f] = [f for f in r["result"]["findings"] if f["status"] != "pass"]
    assert f["expectation"] == "flops" and f["counterexample"]
    st, r = post(server, "/api/check", {k: q[k] for k in ("program", "inputs")})
    assert st == 400 and "expectation" in r["error"]["message"]


# --------------------------------------------------------------------------- limits and isolation


def test_bad_requests_are_json_errors(server):
    st, r = post(server, "/api/trace", {"program": 5})
    assert st == 400 and r["error"]["kind"] == "bad_request" and "program" in r["error"]["message"]
    st, r = post(server, "/api/trace", {"program": "../../etc/passwd.py:x", "inputs": ["x: f32[N]"]})
    assert st == 404 and r["error"]["kind"] == "not_found"
    st, r = post(server, "/api/trace", {"program": "/etc/hostname.py:x", "inputs": ["x: f32[N]"]})
    assert st == 404
    st, r = post(server, "/api/trace", dict(ROWS, inputs=["x: f99[N]"]))
    assert st == 422 and "dtype" in r["error"]["message"]
    st, r = post(server, "/api/trace", dict(ROWS, dims={"N": "9..3"}))
    assert st == 400
    st, r = post(server, "/api/map", dict(ROWS, x="N", y="Q"))
    assert st == 400 and "not a dim" in r["error"]["message"]
    st, r = post(server, "/api/trace", dict(ROWS, inputs=["x: f32[N]"] * 10, program="x" * 300_000))
    assert st == 413 and r["error"]["kind"] == "too_large"
    st, r = post(server, "/api/trace", ROWS, token=None)
    assert st == 401 and r["error"]["kind"] == "unauthorized"
    st, r = post(server, "/api/trace", ROWS, token="wrong-token-000000")
    assert st == 401


def test_misbehaving_programs_never_take_the_server_down(server):
    def q(name):
        return {"program": f"tests/serve_programs.py:{name}", "inputs": ["x: f32[N]"]}
    st, r = post(server, "/api/trace", q("raises"))
    assert st == 422 and "always raises" in r["error"]["message"]
    st, r = post(server, "/api/trace", q("exits_politely"))
    assert st == 422 and r["error"]["kind"] == "program_exit" and "sys.exit(3)" in r["error"]["message"]
    st, r = post(server, "/api/trace", q("exits_hard"))
    assert st == 422 and r["error"]["kind"] == "exited" and "status 7" in r["error"]["message"]
    st, r = post(server, "/api/trace", q("eats_memory"))
    assert st == 422 and r["error"]["kind"] in ("memory", "program_error"), r
    t0 = time.time()
    st, r = post(server, "/api/trace", dict(q("loops_forever"), timeout=3))
    assert st == 504 and r["error"]["kind"] == "timeout" and "3 s" in r["error"]["message"]
    assert time.time() - t0 < 60
    st, r = post(server, "/api/trace", dict(ROWS, dims={"N": "1..32"}))
    assert st == 200 and r["result"]["output_shapes"] == [["N // 4", "4"]]
    st, h = call(server, "GET", "/api/health")
    assert h["worker_stats"]["timeouts"] >= 1 and h["worker_stats"]["exits"] >= 1


def test_binding_off_loopback_needs_a_token(capsys):
    from cli.main import main
    assert main(["serve", "--host", "0.0.0.0", "--port", "0"]) == 2
    assert "--token" in capsys.readouterr().err


# --------------------------------------------------------------------------- the page

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (.ci/run installs Debian's chromium)")
def test_page_in_headless_chromium(server, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    from tests import serve_programs as SP
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.goto(f"{server}/#token={TOKEN}")
            page.wait_for_selector("body[data-loaded='1']")
            assert page.locator("#preset option").count() >= 4  # the contract entries of examples/
            page.fill("#program", GRID["program"])
            page.uncheck("#factory")
            page.fill("#inputs", "x: f32[H, W]")
            page.fill("#dims", "H=1..24, W=1..24")
            page.click("#run")
            page.wait_for_selector("body[data-ready='1']", timeout=120_000)
            assert page.inner_text("#shapes") == "output 0: [H - 2, W // 2]"
            rows = page.locator("#guards tbody tr")
            assert rows.count() >= 1 and "tests/serve_programs.py:" in rows.first.inner_text()
            # The grid: each cell's colour is green-ish where eager runs, red-ish where it raises.
            state = page.evaluate("() => ({map: symshape.map})")["map"]
            assert state["x"] == "W" and state["y"] == "H"
            for j in range(0, len(state["ys"]), 5):
                for i in range(0, len(state["xs"]), 5):
                    h, w = state["ys"][j], state["xs"][i]
                    r, g, b = page.evaluate(
                        "([i, j]) => { const c = symshape.cellCenter(i, j);"
                        " return Array.from(document.getElementById('grid').getContext('2d')"
                        ".getImageData(c.x, c.y, 1, 1).data.slice(0, 3)); }", [i, j])
                    green = g > r
                    assert green == _eager_ok(SP.grid, (h, w)), (h, w, (r, g, b))
            assert page.locator("#legend li").count() >= 2
            assert page.inner_text("#flops-formula").startswith("FLOPs = ")
            assert page.locator("#flops-plot polyline").count() == 1
            page.fill("#sizes", "H=5, W=3")
            page.click("#classify")
            page.wait_for_selector("#verdict .bad")
            verdict = page.inner_text("#verdict")
            assert verdict.startswith("invalid") and "tests/serve_programs.py:" in verdict
            page.fill("#sizes", "H=5, W=6")
            page.click("#classify")
            page.wait_for_selector("#verdict .ok")
            shot = tmp_path / "symshape-page.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
            print(f"screenshot: {shot}")
        finally:
            browser.close()


CNN = {"program": "tests/reading_programs.py:SmallCNN", "inputs": ["img: f32[B, 3, H, W]"],
       "dims": "B=1..4, H=1..48, W=1..48"}


def _analyze(page, program, inputs, dims):
    page.fill("#program", program)
    page.uncheck("#factory")
    page.fill("#inputs", inputs)
    page.fill("#dims", dims)
    page.click("#run")
    page.wait_for_selector("body[data-ready='1']", timeout=180_000)


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (.ci/run installs Debian's chromium)")
def test_page_second_program_keeps_nothing_of_the_first(server):
    """Token typed into the page's field; GRID then the CNN: no stale verdict or result; the CNN
    (whose example sizes fail) is analysed at sizes that run; the map's axes are the dims the
    outcome depends on over the ranges asked, with tick labels and one colour per outcome row."""
    sync_api = pytest.importorskip("playwright.sync_api")
    import re
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.goto(server)  # no #token=: the field is the way in
            page.wait_for_selector("body[data-loaded='1']")
            page.fill("#token", TOKEN)
            _analyze(page, GRID["program"], "x: f32[H, W]", "H=1..24, W=1..24")
            page.fill("#sizes", "H=5, W=3")
            page.click("#classify")
            page.wait_for_selector("#verdict .bad")
            page.fill("#program", CNN["program"])
            assert page.input_value("#preset") == ""  # a typed program is no longer the example
            page.fill("#inputs", CNN["inputs"][0])
            page.fill("#dims", CNN["dims"])
            page.click("#run")
            # The moment a new analysis starts, nothing of the first is on screen.
            assert page.inner_text("#verdict") == "" and page.is_hidden("#results")
            page.wait_for_selector("body[data-ready='1']", timeout=180_000)
            assert page.inner_text("#verdict") == ""
            assert page.inner_text("#shapes") == "output 0: [B, 10]"
            assert "traced at sizes that run" in page.inner_text("#trace-note")
            # (the page's search has 20 s: on a busy machine it may not reach B == 1, hence "in")
            valid = page.inner_text("#valid-iff")
            assert valid.startswith("valid iff ") and "28 <= H <= 31 and 28 <= W <= 31" in valid, valid
            m = page.evaluate("() => symshape.map")
            assert (m["y"], m["x"]) == ("H", "W")  # the dims the outcome depends on, not B
            assert m["xs"][0] == 1 and m["xs"][-1] == 48 and m["ys"][0] == 1 and m["ys"][-1] == 48  # no zoom
            ticks = page.evaluate("() => symshape.ticks")
            assert ticks["x"][0] == 1 and ticks["x"][-1] == 48 and len(ticks["x"]) >= 4
            legend = page.locator("#legend li")
            assert legend.count() == 3  # valid, the Linear's error, the pool's error: one entry each
            colours = {legend.nth(i).locator(".sw").get_attribute("style") for i in range(3)}
            assert len(colours) == 3
            body = page.inner_text("body")
            assert not re.search(r"(?<![=\w])(True|False)\b|\bu\d+\b|Eq\(|Mod\(", body), body
        finally:
            browser.close()


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (.ci/run installs Debian's chromium)")
def test_docs_page_works_offline(server):
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page()
            outside = []

            def only_the_server(route):
                if route.request.url.startswith(server):
                    return route.continue_()
                outside.append(route.request.url)
                return route.abort()
            page.route("**/*", only_the_server)
            page.goto(f"{server}/docs")
            page.wait_for_selector("section.endpoint")
            heads = page.locator("section.endpoint h2").all_inner_texts()
            for path in ("/api/trace", "/api/dinfer", "/api/map", "/api/classify"):
                assert f"POST {path}" in heads, heads
            assert outside == []
        finally:
            browser.close()


def test_time_budget_is_clamped_below_the_timeout(server):
    # A search asked for 500 s in a 20 s request answers partially (no 504): the server keeps the
    # budget inside the worker's time limit.
    body = {"program": CNN["program"], "inputs": CNN["inputs"], "dims": {"B": "1..4", "H": "1..4096", "W": "1..4096"},
            "time_budget": 500, "timeout": 20}
    st, r = post(server, "/api/dinfer", body)
    assert st == 200, r
    assert r["result"]["time_s"] < 20 and r["result"]["classes"]
