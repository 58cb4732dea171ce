"""The JSON explanation report and its schema (``guards/report.schema.json``).

The schema ships with the package; :func:`validate` checks a document
against it with a small validator for the subset of JSON Schema the schema
uses (``type``, ``properties``, ``required``, ``additionalProperties``,
``items``, ``enum``, ``minimum``, ``anyOf``, local ``$ref``), so that
checking a report needs no extra dependency.

Example::

    >>> import shapes, guards
    >>> from guards.report_json import to_dict, validate
    >>> tp = shapes.trace(lambda x: x.view(-1, 8), "x: f32[N]")
    >>> doc = to_dict(guards.explain(tp, at="N=12"))
    >>> validate(doc)
    []
    >>> doc["at"]["verdict"], doc["records"][0]["user_expr"]
    ('runtime_error', 'x.shape[0] % 8 == 0')
"""
from __future__ import annotations

import json
import os
from typing import Optional

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .explanation import ExplanationModel as Explanation

SCHEMA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "report.schema.json")
SCHEMA_VERSION = 1


def load_schema() -> dict:
    """The report's JSON schema (a dict)."""
    with open(SCHEMA_PATH, encoding="utf-8") as f:
        return json.load(f)


def to_dict(ex: Explanation) -> dict:
    """The report as plain JSON data."""
    return {
        "schema_version": SCHEMA_VERSION,
        "program": ex.program,
        "inputs": list(ex.inputs),
        "example_sizes": dict(ex.example_sizes),
        "summary": {
            "dims": [{
                "name": d.name, "sources": list(d.sources), "example": d.example, "status": d.status,
                "range": {"min": d.range[0], "max": d.range[1]}, "value": d.value,
                "unified_with": d.unified_with, "record": d.record, "reason": d.reason,
            } for d in ex.dims],
            "data_dependent": [dict(u) for u in ex.data_dependent],
            "counts": {
                "total": ex.counts["total"], "by_kind": dict(ex.counts["by_kind"]),
                "by_origin": dict(ex.counts["by_origin"]), "by_op": dict(ex.counts["by_op"]),
            },
            "static_decisions": ex.static_decisions,
            "specialize_zero_one": ex.specialize_zero_one,
        },
        "records": [{
            "index": e.index, "kind": e.kind, "expr": e.expr, "user_expr": e.user_expr, "raw": e.raw,
            "original": e.original, "negation": e.negation, "dims": list(e.dims),
            "data_dependent": list(e.data_dependent),
            "source": {"file": e.file, "line": e.line, "code": e.code, "function": e.function,
                       "snippet": {"start": e.snippet_start, "lines": list(e.snippet)}},
            "op": e.op, "origin": e.origin, "origin_text": e.origin_text, "decided_by": e.decided_by,
            "decision_text": e.decision_text, "cost": e.cost, "cost_text": e.cost_text,
            "suggestion": e.suggestion, "message": e.message, "stack": list(e.stack),
            "fails_at_point": e.fails_at_point,
        } for e in ex.entries],
        "at": None if ex.at is None else {
            "point": dict(ex.at.point), "failing": list(ex.at.failing), "undecided": list(ex.at.undecided),
            "out_of_range": [dict(o) for o in ex.at.out_of_range], "verdict": ex.at.verdict,
            "reasons": list(ex.at.reasons),
        },
    }


def dumps(ex: Explanation, indent: Optional[int] = 2) -> str:
    return json.dumps(to_dict(ex), indent=indent) + "\n"


# ----------------------------------------------------------------------------- validation

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    # JSON has one number type; bool is not an integer there even though it is in Python.
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}
_KNOWN = {"$schema", "$id", "title", "description", "definitions", "type", "properties", "required",
          "additionalProperties", "items", "enum", "minimum", "anyOf", "$ref"}


def validate(doc, schema: Optional[dict] = None) -> list:
    """Errors of ``doc`` against ``schema`` (the report schema by default), as ``"path: message"``
    strings; an empty list means the document is valid."""
    schema = load_schema() if schema is None else schema
    errors: list = []
    _check(doc, schema, schema, "$", errors)
    return errors


def _resolve(ref: str, root: dict) -> dict:
    if not ref.startswith("#/"):
        raise ValueError(f"only local $ref are supported, got {ref!r}")
    node = root
    for part in ref[2:].split("/"):
        node = node[part]
    return node


def _check(v, s: dict, root: dict, path: str, errors: list) -> None:
    unknown = set(s) - _KNOWN
    if unknown:
        # A keyword this validator ignores would silently pass anything: refuse instead.
        raise ValueError(f"schema at {path} uses unsupported keyword(s) {sorted(unknown)}")
    if "$ref" in s:
        _check(v, _resolve(s["$ref"], root), root, path, errors)
        return
    if "anyOf" in s:
        for alt in s["anyOf"]:
            sub: list = []
            _check(v, alt, root, path, sub)
            if not sub:
                break
        else:
            errors.append(f"{path}: matches none of the {len(s['anyOf'])} allowed forms")
            return
    if "type" in s:
        types = s["type"] if isinstance(s["type"], list) else [s["type"]]
        if not any(_TYPES[t](v) for t in types):
            errors.append(f"{path}: expected {' or '.join(types)}, got {type(v).__name__} {v!r:.60}")
            return
    if "enum" in s and v not in s["enum"]:
        errors.append(f"{path}: {v!r} is not one of {s['enum']}")
    if "minimum" in s and _TYPES["number"](v) and v < s["minimum"]:
        errors.append(f"{path}: {v} is less than the minimum {s['minimum']}")
    if isinstance(v, dict):
        props = s.get("properties", {})
        for k in s.get("required", []):
            if k not in v:
                errors.append(f"{path}: missing required property {k!r}")
        extra = s.get("additionalProperties", True)
        for k, item in v.items():
            if k in props:
                _check(item, props[k], root, f"{path}.{k}", errors)
            elif extra is False:
                errors.append(f"{path}: unexpected property {k!r}")
            elif isinstance(extra, dict):
                _check(item, extra, root, f"{path}.{k}", errors)
    if isinstance(v, list) and "items" in s:
        for i, item in enumerate(v):
            _check(item, s["items"], root, f"{path}[{i}]", errors)
