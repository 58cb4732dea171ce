"""``symshape trace FILE.py:NAME -i SPEC ...``: trace and print outputs, guards, asserts.

Every output is listed with its pytree path (``out["logits"]: f32[B, T, 50257]``,
``out[1]: 2*T``), tensors in the input-spec syntax.

Example::

    symshape trace examples/mlp.py:tokens_to_blocks -i "x: f32[B, T, 64]"
"""
from __future__ import annotations

import argparse

from .args import SPEC_HELP, add_program_arguments, add_progress_arguments


def register(sub):
    p = sub.add_parser("trace", help="trace a program at symbolic sizes and list its output shapes and guards",
                       description="Trace a program once on meta tensors whose sizes are symbols; print every "
                                   "output with its pytree path, and the guards and runtime asserts.",
                       epilog=SPEC_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_program_arguments(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--graph", action="store_true", help="also print the recorded ATen graph")
    add_progress_arguments(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from .progress import Status, wanted

    with Status(enabled=wanted(args)) as status:
        from .loader import trace_target
        _, tp = trace_target(args, status)
    _print(args, tp)
    return 0


def device_line(tp, short_path) -> str:
    """What the trace assumes about the device: ``device: cpu (assumed: read at 3 lines, first at f.py:4)``."""
    if not tp.device_reads:
        return f"device: {tp.device} (never read by the program: the graph runs on any device)"
    first = tp.device_reads[0].provenance
    return (f"device: {tp.device} (assumed: the program read it at {len(tp.device_reads)} place(s), first "
            f"at {short_path(first.filename)}:{first.lineno}; run() refuses inputs on another device)")


def _print(args, tp) -> None:
    import json

    from guards.explain import short_path
    from guards.render import render_guard, to_python
    from shapes.data_names import data_names
    from shapes.program import OutputKind

    outputs = tp.outputs()
    if args.json:
        print(json.dumps({
            "inputs": [str(s) for s in tp.specs],
            "arguments": {k: v for k, v in args.arg.items()},
            "example_sizes": tp.hints,
            "outputs": [{"path": o.path, "kind": o.kind.value, "text": o.text(),
                         **({"shape": [to_python(e, o.names) for e in o.shape], "dtype": str(o.dtype).replace("torch.", "")}
                            if o.kind is OutputKind.TENSOR else {})} for o in outputs],
            "output_shapes": [[to_python(e, data_names(tp.env)) for e in s] for s in tp.output_shapes],
            "guards": [{"kind": g.kind.value, "expr": render_guard(g, tp.env, user_terms=False),
                        "user_terms": render_guard(g, tp.env), "file": g.filename, "line": g.lineno,
                        "code": g.code, "op": g.op} for g in tp.records],
            "unchecked_indices": [{"file": p.filename, "line": p.lineno, "message": m}
                                  for p, m in tp.unchecked_indices],
            "device": str(tp.device),
            "device_reads": [{"what": r.what, "file": r.provenance.filename, "line": r.provenance.lineno,
                              "code": r.provenance.code} for r in tp.device_reads],
        }, indent=2, default=repr))
        return
    print(f"traced {args.target} at " + ", ".join(f"{k}={v}" for k, v in tp.hints.items()))
    w = tp.world
    if w is not None and w.concrete:
        at = ", ".join(f"{k}={v}" for _, k, v in w.mesh) if w.mesh else f"{w.name}={w.size}"
        print(f"  world: traced at {at} as rank {w.rank} (a device mesh needs it concrete; dinfer and flops "
              f"trace every size of the range and join them)")
    for o in outputs:
        print(f"  {o}")
    print(f"{len(tp.guards)} guard(s), {len(tp.runtime_asserts)} runtime assert(s)")
    for g in tp.records:
        dims, user = render_guard(g, tp.env, user_terms=False), render_guard(g, tp.env)
        print(f"  [{g.kind.value}] {dims}" + (f"   ({user})" if user != dims else "")
              + f"  at {short_path(g.filename)}:{g.lineno}")
    for p, m in tp.unchecked_indices:
        print(f"  [unchecked index] {m}  at {short_path(p.filename)}:{p.lineno}")
    if tp.device_reads or tp.device.type != "cpu":
        print(device_line(tp, short_path))
    if args.graph:
        print(tp.graph)
