"""What a worker process computes for each endpoint; runs the user's program, so never in the server.

Each task takes the request's JSON (already validated by the server, with
the program resolved to an absolute path inside the roots and its source
hash) and returns a JSON-ready dict.  Programs, traces and dinfer results
are cached here by source hash + specs + dims, so a classify or map
request after a dinfer on the same question reuses the search.

Example (in-process, as a worker runs it)::

    >>> import os
    >>> q = {"program": os.path.abspath("examples/mlp.py") + ":tokens_to_blocks",
    ...      "source_hash": "doctest", "inputs": ["x: f32[B, T, 64]"], "dims": {"T": [1, 64]}}
    >>> r = run_task("trace", q)
    >>> r["output_shapes"], [g["expr"] for g in r["guards"]][:1]
    ([['B', 'T // 8', '64']], ['T <= 16'])
"""
from __future__ import annotations

import math
from collections import OrderedDict

import z3

from shapes.errors import SymshapeError

_CACHE: "OrderedDict[tuple, object]" = OrderedDict()
_CACHE_SIZE = 64


def _cached(key, make):
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    v = make()
    _CACHE[key] = v
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return v


def _dims(q) -> dict:
    out = {}
    for k, v in (q.get("dims") or {}).items():
        if isinstance(v, list):
            out[k] = (v[0], math.inf if v[1] is None else v[1])
        else:
            out[k] = v
    return out


def _qkey(q) -> tuple:
    dims = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in (q.get("dims") or {}).items()))
    return (q["program"], q.get("source_hash"), bool(q.get("factory")), tuple(q["inputs"]), dims)


def _program(q):
    from cli.contracts import load_target
    key = ("program", q["program"], q.get("source_hash"), bool(q.get("factory")))
    # The server resolved the path inside its roots (a file target is absolute by now).
    return _cached(key, lambda: load_target(q["program"], q.get("roots") or ["/"], bool(q.get("factory")), None,
                                            restrict=False))


def _traced(q):
    from cli.loader import trace_for

    def make():
        prog = _program(q)
        points = [dict(q["at"])] if isinstance(q.get("at"), dict) else []
        return trace_for(prog, q["inputs"], _dims(q), points)
    return _cached(("trace",) + _qkey(q), make)


def _space(q, budget: float, max_classes: int = 64):
    from validation.dinfer import dinfer

    def make():
        sp = dinfer(_program(q), *q["inputs"], dims=_dims(q), time_budget=budget, max_classes=max_classes)
        sp.program_name = q.get("display", q["program"])
        return sp
    return _cached(("dinfer", budget, max_classes) + _qkey(q), make)


def _loc(filename, q):
    """A source path relative to the project root that holds it (the page shows it), else shortened."""
    import os
    from guards.explain import short_path
    if filename and os.path.isabs(filename):
        real = os.path.realpath(filename)
        for root in q.get("roots") or ():
            root = os.path.realpath(root)
            if os.path.commonpath([real, root]) == root:
                return os.path.relpath(real, root)
    return short_path(filename)


# --------------------------------------------------------------------------- tasks


def task_trace(q) -> dict:
    from guards.render import render_guard, to_python
    from shapes.data_names import data_names
    tp = _traced(q)
    return {
        "inputs": [str(s) for s in tp.specs],
        "example_sizes": dict(tp.hints),
        "note": getattr(tp, "searched_note", None),
        "output_shapes": [[to_python(e, data_names(tp.env)) for e in s] for s in tp.output_shapes],
        "guards": [{"kind": g.kind.value, "expr": render_guard(g, tp.env, user_terms=False),
                    "user_expr": render_guard(g, tp.env), "file": _loc(g.filename, q), "line": g.lineno,
                    "code": (g.code or "").strip(), "op": g.op} for g in tp.records],
    }


def task_explain(q) -> dict:
    from guards.explain import explain
    ex = explain(_traced(q), at=q.get("at") or None)
    ex.program = q.get("display", q["program"])
    return ex.to_dict()


