"""Linears that read one input, as one linear over their stacked weights (training graphs).

Transformers' attention computes its query, key and value as three ``F.linear`` calls on one
hidden state (BERT, ViT, Llama), Llama's MLP its gate and up projections as two.  In a
training step each linear is three matmuls (the output, the input's gradient, the weight's
gradient) and the input's gradient is summed over the group: BERT's two layers make 18
cuBLAS calls and 4 adds for what six calls compute.  On a GPU a training step at these sizes
is host-bound (session 18's host split: host time ~= wall time), and every cuBLAS call costs
~20-60 us of host time, ~250 us at its first call at a new shape (a new sequence length).

:func:`group_linears` rewrites dynamo's graph before AOTAutograd traces it: the group's
weights (and biases) are concatenated along the output features, one linear computes every
output, and ``torch.split`` hands each consumer its slice (a view: no copy).  AOTAutograd then
derives the backward of the one linear (one matmul for the input's gradient, the group's sum
taken inside its contraction; one for the stacked weights' gradient) and of the concatenation
(a slice per parameter).  Each output element is the same dot product; the input's gradient
is summed once in fp32 instead of per linear and then in the output dtype.

The slices of the stacked output are not contiguous: ``view`` calls on them become ``reshape``
(the same values; a view wherever one exists, which is where the original ``view`` was valid).
A consumer that still needs a contiguous input would make AOTAutograd's trace fail: the
training backend then traces the graph as dynamo gave it (:func:`copy_graph` keeps it).
Opt-in (``SYMSHAPE_GROUP_LINEARS=1``) until measured on a GPU: it trades cuBLAS calls for
concatenations (HF BERT's training graphs under the Triton target: 42 matmuls and 44 kernels
become 30 and 49; Llama's 45 and 50 become 27 and 44), and on the CPU here the steps moved
within noise (train_compare --device cpu --quick --pairs eager: BERT 0.97 -> 0.93x, Llama
1.02 -> 1.20x, ViT 0.82 -> 0.84x of eager).

Example (``F.linear`` calls; the ``view(-1)`` of one output becomes a ``reshape``)::

    >>> import torch
    >>> from torch.fx.passes.shape_prop import ShapeProp
    >>> def qkv(x, wq, wk, wv):
    ...     F = torch.nn.functional
    ...     return F.linear(x, wq).sum() + F.linear(x, wk).view(-1).sum() * F.linear(x, wv).sum()
    >>> gm = torch.fx.symbolic_trace(qkv)
    >>> args = [torch.randn(3, 8), torch.randn(8, 8), torch.randn(4, 8), torch.randn(4, 8)]
    >>> want = gm(*args)
    >>> _ = ShapeProp(gm).propagate(*args)  # the weights' shapes (dynamo's graphs carry them)
    >>> group_linears(gm, enabled=True), sum(n.target is torch.nn.functional.linear for n in gm.graph.nodes)
    (1, 1)
    >>> torch.allclose(gm(*args), want, atol=1e-5)
    True
"""
from __future__ import annotations

import operator
import os

import torch
import torch.fx
import torch.nn.functional as F

#: The callables dynamo and ``symbolic_trace`` record for ``nn.Linear`` / ``F.linear``.
_LINEARS = (F.linear, torch._C._nn.linear)

#: Whether :func:`group_linears` rewrites (``SYMSHAPE_GROUP_LINEARS=1``; read at each call).
ENABLED = os.environ.get("SYMSHAPE_GROUP_LINEARS", "0") == "1"


def _shape(node, owner):
    """The shape of the tensor an FX node stands for (dynamo's ``example_value``, ``val``,
    ShapeProp's ``tensor_meta``, a module attribute), or None where unknown."""
    v = node.meta.get("example_value", node.meta.get("val"))
    if isinstance(v, torch.Tensor):
        return tuple(v.shape)
    meta = node.meta.get("tensor_meta")
    if meta is not None and hasattr(meta, "shape"):
        return tuple(meta.shape)
    if node.op == "get_attr":
        v = _attr(owner, node.target)
        return tuple(v.shape) if v is not None else None
    return None


def _weight_rows(node, owner) -> int | None:
    """The output features of a linear's weight node (static), or None where unknown."""
    shape = _shape(node, owner)
    if shape is None or len(shape) != 2 or not isinstance(shape[0], int):
        return None
    return shape[0]


def _attr(owner, target):
    obj = owner
    for part in target.split("."):
        obj = getattr(obj, part, None)
    return obj if isinstance(obj, torch.Tensor) else None


