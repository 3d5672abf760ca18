"""Import layers: every import in app/ and deployments/ (top-level, inside functions, under TYPE_CHECKING) points
down the declared order, and no two packages depend on each other, directly or through others.

A unit is a top-level module or package of `app` (`app.ingest`, `app.catalog`, `app.cli` whether a module or a
package) or all of `deployments`; imports inside one unit are free. A new unit must be given a layer below.
"""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass
from pathlib import Path

# Bottom → top. A unit may import units on lower layers only: the units of one layer are peers and never import
# each other (app.ingest and app.index meet only in app.indexing; app.train and app.eval share what sits below).
LAYERS: list[set[str]] = [
    {"app", "app.errors"},  # `app` is the package's own __init__ (its version)
    {"app.envs", "app.fusion", "app.demo_corpus", "app.config_files", "app.passage",
     "app.page_view", "app.filters"},  # env variables; pure helpers (filters: the metadata filter language)
    {"app.config", "app.storage", "app.raycluster", "app.hardware"},  # … and what this machine computes with
    {"app.catalog", "app.tracking", "app.runs", "app.collections"},  # versions, runs, collections' roots
    {"app.models", "app.dataset", "app.apikeys", "app.audit"},  # model roles; a dataset's files; keys; audit log
    {"app.ingest", "app.index", "app.rag", "app.qa"},  # the pipeline, the index, the RAG flow, question sets
    {"app.indexing"},  # ingest → index build
    {"app.train", "app.eval"},
    {"app.services", "app.serving", "app.remote"},  # long-lived actors, Serve deployment, job submission
    {"app.promotion", "app.overview"},  # judged through the graph; what runs
    {"app.adapt"},  # adapting to a corpus: its generator is judged as a promotion is
    {"deployments"},  # the Serve graph
    {"app.cli"},
]
# Beyond the order: pairs that never import each other although the order would allow it. Serving uses what the
# models are (app.models), never the code that trains them.
FORBIDDEN = {("deployments", "app.train")}
PACKAGES = ("app", "deployments")  # the directories walked
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Import:
    file: str  # relative to the project root
    line: int
    source: str  # the importing module
    target: str  # the imported module (a submodule when `from X import name` names one)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.source} → {self.target}"


def unit_of(module: str) -> str:
    parts = module.split(".")
    return parts[0] if parts[0] == "deployments" else ".".join(parts[:2])


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def find_modules(root: Path) -> dict[str, Path]:
    """Every module under the walked packages, by dotted name (new packages and modules included as they appear)."""
    return {module_name(p, root): p for pkg in PACKAGES for p in sorted((root / pkg).rglob("*.py"))}


def imports_in(source: str, module: str, is_package: bool, known: set[str], file: str = "") -> list[Import]:
    """The imports of `module` (its source text) that reach a walked package, at any depth of the syntax tree."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package, one level up per extra dot
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, *([node.module] if node.module else [])])
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        found += [Import(file, node.lineno, module, t) for t in dict.fromkeys(targets)
                  if t.split(".")[0] in PACKAGES]
    return found


def all_imports(root: Path | None = None) -> list[Import]:
    root = root or ROOT
    modules = find_modules(root)
    known = set(modules)
    return [imp for name, path in modules.items()
            for imp in imports_in(path.read_text(encoding="utf-8"), name, path.name == "__init__.py", known,
                                  str(path.relative_to(root)))]


def layer_of(unit: str) -> int | None:
    return next((i for i, layer in enumerate(LAYERS) if unit in layer), None)


def cycles(edges: dict[tuple[str, str], list[Import]]) -> list[list[str]]:
    """The strongly connected groups of more than one unit (Tarjan), each as a cycle through all of them."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    out = []
    for group in groups:  # one cycle through the group: follow edges inside it until back at the start
        start = min(group)
        path, seen = [start], {start}
        while True:
            nxt = sorted(w for w in graph[path[-1]] if w in group)
            back = start in nxt and len(path) > 1
            fresh = [w for w in nxt if w not in seen]
            if back or not fresh:
                break
            path.append(fresh[0])
            seen.add(fresh[0])
        out.append([*path, start])
    return out


def unit_edges(found: list[Import]) -> dict[tuple[str, str], list[Import]]:
    edges: dict[tuple[str, str], list[Import]] = {}
    for imp in found:
        a, b = unit_of(imp.source), unit_of(imp.target)
        if a != b:
            edges.setdefault((a, b), []).append(imp)
    return edges


def test_the_layers_are_declared_once():
    declared = [u for layer in LAYERS for u in layer]
    assert len(declared) == len(set(declared)), "a unit is on two layers"


def test_every_unit_has_a_layer():
    units = {unit_of(m): p for m, p in sorted(find_modules(ROOT).items(), reverse=True)}
    missing = [f"{u} ({p.relative_to(ROOT)})" for u, p in sorted(units.items()) if layer_of(u) is None]
    assert not missing, f"on no layer (add each to LAYERS in {Path(__file__).name}): {', '.join(missing)}"


def test_imports_point_down_the_layers():
    bad = []
    for imp in all_imports():
        a, b = unit_of(imp.source), unit_of(imp.target)
        la, lb = layer_of(a), layer_of(b)
        if a == b or la is None or lb is None:  # inside one unit; an undeclared unit fails the test above
            continue
        if lb >= la:
            where = "a peer on the same layer" if la == lb else f"layer {lb}, above {a}'s layer {la}"
            bad.append(f"  {imp} ({b} is {where})")
        elif (a, b) in FORBIDDEN:
            bad.append(f"  {imp} ({a} never imports {b})")
    assert not bad, "imports against the layer order (bottom → top: " + " | ".join(
        ", ".join(sorted(layer)) for layer in LAYERS) + "):\n" + "\n".join(bad)


def test_no_cycle_between_packages():
    edges = unit_edges(all_imports())
    found = cycles(edges)
    lines = []
    for cycle in found:
        lines.append("  " + " → ".join(cycle))
        lines += [f"    {edges[a, b][0]}" for a, b in itertools.pairwise(cycle)]
    assert not found, "packages that import each other:\n" + "\n".join(lines)


def test_the_walk_sees_every_kind_of_import():
    source = ("import app.index.build as b\n"
              "from app.models import cross_encoder\n"
              "from . import stages\n"
              "def f():\n"
              "    if True:\n"
              "        from ..index.search import Index\n"
              "import json\n")
    known = {"app.models", "app.models.cross_encoder", "app.ingest.stages", "app.index.search"}
    found = imports_in(source, "app.ingest.pipeline", False, known, "app/ingest/pipeline.py")
    assert [(i.line, i.target) for i in found] == [
        (1, "app.index.build"), (2, "app.models.cross_encoder"), (3, "app.ingest.stages"), (6, "app.index.search")]
    assert str(found[3]) == "app/ingest/pipeline.py:6: app.ingest.pipeline → app.index.search"


def test_a_cycle_is_named_with_its_imports():
    found = [Import("app/ingest/pipeline.py", 3, "app.ingest.pipeline", "app.index.build"),
             Import("app/index/build.py", 9, "app.index.build", "app.ingest.stages"),
             Import("app/index/build.py", 10, "app.index.build", "app.models.embedder")]
    assert cycles(unit_edges(found)) == [["app.index", "app.ingest", "app.index"]]
