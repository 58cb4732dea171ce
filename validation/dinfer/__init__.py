"""dinfer: enumerate the input sizes a program accepts, and how it behaves on each.

The search (:mod:`.search`) traces the program at one point of the box of
dim ranges, records the class of that trace (the sizes that take the same
path: the conjunction of its guards, specializations, runtime asserts and
the engine's assumptions), then asks Z3 for a point of the box that lies in
none of the classes found so far, traces there, and repeats.  It stops when
Z3 proves no such point exists (the space is *complete*) or the budget runs
out (then it says which region is left).

A trace that raises gives an error class: its predicate is the path up to
the error, which for a failing ``torch._check`` includes the negated check.
A data-dependent decision takes the branch typical data take and becomes a
run-time condition (:mod:`.assume`).  What symshape cannot trace is its own
outcome, "unsupported by symshape" (:mod:`.limits`), never the program's error.

The summary (:mod:`.summary`) merges the classes of each outcome into one
short formula proved equivalent with Z3, and :mod:`.suggest` turns the
valid region into a torch.export spec.

Example::

    >>> import torch
    >>> from validation import dinfer
    >>> def f(x):
    ...     if x.shape[0] > 8:
    ...         return x[:8].view(2, 4)
    ...     return x.view(-1, 2)
    >>> space = dinfer(f, "x: f32[N]", dims={"N": (1, 32)})
    >>> space.complete, len(space.classes)
    (True, 3)
    >>> for c in space.classes:
    ...     print(c.outcome(), "|", c.describe(), "|", c.example)
    ok | N <= 8 and N % 2 == 0 | {'N': 2}
    RuntimeError | N <= 8 and N % 2 != 0 | {'N': 1}
    ok | N >= 9 | {'N': 9}
    >>> space.summary.valid_iff
    'N >= 9 or N % 2 == 0'
    >>> space.valid_ranges
    {'N': (2, 32)}
"""
from .search import DEFAULT_RANGE, SEARCH_SHARE, TraceEvent, dinfer, sizes_that_run  # noqa: F401
