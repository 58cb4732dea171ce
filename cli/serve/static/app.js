// The symshape page: asks the server's JSON API and draws the answers. No libraries.
"use strict";
const S = (window.symshape = { query: null, trace: null, dinfer: null, map: null, flops: null, verdict: null });
const $ = (id) => document.getElementById(id);
// One colour per row (outcome and output formula), well apart within each family.
const OK_COLORS = ["#2e9e4f", "#1f78b4", "#66c2a5", "#b2df8a", "#016c59", "#a6cee3"];
const ERR_COLORS = ["#d7301f", "#ff9f1c", "#8e0152", "#f781bf", "#8c510a", "#fdd835"];
const UNK_COLORS = ["#9e9ac8", "#bdbdbd", "#756bb1"];
const NONE_COLOR = "#ffffff";
// Seconds for the search behind the summary, map and verdicts (the server keeps it inside its --timeout).
const SEARCH_S = 60;
const hashToken = new URLSearchParams(location.hash.slice(1)).get("token");

async function api(path, body) {
  const headers = { "content-type": "application/json" };
  // The token typed in the page's field, else one given as #token=... in the address.
  const token = ($("token") && $("token").value.trim()) || hashToken;
  if (token) headers.authorization = "Bearer " + token;
  const r = await fetch(path, body === undefined ? { headers } : { method: "POST", headers, body: JSON.stringify(body) });
  const data = await r.json();
  if (!r.ok) throw new Error((data.error && data.error.message) || r.statusText);
  return data;
}

function status(text, isError) {
  $("status").textContent = text;
  $("status").className = isError ? "error" : "";
}

function parseDims(text) {
  const dims = {};
  for (const part of text.split(",").map((s) => s.trim()).filter(Boolean)) {
    const m = part.match(/^([A-Za-z_]\w*)\s*=\s*(\d+)\s*(\.\.\s*(\d+|inf)?)?$/);
    if (!m) throw new Error(`bad dim range ${JSON.stringify(part)}: write NAME=LO..HI or NAME=N`);
    dims[m[1]] = m[3] ? `${m[2]}..${m[4] || "inf"}` : Number(m[2]);
  }
  return dims;
}

function parseSizes(text) {
  const sizes = {};
  for (const part of text.split(",").map((s) => s.trim()).filter(Boolean)) {
    const m = part.match(/^([A-Za-z_]\w*)\s*=\s*(\d+)$/);
    if (!m) throw new Error(`bad size ${JSON.stringify(part)}: write NAME=N, e.g. B=2, T=129`);
    sizes[m[1]] = Number(m[2]);
  }
  return sizes;
}

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const k of kids) e.append(k);
  return e;
}

function rowColor(k, rows) {
  const r = rows[k];
  const fam = (x) => (x.ok === true ? 0 : x.ok === false ? 1 : 2);
  const i = rows.filter((x) => fam(x) === fam(r)).indexOf(r);
  const pal = [OK_COLORS, ERR_COLORS, UNK_COLORS][fam(r)];
  return pal[i % pal.length];
}

function classColor(cls, classes, rows) {
  if (rows && rows.length && cls.row !== null && cls.row !== undefined) return rowColor(cls.row, rows);
  const same = classes.filter((c) => (c.ok === true) === (cls.ok === true) && (c.ok === false) === (cls.ok === false));
  const i = same.indexOf(cls);
  const pal = cls.ok === true ? OK_COLORS : cls.ok === false ? ERR_COLORS : UNK_COLORS;
  return pal[i % pal.length];
}

function clearResults() {
  // Nothing of the previous program stays on screen: verdict, shapes, map, FLOPs.
  Object.assign(S, { trace: null, dinfer: null, map: null, flops: null, verdict: null });
  $("results").hidden = true;
  for (const id of ["shapes", "legend", "verdict", "valid-iff", "trace-note", "map-fixed", "flops-note", "flops-formula"]) {
    if ($(id)) $(id).replaceChildren();
  }
  $("guards").querySelector("tbody").replaceChildren();
  $("flops-plot").replaceChildren();
  const cv = $("grid");
  cv.getContext("2d").clearRect(0, 0, cv.width, cv.height);
  delete document.body.dataset.ready;
}

