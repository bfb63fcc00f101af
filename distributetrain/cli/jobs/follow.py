"""`submit --follow`: a job's progress as it happens, then the chief's output, then
the job's exit code (the manager container's) as the command's own.

Progress goes to stderr and the training output to stdout, so a script can keep the
training log apart. One watch over the namespace's distributetrain pods sees both
the manager and the pods it creates (which, for a manager run by a batch/v1 Job, are
labelled with the manager pod's generated name rather than the Job's).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TextIO

from distributetrain.cli.jobs import state
from distributetrain.cli.jobs.api import JobsKube
from distributetrain.core import errors, exitcodes, names
from distributetrain.core.placement import podstate
from distributetrain.core.watching import startprogress
from distributetrain.core.clock import Clock
from distributetrain.core.placement.inventory import TERMINAL_PHASES
from distributetrain.core.placement.placement import format_plan
from distributetrain.core.job.record import QUEUED, JobRecord
from distributetrain.kube import waits

MANAGER_START_TIMEOUT_S = 300.0  # pulling the manager image and scheduling it; beyond that, say why
INTERRUPTED = 130  # 128 + SIGINT: the user stopped following, the job goes on
UNKNOWN_EXIT = 1  # the manager pod ended without a container exit code (e.g. evicted)
APP_SELECTOR = f"{names.LABEL_APP}={names.APP}"
WAITING_FACT = "waiting "  # + pod name: why the manager says that pod is not Ready yet
QUEUE_FACT = "queue"  # the job's place in its Kueue queue, while Queued


@dataclass(frozen=True)
class ManagerStarted:
    pass


@dataclass(frozen=True)
class ChiefHasOutput:
    pod: str
    attempt: int
    running: bool  # else it ended already


@dataclass(frozen=True)
class ManagerEnded:
    manager: dict


@dataclass(frozen=True)
class ManagerGone:
    pass


Outcome = ManagerStarted | ChiefHasOutput | ManagerEnded | ManagerGone


class ProgressLines:
    """Turns successive views of a job into the lines the user has not seen yet."""

    def __init__(self, name: str):
        self.name = name
        self.shown: dict[str, str] = {}
        self.training_attempt: int | None = None  # the attempt whose chief was seen running

    def training(self, attempt: int) -> list[str]:
        """The attempt's chief runs, its output follows: the manager records Training on this
        same sight of the chief, often while the output streams. Said now, before the output;
        that record, read after the output, is no news then."""
        self.training_attempt = attempt
        phase = f"phase: {state.TRAINING}"
        if self.shown.get("phase") == phase:
            return []
        self.shown["phase"] = phase
        return [f"{self.name}: {phase}"]

    def update(self, manager: Mapping | None, children: list[Mapping]) -> list[str]:
        if manager is None:
            return []
        pending = podstate.phase(manager) == "Pending"
        facts = {"manager": f"manager pod {manager['metadata']['name']}: "
                            + ((podstate.why_not_ready(manager) or "Ready") if pending else podstate.phase(manager))}
        record = JobRecord.of(manager)
        progress = state.progress_of(manager, children)
        if record.phase:
            facts["phase"] = f"phase: {self._phase(record, progress)}"
        if record.phase == QUEUED and record.queue_position:
            facts[QUEUE_FACT] = f"number {record.queue_position} in its queue"
        plan = record.plan
        if plan:
            in_domains = f" in {record.domains}" if record.domains else ""  # --topology
            facts["plan"] = (f"plan: {sum(share for _, share in plan)} GPUs on {len(plan)} nodes{in_domains} "
                             f"({format_plan(list(plan))}, the chief's share last)")
        job_ended = record.finished or podstate.is_finished(manager)
        label, workers = state.workers_field(progress, job_ended)
        if progress.workers or (plan and label == state.WORKERS_READY):  # a one-node job has none to tear down
            facts["workers"] = f"{label[0].lower()}{label[1:]}: {workers}"
        if progress.chief:
            chief = f"chief {names.chief_name(manager['metadata']['name'], record.attempt)}: {progress.chief}"
            # The chief's end comes first: what follows (teardown, the outcome) is because of it.
            facts = {"chief": chief, **facts} if progress.chief_ended else {**facts, "chief": chief}
        for pod, why in state.waiting_of(manager):
            facts[WAITING_FACT + pod] = f"{pod} waits: {why}"
        # A slow start's time so far is news once a minute, not at each refresh.
        news = {key: startprogress.by_the_minute(text) for key, text in facts.items()}
        new = [f"{self.name}: {text}" for key, text in facts.items() if self.shown.get(key) != news[key]]
        # A pod that stops waiting is forgotten, so waiting again the same way is news;
        # so is a place in the queue, for a job queued again after a restart.
        self.shown = {key: text for key, text in self.shown.items()
                      if not key.startswith(WAITING_FACT) and key != QUEUE_FACT}
        self.shown.update(news)
        return new

    def _phase(self, record: JobRecord, progress: state.Progress) -> str:
        phase = state.phase_with_pods(record.phase, progress)
        if record.attempt == self.training_attempt and phase not in (*TERMINAL_PHASES, state.TEARING_DOWN):
            return state.TRAINING  # an earlier phase of this attempt, recorded late, is no news
        return phase


class Follower:
    def __init__(self, kube: JobsKube, namespace: str, name: str, out: TextIO, err: TextIO, clock: Clock,
                 manager_start_timeout_s: float = MANAGER_START_TIMEOUT_S):
        self.kube = kube
        self.clock = clock
        self.manager_start_timeout_s = manager_start_timeout_s
        self.namespace = namespace
        self.name = name
        self.out = out
        self.err = err
        self.lines = ProgressLines(name)
        self.manager_seen = False

    def follow(self) -> int:
        try:
            return self._run()
        except KeyboardInterrupt:
            self._say(f"{self.name}: stopped following; the job goes on "
                      f"(distributetrain status {self.name}, distributetrain cancel {self.name})")
            return INTERRUPTED

    def _say(self, line: str) -> None:
        print(line, file=self.err, flush=True)

    def _run(self) -> int:
        outcome = self._watch(self._manager_started, self.clock.monotonic() + self.manager_start_timeout_s)
        if outcome is None:
            self._say(f"{self.name}: the manager did not start within {self.manager_start_timeout_s:.0f}s; "
                      f"the job is left as it is (distributetrain status {self.name})")
            return exitcodes.TIMED_OUT
        if isinstance(outcome, ManagerStarted):
            outcome = self._watch(self._chief_has_output, math.inf)
        if isinstance(outcome, ChiefHasOutput):
            if outcome.running:
                for line in self.lines.training(outcome.attempt):
                    self._say(line)
            self._stream(outcome.pod)
            outcome = self._watch(self._manager_ended, math.inf)
        return self._finish(outcome)

    def _watch(self, judge: Callable[[dict | None, list[dict]], Outcome | None], deadline: float) -> Outcome | None:
        def judge_pods(pods: Mapping[str, dict]) -> Outcome | None:
            manager = next((p for p in pods.values() if state.is_manager_of(p, self.name)), None)
            children = [p for p in pods.values() if manager and state.is_child_of(p, manager)]
            for line in self.lines.update(manager, children):
                self._say(line)
            if manager is None:
                return ManagerGone() if self.manager_seen else None
            self.manager_seen = True
            if podstate.is_finished(manager):
                return ManagerEnded(manager)
            return judge(manager, children)

        result = waits.watch_until(self.kube, self.namespace, APP_SELECTOR, judge_pods, deadline, self.clock)
        return result.outcome if isinstance(result, waits.Judged) else None

    @staticmethod
    def _manager_started(manager: dict, _children: list[dict]) -> Outcome | None:
        return ManagerStarted() if podstate.phase(manager) == "Running" else None

    @staticmethod
    def _chief_has_output(manager: dict, children: list[dict]) -> Outcome | None:
        attempt = JobRecord.of(manager).attempt
        chief = names.chief_name(manager["metadata"]["name"], attempt)
        for pod in children:
            if pod["metadata"]["name"] == chief and podstate.phase(pod) != "Pending":
                return ChiefHasOutput(chief, attempt, running=podstate.phase(pod) == "Running")
        return None

    @staticmethod
    def _manager_ended(_manager: dict, _children: list[dict]) -> Outcome | None:
        return None  # only the manager's end (or deletion) ends this wait

    def _stream(self, chief: str) -> None:
        try:
            for text in self.kube.pod_log(self.namespace, chief, state.CHIEF_CONTAINER, follow=True):
                self.out.write(text)
                self.out.flush()
        except errors.DistributeTrainError as e:
            self._say(f"{self.name}: cannot show the chief's output ({e}); waiting for the job to end")

    def _finish(self, outcome: Outcome) -> int:
        if isinstance(outcome, ManagerGone):
            self._say(f"{self.name}: the manager pod was deleted: the job is cancelled")
            return exitcodes.CANCELLED
        status = state.from_manager(outcome.manager)
        code = UNKNOWN_EXIT if status.exit_code is None else status.exit_code
        self._say(f"{self.name}: {status.phase}, exit code {code}" + (f": {status.reason}" if status.reason else ""))
        return code
