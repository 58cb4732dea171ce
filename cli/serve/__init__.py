"""``symshape serve``: the shape-question server (API, worker processes, web page).

Install with ``pip install "symshape[serve]"``.  See :mod:`cli.serve.app`
for the API and :mod:`cli.serve.workers` for how programs are isolated.
"""
