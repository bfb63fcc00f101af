"""The order in which scripts/test.sh's two-at-a-time step hands out its groups of tests:
the groups expected to take longest first (tests/durations.json, as measured), so that
no long group starts last while the other worker has nothing left to do. xdist's own
order is by the number of tests in a group, which sends a module of three 5-minute tests
after forty 5-second ones."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from pathlib import Path

from xdist.scheduler import LoadGroupScheduling

DURATIONS = Path(__file__).with_name("durations.json")
# A test the table does not know (new, or not among a run's slowest): about the median
# cluster test.
UNMEASURED_S = 15.0


def expected_s(nodeids: Iterable[str], durations: Mapping[str, float]) -> float:
    """The seconds a group of tests is expected to take (a node id without its ``@group``)."""
    return sum(durations.get(nodeid.rsplit("@", 1)[0], UNMEASURED_S) for nodeid in nodeids)


def longest_first(workqueue: Mapping[str, Mapping[str, bool]], durations: Mapping[str, float]) -> OrderedDict:
    return OrderedDict(sorted(workqueue.items(), key=lambda unit: -expected_s(unit[1], durations)))


class LongestFirst(LoadGroupScheduling):
    """``--dist loadgroup`` with its groups handed out longest first."""

    def __init__(self, config, log=None):
        super().__init__(config, log)
        self.durations = json.loads(DURATIONS.read_text())
        self.ordered = False

    def _assign_work_unit(self, node) -> None:
        if not self.ordered:  # the first assignment: the whole collection is in the queue
            self.workqueue = longest_first(self.workqueue, self.durations)
            self.ordered = True
        super()._assign_work_unit(node)