def _call(node):
    """``(x, weight, bias)`` of a linear call node, or None where it is not one this rewrite takes."""
    if node.op != "call_function" or node.target not in _LINEARS:
        return None
    args = list(node.args) + [None] * (3 - len(node.args))
    if len(args) != 3 or set(node.kwargs) - {"bias", "input", "weight"}:
        return None
    x = node.kwargs.get("input", args[0])
    w = node.kwargs.get("weight", args[1])
    b = node.kwargs.get("bias", args[2])
    if not isinstance(x, torch.fx.Node) or not isinstance(w, torch.fx.Node) or not (b is None or isinstance(b, torch.fx.Node)):
        return None
    return x, w, b


def _groups(gm) -> list:
    """Lists of two or more linear nodes that read one input node, each list in graph order,
    their weights of known rows and defined before the group's first linear, all with a bias
    or none."""
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    by_input: dict = {}
    for node in gm.graph.nodes:
        call = _call(node)
        if call is not None and _weight_rows(call[1], gm) is not None:
            by_input.setdefault(call[0], []).append(node)
    out = []
    for nodes in by_input.values():
        if len(nodes) < 2:
            continue
        calls = [_call(n) for n in nodes]
        if len({b is None for _, _, b in calls}) != 1:
            continue  # a bias on some only: stacking would need zeros for the others (not worth it)
        first = order[nodes[0]]
        if all(order[w] < first and (b is None or order[b] < first) for _, w, b in calls):
            out.append(nodes)
    return out


def _rewrite(gm, nodes) -> None:
    calls = [_call(n) for n in nodes]
    x = calls[0][0]
    sizes = [_weight_rows(w, gm) for _, w, _ in calls]
    g = gm.graph
    with g.inserting_before(nodes[0]):
        weight = g.call_function(torch.cat, ([w for _, w, _ in calls], 0))
        bias = g.call_function(torch.cat, ([b for _, _, b in calls], 0)) if calls[0][2] is not None else None
        y = g.call_function(nodes[0].target, (x, weight, bias))
        parts = g.call_function(torch.split, (y, sizes, -1))
        outs = [g.call_function(operator.getitem, (parts, i)) for i in range(len(nodes))]
    for node, out in zip(nodes, outs):
        out.meta.update({k: v for k, v in node.meta.items() if k in ("stack_trace", "nn_module_stack", "source_fn_stack")})
        node.replace_all_uses_with(out)
        g.erase_node(node)
        for user in list(out.users):
            # A slice of the stacked output is strided: a view of it may not exist where the
            # linear's own output had one.  The same values either way (nothing writes through it).
            if user.op == "call_method" and user.target == "view" and user.args[0] is out and _read_only(user):
                user.target = "reshape"
            elif user.op == "call_function" and user.target is torch.Tensor.view and user.args[0] is out \
                    and _read_only(user):
                user.target = torch.Tensor.reshape


def _read_only(node) -> bool:
    """Whether no user of ``node`` writes through it (an in-place method or ``out=``)."""
    for user in node.users:
        name = user.target if isinstance(user.target, str) else getattr(user.target, "__name__", "")
        if name.endswith("_") and not name.endswith("__") or "out" in user.kwargs:
            return False
    return True


def copy_graph(graph: torch.fx.Graph) -> torch.fx.Graph:
    """A copy of ``graph`` (nodes, their meta shallowly, and the attributes dynamo sets on them
    such as a placeholder's ``_dynamo_source``): what to restore if a rewrite fails."""
    new = torch.fx.Graph()
    new._codegen = graph._codegen
    made: dict = {}
    new.output(new.graph_copy(graph, made))
    plain = set(torch.fx.Graph().placeholder("x").__dict__)
    for old, node in made.items():
        for k in set(old.__dict__) - plain:
            setattr(node, k, getattr(old, k))
    return new


def group_linears(gm: torch.fx.GraphModule, enabled=None) -> int:
    """Rewrite each group of linears reading one input in ``gm`` (a dynamo graph) as one linear
    over stacked weights, split after; returns how many groups were rewritten.  ``enabled``:
    whether to (None: :data:`ENABLED`)."""
    if not (ENABLED if enabled is None else enabled):
        return 0
    groups = _groups(gm)
    for nodes in groups:
        _rewrite(gm, nodes)
    if groups:
        gm.recompile()
    return len(groups)


__all__ = ["group_linears", "copy_graph", "ENABLED"]
