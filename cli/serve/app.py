"""The HTTP API (FastAPI): shape questions answered by worker processes, repeated ones from a cache.

Every endpoint takes and returns JSON; errors are JSON too:
``{"error": {"kind": "...", "message": "..."}}`` with a 4xx/5xx status.
The OpenAPI schema is at ``/openapi.json``; the page at ``/``.

**Serving executes the named code**: a request names a Python file under
the project roots and the server's workers import and run it.  Bind to
loopback (the default) or protect the server with a token.

Example (a request body as the server validates it)::

    >>> Query(program="examples/mlp.py:MLP", inputs=["x: f32[B, T, 64]"], dims={"B": "1..64", "T": 16}).dims
    {'B': [1, 64], 'T': 16}
    >>> Query(program="m.py:f", inputs=["x: f32[N]"], dims={"N": "9..3"})
    Traceback (most recent call last):
    ...
    pydantic_core._pydantic_core.ValidationError: 1 validation error for Query
    dims
      Value error, dims.N: empty or out-of-range range 9..3 [type=value_error, input_value={'N': '9..3'}, input_type=dict]
    ...
"""
from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import math
import os
import re
import threading
import time
from collections import OrderedDict
from typing import Dict, List, Optional, Union

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from pydantic import BaseModel, Field, field_validator

from ..contracts import EXPECTATIONS, default_contract_file, load_contracts, resolve_target
from ..loader import CliError
from .workers import WorkerError, WorkerPool

STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
MAX_BODY = 256 * 1024
_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"

DimValue = Union[int, str, List[Optional[int]]]


class Query(BaseModel):
    """A program and its input specs: what every question is about."""

    program: str = Field(..., max_length=400, description="FILE.py:NAME or package.module:NAME under a project root",
                         examples=["examples/mlp.py:MLP"])
    inputs: List[str] = Field(..., min_length=1, max_length=16, description='input specs, e.g. "x: f32[B, T, 64]"')
    dims: Dict[str, DimValue] = Field(default_factory=dict, max_length=16,
                                      description='per dim "LO..HI", [LO, HI] (HI null: no bound) or an int (pinned)')
    factory: bool = Field(False, description="NAME is a function that builds the model")
    timeout: Optional[float] = Field(None, gt=0, le=3600,
                                     description="seconds this request may run (at most the server's --timeout)")

    @field_validator("inputs")
    @classmethod
    def _short(cls, v):
        for s in v:
            if len(s) > 300:
                raise ValueError("an input spec is longer than 300 characters")
        return v

    @field_validator("dims")
    @classmethod
    def _dims(cls, v):
        out = {}
        for k, d in v.items():
            if not re.match(_NAME, k):
                raise ValueError(f"{k!r} is not a dim name")
            if isinstance(d, bool):
                raise ValueError(f"dims.{k}: a bool is not a size")
            if isinstance(d, int):
                if not 0 <= d <= 2 ** 40:
                    raise ValueError(f"dims.{k} = {d} is out of range")
                out[k] = d
                continue
            if isinstance(d, str):
                m = re.match(r"^\s*(\d+)\s*\.\.\s*(\d+|inf)?\s*$", d)
                if not m:
                    raise ValueError(f"dims.{k} = {d!r}: expected \"LO..HI\"")
                lo, hi = int(m.group(1)), (None if m.group(2) in (None, "inf") else int(m.group(2)))
            else:
                if len(d) != 2 or d[0] is None:
                    raise ValueError(f"dims.{k}: expected [LO, HI]")
                lo, hi = d
            if lo < 0 or (hi is not None and (hi < lo or hi > 2 ** 40)):
                raise ValueError(f"dims.{k}: empty or out-of-range range {lo}..{hi}")
            out[k] = [lo, hi]
        return out


Sizes = Dict[str, int]


class TraceQuery(Query):
    at: Optional[Sizes] = Field(None, max_length=16, description="trace at these sizes if the default ones raise")


class ExplainQuery(Query):
    at: Optional[Sizes] = Field(None, max_length=16, description="evaluate every guard at these sizes")


class DinferQuery(Query):
    max_classes: int = Field(64, ge=1, le=256)
    time_budget: float = Field(20.0, gt=0, le=600)


class FlopsQuery(Query):
    points: List[Sizes] = Field(default_factory=list, max_length=512, description="sizes to evaluate the formula at")


class ClassifyQuery(Query):
    sizes: Sizes = Field(..., max_length=16, description="one size per dim")
    time_budget: float = Field(20.0, gt=0, le=600)


class MapQuery(Query):
    x: str = Field(..., pattern=_NAME)
    y: str = Field(..., pattern=_NAME)
    x_range: Optional[List[int]] = Field(None, min_length=2, max_length=2)
    y_range: Optional[List[int]] = Field(None, min_length=2, max_length=2)
    fixed: Sizes = Field(default_factory=dict, max_length=16, description="sizes of the other dims")
    cells: int = Field(48, ge=2, le=128, description="grid cells per axis at most")
    time_budget: float = Field(20.0, gt=0, le=600)


