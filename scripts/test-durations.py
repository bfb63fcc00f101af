#!/usr/bin/env python3
"""Refresh tests/durations.json (the order of `make test`'s two-at-a-time step, see
tests/scheduling.py) from the output of a `make test`: the lines pytest's --durations
prints ("12.34s call     tests/e2e/test_x.py::test_y@group"), setup, call and teardown
added up per test. Tests the output does not name keep their measured time.

    python scripts/test-durations.py < make-test.log
"""

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

TABLE = Path(__file__).resolve().parents[1] / "tests" / "durations.json"
LINE = re.compile(r"^(\d+(?:\.\d+)?)s (?:setup|call|teardown) +(tests/(?:cluster|integration|e2e|platforms|faults)/\S+)$")


def main() -> None:
    measured: dict[str, float] = defaultdict(float)
    for line in sys.stdin:
        match = LINE.match(line.strip())
        if match:
            measured[match.group(2).rsplit("@", 1)[0]] += float(match.group(1))
    table = json.loads(TABLE.read_text()) if TABLE.exists() else {}
    table.update({nodeid: round(seconds, 1) for nodeid, seconds in measured.items()})
    TABLE.write_text(json.dumps(dict(sorted(table.items())), indent=1) + "\n")
    print(f"{len(measured)} tests measured, {len(table)} in {TABLE}")


if __name__ == "__main__":
    main()
