#!/usr/bin/env python3
"""One line per failed test of a `make test`, read from its steps' JUnit reports: the
test and the first line of what it said. scripts/test.sh prints it last, so a failed
run's final lines (all a CI page may show) say what failed and why.

    python scripts/test-failures.py unit.xml cluster.xml exclusive.xml
"""

import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

WIDTH = 400  # characters of a failure's first line: enough for a bound and what was seen


def failures(report: Path) -> list[str]:
    """'tests.x::test_y: first line' for each failed or erroring test of a report (JUnit
    names a test by its module, dotted, and its name)."""
    lines = []
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        for outcome in ("failure", "error"):
            found = case.find(outcome)
            if found is None:
                continue
            said = (found.get("message") or found.text or "").strip().splitlines()
            first = said[0] if said else outcome
            lines.append(f"{case.get('classname')}::{case.get('name')}: {first[:WIDTH]}")
    return lines


def main(paths: list[str]) -> int:
    found = [line for path in paths if Path(path).exists() for line in failures(Path(path))]
    for line in found:
        print(f"FAILED {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