class CheckQuery(Query):
    name: str = Field("request", max_length=100)
    valid: Optional[Union[bool, str]] = None
    no_specialization: Optional[bool] = None
    max_guards: Optional[int] = Field(None, ge=0)
    flops: Optional[Union[int, str]] = None
    output: Optional[list] = None
    time_budget: float = Field(20.0, gt=0, le=600)


def _check_task_args(d: dict):
    """What the ``check`` task needs beyond the query: the expectations, and dims written as in TOML."""
    exp = {k: d[k] for k in EXPECTATIONS if d.get(k) is not None}
    if not exp:
        return _error(400, "bad_request", f"state at least one expectation: {', '.join(EXPECTATIONS)}")
    dims_toml = {k: (v if isinstance(v, int) else f"{v[0]}..{'inf' if v[1] is None else v[1]}")
                 for k, v in d["dims"].items()}
    return {"expectations": exp, "dims_toml": dims_toml}


#: Endpoint ``/api/KIND`` -> (request model, summary); each is answered by the worker task of the same name (:mod:`cli.serve.tasks`).
QUESTIONS = {
    "trace": (TraceQuery, "Symbolic output shapes, guards and runtime asserts with source lines"),
    "explain": (ExplainQuery, "The explain report as JSON (guards/report.schema.json)"),
    "dinfer": (DinferQuery, "Classes of input sizes and the valid-iff summary"),
    "flops": (FlopsQuery, "Symbolic FLOPs and bytes: formula and values at sizes"),
    "classify": (ClassifyQuery, "Is this size valid, and if not, which guard or line fails"),
    "map": (MapQuery, "The class of each cell of a grid over two dims (the valid-size map)"),
    "check": (CheckQuery, "Check one contract entry (same keys as the TOML)"),
}
#: Arguments a task needs beyond the query (or an error response), by endpoint.
TASK_ARGS = {"check": _check_task_args}


def _question(answer, kind: str, model):
    """The handler of ``/api/KIND``: the body validated as ``model``, then request -> task -> cache."""
    def handle(q):
        extra = TASK_ARGS[kind](q.model_dump()) if kind in TASK_ARGS else None
        if isinstance(extra, JSONResponse):
            return extra
        return answer(kind, q, extra)
    handle.__annotations__ = {"q": model}  # FastAPI reads the body's model from the annotation
    handle.__name__ = handle.__qualname__ = f"ask_{kind}"
    return handle


def _error(status: int, kind: str, message: str, **extra) -> JSONResponse:
    return JSONResponse({"error": {"kind": kind, "message": message, **extra}}, status_code=status)


class _Cache:
    """Answers by (endpoint, program source hash, request): a repeated question costs a dict lookup."""

    def __init__(self, size: int = 2048):
        self.size, self.data, self.lock = size, OrderedDict(), threading.Lock()
        self.hits = self.misses = 0

    def get(self, key):
        with self.lock:
            v = self.data.get(key)
            if v is not None:
                self.data.move_to_end(key)
                self.hits += 1
            else:
                self.misses += 1
            return v

    def put(self, key, v):
        with self.lock:
            self.data[key] = v
            while len(self.data) > self.size:
                self.data.popitem(last=False)


def _presets(roots) -> list:
    """Contract entries found in the roots (symshape.toml, [tool.symshape], examples/symshape.toml),
    as queries the page offers.  Reading TOML runs no user code."""
    out, seen = [], set()
    for root in roots:
        for where in (root, os.path.join(root, "examples")):
            try:
                path = default_contract_file(where)
                entries = load_contracts(path)
            except CliError:
                continue
            for c in entries:
                left, name = c.program.rsplit(":", 1)
                prog = c.program
                if left.endswith(".py") or "/" in left:
                    full = os.path.realpath(os.path.join(c.base_dir, left))
                    if os.path.commonpath([full, os.path.realpath(root)]) != os.path.realpath(root):
                        continue
                    prog = os.path.relpath(full, os.path.realpath(root)) + ":" + name
                key = (prog, tuple(c.inputs))
                if key in seen:
                    continue
                seen.add(key)
                dims = {k: (v if isinstance(v, int) else f"{v[0]}..{'inf' if v[1] == math.inf else v[1]}")
                        for k, v in c.dims.items()}
                out.append({"name": c.name, "program": prog, "factory": c.factory, "inputs": c.inputs,
                            "dims": dims, "expectations": c.expectations})
    return out


