"""How a traced program takes its inputs: tensors by position or by keyword, a module's own tensors.

Example::

    >>> def f(x, attention_mask=None): ...
    >>> by_keyword(f, ["attention_mask", "x"]), by_keyword(f, ["x"])
    (True, False)
"""
from __future__ import annotations

import inspect

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
    state = {}
    for n, p in program.named_parameters(remove_duplicate=False):
        state[n] = meta_like(p)
        if trainable and p.requires_grad:
            state[n].requires_grad_()
    for n, bf in program.named_buffers(remove_duplicate=False):
        state[n] = meta_like(bf)
    by_id = {}
    for n, p in list(program.named_parameters(remove_duplicate=False)) + list(
            program.named_buffers(remove_duplicate=False)):
        if id(p) in by_id:
            state[n] = state[by_id[id(p)]]
        else:
            by_id[id(p)] = n
            add_attr(n, state[n])
    return state
