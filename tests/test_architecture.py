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


def test_no_import_circles_even_through_typing_only_imports():
    """A model imported back by its renderer under ``if TYPE_CHECKING:`` is a circle of design."""
    cycles = _module_cycles(import_graph(typing_only=True))
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


def _is_text(n) -> bool:
    if isinstance(n, ast.Constant) and isinstance(n.value, str):
        return True
    return isinstance(n, (ast.Tuple, ast.List, ast.Set)) and bool(n.elts) and all(_is_text(e) for e in n.elts)


def test_kinds_and_statuses_are_enums_not_strings():
    """No ``x.kind == "..."`` / ``status in ("...", ...)``: kinds are enums (``shapes.enums.TextEnum``)."""
    fields = {"kind", "status"}

    def named(n):
        return (isinstance(n, ast.Attribute) and n.attr in fields) or (isinstance(n, ast.Name) and n.id in fields)

    bad = []
    for path in modules().values():
        for n in ast.walk(ast.parse(open(path).read(), path)):
            if isinstance(n, ast.Compare) and any(isinstance(o, (ast.Eq, ast.NotEq, ast.In, ast.NotIn))
                                                  for o in n.ops):
                sides = [n.left, *n.comparators]
                if any(named(x) for x in sides) and any(_is_text(x) for x in sides):
                    bad.append(f"{os.path.relpath(path, ROOT)}:{n.lineno}: {ast.unparse(n)}")
    assert not bad, "\n".join(bad)


#: The most catch-alls (``except Exception``/``BaseException``/bare ``except``) the packages may hold.
MAX_CATCH_ALLS = 20


def test_catch_alls_are_few_and_each_says_why():
    """Catch-alls only at process boundaries (CLI main, worker loop, the user's code), each with its
    reason as a comment on the ``except`` line; symshape's own failures are typed (``shapes.errors``)."""

    def catch_all(t) -> bool:
        if t is None:
            return True
        names = t.elts if isinstance(t, ast.Tuple) else [t]
        return any(isinstance(n, ast.Name) and n.id in ("Exception", "BaseException") for n in names)

    found, silent = [], []
    for path in modules().values():
        lines = open(path).read().splitlines()
        for n in ast.walk(ast.parse("\n".join(lines), path)):
            if isinstance(n, ast.ExceptHandler) and catch_all(n.type):
                where = f"{os.path.relpath(path, ROOT)}:{n.lineno}"
                found.append(where)
                if "#" not in lines[n.lineno - 1]:
                    silent.append(where)
    assert not silent, "catch-alls without a reason comment on the line: " + ", ".join(silent)
    assert len(found) <= MAX_CATCH_ALLS, f"{len(found)} catch-alls (at most {MAX_CATCH_ALLS}): " + ", ".join(found)


#: The longest a function may be (its ``def`` line to its last line, docstring included).
MAX_FUNCTION_LINES = 80


def test_no_function_over_80_lines():
    long = []
    for path in modules().values():
        for n in ast.walk(ast.parse(open(path).read(), path)):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = n.end_lineno - n.lineno + 1
                if size > MAX_FUNCTION_LINES:
                    long.append(f"{os.path.relpath(path, ROOT)}:{n.lineno} {n.name} ({size} lines)")
    assert not long, "functions over 80 lines: " + ", ".join(long)
