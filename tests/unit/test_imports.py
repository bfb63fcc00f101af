"""The package's modules import one another without a circle.

A circle works only while every module in it happens to be imported in a lucky order
(or lazily, inside a function); the next import moved to the top breaks start-up. The
graph is built from the source with ``ast``, imports inside functions included.
"""

from __future__ import annotations

import ast
from pathlib import Path

import distributetrain

PACKAGE = "distributetrain"
PACKAGE_DIR = Path(distributetrain.__file__).parent


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE_DIR.rglob("*.py"))}


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """Modules of the package that ``name`` imports (``from p import m`` counts m if it is a module)."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        found.update(t for t in targets if t in known and t != name)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = package_modules()
    return {name: imported_modules(name, path, set(modules)) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of the graph as [a, b, ..., a], or None (depth-first, three colours)."""
    visiting, done = [], set()

    def visit(node: str) -> list[str] | None:
        if node in visiting:
            return [*visiting[visiting.index(node):], node]
        if node in done:
            return None
        visiting.append(node)
        for target in sorted(graph.get(node, ())):
            cycle = visit(target)
            if cycle:
                return cycle
        visiting.pop()
        done.add(node)
        return None

    for start in sorted(graph):
        cycle = visit(start)
        if cycle:
            return cycle
    return None


def test_the_package_has_no_import_circle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_the_graph_sees_every_kind_of_import():
    graph = import_graph()
    assert "distributetrain.jobflags" in graph["distributetrain.cli"]  # from distributetrain.jobflags import ...
    assert "distributetrain.jobs.commands" in graph["distributetrain.cli"]  # from distributetrain.jobs import commands
    assert "distributetrain.errors" in graph["distributetrain.kube"]  # from distributetrain import errors
    # imports inside functions count: cli.run_manager imports lifecycle only when it runs
    assert "distributetrain.lifecycle" in graph["distributetrain.cli"]


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