def valid_iff(sp) -> str:
    """dinfer's ``valid iff`` summary when it has one, else the region the contract checker states."""
    from validation.contracts.valid import valid_region_text
    return valid_region_text(sp)


def depends_on(sp) -> list:
    """The dims the outcome depends on: those the summary's rows name, in the specs' order."""
    rows = sp.summary.rows if sp.summary is not None else []
    named = {s.name for r in rows for conj in r.region.dnf for c in conj for s in c.free_symbols}
    return [n for n in sp.dims if n in named]


def _row_of(sp) -> dict:
    """Class index -> the index of its row (one per outcome and output formula)."""
    rows = sp.summary.rows if sp.summary is not None else []
    return {i: k for k, r in enumerate(rows) for i in r.region.classes}


def task_dinfer(q) -> dict:
    sp = _space(q, float(q.get("time_budget", 20.0)), int(q.get("max_classes", 64)))
    d = sp.to_dict()
    d["depends_on"] = depends_on(sp)
    try:
        d["valid_iff"] = valid_iff(sp)
    except (SymshapeError, z3.Z3Exception) as e:  # the summary is extra; the classes stand without it
        d["valid_iff"] = None
        d["warnings"] = d.get("warnings", []) + [f"no valid-iff summary: {type(e).__name__}: {e}"]
    return d


def task_flops(q) -> dict:
    from guards.render import to_python
    from shapes.flops import count_flops
    tp = _traced(q)
    rep = _cached(("flops",) + _qkey(q), lambda: count_flops(tp))
    d = rep.to_dict()
    d["formula"] = to_python(rep.total)
    d["bytes_formula"] = to_python(rep.total_bytes)
    values = []
    for pt in q.get("points") or []:
        try:
            v = rep.at(pt)
            values.append({"sizes": v.sizes, "flops": v.flops, "bytes": v.bytes})
        except SymshapeError as e:  # a point outside the trace's class: say so for that point only
            values.append({"sizes": pt, "error": " ".join(str(e).split())})
    d["values"] = values
    return d


def _failing_guards(q, sizes):
    """Records of the default trace that are false at ``sizes``, with their user lines."""
    from guards.explain import explain
    try:
        ex = explain(_traced(q), at=sizes)
    except SymshapeError:  # sizes the trace cannot take (bad --at, a failed trace): no guard to name
        return []
    at = ex.at
    if at is None:
        return []
    out = []
    for i in at.failing:
        e = ex.entries[i]
        out.append({"kind": e.kind, "expr": e.expr, "user_expr": e.user_expr, "file": _loc(e.file, q), "line": e.line,
                    "code": e.code.strip(), "suggestion": e.suggestion})
    return out


def task_classify(q) -> dict:
    sp = _space(q, float(q.get("time_budget", 20.0)))
    sizes = dict(q["sizes"])
    try:
        c = sp.classify(sizes)
    except ValueError as e:
        raise UserError(str(e))
    out = {"sizes": sizes, "complete": sp.complete}
    if c is None:
        out.update(valid=None, outcome="unexplored",
                   reason=f"dinfer stopped before classifying these sizes: {sp.reason}")
        return out
    out.update(valid=c.ok, outcome=c.outcome(), class_index=c.index, predicate=c.describe(),
               output_shapes=c.to_dict()["output_shapes"])
    if c.error is not None:
        out["error"] = {"type": c.error.type, "message": c.error.message, "file": _loc(c.error.filename, q),
                        "line": c.error.lineno, "code": (c.error.code or "").strip()}
    if c.message:
        out["message"] = c.message
    out["failing_guards"] = _failing_guards(q, sizes)
    if c.ok:
        out["reason"] = f"the sizes satisfy class {c.index} ({c.describe()}), on which the program runs"
    elif c.ok is False:
        e = out["error"]
        out["reason"] = f"{e['type']} at {e['file']}:{e['line']}: {e['message']}"
    else:
        out["reason"] = f"sizes alone do not decide it: {c.message or c.outcome()}"
    return out


