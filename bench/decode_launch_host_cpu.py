"""Host work per decode token to launch the Triton kernels that see the cache length, on the CPU.

The kernels outside the piecewise CUDA graphs (:mod:`compiler.piecewise`: each layer's
cache ``cat`` with the key rotary, the positions) meet a new cache length at every token.
Two ways, timed in the same process, alternating (process time, best of rounds):

* ``bind per size``: :func:`compiler.wrapper.bind_launches` then the bound launches
  (what every eager segment did per call before ``decode6``);
* ``launch_at``: the launches made once (:func:`compiler.piecewise.sized_launches`),
  each call planning its sizes and launching through a cached
  :class:`~compiler.codegen.triton_launch.Launcher`.

The kernels themselves are stubbed (``run`` does nothing): this is the Python host work
around a launch, which on the GPU machine's slower host costs about three times as much.
Tiny HF Llama (4 layers), Triton target under ``TRITON_INTERPRET=1`` (set here).

Usage::

    python bench/decode_launch_host_cpu.py

Example::

    >>> _best([3.0, 1.0, 2.0])
    1.0
"""
import os
import sys
import time

os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402


def _best(xs):
    return min(xs)


def main(rounds=6, tokens=2000):
    import transformers

    import compiler
    from compiler import cuda_graphs
    from compiler.piecewise import sized_launches
    from compiler.wrapper import KernelStep, bind_launches
    compiler.register()
    conf = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192)
    conf._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(conf).eval()
    fn = torch.compile(model, backend="symshape", dynamic=True, options={"cuda_graphs": True, "target": "triton"})
    with torch.no_grad():
        cache = transformers.DynamicCache()
        out = fn(input_ids=torch.randint(0, 128, (1, 20)), past_key_values=cache, use_cache=True)
        for _ in range(2):
            out = fn(input_ids=out.logits[:, -1].argmax(-1)[:, None], past_key_values=cache, use_cache=True)
    pw = next(p for gp in cuda_graphs_programs(compiler) for p in gp.pieces.values() if p is not None)
    steps = [st for s in pw.segments if not s.graphed for st in s.steps]
    kernels = [st for st in steps if isinstance(st, KernelStep)]
    # The kernels themselves: nothing (the host work around them is timed).  On the class: a
    # size of a new divisibility class builds its variant (another JIT function) on first use.
    from triton.runtime.interpreter import InterpretedFunction
    InterpretedFunction.run = lambda self, *a, **k: None
    split = [i for i, s in enumerate(pw.v.lp.symbols) if s in pw.dims][0]
    base = list(pw._cell[0] or [0] * len(pw.v.lp.symbols))
    cell = [None]
    sized = sized_launches(steps, cell)
    bufs = {id(st): [torch.empty(0)] * len(st.buffers) for st in kernels}

    def kv(n):
        k = list(base)
        k[split] = n
        return tuple(k)

    def old(n):
        for st, launch in zip(kernels, bind_launches(steps, kv(n))):
            launch(bufs[id(st)])

    def new(n):
        cell[0] = kv(n)
        for st, launch in zip(kernels, sized):
            launch(bufs[id(st)])

    res = {"bind per size": [], "launch_at": []}
    start = 10 ** 5
    for r in range(rounds):
        for name, f in (("bind per size", old), ("launch_at", new)):
            t0 = time.process_time()
            for n in range(tokens):
                f(start + n)
            start += tokens
            res[name].append((time.process_time() - t0) / tokens * 1e6)
    print(f"host us per token to launch the {len(kernels)} Triton kernels outside the graphs (tiny Llama, "
          f"{len(pw.segments)} segments), best of {rounds} x {tokens} new cache lengths, kernels stubbed:")
    ref = _best(res["bind per size"])
    for name, xs in res.items():
        print(f"  {name:<16} {_best(xs):7.2f} us   ({_best(xs) / ref:.2f}x; mean of rounds {sum(xs) / len(xs):.1f} us; "
              f"rounds: {' '.join(f'{x:.1f}' for x in xs)})")
    print("  (bind per size keeps each binding, up to 4096 per kernel: its first rounds fill those caches,"
          " and the objects kept make Python's full garbage collections frequent)")


def cuda_graphs_programs(compiler):
    return compiler.backend.graphed_programs()


if __name__ == "__main__":
    main()
