"""The table `make test-versions` prints (scripts/test-versions.sh): one row per Kubernetes
release, one column per test of the smoke tier, read from each release's JUnit XML.

    python scripts/versions_table.py RESULTS_DIR

RESULTS_DIR holds, per release MAJOR.MINOR: `<release>.xml` (pytest's --junitxml), and
`<release>.run` with lines `release=v1.36.3`, `seconds=612`, `exit=0`, and
`skip <column>=<why>` for a column not run on that release.
"""

from __future__ import annotations

import datetime
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

# Column: what of a test's JUnit classname or name marks it as that column's.
COLUMNS = (
    ("cluster", "tests.versions.test_cluster_release"),
    ("DRA GPUs", "tests.cluster.test_dra"),
    ("demo job", "test_training_job"),
    ("restricted + rbac/", "test_restricted_namespace"),
    ("restart", "test_restarts"),
    ("Kueue", "test_queued_jobs"),
    ("Karpenter", "test_scale_up"),
    ("gang scheduling", "test_gang_scheduling"),
)


def column_of(case: ElementTree.Element) -> str | None:
    where = f"{case.get('classname', '')}.{case.get('name', '')}"
    return next((column for column, marker in COLUMNS if marker in where), None)


def outcomes(junit_xml: str) -> dict[str, str]:
    """{column: "pass" | "FAIL" | "skipped: why"} of the columns whose tests ran."""
    seen: dict[str, list[str]] = {}
    for case in ElementTree.fromstring(junit_xml).iter("testcase"):
        column = column_of(case)
        if column is None:
            continue
        if case.find("failure") is not None or case.find("error") is not None:
            seen.setdefault(column, []).append("FAIL")
        elif (skipped := case.find("skipped")) is not None:
            seen.setdefault(column, []).append(f"skipped: {skipped.get('message', '')}")
        else:
            seen.setdefault(column, []).append("pass")
    return {column: ("FAIL" if "FAIL" in results else results[0] if len(set(results)) == 1 else "pass")
            for column, results in seen.items()}


def run_facts(text: str) -> dict[str, str]:
    facts = {}
    for line in text.splitlines():
        key, _, value = line.partition("=")
        facts[key.strip()] = value.strip()
    return facts


def row(release: str, junit_xml: str | None, facts: dict[str, str]) -> list[str]:
    """One release's cells: its pinned version, each column's outcome, the run's, its time."""
    results = outcomes(junit_xml) if junit_xml else {}
    cells = []
    for column, _ in COLUMNS:
        if skip := facts.get(f"skip {column}"):
            cells.append(f"skipped: {skip}")
        else:
            cells.append(results.get(column, "not run"))
    verdict = "green" if facts.get("exit") == "0" else f"exit {facts.get('exit', '?')}"
    minutes = int(facts.get("seconds", "0")) / 60
    return [facts.get("release", release), *cells, verdict, f"{minutes:.0f} min"]


def table(rows: list[list[str]]) -> str:
    header = ["Kubernetes", *(column for column, _ in COLUMNS), "run", "time"]
    lines = [header, ["---"] * len(header), *rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)


def main(argv: list[str]) -> int:
    results = Path(argv[1])
    rows = []
    for run in sorted(results.glob("*.run"), key=lambda path: [int(part) for part in path.stem.split(".")]):
        junit = run.with_suffix(".xml")
        rows.append(row(run.stem, junit.read_text() if junit.exists() else None, run_facts(run.read_text())))
    print(table(rows))
    print(f"\n(`make test-versions`, {datetime.date.today().isoformat()})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
