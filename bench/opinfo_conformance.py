"""symshape against make_fx(tracing_mode="symbolic") on torch's OpInfo corpus.

Every OpInfo in ``op_db`` that supports float32 on CPU, its first samples
whose tensors all have rank >= 1, a fresh symbol per dim (see
:mod:`validation.opinfo`).  Prints the figures side by side with torch's:
trace success, wrong output shapes, unsound accepts (symshape's guards
accept sizes that torch's reject and eager fails), guard counts (size-1
guards that torch's 0/1 policy assumes counted apart), trace time;
then every sample where symshape is wrong, unsound, fails where torch
traces, accepts sizes where eager fails, or needs more guards than torch.

Run::

    python bench/opinfo_conformance.py                   # the whole corpus (minutes)
    python bench/opinfo_conformance.py --ops conv1d nll_loss --details
    python bench/opinfo_conformance.py --json results.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from validation import opinfo  # noqa: E402


def _matches(name, patterns):
    return any(p == name or p == name.split(".")[0] or name.endswith("." + p) for p in patterns)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", nargs="*", help="only these OpInfos (name, name.variant, or the last name part)")
    ap.add_argument("--samples", type=int, default=3, help="samples per OpInfo (default 3)")
    ap.add_argument("--timeout", type=float, default=30, help="seconds per trace before it counts as failed")
    ap.add_argument("--details", action="store_true", help="list every sample, not only the discrepancies")
    ap.add_argument("--json", help="write every sample's result to this file")
    ap.add_argument("--load", help="print the table of a file --json wrote instead of running")
    args = ap.parse_args(argv)

    names = None
    if args.ops:
        names = [opinfo.op_name(o) for o in opinfo.op_db() if _matches(opinfo.op_name(o), args.ops)]
    t0 = time.perf_counter()
    done = [0]

    def progress(r):
        done[0] += 1
        if done[0] % 100 == 0:
            print(f"  ... {done[0]} samples, {time.perf_counter() - t0:.0f} s", file=sys.stderr)

    if args.load:
        with open(args.load) as f:
            results = [opinfo.SampleResult(**d) for d in json.load(f)]
    else:
        results = opinfo.run_corpus(names, args.samples, progress=progress, timeout=args.timeout)
    wall = time.perf_counter() - t0
    if args.json:
        with open(args.json, "w") as f:
            json.dump([r.__dict__ for r in results], f, indent=1, default=str)
    s = opinfo.summarize(results)
    both = [r for r in results if r.sym_ok and r.torch_ok]
    fmt = "{:<34} {:>16} {:>16}"
    print(f"OpInfo corpus: {len(set(r.op for r in results))} OpInfos, {s.samples} samples "
          f"(float32, CPU, first {args.samples} samples with rank >= 1 tensors); {wall:.0f} s")
    print(fmt.format("", "symshape", "make_fx symbolic"))
    print(fmt.format("traces", f"{s.sym_ok} ({s.sym_pct:.1f}%)", f"{s.torch_ok} ({s.torch_pct:.1f}%)"))
    print(fmt.format("wrong output shapes (samples)", s.wrong, "-"))
    print(fmt.format("unsound accepts (samples)", s.unsound, "-"))
    print(fmt.format("guards <= torch's (both trace)", f"{s.guards_le}/{s.both_ok} ({s.guards_le_pct:.1f}%)", "-"))
    print(fmt.format("guards+asserts, total (both trace)", sum(r.sym_guards for r in both),
                     sum(r.torch_guards for r in both)))
    # symshape keeps size-1 conditions (K != 1) that torch's 0/1 policy assumes: set apart, not compared.
    print(fmt.format("  + size-1 guards torch assumes", s.size_one_guards, "(assumed)"))
    if both:
        print(fmt.format("median trace ms (both trace)", f"{1000 * statistics.median(r.sym_s for r in both):.1f}",
                         f"{1000 * statistics.median(r.torch_s for r in both):.1f}"))
    print(fmt.format("size points checked", sum(r.points for r in results), "-"))
    print(fmt.format("points both accept, eager fails", s.both_accept_eager_fails, "-"))

    def line(r, why):
        return f"  {r.op}[{r.index}] {'; '.join(r.specs)}: {why}"

    sections = [
        ("WRONG OUTPUT SHAPES", [line(r, f"at {r.wrong[0][0]}: {r.wrong[0][1]}") for r in results if r.wrong]),
        ("UNSOUND ACCEPTS", [line(r, f"at {r.unsound[0][0]}: eager {r.unsound[0][1]}") for r in results if r.unsound]),
        ("symshape fails, make_fx traces", [line(r, f"{r.sym_status}: {r.sym_error}") for r in results
                                            if not r.sym_ok and r.torch_ok]),
        ("symshape traces, make_fx fails", [line(r, f"{r.torch_status}: {r.torch_error}") for r in results
                                            if r.sym_ok and not r.torch_ok]),
        ("sizes both symshape and torch accept where eager fails (index values, or checks torch lacks too)",
         [line(r, f"at {r.both_accept_errors[0][0]}: eager {r.both_accept_errors[0][1]}") for r in results
          if r.both_accept_errors]),
        ("more guards than torch", [line(r, f"{r.sym_guards} vs {r.torch_guards}") for r in both
                                    if r.sym_guards > r.torch_guards]),
    ]
    if args.details:
        sections.append(("all samples", [line(r, f"symshape {r.sym_status} ({r.sym_guards} guards), make_fx "
                                         f"{r.torch_status} ({r.torch_guards} guards)") for r in results]))
    for title, rows in sections:
        if rows:
            print(f"\n{title} ({len(rows)}):")
            print("\n".join(rows))


if __name__ == "__main__":
    main()
