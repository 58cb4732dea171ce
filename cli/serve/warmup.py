"""Imported by the workers' forkserver: one small run of each task, so forked workers start warm.

Importing torch is only part of a cold start; the first trace, explain,
FLOP count and dinfer search each load more (torch's meta kernels and
dispatch tables, sympy's caches, Z3).  Doing it once here, before any
worker is forked, makes a fresh worker answer its first request as fast
as an old one, which matters after a worker had to be replaced.
"""


def _warm():
    import shapes
    from guards.explain import explain
    from shapes.flops import count_flops
    from validation.dinfer import dinfer

    def f(x, w):
        return (x.view(-1, 2) @ w).relu().sum(0)
    tp = shapes.trace(f, "x: f32[N]", "w: f32[2, 3]")
    explain(tp, at={"N": 3})
    count_flops(tp)
    dinfer(f, "x: f32[N]", "w: f32[2, 3]", dims={"N": (1, 16)}, time_budget=5)


_warm()
