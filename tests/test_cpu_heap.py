"""compiler.codegen.cpu_heap: a compiled CPU program's megabyte buffers come from malloc's heap.

HF Gemma (d=256, fp32) at batch 4 x 250 tokens, compiled for the C++ target, run in a fresh
process (malloc's settings are the process's) with and without ``SYMSHAPE_MALLOPT=0``: minor
page faults per forward call, after warm-up calls, counted by the kernel (``getrusage``).
"""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytest.importorskip("transformers")

SCRIPT = r'''
import resource, torch, transformers as t
import compiler
torch.manual_seed(0)
torch.set_num_threads(2)
cfg = t.GemmaConfig(vocab_size=1000, hidden_size=256, intermediate_size=1024, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=1, head_dim=64, max_position_embeddings=1024)
m = t.GemmaModel(cfg).eval()
c = compiler.compile(m, "input_ids: i64[B, T]", target="cpp")
ids = torch.randint(0, 1000, (4, 250))
with torch.no_grad():
    want = m(input_ids=ids).last_hidden_state
    for _ in range(3):
        got = c(ids)
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        c(ids)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / 5
got = got.last_hidden_state if hasattr(got, "last_hidden_state") else got[0]
assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()
print("FAULTS", faults)
'''


def _faults(**env) -> float:
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=ROOT, timeout=600,
                       env=dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **env))
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("FAULTS ")]
    assert line, f"the program did not run:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return float(line[-1].split()[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc settings")
def test_a_compiled_model_takes_no_page_faults_per_call():
    # glibc's dynamic threshold sometimes keeps the blocks in the heap by itself (which thread
    # freed what, in which order): up to three runs with its defaults, for one that faults.
    for _ in range(3):
        fresh = _faults(SYMSHAPE_MALLOPT="0")
        if fresh >= 500:
            break
    else:
        pytest.skip(f"malloc's defaults served no fresh pages in three runs ({fresh} faults a call): nothing to compare")
    # Faults outside malloc's blocks (Python's own 1 MiB object arenas are mmap'd and unmapped as
    # they empty) add a few hundred a call in some runs: the best of up to three runs with the
    # thresholds raised. Without them every run faults like ``fresh``, so the test still fails.
    kept = []
    for _ in range(3):
        kept.append(_faults())
        if kept[-1] * 10 < fresh:
            break
    assert min(kept) * 10 < fresh, (kept, fresh)