def _axis(lo, hi, n):
    """Up to ``n`` integer sizes spread over lo..hi (every size when they fit)."""
    if hi - lo + 1 <= n:
        return list(range(lo, hi + 1))
    step = (hi - lo) / (n - 1)
    return sorted({int(round(lo + i * step)) for i in range(n)})


def task_map(q) -> dict:
    """The class of every cell of a grid over two dims, the others fixed."""
    sp = _space(q, float(q.get("time_budget", 20.0)))
    x, y = q["x"], q["y"]
    for d in (x, y):
        if d not in sp.dims:
            raise UserError(f"{d!r} is not a dim of this program (dims: {', '.join(sp.dims)})")
    if x == y:
        raise UserError("x and y must be two different dims")
    n = int(q.get("cells", 48))

    def rng(d, given):
        lo, hi = sp.dims[d]
        if given:
            lo, hi = max(lo, given[0]), min(hi, given[1])
        if hi == math.inf:
            hi = lo + n - 1
        if lo > hi:
            raise UserError(f"the range asked for {d} lies outside the searched range")
        return int(lo), int(hi)
    xs = _axis(*rng(x, q.get("x_range")), n)
    ys = _axis(*rng(y, q.get("y_range")), n)
    fixed = dict(q.get("fixed") or {})
    for d, (lo, hi) in sp.dims.items():
        if d not in (x, y) and d not in fixed:
            fixed[d] = int(lo) if lo >= 2 or hi < 2 else 2
    preds = []
    for c in sp.classes:
        try:
            preds.append(compile(c.describe(), "<class>", "eval"))
        except SyntaxError:
            preds.append(None)
    cells = []
    for yv in ys:
        row = []
        for xv in xs:
            pt = dict(fixed, **{x: xv, y: yv})
            idx = None
            for c, p in zip(sp.classes, preds):
                try:
                    hit = bool(eval(p, {"__builtins__": {}}, pt)) if p is not None else c.contains(
                        {sp.symbols[k]: v for k, v in pt.items()})
                except ZeroDivisionError:
                    hit = False
                if hit:
                    idx = c.index
                    break
            row.append(idx)
        cells.append(row)
    row_of = _row_of(sp)
    classes = [{"index": c.index, "outcome": c.outcome(), "ok": c.ok, "predicate": c.describe(),
                "example": c.example, "row": row_of.get(c.index)} for c in sp.classes]
    rows = [dict(r.to_dict(), ok=r.ok)
            for r in (sp.summary.rows if sp.summary is not None else [])]
    return {"x": x, "y": y, "xs": xs, "ys": ys, "fixed": fixed, "cells": cells, "classes": classes,
            "rows": rows, "complete": sp.complete, "valid_iff": task_dinfer(q).get("valid_iff")}


def task_check(q) -> dict:
    from cli.contracts import Contract, parse_dims
    from cli.verify import verify
    c = Contract(name=q["name"], program=q["program"], inputs=list(q["inputs"]),
                 dims=parse_dims(q.get("dims_toml") or {}, f"contract {q['name']!r}"),
                 expectations=dict(q["expectations"]), factory=bool(q.get("factory")), source="<request>", line=0)
    r = verify(c, q.get("roots") or ["/"], time_budget=float(q.get("time_budget", 20.0)))
    d = r.to_dict()
    d["program"] = q.get("display", q["program"])
    return d


TASKS = {"trace": task_trace, "explain": task_explain, "dinfer": task_dinfer, "flops": task_flops,
         "classify": task_classify, "map": task_map, "check": task_check}


class UserError(Exception):
    """A request that makes no sense for this program (a dim it does not have)."""


def run_task(kind: str, q: dict) -> dict:
    """Run one task in this process (the worker calls this)."""
    return TASKS[kind](q)
