"""How a traced program takes its inputs: tensors by position or by keyword, a module's own tensors.

Example::

    >>> def f(x, attention_mask=None): ...
    >>> by_keyword(f, ["attention_mask", "x"]), by_keyword(f, ["x"])
    (True, False)
"""
from __future__ import annotations

import inspect

import sys

import torch

from .errors import SpecError
from .recorder import meta_like


def by_keyword(program, names: list, kwargs=()) -> bool:
    """How inputs are passed: True to pass them by keyword (every spec is named
    after a parameter and they are not simply the leading positionals, e.g.
    ``ids`` and ``attention_mask`` of a transformers model), False for
    positional.  ``kwargs`` names the non-tensor arguments passed by keyword.
    Raises SpecError when the inputs cannot be passed at all."""
    fn = program.forward if isinstance(program, torch.nn.Module) else program
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    params = list(sig.parameters.values())
    fname = getattr(fn, "__qualname__", repr(fn))
    given = set(kwargs)
    if given:
        takes = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        unknown = sorted(given - takes)
        if unknown and not any(p.kind is p.VAR_KEYWORD for p in params):
            raise SpecError(f"{fname} has no parameter named {', '.join(map(repr, unknown))} "
                            f"(its parameters: {', '.join(p.name for p in params) or 'none'})")
        clash = [k for k in names if k in given]
        if clash:
            raise SpecError(f"{', '.join(map(repr, clash))} is given both as an input spec and as an argument")
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    by_name = {p.name: p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    n = len(names)
    if names and all(nm in by_name for nm in names) and names != [p.name for p in positional[:n]]:
        missing = [p.name for p in params if p.default is p.empty and p.name not in names
                   and p.name not in given and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if missing:
            raise SpecError(f"{fname} needs input(s) {', '.join(missing)}, which no spec names")
        return True
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return False
    if n > len(positional):
        raise SpecError(
            f"{fname} takes {len(positional)} positional input(s) ({', '.join(p.name for p in positional)}) "
            f"but {n} input spec(s) were given; name a spec after a parameter to pass it by keyword"
        )
    taken = [p.name for p in positional[:n] if p.name in given]
    if taken:
        raise SpecError(f"the input specs fill {fname}'s parameter(s) {', '.join(taken)} by position, which are "
                        f"also given as arguments; name each spec after its parameter")
    missing = [p.name for p in positional[n:] if p.default is p.empty and p.name not in given]
    if missing:
        required = len([p for p in positional if p.default is p.empty and p.name not in given])
        raise SpecError(f"{fname} needs {required} input(s) but {n} spec(s) were given; missing: "
                        f"{', '.join(missing)}")
    return False


def module_state(program, add_attr, *, trainable: bool) -> dict:
    """Meta tensors for ``program``'s parameters and buffers, by name (empty for a function).

    Tied weights are one tensor in the module and one meta tensor here;
    ``add_attr(name, tensor)`` is called once per distinct tensor (the graph's
    attributes).  With ``trainable`` the parameters that require grad do here.

    >>> sorted(module_state(torch.nn.Linear(2, 3), lambda n, t: None, trainable=False))
    ['bias', 'weight']
    """
    if not isinstance(program, torch.nn.Module):
        return {}
    state, local = {}, {}
    for n, p in program.named_parameters(remove_duplicate=False):
        state[n], local[n] = _meta_state(p, trainable and p.requires_grad)
    for n, bf in program.named_buffers(remove_duplicate=False):
        state[n], local[n] = _meta_state(bf, False)
    by_id = {}
    for n, p in list(program.named_parameters(remove_duplicate=False)) + list(
            program.named_buffers(remove_duplicate=False)):
        if id(p) in by_id:
            state[n] = state[by_id[id(p)]]
        else:
            by_id[id(p)] = n
            add_attr(n, local[n])
    return state


def fsdp_managed(program) -> bool:
    """Whether FSDP2 (``fully_shard``) manages ``program``'s parameters: it swaps them itself (the sharded
    ones for the gathered ones around each forward), so the trace leaves them in place.

    >>> fsdp_managed(torch.nn.Linear(2, 2))
    False
    """
    fsdp = sys.modules.get("torch.distributed.fsdp")
    return (isinstance(program, torch.nn.Module) and fsdp is not None
            and any(isinstance(m, fsdp.FSDPModule) for m in program.modules()))


def fsdp_lazy_init(program) -> None:
    """FSDP2's first-forward setup of a root module, done before the trace: its lazy initialization and
    one unshard/reshard of each group, which make the padded shards and the gathered parameters (views of
    buffers FSDP2 allocates and frees) outside any op.  Every later forward gathers into them again, as the
    traced one does; on a fake process group no data moves."""
    if fsdp_managed(program):
        from torch.distributed.fsdp import FSDPModule, fully_shard
        fully_shard.state(program)._lazy_init()
        for m in program.modules():
            if isinstance(m, FSDPModule):
                m.unshard()
                m.reshard()


def _meta_state(t: torch.Tensor, grad: bool):
    """(what the module holds while traced, the tensor the graph records): a meta tensor twice, or for a
    DTensor parameter (a tensor-parallel plan's shard) a DTensor of the same layout over a meta shard and that
    shard: the ops the trace records run on each rank's shard."""
    from torch.distributed.tensor import DTensor
    if isinstance(t, DTensor):
        shard = meta_like(t.to_local())
        if grad:
            shard.requires_grad_()
        # The constructor, not from_local: from_local wraps a view of the shard, made outside the trace.
        return DTensor(shard, t._spec, requires_grad=grad), shard
    m = meta_like(t)
    if grad:
        m.requires_grad_()
    return m, m


def captured_modules(program) -> list:
    """The nn.Modules a function reaches without taking them as inputs: its closure cells and
    the globals its code names (also inside nested functions it closes over), a bound
    method's ``self``, a ``functools.partial``'s arguments; lists, tuples and dicts of
    modules count.  Submodules of a module found are not listed again.

    >>> lin = torch.nn.Linear(2, 2)
    >>> def loss(x):
    ...     return lin(x).sum()
    >>> [type(m).__name__ for m in captured_modules(loss)]
    ['Linear']
    """
    import functools
    found: list = []
    seen: set = set()

    def add(v, depth):
        if id(v) in seen or depth > 3:
            return
        seen.add(id(v))
        if isinstance(v, torch.nn.Module):
            found.append(v)
        elif isinstance(v, (list, tuple)):
            for x in v:
                add(x, depth + 1)
        elif isinstance(v, dict):
            for x in v.values():
                add(x, depth + 1)
        elif isinstance(v, functools.partial):
            add(v.func, depth + 1)
            add(v.args, depth + 1)
            add(dict(v.keywords), depth + 1)
        elif inspect.ismethod(v):
            add(v.__self__, depth + 1)
            add(v.__func__, depth + 1)
        elif inspect.isfunction(v):
            for cell in v.__closure__ or ():
                try:
                    add(cell.cell_contents, depth + 1)
                except ValueError:  # an empty cell (a name not yet bound)
                    pass
            names = set(_code_names(v.__code__))
            g = v.__globals__
            for n in names:
                if n in g and not inspect.ismodule(g[n]):
                    add(g[n], depth + 1)

    if isinstance(program, torch.nn.Module):
        add(program.forward.__func__ if inspect.ismethod(program.forward) else program.forward, 0)
        found = [m for m in found if m is not program]
    else:
        add(program, 0)
    # A module that is another's submodule is swapped with its parent.
    inner = {id(s) for m in found for s in m.modules() if s is not m}
    out = []
    for m in found:
        if id(m) not in inner and all(m is not o for o in out):
            out.append(m)
    return out


def _code_names(code):
    yield from code.co_names
    for c in code.co_consts:
        if inspect.iscode(c):
            yield from _code_names(c)


class CapturedState:
    """Swap the parameters and buffers of modules a program closes over for meta tensors
    while it is traced, and back after (a context manager).

    A traced module's own tensors are meta tensors already (:func:`module_state`); a
    module the program reaches through its closure keeps real tensors, which autograd
    would then meet next to meta gradients.  Each real tensor becomes a graph constant
    (``constant(real, meta)`` registers it); parameters that require grad keep requiring it.

    >>> lin = torch.nn.Linear(2, 3)
    >>> with CapturedState([lin], lambda real, meta: None, trainable=True):
    ...     lin.weight.device.type, lin.weight.requires_grad
    ('meta', True)
    >>> lin.weight.device.type
    'cpu'
    """

    def __init__(self, modules, constant, *, trainable: bool):
        self.modules = list(modules)
        self.constant = constant
        self.trainable = trainable
        self.saved: list = []

    def __enter__(self):
        metas: dict = {}
        for root in self.modules:
            for mod in root.modules():
                for is_param, store in ((True, mod.__dict__.get("_parameters") or {}),
                                        (False, mod.__dict__.get("_buffers") or {})):
                    for name, t in list(store.items()):
                        if t is None or t.device.type == "meta":
                            continue
                        m = metas.get(id(t))
                        if m is None:
                            m = meta_like(t)
                            if is_param:
                                m = torch.nn.Parameter(m, requires_grad=self.trainable and t.requires_grad)
                            metas[id(t)] = m
                            self.constant(t, m)
                        self.saved.append((store, name, t))
                        store[name] = m
        return self

    def __exit__(self, *exc):
        for store, name, t in reversed(self.saved):
            store[name] = t
        self.saved.clear()
        return False
