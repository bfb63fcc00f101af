"""The benchmarks run rarely (bench/run_all.sh, an isolated cluster each), so a name the
package dropped would only show there: every `module.name` a bench script reads from the
package or from another bench module must exist."""

import ast
import importlib
import types
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
OURS = ("distributetrain", "bench")


def imported_modules(tree: ast.Module) -> dict[str, types.ModuleType]:
    """Local name -> the project module it is bound to (``import a.b as c``, ``from a import b``),
    at the module's top level: imports inside a function may be of another commit's tree
    (``bench.manager_probe`` runs in the tree before issue 46 too)."""
    bound = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(OURS) and alias.asname:
                    bound[alias.asname] = importlib.import_module(alias.name)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(OURS):
            for alias in node.names:
                value = getattr(importlib.import_module(node.module), alias.name, None)
                if value is None:
                    value = importlib.import_module(f"{node.module}.{alias.name}")
                if isinstance(value, types.ModuleType):
                    bound[alias.asname or alias.name] = value
    return bound


def missing_names(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    modules = imported_modules(tree)
    return sorted({f"{node.value.id}.{node.attr}" for node in ast.walk(tree)
                   if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                   and node.value.id in modules and not hasattr(modules[node.value.id], node.attr)
                   and not isinstance(node.ctx, ast.Store)})


@pytest.mark.parametrize("path", sorted(BENCH.glob("*.py")), ids=lambda path: path.name)
def test_a_bench_script_reads_only_names_that_exist(path):
    assert missing_names(path) == []


def test_a_dropped_name_is_found(tmp_path):
    script = tmp_path / "old.py"
    script.write_text("from distributetrain.kube import waits\nwaits.watch_job(1)\nwaits.watch_until\n")
    assert missing_names(script) == ["waits.watch_job"]
