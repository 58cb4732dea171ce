"""The HTML explanation report: one self-contained page.

Inline CSS and JavaScript only; the page loads nothing from the network (a
Content-Security-Policy forbids it), so it can be mailed, attached to CI runs
or opened from disk.  It shows the summary, the ``--at`` verdict, a table of
contents and one card per record with the user's source around the line
(the line highlighted).  Filters by dim, by kind and by "fails at the point"
hide cards; the filter state lives in the URL (``report.html#dim=B&kind=guard``
or ``?dim=B``), so a filtered view can be linked to.

Example::

    >>> import shapes, guards
    >>> tp = shapes.trace(lambda x: x.view(-1, 8), "x: f32[N]")
    >>> page = guards.explain(tp).html()
    >>> page.startswith("<!DOCTYPE html>") and 'data-kind="runtime_assert"' in page
    True
    >>> "http://" in page or "https://" in page
    False
"""
from __future__ import annotations

from html import escape

from typing import TYPE_CHECKING

from .render import short_path
from .suggestions import INPUT_SPEC, TORCH_OP, TORCH_PYTHON, USER_CODE

if TYPE_CHECKING:  # pragma: no cover
    from .explanation import Entry
    from .explanation import ExplanationModel as Explanation

_KIND_TITLE = {"guard": "guard", "runtime_assert": "runtime assert", "specialization": "specialization"}
_ORIGIN_TITLE = {USER_CODE: "your code", TORCH_OP: "inside torch (op)",
                 TORCH_PYTHON: "inside torch (Python)", INPUT_SPEC: "input spec"}

_CSS = """
:root { --fg:#1d2330; --muted:#5b6474; --bg:#f7f8fa; --card:#fff; --line:#dde1e7;
        --guard:#b35900; --ra:#0b63b6; --spec:#8a2be2; --bad:#c62828; --ok:#2e7d32; --hl:#fff3bf; }
* { box-sizing: border-box; }
body { margin:0; font:15px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif; color:var(--fg); background:var(--bg); }
code, pre, .mono { font-family: ui-monospace,"SFMono-Regular",Menlo,Consolas,monospace; font-size:13px; }
header { padding:14px 24px; background:#1d2330; color:#fff; }
header h1 { margin:0; font-size:20px; font-weight:600; }
header .sub { color:#c8cdd6; font-size:13px; }
.layout { display:flex; align-items:flex-start; }
nav#toc { position:sticky; top:0; width:280px; max-height:100vh; overflow:auto; padding:12px 16px;
          border-right:1px solid var(--line); background:#fff; flex:none; }
nav#toc h2 { font-size:13px; text-transform:uppercase; letter-spacing:.05em; color:var(--muted); margin:8px 0; }
nav#toc ol { list-style:none; padding:0; margin:0; }
nav#toc li { margin:2px 0; }
nav#toc a { color:var(--fg); text-decoration:none; display:block; padding:2px 6px; border-radius:4px;
            white-space:nowrap; overflow:hidden; text-overflow:ellipsis; }
nav#toc a:hover { background:var(--bg); }
main { flex:1; min-width:0; padding:16px 24px 48px; }
section.panel { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:12px 16px; margin-bottom:16px; }
section.panel h2 { font-size:16px; margin:0 0 8px; }
table { border-collapse:collapse; width:100%; }
th, td { text-align:left; padding:4px 8px; border-bottom:1px solid var(--line); vertical-align:top; }
th { color:var(--muted); font-weight:600; font-size:13px; }
.badge { display:inline-block; padding:0 8px; border-radius:10px; font-size:12px; font-weight:600; color:#fff; }
.badge.guard { background:var(--guard); } .badge.runtime_assert { background:var(--ra); }
.badge.specialization { background:var(--spec); } .badge.fails { background:var(--bad); }
.status-dynamic { color:var(--ok); font-weight:600; } .status-specialized { color:var(--spec); font-weight:600; }
.status-unified { color:var(--ra); font-weight:600; }
.verdict-ok { color:var(--ok); } .verdict-recompile, .verdict-runtime_error { color:var(--bad); }
#filters { display:flex; flex-wrap:wrap; gap:16px; align-items:center; }
#filters fieldset { border:none; margin:0; padding:0; display:flex; gap:10px; align-items:center; }
#filters legend { float:left; margin-right:6px; font-weight:600; }
#shown-count { color:var(--muted); margin-left:auto; }
article.record { background:var(--card); border:1px solid var(--line); border-left:4px solid var(--line);
                 border-radius:8px; padding:10px 16px; margin-bottom:14px; }
article.record.guard { border-left-color:var(--guard); } article.record.runtime_assert { border-left-color:var(--ra); }
article.record.specialization { border-left-color:var(--spec); }
article.record.fails { box-shadow:0 0 0 2px var(--bad); }
article.record h3 { margin:0 0 6px; font-size:16px; display:flex; gap:8px; align-items:center; flex-wrap:wrap; }
article.record h3 code { font-size:15px; }
dl { display:grid; grid-template-columns:110px 1fr; gap:2px 12px; margin:6px 0; }
dt { color:var(--muted); font-weight:600; font-size:13px; } dd { margin:0; }
pre.snippet { background:#fbfbfc; border:1px solid var(--line); border-radius:6px; padding:6px 0; margin:6px 0; overflow:auto; }
pre.snippet span.src { display:block; padding:0 10px; white-space:pre; }
pre.snippet span.src.hit { background:var(--hl); font-weight:600; }
pre.snippet span.ln { display:inline-block; width:48px; color:var(--muted); text-align:right; margin-right:12px; user-select:none; }
.suggest { background:#eef7ee; border-radius:6px; padding:6px 10px; }
details summary { cursor:pointer; color:var(--muted); font-size:13px; }
[hidden] { display:none !important; }
"""

