"""The layout a newcomer reads: imports flow one way, no circles, ARCHITECTURE.md matches the tree.

Imports are read from the source with ``ast`` (top-level and function-local
alike): a function-local import that closes a circle is a circle all the
same, it only hides until run time.
"""
import ast
import os
import re

import networkx as nx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ["shapes", "guards", "validation", "compiler", "cli"]
#: Which packages each package may import (the data flow of the design card).
ALLOWED = {
    "shapes": {"shapes"},
    "guards": {"shapes", "guards"},
    "validation": {"shapes", "guards", "validation"},
    "compiler": {"shapes", "guards", "compiler"},
    "cli": set(PACKAGES),
}


def modules() -> dict:
    """Dotted module name -> file path, for every module of the packages."""
    out = {}
    for pkg in PACKAGES:
        for dirpath, _, files in os.walk(os.path.join(ROOT, pkg)):
            if "__pycache__" in dirpath:
                continue
            for f in files:
                if f.endswith(".py"):
                    rel = os.path.relpath(os.path.join(dirpath, f), ROOT)[:-3].replace(os.sep, ".")
                    out[rel[:-len(".__init__")] if rel.endswith(".__init__") else rel] = os.path.join(dirpath, f)
    return out


def _resolve(mod: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = mod.split(".")
    base = base if is_pkg else base[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(typing_only: bool = False) -> nx.DiGraph:
    """The import graph of the packages; ``typing_only`` adds the imports under ``if TYPE_CHECKING:``."""
    mods = modules()
    g = nx.DiGraph()
    g.add_nodes_from(mods)
    for mod, path in mods.items():
        tree = ast.parse(open(path).read(), path)
        is_pkg = path.endswith("__init__.py")
        for node in ast.walk(tree):
            if not typing_only and isinstance(node, ast.If) and _is_type_checking(node.test):
                node.body = []  # typing-only imports never run
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(mod, is_pkg, node)
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            for t in targets:
                # the longest prefix that is a module of ours
                parts = t.split(".")
                for i in range(len(parts), 0, -1):
                    cand = ".".join(parts[:i])
                    if cand in mods:
                        if cand != mod:
                            g.add_edge(mod, cand, line=getattr(node, "lineno", 0))
                        break
    return g


def _is_type_checking(test) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _without_package_edges(g):
    # A package's __init__ re-exporting its submodules is not a circle of logic:
    # drop the edges from a module to a package that contains it.
    mods = modules()
    h = g.copy()
    for a, b in list(h.edges):
        if mods[b].endswith("__init__.py") and a.startswith(b + "."):
            h.remove_edge(a, b)
    return h


def _module_cycles(g):
    return list(nx.simple_cycles(_without_package_edges(g)))


def test_no_import_circles():
    cycles = _module_cycles(import_graph())
    assert not cycles, "import circles: " + "; ".join(" -> ".join(c + [c[0]]) for c in cycles[:10])


#: The engine's layers below the ShapeEnv face: they never see it, not even for typing.
BELOW_THE_FACE = ["shapes.decide", "shapes.simplify", "shapes.size_oblivious", "shapes.reasoner", "shapes.facts",
                  "shapes.symbols", "shapes.value_ranges", "shapes.conditions"]


def test_engine_layers_below_the_shapeenv_never_import_it():
    g = _without_package_edges(import_graph(typing_only=True))
    bad = [m for m in BELOW_THE_FACE if "shapes.env" in nx.descendants(g, m)]
    assert not bad, f"reach the ShapeEnv (shapes.env): {bad}"


def test_nothing_reaches_around_the_shapeenv():
    """Code outside the engine's core uses the face: no ``env.decisions``/``env.table``/``env.facts_store``."""
    core = {"shapes/env.py"}
    pat = re.compile(r"\benv\.(decisions|table|facts_store)\b")
    bad = []
    for path in modules().values():
        rel = os.path.relpath(path, ROOT).replace(os.sep, "/")
        if rel in core:
            continue
        for i, line in enumerate(open(path), 1):
            code = line.split("#", 1)[0]
            if pat.search(code) and ">>>" not in code:
                bad.append(f"{rel}:{i}: {line.strip()}")
    assert not bad, "\n".join(bad)


def test_imports_follow_the_data_flow():
    g = import_graph()
    bad = [f"{a} imports {b} (line {d['line']})" for a, b, d in g.edges(data=True)
           if b.split(".")[0] not in ALLOWED[a.split(".")[0]]]
    assert not bad, "\n".join(bad)


def test_no_private_names_imported_across_modules():
    mods = modules()
    bad = []
    for mod, path in mods.items():
        tree = ast.parse(open(path).read(), path)
        is_pkg = path.endswith("__init__.py")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = _resolve(mod, is_pkg, node)
                if base.split(".")[0] not in PACKAGES:
                    continue
                for a in node.names:
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        bad.append(f"{mod}:{node.lineno} imports {base}.{a.name}")
    assert not bad, "\n".join(bad)


def test_architecture_md_lists_every_module():
    text = open(os.path.join(ROOT, "ARCHITECTURE.md")).read()
    listed = set(re.findall(r"`((?:%s)(?:/[\w]+)*\.py)`" % "|".join(PACKAGES), text))
    files = {os.path.relpath(p, ROOT).replace(os.sep, "/") for p in modules().values()}
    assert not (files - listed), f"not in ARCHITECTURE.md: {sorted(files - listed)}"
    assert not (listed - files), f"in ARCHITECTURE.md but not in the tree: {sorted(listed - files)}"


def test_provenance_treats_every_package_as_symshape():
    """A frame in any of symshape's packages is never "the user's line" (read from pyproject.toml)."""
    from shapes.provenance import engine_packages, is_engine_file
    assert set(engine_packages()) == set(PACKAGES)
    assert all(is_engine_file(path) for path in modules().values())
