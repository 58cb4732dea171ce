"""``symshape flops FILE.py:NAME -i SPEC [--at B=8,T=1024] [--train] [--check F] [--mfu ...]``.

Prints the total FLOPs and bytes moved as closed forms over the named dims,
per ATen op, and (with ``--at``) their exact values and arithmetic intensity
at concrete sizes.  Conventions are torch.utils.flop_counter's (see
:mod:`shapes.flops`).

* ``--train``: the program returns the loss; count forward + backward
  (traced through torch's autograd).
* ``--check "L*(24*B*T*D**2 + 4*B*T**2*D)" --const L=12,D=768``: prove the
  formula equal to the traced count, or print the smallest counterexample
  (exit status 1 unless equal).
* ``--mfu step_s=0.35,peak=h100-sxm`` with ``--at``: achieved TFLOP/s and MFU
  at each ``--at`` point (peaks: :mod:`shapes.flops.mfu`).

Example::

    symshape flops examples/mlp.py:MLP -i "x: f32[B, T, 64]" --at B=8,T=1024
"""
from __future__ import annotations

import argparse

from .args import SPEC_HELP, add_program_arguments, add_progress_arguments


def register(sub):
    p = sub.add_parser(
        "flops", help="count FLOPs and bytes moved as closed forms over the named dims",
        description="Count FLOPs and bytes moved as closed forms over the named dims.  Conventions are "
                    "torch.utils.flop_counter's: a multiply-add is 2 FLOPs; the matmul family, convolution and "
                    "scaled-dot-product attention have FLOPs, other ops count 0 (listed, never hidden; ops torch "
                    "counts but symshape cannot are marked UNCOUNTED). Bytes moved: tensor inputs read plus "
                    "outputs written per op; views move 0 bytes. 'useful' FLOPs count causal attention at the "
                    "score entries it keeps.",
        epilog=SPEC_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_program_arguments(p, example="ids: i64[B, T]")
    p.add_argument("--at", action="append", metavar="B=8,T=1024",
                   help="also evaluate at these sizes (every dim; repeatable)")
    p.add_argument("--train", action="store_true",
                   help="count a training step: the program returns the loss; forward + loss.backward()")
    p.add_argument("--check", metavar="FORMULA",
                   help='prove a hand-written formula equal to the count, e.g. "6*P*B*T + 12*L*D*B*T**2" '
                        "(exit status 1 unless equal)")
    p.add_argument("--const", action="append", metavar="L=12,D=768", help="named constants for --check")
    p.add_argument("--of", default="total", metavar="COUNT",
                   help="the count --check compares with: total (default), useful, forward or backward")
    p.add_argument("--mfu", metavar="step_s=0.35,peak=h100-sxm",
                   help="with --at: achieved TFLOP/s and MFU for a measured step time; peak is FLOP/s or an "
                        "accelerator name (h100-sxm, a100:tf32, ...); count=total to use torch's convention")
    p.add_argument("--roofline", metavar="peak=h100-sxm,link=4.5e11",
                   help="with --at and --world: the step time bound from a device's peak FLOP/s (or name) and its "
                        "link bandwidth in bytes/s, with MFU per device and global (shapes.flops.roofline)")
    p.add_argument("--json", action="store_true", help="print JSON (expressions as strings, exact ints)")
    p.add_argument("--modules", action="store_true", help="also print the per-module breakdown")
    p.add_argument("--depth", type=int, default=2, help="module levels shown with --modules (default 2)")
    p.add_argument("--width", type=int, default=80, help="table width in columns (default 80)")
    add_progress_arguments(p)
    p.set_defaults(run=run)


def _parse_mfu(text: str) -> dict:
    from shapes.errors import SpecError

    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq or key not in ("step_s", "peak", "count"):
            raise SpecError(f"bad --mfu item {part!r}: write step_s=SECONDS,peak=NAME_OR_FLOPS[,count=total]")
        out[key] = value.strip()
    if "step_s" not in out or "peak" not in out:
        raise SpecError("--mfu needs step_s=SECONDS and peak=NAME_OR_FLOPS, e.g. --mfu step_s=0.35,peak=h100-sxm")
    try:
        out["step_s"] = float(out["step_s"])
    except ValueError:
        raise SpecError(f"--mfu step_s must be a number of seconds, got {out['step_s']!r}") from None
    return out


def _parse_roofline(text: str) -> dict:
    """``--roofline peak=NAME_OR_FLOPS,link=BYTES_PER_S[,model_flops=N]``.

    >>> _parse_roofline("peak=h100-sxm,link=4.5e11")
    {'peak': 'h100-sxm', 'link': 450000000000.0}
    """
    from shapes.errors import SpecError

    out: dict = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq or key not in ("peak", "link", "model_flops"):
            raise SpecError(f"bad --roofline item {part!r}: write peak=NAME_OR_FLOPS,link=BYTES_PER_S")
        out[key] = value.strip()
    if "peak" not in out or "link" not in out:
        raise SpecError("--roofline needs peak=NAME_OR_FLOPS and link=BYTES_PER_S, e.g. peak=h100-sxm,link=4.5e11")
    for key in ("link", "model_flops"):
        if key in out:
            try:
                out[key] = float(out[key])
            except ValueError:
                raise SpecError(f"--roofline {key} must be a number, got {out[key]!r}") from None
    return out


def run(args) -> int:
    from .progress import Status, wanted

    with Status(enabled=wanted(args)) as status:
        status.phase(f"loading {args.target}")
        from shapes.errors import SpecError
        from shapes.flops import count_flops
        from shapes.flops.check import parse_consts
        from .loader import parse_point, trace_target

        consts = {}
        for c in args.const or []:
            consts.update(parse_consts(c))
        if consts and not args.check:
            raise SpecError("--const names constants for --check; give --check FORMULA too")
        mfu_args = _parse_mfu(args.mfu) if args.mfu else None
        points = [parse_point(a) for a in args.at or []]
        if mfu_args and not points:
            raise SpecError("--mfu needs the sizes the step was measured at: give --at B=...,T=...")
        def train_options(prog):
            from shapes.flops.train import default_requires_grad, training_step
            return {"backward": training_step(), "requires_grad": tuple(default_requires_grad(prog, args.input))}

        from .args import world_options
        dims, world = world_options(args)
        roof_args = _parse_roofline(args.roofline) if args.roofline else None
        if roof_args and not (points and world):
            raise SpecError("--roofline needs --world (or --mesh) and the sizes to bound the step at: give "
                            "--at W=...,B=...")
        prog, traced = trace_target(args, status, points, train_options if args.train else None)
        status.phase("counting FLOPs")
        from shapes.distributed import PerWorld
        if isinstance(prog, PerWorld) and world and not args.train:
            # Built per world size (a device mesh): traced at each one and joined (shapes.flops.worlds).
            report = count_flops(prog, *args.input, dims=dims, world=world)
        else:
            report = count_flops(traced, mode="train" if args.train else "forward")
        roofs = [report.roofline(pt, roof_args["peak"], roof_args["link"], roof_args.get("model_flops"))
                 for pt in points] if roof_args else []
        # Evaluate everything before printing anything, so a bad --at is one error line.
        checked = report.check(args.check, consts, of=args.of) if args.check else None
        mfus = [report.mfu(pt, mfu_args["step_s"], mfu_args["peak"], mfu_args.get("count", "useful"))
                for pt in points] if mfu_args else []
        out = (_json(args, report, points, checked, mfus, roofs) if args.json
               else _text(args, report, points, checked, mfus, roofs))
    print(out)
    return 0 if checked is None or checked else 1


def _json(args, report, points, checked, mfus, roofs) -> str:
    """``--json``: the report, the check, communication, the roofline and MFU as JSON."""
    import json

    d = report.to_dict(points)
    if checked is not None:
        d["check"] = {"formula": args.check, "of": args.of, "outcome": checked.outcome,
                      "message": checked.message, "counterexample": checked.counterexample,
                      "values": list(checked.values) if checked.values else None, "region": checked.region}
    if report.comm.by_kind:
        d["comm"] = {k: {"bytes_per_rank": str(e), "calls": report.comm.calls[k],
                         "at": [str(report.comm.evaluate(pt)[k]) for pt in points]}
                     for k, e in report.comm.by_kind.items()}
    if report.world_method:
        d["world_method"] = report.world_method
    if roofs:
        d["roofline"] = [{"sizes": r.sizes, "compute_s": r.compute_s, "comm_s": r.comm_s, "step_s": r.step_s,
                          "overlapped_s": r.overlapped_s, "mfu_per_device": r.mfu_per_device(),
                          "mfu_global": r.mfu_global(), "global_flops": r.global_source} for r in roofs]
    if mfus:
        d["mfu"] = [{"sizes": m.sizes, "flops": m.flops, "count": m.count, "seconds": m.seconds,
                     "achieved_flops_per_s": m.achieved, "peak_flops_per_s": m.peak, "peak": m.peak_label,
                     "mfu": m.mfu} for m in mfus]
    return json.dumps(d, indent=2)


def _text(args, report, points, checked, mfus, roofs) -> str:
    """The tables: the count, modules, the check, MFU, communication, the world and the roofline."""
    from shapes.flops.comm import comm_table

    tables = [report.table(points or None, width=args.width)]
    if args.modules:
        if points:
            tables += [report.module_table(pt, depth=args.depth, width=args.width) for pt in points]
        else:
            tables.append(report.module_table(depth=args.depth, width=args.width))
    if checked is not None:
        tables.append(f"check {args.check}" + (f" (against {args.of})" if args.of != "total" else "")
                      + f"\n  {checked}")
    tables += [f"MFU: {m}" for m in mfus]
    if report.comm.by_kind:
        tables.append(comm_table(report.comm, points))
    if report.world_method:
        tables.append(f"world: {report.world_method}")
    tables += [f"roofline: {r}" for r in roofs]
    return "\n\n".join(tables)