_JS = r"""
(function () {
  "use strict";
  var records = Array.prototype.slice.call(document.querySelectorAll("article.record"));
  var tocItems = Array.prototype.slice.call(document.querySelectorAll("#toc li[data-record]"));
  var dimSel = document.getElementById("filter-dim");
  var kindBoxes = Array.prototype.slice.call(document.querySelectorAll("#filter-kind input[type=checkbox]"));
  var failBox = document.getElementById("filter-failing");
  var count = document.getElementById("shown-count");

  function state() {
    return {
      dim: dimSel.value,
      kinds: kindBoxes.filter(function (b) { return b.checked; }).map(function (b) { return b.value; }),
      failing: !!(failBox && failBox.checked)
    };
  }
  function visible(el, s) {
    var dims = (el.getAttribute("data-dims") || "").split(" ");
    if (s.dim && dims.indexOf(s.dim) < 0) return false;
    if (s.kinds.indexOf(el.getAttribute("data-kind")) < 0) return false;
    if (s.failing && el.getAttribute("data-fails") !== "true") return false;
    return true;
  }
  function apply(updateUrl) {
    var s = state(), shown = 0, byId = {};
    records.forEach(function (el) {
      var v = visible(el, s);
      el.hidden = !v;
      byId[el.id] = v;
      if (v) shown++;
    });
    tocItems.forEach(function (li) { li.hidden = !byId[li.getAttribute("data-record")]; });
    count.textContent = "showing " + shown + " of " + records.length;
    document.body.setAttribute("data-shown", String(shown));
    if (updateUrl) {
      var parts = [];
      if (s.dim) parts.push("dim=" + encodeURIComponent(s.dim));
      if (s.kinds.length !== kindBoxes.length) parts.push("kind=" + s.kinds.join(","));
      if (s.failing) parts.push("failing=1");
      try { history.replaceState(null, "", parts.length ? "#" + parts.join("&") : location.pathname + location.search); }
      catch (e) { /* file:// pages may refuse; the filter still applies */ }
    }
  }
  function fromUrl() {
    var raw = (location.hash.indexOf("=") >= 0 ? location.hash.slice(1) : "") || location.search.slice(1);
    if (!raw) return;
    raw.split("&").forEach(function (kv) {
      var i = kv.indexOf("="); if (i < 0) return;
      var k = kv.slice(0, i), v = decodeURIComponent(kv.slice(i + 1));
      if (k === "dim") {
        var ok = Array.prototype.some.call(dimSel.options, function (o) { return o.value === v; });
        dimSel.value = ok ? v : "";
      } else if (k === "kind") {
        var ks = v.split(",");
        kindBoxes.forEach(function (b) { b.checked = ks.indexOf(b.value) >= 0; });
      } else if (k === "failing" && failBox) {
        failBox.checked = v === "1" || v === "true";
      }
    });
  }
  dimSel.addEventListener("change", function () { apply(true); });
  kindBoxes.forEach(function (b) { b.addEventListener("change", function () { apply(true); }); });
  if (failBox) failBox.addEventListener("change", function () { apply(true); });
  window.addEventListener("hashchange", function () {
    if (location.hash.indexOf("=") >= 0) { fromUrl(); apply(false); }
  });
  fromUrl();
  apply(false);
  document.body.setAttribute("data-ready", "1");
})();
"""