def create_app(roots=(".",), workers: int = 2, timeout: float = 60.0, memory_mb: int = 4096,
               token: Optional[str] = None) -> FastAPI:
    """The ASGI app: ``roots`` are the folders programs may come from."""
    roots = [os.path.realpath(r) for r in roots]
    for r in roots:
        if not os.path.isdir(r):
            raise CliError(f"project root {r} is not a folder")

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        app.state.pool.close()

    app = FastAPI(title="symshape", version=_version(), lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Symbolic shape questions about PyTorch programs: trace, explain, dinfer, flops, "
                              "check, classify, map.  Serving executes the named code in worker processes.")
    pool = WorkerPool(size=workers, timeout=timeout, memory_mb=memory_mb)
    cache = _Cache()
    app.state.pool, app.state.cache, app.state.roots = pool, cache, roots
    started = time.time()

    _install_guards(app, token)
    answer = _answerer(pool, cache, roots)

    @app.get("/api/health", summary="Server status: workers, cache, roots")
    def health():
        return {"ok": True, "version": _version(), "roots": roots, "uptime_s": round(time.time() - started, 1),
                "workers": pool.size, "worker_stats": dict(pool.stats),
                "cache": {"entries": len(cache.data), "hits": cache.hits, "misses": cache.misses}}

    @app.get("/api/examples", summary="Programs and specs from the contract files in the roots (for the page)")
    def examples():
        return {"examples": _presets(roots)}

    for kind, (model, summary) in QUESTIONS.items():
        app.post(f"/api/{kind}", summary=summary)(_question(answer, kind, model))

    @app.get("/", include_in_schema=False)
    def page():
        return FileResponse(os.path.join(STATIC, "index.html"), media_type="text/html")

    @app.get("/docs", include_in_schema=False)
    def docs():
        # A self-contained page over /openapi.json: works offline (no CDN, unlike Swagger UI's default).
        return FileResponse(os.path.join(STATIC, "docs.html"), media_type="text/html")

    @app.get("/static/{name}", include_in_schema=False)
    def static(name: str):
        if not re.match(r"^[A-Za-z0-9_-]+\.(js|css|html)$", name) or not os.path.isfile(os.path.join(STATIC, name)):
            return _error(404, "not_found", f"no static file {name!r}")
        return FileResponse(os.path.join(STATIC, name))

    return app


def _install_guards(app, token: Optional[str]) -> None:
    """Size and token checks before any handler; errors as the API's JSON error replies."""
    @app.middleware("http")
    async def _guard(request: Request, call_next):
        n = request.headers.get("content-length")
        if n is not None and (not n.isdigit() or int(n) > MAX_BODY):
            return _error(413, "too_large", f"request body over {MAX_BODY} bytes")
        if n is None and request.method == "POST":
            # A chunked body has no stated size to check before reading it.
            return _error(411, "length_required", "send the body with a Content-Length header")
        if token is not None and request.url.path.startswith("/api/"):
            got = request.headers.get("authorization", "")
            want = f"Bearer {token}"
            if not hmac.compare_digest(got.encode(), want.encode()):
                return _error(401, "unauthorized", "missing or wrong bearer token (Authorization: Bearer TOKEN)")
        return await call_next(request)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request, exc):
        errs = exc.errors()
        parts = []
        for e in errs[:5]:
            loc = ".".join(str(x) for x in e.get("loc", ()) if x != "body")
            parts.append(f"{loc or 'body'}: {e.get('msg')}")
        return _error(400, "bad_request", "; ".join(parts) or "malformed request")

    @app.exception_handler(Exception)
    async def _unexpected(request, exc):
        return _error(500, "internal", f"symshape server error: {type(exc).__name__}: {exc}")


def _answerer(pool, cache, roots):
    """The handler body every question shares: resolve the program, answer from the cache or a worker."""
    def answer(kind: str, q: BaseModel, extra: dict = None):
        d = q.model_dump()
        if "time_budget" in d:
            # A search must end inside the worker's time limit, with a partial answer, not a 504.
            limit = min(float(d.get("timeout") or pool.timeout), pool.timeout)
            d["time_budget"] = min(float(d["time_budget"]), max(1.0, 0.75 * limit - 2.0))
        try:
            _, path, name = resolve_target(d["program"], roots)
        except CliError as e:
            return _error(400, "bad_request", str(e))
        if path is None:
            return _error(404, "not_found", f"{d['program']}: no such file or module under the project roots "
                                            f"({', '.join(roots)})")
        try:
            with open(path, "rb") as f:
                src_hash = hashlib.sha256(f.read()).hexdigest()
        except OSError as e:
            return _error(404, "not_found", f"cannot read {d['program']}: {e.strerror}")
        asked = {k: v for k, v in d.items() if k != "timeout"}  # the same question, however patient
        key = hashlib.sha256(json.dumps([kind, src_hash, asked], sort_keys=True, default=str).encode()).hexdigest()
        hit = cache.get(key)
        if hit is not None:
            return dict(hit, cached=True)
        left = d["program"].rsplit(":", 1)[0]
        is_file = left.endswith(".py") or "/" in left
        wq = dict(d, display=d["program"], program=f"{path}:{name}" if is_file else d["program"],
                  source_hash=src_hash, roots=roots, **(extra or {}))
        t0 = time.perf_counter()
        try:
            result = pool.call(kind, wq, timeout=d.get("timeout"))
        except WorkerError as e:
            return _error(e.status, e.kind, e.message)
        out = {"result": result, "program": d["program"], "source_hash": src_hash,
               "time_s": round(time.perf_counter() - t0, 4)}
        cache.put(key, out)
        return dict(out, cached=False)
    return answer


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("symshape")
    except ImportError:  # PackageNotFoundError: run from a source tree without metadata
        return "0"
