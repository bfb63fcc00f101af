"""How long an attempt may take to start, when starting slowly is progress.

The rule (docs/exit-codes.md says it in one sentence): ``--worker-ready-timeout`` counts only the
time in which some pod of the attempt is neither Ready nor in a slow start (pulling its
image, awaiting a new node: ``startprogress``); each slow start has a bound of its own,
``--image-pull-timeout`` for a pull and ``--scale-up-timeout`` for a node, measured from
when the manager first saw it. So a 6-minute pull on a fresh node starts fine under a
5-minute timeout, while a pod the scheduler cannot place, or one whose container does
not get Ready, is released at --worker-ready-timeout.

An elastic job's replacements start one by one while the job trains: each has a budget
of its own (``StartBudgets``), by the same rule.

Pure: the caller passes ``now`` (the manager's monotonic clock) and what it saw.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from distributetrain.core.settings import JobSettings
from distributetrain.core.watching.startprogress import AwaitingNode, Stage, reason


@dataclass
class StartBudget:
    timeout_s: float  # --worker-ready-timeout
    image_pull_timeout_s: float  # --image-pull-timeout: one pull
    scale_up_timeout_s: float  # --scale-up-timeout: one wait for a new node
    counting_since: float | None  # when the timeout's clock last ran on; None while paused
    spent_before_s: float = 0.0  # the timeout's time spent before counting_since

    @classmethod
    def starting(cls, settings: JobSettings, now: float) -> StartBudget:
        """A fresh attempt's budget: the timeout runs until a slow start is seen."""
        return cls(settings.worker_ready_timeout_s, settings.image_pull_timeout_s, settings.scale_up_timeout_s, now)

    def observe(self, now: float, waiting: Iterable[str], slow: Mapping[str, tuple[Stage, float]]) -> None:
        """``waiting``: the pods not Ready now; ``slow``: those in a slow start, since when."""
        stuck = any(pod not in slow for pod in waiting)
        if stuck and self.counting_since is None:
            self.counting_since = now
        elif not stuck and self.counting_since is not None:
            self.spent_before_s += now - self.counting_since
            self.counting_since = None

    def spent_s(self, now: float) -> float:
        running = 0.0 if self.counting_since is None else now - self.counting_since
        return self.spent_before_s + running

    def timeout_at(self, now: float) -> float:
        """When the timeout runs out if nothing changes (never while it is paused)."""
        if self.counting_since is None:
            return math.inf
        return now + self.timeout_s - self.spent_s(now)

    def bound_s(self, stage: Stage) -> float:
        return self.scale_up_timeout_s if isinstance(stage, AwaitingNode) else self.image_pull_timeout_s

    def stage_ends_at(self, slow: Mapping[str, tuple[Stage, float]]) -> float:
        """When the first slow start runs past its bound if it goes on."""
        return min((since + self.bound_s(stage) for stage, since in slow.values()), default=math.inf)

    def overdue(self, now: float, slow: Mapping[str, tuple[Stage, float]]) -> dict[str, str]:
        """The pods whose slow start ran past its bound, each with its reason."""
        return {pod: reason(stage, since, now) for pod, (stage, since) in slow.items()
                if now - since >= self.bound_s(stage)}

    def timed_out(self, now: float) -> bool:
        # Also by ``timeout_at``'s own sum: a wait until then finds the budget spent even
        # when rounding leaves ``spent_s`` a hair short (on a fake clock, which does not
        # move while the caller waits again, that wait would last for ever).
        return self.spent_s(now) >= self.timeout_s or now >= self.timeout_at(now)


class StartBudgets:
    """One ``StartBudget`` per pod, for pods that start one by one (an elastic job's
    replacements): a pod's budget starts when it is first seen not Ready, and is
    forgotten once it is Ready (or gone), so a later wait of the same pod starts afresh."""

    def __init__(self, settings: JobSettings) -> None:
        self.settings = settings
        self.budgets: dict[str, StartBudget] = {}

    def overdue(self, now: float, waiting: Iterable[str],
                slow: Mapping[str, tuple[Stage, float]]) -> dict[str, str | None]:
        """The waiting pods whose start is late: each with its slow start's reason when that
        ran past its own bound, None when ``--worker-ready-timeout`` ran out."""
        waiting = set(waiting)
        self.budgets = {pod: budget for pod, budget in self.budgets.items() if pod in waiting}
        late: dict[str, str | None] = {}
        for pod in sorted(waiting):
            budget = self.budgets.setdefault(pod, StartBudget.starting(self.settings, now))
            own = {pod: slow[pod]} if pod in slow else {}
            budget.observe(now, [pod], own)
            if budget.timed_out(now):
                late[pod] = None
            elif past_bound := budget.overdue(now, own):
                late[pod] = past_bound[pod]
        return late