def _e(s) -> str:
    return escape("" if s is None else str(s), quote=True)


def _range(lo, hi) -> str:
    return f"{'?' if lo is None else lo} .. {'∞' if hi is None else hi}"


def _summary(ex: Explanation) -> str:
    k, o = ex.counts["by_kind"], ex.counts["by_origin"]
    rows = []
    for d in ex.dims:
        why = _e(d.reason) if d.reason else ""
        if d.record is not None:
            why += f' (<a href="#r{d.record}">record #{d.record}</a>)'
        rows.append(
            f'<tr data-dim="{_e(d.name)}"><td class="mono"><b>{_e(d.name)}</b></td>'
            f'<td class="mono">{_e(", ".join(d.sources))}</td><td>{d.example}</td>'
            f'<td class="status-{_e(d.status)}">{_e(d.status)}</td><td class="mono">{_e(_range(*d.range))}</td>'
            f'<td>{why}</td></tr>')
    dims = ("<table id=\"dims\"><thead><tr><th>dim</th><th>source</th><th>example</th><th>status</th>"
            "<th>sizes covered</th><th>why</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
            if rows else "<p>No named dims.</p>")
    ops = "".join(f"<li><code>{_e(op)}</code>: {n}</li>" for op, n in ex.counts["by_op"].items())
    dd = ""
    if ex.data_dependent:
        dd = ("<h3>Data-dependent sizes</h3><ul>" + "".join(
            f"<li><code>{_e(u['name'])}</code>: {_e(u['what'])}</li>" for u in ex.data_dependent) + "</ul>")
    return f"""
<section class="panel" id="summary">
  <h2>Summary</h2>
  <p><b>Inputs:</b> {"; ".join(f"<code>{_e(i)}</code>" for i in ex.inputs)}
     &nbsp; <b>traced at</b> <code>{_e(", ".join(f"{n}={v}" for n, v in ex.example_sizes.items()))}</code></p>
  {dims}
  <table id="counts" style="margin-top:10px">
    <thead><tr><th>records</th><th>guards</th><th>specializations</th><th>runtime asserts</th>
      <th>your code</th><th>inside torch</th><th>input spec</th><th>decided statically</th></tr></thead>
    <tbody><tr><td>{ex.counts["total"]}</td><td>{k["guard"]}</td><td>{k["specialization"]}</td>
      <td>{k["runtime_assert"]}</td><td>{o[USER_CODE]}</td><td>{o[TORCH_OP] + o[TORCH_PYTHON]}</td>
      <td>{o[INPUT_SPEC]}</td><td>{ex.static_decisions} (no guard)</td></tr></tbody>
  </table>
  {f'<p><b>Inside torch, by op:</b></p><ul>{ops}</ul>' if ops else ''}
  {dd}
</section>"""


def _at(ex: Explanation) -> str:
    if ex.at is None:
        return ""
    at = ex.at
    point = ", ".join(f"{k}={v}" for k, v in at.point.items())
    items = "".join(f"<li>{_e(r)}</li>" for r in at.reasons)
    links = " ".join(f'<a href="#r{i}">#{i}</a>' for i in at.failing) or "none"
    return f"""
<section class="panel" id="at" data-verdict="{_e(at.verdict)}">
  <h2>At <code>{_e(point)}</code>: <span class="verdict-{_e(at.verdict)}">{_e(at.verdict.replace("_", " "))}</span></h2>
  <p>Failing records: {links}</p>
  <ul>{items}</ul>
</section>"""


def _snippet(e: Entry) -> str:
    if not e.snippet:
        return ""
    spans = []
    for i, line in enumerate(e.snippet):
        n = e.snippet_start + i
        cls = "src hit" if n == e.line else "src"
        spans.append(f'<span class="{cls}" data-line="{n}"><span class="ln">{n}</span>{_e(line)}</span>')
    return f'<pre class="snippet">{"".join(spans)}</pre>'


