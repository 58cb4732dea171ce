"""``symshape trace FILE.py:NAME -i SPEC ...``: trace and print shapes, guards, asserts."""
from __future__ import annotations

import json

from guards.render import render_guard, to_python
from shapes import trace

from .loader import load_program, parse_dim_args


def register(sub):
    p = sub.add_parser("trace", help="trace a program at symbolic sizes and list its output shapes and guards")
    p.add_argument("target", help="FILE.py:NAME (a function, an nn.Module instance or class)")
    p.add_argument("-i", "--input", action="append", required=True, metavar="SPEC",
                   help='input spec, one per positional input, e.g. "x: f32[B, T, 768]"')
    p.add_argument("--dim", action="append", metavar="NAME=LO..HI", help="dim range or example size")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--graph", action="store_true", help="also print the recorded ATen graph")
    p.set_defaults(run=run)


def run(args) -> int:
    prog = load_program(args.target)
    tp = trace(prog, *args.input, dims=parse_dim_args(args.dim))
    if args.json:
        print(json.dumps({
            "inputs": [str(s) for s in tp.specs],
            "example_sizes": tp.hints,
            "output_shapes": [[to_python(e) for e in s] for s in tp.output_shapes],
            "guards": [{"kind": g.kind.value, "expr": render_guard(g, tp.env, user_terms=False),
                        "user_terms": render_guard(g, tp.env), "file": g.filename, "line": g.lineno,
                        "code": g.code, "op": g.op} for g in tp.records],
        }, indent=2))
        return 0
    print(f"traced {args.target} at " + ", ".join(f"{k}={v}" for k, v in tp.hints.items()))
    for i, s in enumerate(tp.output_shapes):
        print(f"  output {i}: [{', '.join(to_python(e) for e in s)}]")
    print(f"{len(tp.guards)} guard(s), {len(tp.runtime_asserts)} runtime assert(s)")
    for g in tp.records:
        print(f"  [{g.kind.value}] {render_guard(g, tp.env, user_terms=False)}   "
              f"({render_guard(g, tp.env)})  at {g.filename}:{g.lineno}")
    if args.graph:
        print(tp.graph)
    return 0