function currentQuery() {
  const inputs = $("inputs").value.split("\n").map((s) => s.trim()).filter(Boolean);
  return { program: $("program").value.trim(), factory: $("factory").checked, inputs, dims: parseDims($("dims").value) };
}

async function analyze() {
  let q;
  try {
    q = currentQuery();
  } catch (e) {
    return status(e.message, true);
  }
  clearResults();
  S.query = q;
  status("tracing…");
  try {
    S.trace = (await api("/api/trace", q)).result;
    renderTrace();
    $("results").hidden = false;
    status("searching valid sizes…");
    S.dinfer = (await api("/api/dinfer", Object.assign({}, q, { time_budget: SEARCH_S }))).result;
    setupDims();
    await drawMap();
    await drawFlops();
    status(`done: ${S.dinfer.classes.length} class(es), ${S.dinfer.complete ? "complete" : "incomplete"}`);
    document.body.dataset.ready = "1";
  } catch (e) {
    status(e.message, true);
  }
}

function renderTrace() {
  const t = S.trace;
  $("trace-note").textContent = t.note ? `Note: ${t.note}` : "";
  $("shapes").replaceChildren(...t.output_shapes.map((s, i) => el("li", {}, `output ${i}: `, el("code", {}, `[${s.join(", ")}]`))));
  const rows = t.guards.map((g) => el("tr", {}, el("td", {}, g.kind), el("td", {}, el("code", {}, g.expr)),
    el("td", {}, el("code", {}, g.user_expr)), el("td", {}, `${g.file}:${g.line} `, el("code", {}, g.code))));
  if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: "4" }, "none: every size in the ranges takes the same path")));
  $("guards").querySelector("tbody").replaceChildren(...rows);
  $("sizes").value = Object.entries(t.example_sizes).map(([k, v]) => `${k}=${v}`).join(", ");
}

function setupDims() {
  const dims = Object.keys(S.dinfer.dims).filter((d) => S.dinfer.dims[d][0] !== S.dinfer.dims[d][1]);
  for (const id of ["map-x", "map-y", "flops-dim"]) $(id).replaceChildren(...dims.map((d) => el("option", { value: d }, d)));
  // The axes: the dims the outcome depends on first, then the others in the specs' order.
  const dep = (S.dinfer.depends_on || []).filter((d) => dims.includes(d));
  const order = dep.concat(dims.filter((d) => !dep.includes(d)));
  if (order.length > 1) {  // y the earlier of the two in the specs, x the later
    const [a, b] = [order[0], order[1]].sort((u, v) => dims.indexOf(u) - dims.indexOf(v));
    $("map-x").value = b;
    $("map-y").value = a;
  }
  $("flops-dim").value = dims[dims.length - 1] || "";
  const summary = S.dinfer.summary || {};
  $("valid-iff").replaceChildren(el("code", {}, summary.valid_text || "(no summary)"));
}

function clip(d, n) {
  // The range asked for; only a dim without an upper end gets a window (said on the axis).
  const [lo, hi] = S.dinfer.dims[d];
  if (hi !== null) return [lo, hi];
  const vr = (S.dinfer.valid_ranges || {})[d];
  const top = vr && vr[1] !== null ? Math.max(vr[1] + Math.ceil((vr[1] - lo + 1) / 4), lo + n - 1) : lo + n - 1;
  return [lo, top];
}

function ticks(values, count) {
  // About ``count`` evenly spread labels, always the first and the last.
  const out = [];
  const step = Math.max(1, Math.round((values.length - 1) / Math.max(1, count - 1)));
  for (let i = 0; i < values.length; i += step) out.push(i);
  if (out[out.length - 1] !== values.length - 1) out.push(values.length - 1);
  return out;
}

