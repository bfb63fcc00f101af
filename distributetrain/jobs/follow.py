"""`submit --follow`: a job's progress as it happens, then the chief's output, then
the job's exit code (the manager container's) as the command's own.

Progress goes to stderr and the training output to stdout, so a script can keep the
training log apart. One watch over the namespace's distributetrain pods sees both
the manager and the pods it creates (which, for a manager run by a batch/v1 Job, are
labelled with the manager pod's generated name rather than the Job's).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TextIO, TypeVar

from distributetrain import errors, exitcodes, names, podstate, waits
from distributetrain.jobs import state
from distributetrain.jobs.api import JobsKube
from distributetrain.placement import format_plan

log = logging.getLogger(__name__)

MANAGER_START_TIMEOUT_S = 300.0  # pulling the manager image and scheduling it; beyond that, say why
INTERRUPTED = 130  # 128 + SIGINT: the user stopped following, the job goes on
UNKNOWN_EXIT = 1  # the manager pod ended without a container exit code (e.g. evicted)
APP_SELECTOR = f"{names.LABEL_APP}={names.APP}"

T = TypeVar("T")


@dataclass(frozen=True)
class ManagerStarted:
    pass


@dataclass(frozen=True)
class ChiefStarted:
    pod: str


@dataclass(frozen=True)
class ManagerEnded:
    manager: dict


@dataclass(frozen=True)
class ManagerGone:
    pass


Outcome = ManagerStarted | ChiefStarted | ManagerEnded | ManagerGone


def watch_until(kube: JobsKube, namespace: str, selector: str, judge: Callable[[Mapping[str, dict]], T | None],
                deadline: float) -> T | None:
    """List, then watch, the selected pods until ``judge`` returns an outcome; None at the deadline.

    Like ``waits.watch_job``, but for any label selector.
    """
    pods: dict[str, dict] = {}
    version = ""
    while time.monotonic() < deadline:
        try:
            if not version:
                items, version = kube.list_all("pods", namespace, label_selector=selector)
                pods = {p["metadata"]["name"]: p for p in items}
                if (outcome := judge(pods)) is not None:
                    return outcome
            chunk_s = min(deadline - time.monotonic(), waits.WATCH_CHUNK_S)
            for kind, pod in kube.watch_pods(namespace, version, chunk_s, label_selector=selector):
                version = pod["metadata"].get("resourceVersion", version)
                if kind == "DELETED":
                    pods.pop(pod["metadata"]["name"], None)
                elif kind != "BOOKMARK":
                    pods[pod["metadata"]["name"]] = pod
                if (outcome := judge(pods)) is not None:
                    return outcome
        except errors.Gone:
            version = ""  # too old to resume: list again
        except errors.TransientApiError as e:
            log.warning("watch of namespace %s interrupted (%s); resuming", namespace, e)
            time.sleep(waits.RECONNECT_DELAY_S)
    return None


class ProgressLines:
    """Turns successive views of a job into the lines the user has not seen yet."""

    def __init__(self, name: str):
        self.name = name
        self.shown: dict[str, str] = {}

    def update(self, manager: Mapping | None, children: list[Mapping]) -> list[str]:
        if manager is None:
            return []
        pending = podstate.phase(manager) == "Pending"
        facts = {"manager": f"manager pod {manager['metadata']['name']}: "
                            + (podstate.waiting_reason(manager) if pending else podstate.phase(manager))}
        reported = (manager["metadata"].get("annotations") or {}).get(names.ANNOTATION_PHASE)
        if reported:
            facts["phase"] = f"phase: {reported}"
        plan = state.plan_of(manager)
        if plan:
            facts["plan"] = (f"plan: {sum(share for _, share in plan)} GPUs on {len(plan)} nodes "
                             f"({format_plan(list(plan))}, the chief's share last)")
        progress = state.progress_of(manager, children)
        if plan or progress.workers:
            facts["workers"] = f"workers Ready: {progress.workers_ready}/{progress.workers}"
        if progress.chief:
            facts["chief"] = f"chief {names.chief_name(manager['metadata']['name'])}: {progress.chief}"
        new = [f"{self.name}: {text}" for key, text in facts.items() if self.shown.get(key) != text]
        self.shown.update(facts)
        return new


class Follower:
    def __init__(self, kube: JobsKube, namespace: str, name: str, out: TextIO, err: TextIO):
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.out = out
        self.err = err
        self.lines = ProgressLines(name)
        self.manager_seen = False

    def run(self) -> int:
        try:
            return self._run()
        except KeyboardInterrupt:
            self._say(f"{self.name}: stopped following; the job goes on "
                      f"(distributetrain status {self.name}, distributetrain cancel {self.name})")
            return INTERRUPTED

    def _say(self, line: str) -> None:
        print(line, file=self.err, flush=True)

    def _run(self) -> int:
        outcome = self._watch(self._manager_started, time.monotonic() + MANAGER_START_TIMEOUT_S)
        if outcome is None:
            self._say(f"{self.name}: the manager did not start within {MANAGER_START_TIMEOUT_S:.0f}s; "
                      f"the job is left as it is (distributetrain status {self.name})")
            return exitcodes.TIMED_OUT
        if isinstance(outcome, ManagerStarted):
            outcome = self._watch(self._chief_started, math.inf)
        if isinstance(outcome, ChiefStarted):
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

        return watch_until(self.kube, self.namespace, APP_SELECTOR, judge_pods, deadline)

    @staticmethod
    def _manager_started(manager: dict, _children: list[dict]) -> Outcome | None:
        return ManagerStarted() if podstate.phase(manager) == "Running" else None

    @staticmethod
    def _chief_started(manager: dict, children: list[dict]) -> Outcome | None:
        chief = names.chief_name(manager["metadata"]["name"])
        for pod in children:
            if pod["metadata"]["name"] == chief and podstate.phase(pod) != "Pending":
                return ChiefStarted(chief)
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
