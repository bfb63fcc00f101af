"""The package's modules import one another without a circle, and only downwards
through its four layers: core (pure) <- kube (the API layer) <- manager <- cli; inside
core and manager, only downwards through their parts (the folders of a job's parts:
placement, pods, watching, the job...; PARTS below).
localcluster's the same way through its four: its base (the plan and the host's
primitives) <- its parts <- cluster (the handle that orders them) <- __main__ (the CLI).

A circle works only while every module in it happens to be imported in a lucky order
(or lazily, inside a function); the next import moved to the top breaks start-up. The
graph is built from the source with ``ast``, imports inside functions included.
"""

from __future__ import annotations

import ast
from pathlib import Path

import distributetrain
import localcluster
from harness.sources import walked

PACKAGE = "distributetrain"
PACKAGE_DIR = Path(distributetrain.__file__).parent
LOCALCLUSTER_DIR = Path(localcluster.__file__).parent


def module_name(path: Path, package_dir: Path = PACKAGE_DIR) -> str:
    parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules(package_dir: Path = PACKAGE_DIR) -> dict[str, Path]:
    return {module_name(path, package_dir): path for path in sorted(package_dir.rglob("*.py"))}


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """Modules of the package that ``name`` imports (``from p import m`` counts m if it is a module)."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in walked(path):
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


def import_graph(package_dir: Path = PACKAGE_DIR) -> dict[str, set[str]]:
    modules = package_modules(package_dir)
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


def test_localcluster_has_no_import_circle():
    cycle = find_cycle(import_graph(LOCALCLUSTER_DIR))
    assert cycle is None, "import circle: " + " -> ".join(cycle)


# Each layer may import its own modules and the layers before it, nothing after it.
LAYERS = ("core", "kube", "manager", "cli")


def layer_of(module: str) -> int | None:
    """The module's place in LAYERS; None for the package itself and its __main__."""
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{module} -> {target}" for module, targets in graph.items() for target in targets
                  if layer_of(module) is not None and layer_of(target) is not None
                  and layer_of(target) > layer_of(module))


def test_every_module_lives_in_a_layer():
    loose = [m for m in import_graph() if layer_of(m) is None and m not in (PACKAGE, f"{PACKAGE}.__main__")]
    assert loose == []


def test_no_layer_imports_a_layer_above_it():
    assert upward_imports(import_graph()) == []


def test_core_imports_nothing_but_core():
    graph = import_graph()
    assert [f"{m} -> {t}" for m in graph if layer_of(m) == 0 for t in graph[m] if layer_of(t) != 0] == []


def test_an_upward_import_is_found():
    assert upward_imports({f"{PACKAGE}.core.names": {f"{PACKAGE}.kube.client"},
                           f"{PACKAGE}.cli.main": {f"{PACKAGE}.manager.job"}}) == [
        f"{PACKAGE}.core.names -> {PACKAGE}.kube.client"]


def test_the_graph_sees_every_kind_of_import():
    graph = import_graph()
    assert "distributetrain.cli.jobflags" in graph["distributetrain.cli.main"]  # from distributetrain.cli.jobflags import ...
    assert "distributetrain.cli.jobs.commands" in graph["distributetrain.cli.main"]  # from distributetrain.cli.jobs import commands
    assert "distributetrain.core.errors" in graph["distributetrain.kube.client"]  # from distributetrain.core import errors
    # imports inside functions count: cli.run_manager imports lifecycle only when it runs
    assert "distributetrain.manager.job.lifecycle" in graph["distributetrain.cli.main"]


# The parts of core and of manager, in order: each imports only the parts before it (and
# the layers before its own). "" is the layer's top-level modules: core's vocabulary (names,
# settings, errors, the clock...), which every part reads; manager's process state, which
# every part but pods and reporting is handed. core: the pods are built from the settings,
# the plan measures pods (podfit) and places them, watching reads the pods placed, and the
# job's record stores a plan. manager: placement waits through watching, the job's loop
# runs the placement paths.
PARTS = {
    "core": ("", "pods", "placement", "watching", "job"),
    "manager": ("pods", "reporting", "", "watching", "placement", "job"),
}


def part_of(module: str) -> tuple[str, str] | None:
    """(layer, part) of a module of core or manager; None elsewhere (and for the layer itself)."""
    names = module.split(".")
    if len(names) < 3 or names[1] not in PARTS:
        return None
    return names[1], names[2] if (PACKAGE_DIR / names[1] / names[2]).is_dir() else ""


