"""A job's way from its submission to its first training step, cut into parts that add up.

Pure, so ``bench/first_step.py`` measures and this module only divides: the instants a
run observed (the manager's log records, the pods' watch, Karpenter's NodeClaims and
nodes, the kubelets' pull Events, the chief's timestamped log) become consecutive parts
of one critical path. Each instant is the *last* of the job's pods to get there (the
job starts when its slowest pod does), clamped so that no part is negative: an instant
seen a little late by a poll, or one the path did not wait for (the manager published
the hosts before the chief's container ran), shortens the part before it and leaves
the next at zero, so the parts always sum to the total.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

MANAGER_PLAN = "manager: plan and create"
KARPENTER = "Karpenter: pods to NodeClaims"
NODES = "node provisioning"
POD_START = "pod start"
PULL = "image pull"
MANAGER_HOSTS = "manager: hosts published"
TRAINING = "training start"
# In the order they happen (the image pull inside the pods' start).
PARTS = (MANAGER_PLAN, KARPENTER, NODES, POD_START, PULL, MANAGER_HOSTS, TRAINING)
MANAGER_PARTS = (MANAGER_PLAN, MANAGER_HOSTS)

# A kubelet log timestamp (RFC 3339 with nanoseconds) and the rest of the line.
TIMESTAMPED_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z (.*)$")


@dataclass(frozen=True)
class Marks:
    """When each step of one job's start was done, wall clock (``time.time()``).

    ``first_nodeclaim`` and ``nodes_ready`` are None where no node was added;
    ``pulls`` holds each pod's (Pulling, Pulled), for the pods that pulled their image.
    """

    submitted: float  # the manager starts
    pods_created: float  # its last create request returned
    first_nodeclaim: float | None  # Karpenter's first NodeClaim for the job's pods
    nodes_ready: float | None  # the last node added for the job is Ready
    pulls: tuple[tuple[float, float], ...]
    pods_started: float  # every worker Ready and the chief Running
    hosts_published: float  # the manager hands the workers' addresses to the chief
    first_step: float  # rank 0 reports its first epoch


def split(marks: Marks) -> dict[str, float]:
    """The parts of ``marks.first_step - marks.submitted``, in PARTS order, in seconds."""
    boundaries = _monotonic([marks.submitted, marks.pods_created, marks.first_nodeclaim, marks.nodes_ready,
                             marks.pods_started, marks.hosts_published, marks.first_step])
    submitted, created, claimed, nodes_ready, started, published, first_step = boundaries
    pulling = covered(marks.pulls, nodes_ready, started)
    return {
        MANAGER_PLAN: created - submitted,
        KARPENTER: claimed - created,
        NODES: nodes_ready - claimed,
        POD_START: started - nodes_ready - pulling,
        PULL: pulling,
        MANAGER_HOSTS: published - started,
        TRAINING: first_step - published,
    }


def manager_share(parts: dict[str, float]) -> float:
    return sum(parts[name] for name in MANAGER_PARTS)


def _monotonic(instants: Sequence[float | None]) -> list[float]:
    """Each instant no earlier than the one before; a missing one (None) is the one before."""
    out: list[float] = []
    for instant in instants:
        previous = out[-1] if out else instant
        out.append(previous if instant is None else max(previous, instant))
    return out


def covered(intervals: Iterable[tuple[float, float]], start: float, end: float) -> float:
    """How long at least one interval runs within [start, end] (pulls overlap across nodes)."""
    clipped = sorted((max(a, start), min(b, end)) for a, b in intervals if min(b, end) > max(a, start))
    total, reach = 0.0, start
    for a, b in clipped:
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


def first_line_time(timestamped_log: str, pattern: re.Pattern) -> float | None:
    """The epoch time of the first line of a ``timestamps=True`` pod log matching ``pattern``."""
    for line in timestamped_log.splitlines():
        match = TIMESTAMPED_LINE.match(line)
        if match and pattern.search(match.group(3)):
            seconds = datetime.fromisoformat(match.group(1) + "+00:00").timestamp()
            return seconds + float(match.group(2) or 0)
    return None
