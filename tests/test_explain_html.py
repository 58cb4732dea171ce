"""The HTML explanation report in a real headless browser (Debian's chromium).

Two ways in, both without extra dependencies:

* ``--dump-dom``: the DOM after the page's scripts ran (load, every record
  shown, a filter given in the URL applied);
* the DevTools protocol over ``--remote-debugging-pipe`` (NUL-separated JSON
  on file descriptors 3 and 4, no websocket needed): real mouse clicks on
  the filter checkboxes and on the contents links.

``.ci/run`` installs chromium when it is missing; these tests skip only when
no chromium binary can be found at all.
"""
import fcntl
import html.parser
import json
import os
import select
import shutil
import subprocess
import time

import pytest

import guards
import shapes
from tests import explain_programs as E
from tests import programs as P

_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM = next((p for p in map(shutil.which, _CANDIDATES) if p), None)
# A list: tests/conftest.py iterates over pytestmark.
pytestmark = [pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium binary on PATH (install Debian's chromium: apt-get install chromium; "
                             ".ci/run does this)")]

_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync",
          "--window-size=1280,900"]


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    d = tmp_path_factory.mktemp("html")
    several = guards.explain(shapes.trace(E.several, "x: f32[B, T]", "y: f32[C, D]",
                                          dims={"B": 8, "T": 32, "C": 1}, specialize_zero_one=True),
                             at={"B": 2, "T": 12, "C": 1, "D": 5})  # the 0/1 policy: one specialization
    conv = guards.explain(shapes.trace(P.ConvPool(), "x: f32[B, 3, H, W]"))
    out = {}
    for name, ex in (("several", several), ("conv", conv)):
        path = d / f"{name}.html"
        path.write_text(ex.html(), encoding="utf-8")
        out[name] = (ex, path)
    return out