def backward_part_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports of a part after the importer's own, inside its layer."""
    found = []
    for module, targets in graph.items():
        for target in targets:
            source, dest = part_of(module), part_of(target)
            if source and dest and source[0] == dest[0]:
                order = PARTS[source[0]]
                if order.index(dest[1]) > order.index(source[1]):
                    found.append(f"{module} -> {target}")
    return sorted(found)


def test_the_parts_are_the_folders_of_core_and_manager():
    for layer, parts in PARTS.items():
        folders = {path.name for path in (PACKAGE_DIR / layer).iterdir()
                   if path.is_dir() and (path / "__init__.py").exists()}
        assert folders == set(parts) - {""}, layer


def test_no_part_imports_a_part_after_it():
    assert backward_part_imports(import_graph()) == []


def test_a_part_importing_a_later_part_is_found():
    assert backward_part_imports({
        f"{PACKAGE}.core.placement.inventory": {f"{PACKAGE}.core.pods.manifests", f"{PACKAGE}.core.job.record"},
        f"{PACKAGE}.core.names": {f"{PACKAGE}.core.pods.manifests"},
        f"{PACKAGE}.manager.watching.podwaits": {f"{PACKAGE}.manager.processstate", f"{PACKAGE}.core.job.record"},
        f"{PACKAGE}.manager.reporting.reporting": {f"{PACKAGE}.manager.processstate"}}) == [
        f"{PACKAGE}.core.names -> {PACKAGE}.core.pods.manifests",
        f"{PACKAGE}.core.placement.inventory -> {PACKAGE}.core.job.record",
        f"{PACKAGE}.manager.reporting.reporting -> {PACKAGE}.manager.processstate"]


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def top_level_imports(path: Path) -> set[str]:
    """The top-level names of every absolute import in the file, inside functions too."""
    found = set()
    for node in walked(path):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found.add((node.module or "").split(".")[0])
    return found


def test_localcluster_imports_nothing_of_the_project():
    """localcluster is a project of its own (localcluster/pyproject.toml): it imports neither
    distributetrain nor the test suite's modules."""
    checkout = Path(__file__).resolve().parents[2]
    sources = sorted((checkout / "localcluster" / "localcluster").rglob("*.py"))
    project = {PACKAGE, "tests", "clusterfixtures", "projectrbac", "jobharness", "bench"}
    assert len(sources) > 20
    assert {str(path.relative_to(checkout)): sorted(top_level_imports(path) & project)
            for path in sources if top_level_imports(path) & project} == {}


# localcluster's four layers. Its base: the cluster's plan (names, addresses, files, command
# lines) and the host's primitives (processes, certificates, the apiserver probe, the bridge).
# Its parts, every other module: one piece of the cluster each (the control plane's processes,
# the registry, a node, a node group, Kueue, Karpenter...). Then the handle that orders the
# parts, and the CLI.
LOCALCLUSTER_BASE = {f"localcluster.{name}" for name in (
    "certs", "components", "controllers", "errors", "hostnetwork", "kubeconfig", "layout", "netsetup", "node",
    "node.cgroups", "node.config", "node.containerdconfig", "podman", "probe", "processes", "slowpulls", "versions")}
LOCALCLUSTER_TOP = {"localcluster.cluster": 2, "localcluster.__main__": 3}


def localcluster_layer_of(module: str) -> int:
    """0 the base (and the package itself), 1 a part, 2 the cluster, 3 the CLI."""
    if module in LOCALCLUSTER_BASE or module == "localcluster":
        return 0
    return LOCALCLUSTER_TOP.get(module, 1)


def localcluster_upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{module} -> {target}" for module, targets in graph.items() for target in targets
                  if localcluster_layer_of(target) > localcluster_layer_of(module))


def test_localcluster_s_layers_name_its_modules():
    assert LOCALCLUSTER_BASE | set(LOCALCLUSTER_TOP) <= set(import_graph(LOCALCLUSTER_DIR))


def test_no_module_of_localcluster_imports_a_layer_above_it():
    assert localcluster_upward_imports(import_graph(LOCALCLUSTER_DIR)) == []


def test_an_upward_import_of_localcluster_is_found():
    assert localcluster_upward_imports({"localcluster.nodeclaims": {"localcluster.cluster", "localcluster.layout"},
                                        "localcluster.components": {"localcluster.registry"},
                                        "localcluster.cluster": {"localcluster.nodeclaims"},
                                        "localcluster.profiles": {"localcluster.__main__"}}) == [
        "localcluster.components -> localcluster.registry", "localcluster.nodeclaims -> localcluster.cluster",
        "localcluster.profiles -> localcluster.__main__"]