async function drawMap() {
  const x = $("map-x").value, y = $("map-y").value;
  const cv = $("grid"), ctx = cv.getContext("2d");
  ctx.clearRect(0, 0, cv.width, cv.height);
  if (!x || !y || x === y) {
    $("legend").replaceChildren(el("li", {}, "pick two different dims (this program has fewer than two free dims)"));
    S.map = null;
    return;
  }
  const body = Object.assign({}, S.query, { x, y, cells: 48, x_range: clip(x, 48), y_range: clip(y, 48), time_budget: SEARCH_S });
  const m = (S.map = (await api("/api/map", body)).result);
  const byIndex = Object.fromEntries(m.classes.map((c) => [c.index, c]));
  const margin = 36, side = cv.width - margin;
  const cw = side / m.xs.length, ch = side / m.ys.length;
  S.cellCenter = (i, j) => ({ x: Math.floor(margin + (i + 0.5) * cw), y: Math.floor((m.ys.length - j - 0.5) * ch) });
  const rows = m.rows || [];
  m.cells.forEach((row, j) => row.forEach((idx, i) => {
    ctx.fillStyle = idx === null ? NONE_COLOR : classColor(byIndex[idx], m.classes, rows);
    ctx.fillRect(margin + i * cw, (m.ys.length - j - 1) * ch, Math.ceil(cw), Math.ceil(ch));
  }));
  ctx.fillStyle = "#1d2330";
  ctx.font = "10px sans-serif";
  S.ticks = { x: [], y: [] };
  for (const i of ticks(m.xs, 6)) {  // tick labels under the grid (x) and left of it (y)
    const px = Math.floor(margin + (i + 0.5) * cw);
    ctx.fillText(String(m.xs[i]), px - 6, side + 12);
    S.ticks.x.push(m.xs[i]);
  }
  for (const j of ticks(m.ys, 6)) {
    const py = Math.floor((m.ys.length - j - 0.5) * ch);
    ctx.fillText(String(m.ys[j]), 16, py + 4);
    S.ticks.y.push(m.ys[j]);
  }
  ctx.font = "11px sans-serif";
  ctx.fillText(`${x} →`, margin + side / 2, cv.height - 4);
  ctx.save();
  ctx.translate(10, side / 2);
  ctx.rotate(-Math.PI / 2);
  ctx.fillText(`${y} →`, 0, 0);
  ctx.restore();
  const shown = new Set(m.cells.flat());
  if (rows.length) {  // one legend entry per outcome and output formula
    const shownRows = new Set(m.classes.filter((c) => shown.has(c.index)).map((c) => c.row));
    $("legend").replaceChildren(...rows.map((r, k) => [r, k]).filter(([, k]) => shownRows.has(k)).map(([r, k]) =>
      el("li", { "data-row": String(k) }, el("span", { class: "sw", style: `background:${rowColor(k, rows)}` }),
        `${r.outcome}: `, el("code", {}, r.text), r.output ? ` → ${r.output}` : "")));
  } else {
    $("legend").replaceChildren(...m.classes.filter((c) => shown.has(c.index)).map((c) =>
      el("li", { "data-class": String(c.index) }, el("span", { class: "sw", style: `background:${classColor(c, m.classes)}` }),
        `${c.outcome}: `, el("code", {}, c.predicate))));
  }
  const fixed = Object.entries(m.fixed).map(([k, v]) => `${k}=${v}`).join(", ");
  $("map-fixed").textContent = fixed ? `(at ${fixed})` : "";
}