def _record(e: Entry) -> str:
    fails = "true" if e.fails_at_point else "false"
    cls = f"record {e.kind}" + (" fails" if e.fails_at_point else "")
    badge_fail = '<span class="badge fails">fails at the point</span>' if e.fails_at_point else ""
    if e.origin == INPUT_SPEC:
        where = "the input spec (the example size); no source line caused it"
    else:
        where = (f'<span class="mono" title="{_e(e.file)}">{_e(short_path(e.file))}:{e.line}</span>'
                 + (f" in <code>{_e(e.function)}</code>" if e.function else ""))
    rows = [
        ("in dims", f"<code>{_e(e.expr)}</code>"
         + (f' &nbsp; <span class="mono" style="color:var(--muted)">as traced: {_e(e.raw)}</span>'
            if e.raw != e.expr else "")),
        ("where", where),
        ("asked by", _e(e.origin_text)),
        ("decided", _e(e.decision_text)),
        ("cost", _e(e.cost_text)),
    ]
    if e.message:
        rows.append(("note", _e(e.message)))
    dl = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows)
    suggest = f'<p class="suggest"><b>Avoid it:</b> {_e(e.suggestion)}</p>' if e.suggestion else ""
    stack = ""
    if len(e.stack) > 1:
        stack = ("<details><summary>call stack (user frames)</summary><pre>"
                 + "\n".join(_e(s) for s in e.stack) + "</pre></details>")
    dims = " ".join(e.dims + e.data_dependent)
    return f"""
<article class="{cls}" id="r{e.index}" data-kind="{_e(e.kind)}" data-dims="{_e(dims)}" data-origin="{_e(e.origin)}" data-fails="{fails}">
  <h3><a href="#r{e.index}">#{e.index}</a> <span class="badge {_e(e.kind)}">{_e(_KIND_TITLE[e.kind])}</span>
      <code class="user-expr">{_e(e.user_expr)}</code> {badge_fail}</h3>
  <dl>{dl}</dl>
  {_snippet(e)}
  {suggest}
  {stack}
</article>"""


def _filters(ex: Explanation) -> str:
    names = [d.name for d in ex.dims] + [u["name"] for u in ex.data_dependent]
    opts = '<option value="">all dims</option>' + "".join(
        f'<option value="{_e(n)}">{_e(n)}</option>' for n in names)
    kinds = "".join(
        f'<label><input type="checkbox" value="{k}" checked> {_e(t)} ({ex.counts["by_kind"][k]})</label>'
        for k, t in _KIND_TITLE.items())
    failing = ('<label><input type="checkbox" id="filter-failing"> only records failing at the point</label>'
               if ex.at is not None else "")
    return f"""
<section class="panel" id="filters">
  <label><b>Dim</b> <select id="filter-dim">{opts}</select></label>
  <fieldset id="filter-kind"><legend>Kind</legend>{kinds}</fieldset>
  {failing}
  <span id="shown-count">showing {len(ex.entries)} of {len(ex.entries)}</span>
</section>"""


def _toc(ex: Explanation) -> str:
    items = "".join(
        f'<li data-record="r{e.index}"><a href="#r{e.index}" title="{_e(e.user_expr)}">'
        f'<span class="badge {_e(e.kind)}">#{e.index}</span> <span class="mono">{_e(e.expr)}</span></a></li>'
        for e in ex.entries)
    return f"""
<nav id="toc">
  <h2>Contents</h2>
  <ol><li><a href="#summary">Summary</a></li>{'<li><a href="#at">At the point</a></li>' if ex.at else ''}
      <li><a href="#filters">Filters</a></li></ol>
  <h2>Records</h2>
  <ol>{items or "<li>none</li>"}</ol>
</nav>"""


def render(ex: Explanation) -> str:
    """The whole page as a string."""
    records = "".join(_record(e) for e in ex.entries) or \
        '<p>No guards, specializations or runtime asserts: the trace covers every size in the dim ranges.</p>'
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<title>symshape explain: {_e(ex.program)}</title>
<style>{_CSS}</style>
</head>
<body>
<header><h1>symshape explain: <code>{_e(ex.program)}</code></h1>
<div class="sub">{_e("; ".join(ex.inputs))} &middot; {ex.counts["total"]} record(s)</div></header>
<div class="layout">
{_toc(ex)}
<main>
{_summary(ex)}
{_at(ex)}
{_filters(ex)}
<section id="records">{records}
</section>
</main>
</div>
<script>{_JS}</script>
</body>
</html>
"""
