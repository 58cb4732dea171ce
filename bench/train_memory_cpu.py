"""Host memory of one CPU training step: eager, Inductor dynamic and symshape side by side.

Each mode runs in a fresh process: a GPT-2 (d=768, 2 layers, vocabulary 8192) under bf16 autocast
compiles at two small lengths, then takes one step at ``--batch`` x ``--length``; the table gives the
growth of the process's high-water mark (``ru_maxrss``) over that step, the step's peak above what the
process held before, and its time.  Large steps make the step's own buffers dominate.  The CUDA
memory of the same step is in ``bench/train_compare.py`` (memory phases).

    python bench/train_memory_cpu.py --batch 4 --length 1024
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ("eager", "ind_dyn", "symshape")


def _step_in_this_process(mode: str, batch: int, length: int) -> dict:
    import torch
    import transformers as tf
    torch.manual_seed(0)
    vocab = 8192
    m = tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=vocab, n_embd=768, n_layer=2, n_head=12, n_positions=2048,
                                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)).train()
    m.config.loss_type = m.loss_type = "ForCausalLM"
    if mode == "symshape":
        import compiler
        compiler.register()
        f = torch.compile(m, backend="symshape", dynamic=True)
    elif mode == "ind_dyn":
        f = torch.compile(m, dynamic=True)
    else:
        f = m
    g = torch.Generator().manual_seed(0)

    def step(n):
        ids = torch.randint(0, vocab, (batch, n), generator=g)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = f(input_ids=ids, labels=ids).loss
        loss.backward()
        for p in m.parameters():
            p.grad = None

    step(17), step(33)  # compiled (and its small size classes built) before the measured step
    held = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    step(length)
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"mode": mode, "held_mib": held, "step_peak_mib": after - max(before, held), "step_s": seconds}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--length", type=int, default=1024)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        print("RESULT " + json.dumps(_step_in_this_process(a.worker, a.batch, a.length)))
        return 0
    print(f"GPT-2 (d=768, 2 layers, vocab 8192) bf16 autocast, one step at B={a.batch}, T={a.length}; "
          f"threads={os.environ.get('OMP_NUM_THREADS', 'default')}, load {os.getloadavg()[0]:.1f}")
    print(f"{'mode':<10} {'held MiB':>9} {'step peak MiB':>14} {'step s':>7}")
    for mode in a.modes.split(","):
        r = subprocess.run([sys.executable, __file__, "--worker", mode, "--batch", str(a.batch),
                            "--length", str(a.length)], capture_output=True, text=True, cwd=ROOT,
                           env=dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")))
        got = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
        if not got:
            print(f"{mode:<10} failed: {(r.stderr.strip().splitlines() or ['no output'])[-1][:100]}")
            continue
        d = json.loads(got[-1][len("RESULT "):])
        print(f"{mode:<10} {d['held_mib']:>9.0f} {d['step_peak_mib']:>14.0f} {d['step_s']:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
