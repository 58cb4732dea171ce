"""Launches per call of the Triton plans of BERT, GPT-2 and ViT: a reference tree against this one.

Planning needs no GPU: each model (``bench/gpu_models.py``'s full configs, bf16) is compiled
for ``target="triton"`` on the CPU (under ``TRITON_INTERPRET=1``, nothing is built for a GPU)
and its first variant's plan counted with :func:`compiler.wrapper.plan_launches` (kernels and
ATen calls other than views; an upper bound per call, the same rule for both trees).  Each
tree runs in its own process (``PYTHONPATH`` set to it), side by side in one table.

Usage::

    python bench/plan_launches.py --ref /work/main            # reference tree vs this tree
    python bench/plan_launches.py --only bert --small          # the small configs (faster)

Example (one row of the table)::

    >>> _row("bert", {"launches": 66, "kernels": 11, "at": "B=8, T=16"}, {"launches": 60, "kernels": 8, "at": "B=8, T=16"})
    'bert     66 (11 kernels)  B=8, T=16          60 (8 kernels)   B=8, T=16          -6'
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODELS = ("bert", "gpt2", "vit")


def count(names, small: bool) -> dict:
    """``{model: {"launches", "kernels", "at"}}`` for the tree on ``sys.path``."""
    # The tree's own bench/gpu_models.py (it puts its tree first on sys.path): run with cwd = the tree.
    sys.path.insert(0, os.path.join(os.getcwd(), "bench"))
    import torch
    import gpu_models
    import compiler
    from compiler import wrapper
    out = {}
    for case in gpu_models.CASES:
        if case.name not in names:
            continue
        torch.manual_seed(0)
        model = case.make(small).eval()
        specs = [s.format(dt="bf16") for s in case.specs]
        f = compiler.compile(model.to(torch.bfloat16), *specs,
                             target="triton", device="cpu")
        v = f.variants[0]
        plan = v.plan
        kernels = sum(type(s).__name__ == "KernelStep" for s in plan)
        launches = wrapper.plan_launches(plan) if hasattr(wrapper, "plan_launches") else _launches(plan)
        out[case.name] = {"launches": launches, "kernels": kernels,
                          "at": ", ".join(f"{k}={val}" for k, val in v.tp.hints.items()),
                          "traces": f.stats["traces"]}
    return out


def _launches(plan) -> int:
    """:func:`compiler.wrapper.plan_launches` for a tree without it (the same rule)."""
    views = {"view_as_traced", "view", "_unsafe_view", "t", "transpose", "permute", "unsqueeze", "squeeze",
             "expand", "slice", "select", "detach", "alias", "as_strided", "sym_size", "split", "unbind"}
    n, converted = 0, set()
    for s in plan:
        if type(s).__name__ == "KernelStep":
            n += 1
            continue
        name = (getattr(s.target, "__name__", None) or str(s.target)).split(".")[0]
        n += name not in views
        if name == "sdpa_shared_mask" and "additive" not in s.kwargs and s.args[4] not in converted:
            converted.add(s.args[4])
            n += 3
    return n


def _row(name, a, b) -> str:
    def cell(r):
        return f"{r['launches']} ({r['kernels']} kernels)"
    return f"{name:<8} {cell(a):<16} {a['at']:<18} {cell(b):<16} {b['at']:<18} {b['launches'] - a['launches']:+d}"


def _run_tree(tree, names, small) -> dict:
    env = dict(os.environ, PYTHONPATH=tree)
    try:
        import torch
        cuda = torch.cuda.is_available()
    except ImportError:
        cuda = False
    if not cuda:
        env["TRITON_INTERPRET"] = "1"
    cmd = [sys.executable, os.path.abspath(__file__), "--count", "--only", ",".join(names)] + (["--small"] if small else [])
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tree, timeout=1800)
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("COUNTS ")]
    if not line:
        raise SystemExit(f"counting in {tree} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    return json.loads(line[-1][len("COUNTS "):])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", default="/work/main", help="the reference tree (before)")
    ap.add_argument("--only", default=",".join(MODELS))
    ap.add_argument("--small", action="store_true", help="the small configs")
    ap.add_argument("--count", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    names = [n for n in a.only.split(",") if n]
    if a.count:
        print("COUNTS " + json.dumps(count(names, a.small)))
        return
    ref, new = _run_tree(os.path.abspath(a.ref), names, a.small), _run_tree(ROOT, names, a.small)
    print(f"Triton plan launches per call (kernels + non-view ATen calls), first variant, bf16, "
          f"{'small' if a.small else 'full'} configs")
    print(f"{'model':<8} {'before':<16} {'traced at':<18} {'after':<16} {'traced at':<18} change")
    print(f"{'':<8} {a.ref:<35} {ROOT}")
    for n in names:
        print(_row(n, ref[n], new[n]))


if __name__ == "__main__":
    main()
