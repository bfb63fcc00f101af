"""The layout table of docs/architecture.md matches the folders: every path its first
column names exists, and every folder of the checkout, and every folder directly inside
its projects and scripts (`distributetrain/`, `localcluster/`, `scripts/`), is named there."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ARCHITECTURE = REPO / "docs" / "architecture.md"
# Folders whose own folders the table names one by one.
DETAILED = ("distributetrain", "localcluster", "scripts")
# What a build, a test run or an editor leaves in a checkout (.gitignore's folders).
NOT_SOURCES = re.compile(r"^(\..*|__pycache__|build|dist|.*\.egg-info)$")
CODE = re.compile(r"`([^`]+)`")


def table_paths(markdown: str) -> set[str]:
    """The paths in the first column of the table under `## Layout`."""
    section = markdown.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {path for row in rows for path in CODE.findall(row.split(" | ", 1)[0])}


def folders(root: Path) -> set[str]:
    """The checkout's folders and those directly inside DETAILED, as `name/`."""
    def children(path: Path) -> list[Path]:
        return [child for child in path.iterdir() if child.is_dir() and not NOT_SOURCES.match(child.name)]
    found = {f"{top.name}/" for top in children(root)}
    for parent in DETAILED:
        if (root / parent).is_dir():
            found |= {f"{parent}/{child.name}/" for child in children(root / parent)}
    return found


def mismatches(root: Path, markdown: str) -> tuple[set[str], set[str]]:
    """(paths the table names that do not exist, folders the table does not name)."""
    named = table_paths(markdown)
    return {path for path in named if not (root / path).exists()}, folders(root) - named


def test_the_layout_table_names_every_folder_and_only_paths_that_exist():
    assert mismatches(REPO, ARCHITECTURE.read_text()) == (set(), set())


def test_a_folder_missing_from_the_table_or_a_path_gone_is_caught(tmp_path):
    for folder in ("localcluster/localcluster", "localcluster/images", "docs", "build", ".git"):
        (tmp_path / folder).mkdir(parents=True)
    table = "# How it works\n\n## Layout\n\n| path | what |\n| --- | --- |\n| `localcluster/`, `gone.md` | x |\n| `docs/` | y |\n"
    assert mismatches(tmp_path, table) == ({"gone.md"}, {"localcluster/localcluster/", "localcluster/images/"})
