"""The README stays short, and no relative link of the README or of `docs/` dangles.

The README is a newcomer's first page: what it is, the two commands, running a job on
your own cluster, and links into `docs/`, where everything else lives. A link into a
page, or to a heading of a page, is checked as GitHub renders it: the file must exist,
and the anchor must be one of its headings' (lowercased, spaces to `-`, punctuation but
`-` and `_` dropped, a repeated heading suffixed `-1`, `-2`...).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README_MAX_LINES = 200

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
EXTERNAL = ("http://", "https://", "mailto:")


def documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def outside_code(text: str) -> list[str]:
    """The lines of a Markdown text outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: `## Batch queueing: \\`--queue\\`` -> `batch-queueing---queue`."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in outside_code(path.read_text()):
        if match := HEADING.match(line):
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[str]:
    found = []
    for line in outside_code(path.read_text()):
        without_code = re.sub(r"`[^`]*`", "", line)
        found.extend(LINK.findall(without_code))
    return found


def dangling(path: Path) -> list[str]:
    """The relative links of one document whose file or heading does not exist."""
    bad = []
    for target in links(path):
        if target.startswith(EXTERNAL):
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            bad.append(f"{target}: no file {linked.relative_to(REPO) if linked.is_relative_to(REPO) else linked}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            bad.append(f"{target}: no heading #{anchor} in {linked.relative_to(REPO)}")
    return bad


def test_the_readme_is_under_200_lines():
    lines = len((REPO / "README.md").read_text().splitlines())
    assert lines < README_MAX_LINES, f"README.md has {lines} lines: move detail into docs/"


@pytest.mark.parametrize("path", documents(), ids=lambda path: str(path.relative_to(REPO)))
def test_no_relative_link_dangles(path):
    assert dangling(path) == []


def test_the_anchor_rule_is_githubs():
    assert slug("Batch queueing with Kueue: `--queue`") == "batch-queueing-with-kueue---queue"
    assert slug("The manager's ServiceAccount for managers only") == "the-managers-serviceaccount-for-managers-only"
    assert slug("11. On racks and blocks: `--topology`") == "11-on-racks-and-blocks---topology"
    assert slug("What is guaranteed under failure, and the test that proves it") == (
        "what-is-guaranteed-under-failure-and-the-test-that-proves-it")


def test_a_missing_heading_or_file_is_caught(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# A page\n\n## Its part\n\n```sh\n# not a heading\n```\n")
    readme = tmp_path / "README.md"
    readme.write_text(
        "[ok](docs/page.md#its-part) [ok](docs/page.md) [ok](#title) [web](https://x.org/#y)\n"
        "# Title\n[bad](docs/page.md#not-a-heading) [bad](docs/none.md) [bad](#nowhere) `[code](#x)`\n")
    assert dangling(readme) == [
        "docs/page.md#not-a-heading: no heading #not-a-heading in docs/page.md",
        "docs/none.md: no file docs/none.md",
        "#nowhere: no heading #nowhere in README.md",
    ]