async function drawFlops() {
  const d = $("flops-dim").value;
  const svg = $("flops-plot");
  svg.replaceChildren();
  if (!d) return;
  const [lo, hi] = clip(d, 64);
  const n = Math.min(40, hi - lo + 1), pts = [];
  for (let i = 0; i < n; i++) {
    const v = Math.round(lo + (i * (hi - lo)) / Math.max(1, n - 1));
    if (!pts.length || pts[pts.length - 1][d] !== v) pts.push(Object.assign({}, S.trace.example_sizes, { [d]: v }));
  }
  const f = (S.flops = (await api("/api/flops", Object.assign({}, S.query, { points: pts }))).result);
  $("flops-formula").textContent = `FLOPs = ${f.formula}`;
  const others = Object.entries(S.trace.example_sizes).filter(([k]) => k !== d).map(([k, v]) => `${k}=${v}`).join(", ");
  $("flops-note").textContent = others ? `(at ${others})` : "";
  const vals = f.values.filter((v) => v.flops !== undefined);
  if (!vals.length) return;
  const W = 640, H = 240, L = 70, B = 30;
  const xs = vals.map((v) => v.sizes[d]), ys = vals.map((v) => v.flops);
  const x0 = Math.min(...xs), x1 = Math.max(...xs), y1 = Math.max(...ys, 1);
  const px = (v) => L + ((v - x0) / Math.max(1, x1 - x0)) * (W - L - 10);
  const py = (v) => H - B - (v / y1) * (H - B - 10);
  const ns = "http://www.w3.org/2000/svg";
  const mk = (tag, attrs, text) => {
    const e = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    svg.append(e);
  };
  mk("line", { x1: L, y1: H - B, x2: W - 10, y2: H - B, stroke: "#888" });
  mk("line", { x1: L, y1: 10, x2: L, y2: H - B, stroke: "#888" });
  mk("polyline", { points: vals.map((v) => `${px(v.sizes[d])},${py(v.flops)}`).join(" "), fill: "none", stroke: "#2e6bd1", "stroke-width": 2 });
  mk("text", { x: L, y: H - 8, "font-size": 11 }, `${d} = ${x0}`);
  mk("text", { x: W - 60, y: H - 8, "font-size": 11 }, `${d} = ${x1}`);
  mk("text", { x: 4, y: 16, "font-size": 11 }, y1.toExponential(2));
  mk("text", { x: 4, y: H - B, "font-size": 11 }, "0");
}

async function classify() {
  let sizes;
  try {
    sizes = parseSizes($("sizes").value);
  } catch (e) {
    return $("verdict").replaceChildren(el("span", { class: "bad" }, e.message));
  }
  $("verdict").textContent = "…";
  try {
    const r = (S.verdict = (await api("/api/classify", Object.assign({}, S.query, { sizes, time_budget: SEARCH_S }))).result);
    const head = r.valid === true ? el("span", { class: "ok" }, "valid") :
      r.valid === false ? el("span", { class: "bad" }, "invalid") : el("span", {}, "undecided");
    const parts = [head, ": ", r.reason];
    for (const g of r.failing_guards || []) {
      parts.push(el("div", { class: "failing" }, `fails ${g.kind} `, el("code", {}, g.expr), ` at ${g.file}:${g.line} `, el("code", {}, g.code)));
    }
    $("verdict").replaceChildren(...parts);
  } catch (e) {
    $("verdict").replaceChildren(el("span", { class: "bad" }, e.message));
  }
}

function usePreset() {
  const p = S.presets[$("preset").value];
  if (!p) return;
  $("program").value = p.program;
  $("factory").checked = !!p.factory;
  $("inputs").value = p.inputs.join("\n");
  $("dims").value = Object.entries(p.dims).map(([k, v]) => `${k}=${v}`).join(", ");
}

async function init() {
  $("run").addEventListener("click", analyze);
  $("classify").addEventListener("click", classify);
  $("map-x").addEventListener("change", () => drawMap().catch((e) => status(e.message, true)));
  $("map-y").addEventListener("change", () => drawMap().catch((e) => status(e.message, true)));
  $("flops-dim").addEventListener("change", () => drawFlops().catch((e) => status(e.message, true)));
  $("preset").addEventListener("change", usePreset);
  // A program typed by hand is no longer the example picked.
  $("program").addEventListener("input", () => { $("preset").value = ""; });
  try {
    S.presets = (await api("/api/examples")).examples;
    S.presets.forEach((p, i) => $("preset").append(el("option", { value: String(i) }, `${p.name} (${p.program})`)));
    if (S.presets.length) {
      $("preset").value = "0";
      usePreset();
    }
  } catch (e) {
    status(e.message, true);
  }
  document.body.dataset.loaded = "1";
}
init();