class _Articles(html.parser.HTMLParser):
    """Collects <article class="record"> attributes and the text of #shown-count."""

    def __init__(self):
        super().__init__()
        self.articles, self.shown, self._in_count, self.body = [], "", False, {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "article":
            self.articles.append(a)
        elif tag == "body":
            self.body = a
        elif a.get("id") == "shown-count":
            self._in_count = True

    def handle_endtag(self, tag):
        self._in_count = False

    def handle_data(self, data):
        if self._in_count:
            self.shown += data


def dump_dom(url, tmp_path):
    proc = subprocess.run([CHROMIUM, *_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", url],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    p = _Articles()
    p.feed(proc.stdout)
    return p, proc.stdout


def test_page_loads_and_shows_every_record(reports, tmp_path):
    ex, path = reports["conv"]
    dom, text = dump_dom(path.as_uri(), tmp_path)
    assert dom.body.get("data-ready") == "1"  # the script ran to the end
    assert [a["id"] for a in dom.articles] == [f"r{e.index}" for e in ex.entries]
    assert len(dom.articles) == len(ex.entries) >= 2
    assert not any("hidden" in a for a in dom.articles)
    assert dom.shown == f"showing {len(ex.entries)} of {len(ex.entries)}"
    for e in ex.entries:
        assert html_text(e.user_expr) in text
    # The user's line is highlighted in its snippet.
    assert 'class="src hit" data-line="%d"' % ex.entries[0].line in text


def html_text(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def test_filter_in_the_url_is_applied(reports, tmp_path):
    ex, path = reports["several"]
    kinds = {e.index: e.kind for e in ex.entries}
    assert sorted(kinds.values()) == ["guard", "runtime_assert", "specialization"]
    dom, _ = dump_dom(path.as_uri() + "#dim=T", tmp_path)
    visible = [a["id"] for a in dom.articles if "hidden" not in a]
    assert visible == [f"r{e.index}" for e in ex.entries if "T" in e.dims] and len(visible) == 1
    assert dom.shown == f"showing 1 of {len(ex.entries)}"
    dom, _ = dump_dom(path.as_uri() + "?kind=guard,specialization", tmp_path)
    visible = [a["id"] for a in dom.articles if "hidden" not in a]
    assert visible == [f"r{e.index}" for e in ex.entries if e.kind != "runtime_assert"]
    dom, _ = dump_dom(path.as_uri() + "#failing=1", tmp_path)
    visible = [a["id"] for a in dom.articles if "hidden" not in a]
    assert visible == [f"r{i}" for i in ex.at.failing] and len(visible) == 2


class Browser:
    """Chromium driven through the DevTools protocol on a pipe (fds 3 and 4)."""

    def __init__(self, url, profile):
        cmd_r, cmd_w = os.pipe()
        res_r, res_w = os.pipe()
        # Move the child's ends above 10 so that placing them on 3 and 4 cannot clobber each other.
        hi = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (cmd_r, res_w)]

        def child():
            os.dup2(hi[0], 3)
            os.dup2(hi[1], 4)

        self.proc = subprocess.Popen(
            [CHROMIUM, *_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-pipe", url],
            close_fds=False, preexec_fn=child, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for fd in (cmd_r, res_w, *hi):
            os.close(fd)
        self.w, self.r, self.buf, self.n = cmd_w, res_r, b"", 0
        page = next(t for t in self.send("Target.getTargets")["targetInfos"] if t["type"] == "page")
        self.session = self.send("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True})["sessionId"]
        self.wait_for("document.body && document.body.getAttribute('data-ready') === '1'")

    def send(self, method, params=None, session=None, timeout=30):
        self.n += 1
        msg = {"id": self.n, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self.buf:
                raw, self.buf = self.buf.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self.n:
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error']}")
                    return reply["result"]
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no reply to {method} in {timeout}s")
            if select.select([self.r], [], [], left)[0]:
                chunk = os.read(self.r, 1 << 16)
                if not chunk:
                    raise RuntimeError("chromium closed the DevTools pipe")
                self.buf += chunk

    def eval(self, expr):
        r = self.send("Runtime.evaluate", {"expression": expr, "returnByValue": True}, session=self.session)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, expr, timeout=20):
        deadline = time.monotonic() + timeout
        while not self.eval(expr):
            if time.monotonic() > deadline:
                raise TimeoutError(expr)
            time.sleep(0.05)

    def click(self, selector):
        """A real mouse click at the centre of the element."""
        x, y = self.eval(f"""(function () {{
            var el = document.querySelector({json.dumps(selector)});
            el.scrollIntoView({{block: "center"}});
            var r = el.getBoundingClientRect();
            return [r.x + r.width / 2, r.y + r.height / 2]; }})()""")
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left",
                                                   "clickCount": 1}, session=self.session)

    def visible_records(self):
        return self.eval("Array.prototype.filter.call(document.querySelectorAll('article.record'),"
                         " function (a) { return !a.hidden && a.offsetParent !== null; })"
                         ".map(function (a) { return a.id; })")

    def close(self):
        try:
            self.send("Browser.close", timeout=5)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.w)
        os.close(self.r)


@pytest.fixture
def browser(reports, tmp_path):
    opened = []

    def open_(name):
        b = Browser(reports[name][1].as_uri(), tmp_path / f"profile{len(opened)}")
        opened.append(b)
        return b

    yield open_
    for b in opened:
        b.close()


def test_clicking_the_filters(reports, browser):
    ex, _ = reports["several"]
    b = browser("several")
    every = [f"r{e.index}" for e in ex.entries]
    assert b.visible_records() == every
    guard = next(e for e in ex.entries if e.kind == "guard")
    # Untick "guard": the guard's card and its contents entry disappear, nothing else.
    b.click('#filter-kind input[value="guard"]')
    assert b.visible_records() == [r for r in every if r != f"r{guard.index}"]
    assert b.eval(f"document.querySelector('#toc li[data-record=\"r{guard.index}\"]').hidden") is True
    assert b.eval("document.getElementById('shown-count').textContent") == f"showing {len(every) - 1} of {len(every)}"
    assert b.eval("location.hash") == "#kind=runtime_assert,specialization"
    b.click('#filter-kind input[value="guard"]')
    assert b.visible_records() == every
    # Pick a dim: only records about it stay.
    b.eval("var s = document.getElementById('filter-dim'); s.value = 'C';"
           " s.dispatchEvent(new Event('change')); true")
    assert b.visible_records() == [f"r{e.index}" for e in ex.entries if "C" in e.dims]
    b.eval("var s = document.getElementById('filter-dim'); s.value = '';"
           " s.dispatchEvent(new Event('change')); true")
    # Only the records that fail at the --at point.
    b.click("#filter-failing")
    assert b.visible_records() == [f"r{i}" for i in ex.at.failing]
    # Nothing was fetched from anywhere: the page is self-contained.
    assert b.eval("performance.getEntriesByType('resource').length") == 0


def test_contents_links_navigate(reports, browser):
    ex, _ = reports["conv"]
    b = browser("conv")
    last = ex.entries[-1].index
    b.click(f'#toc a[href="#r{last}"]')
    b.wait_for(f"location.hash === '#r{last}'")
    # The card is scrolled into view and every card is still shown (an anchor is not a filter).
    top = b.eval(f"document.getElementById('r{last}').getBoundingClientRect().top")
    assert 0 <= top < 900
    assert len(b.visible_records()) == len(ex.entries)
