"""The job's pods waited on: what a wait ends with (a typed outcome) and the judges that
read it from the pods, on ``kube.waits``' watch with a deadline.

An attempt starts (every worker Ready, the chief bound), the chief starts and finishes,
a pod is lost (ended, deleted, being deleted; evicted by Kueue), or the deadline passes
with each pod's reason for not being there yet.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from distributetrain.core import errors, exitcodes
from distributetrain.core.placement import podstate
from distributetrain.kube.informer import Informer, Satisfied


@dataclass(frozen=True)
class AttemptStarted:
    """Every worker Ready and the chief bound to its node: the attempt holds all its GPUs."""

    hosts: tuple[tuple[str, int], ...]  # (address, GPUs) of each worker, in rank order


@dataclass(frozen=True)
class ChiefStarted:
    """The chief runs: training has begun."""


@dataclass(frozen=True)
class ChiefFinished:
    """The chief ended: its exit code is the job's."""

    exit_code: int


@dataclass(frozen=True)
class PodLost:
    """A pod the attempt needs is lost (ended, deleted, being deleted): the attempt is lost with it."""

    pod: str
    reason: str
    preempted: bool = False  # Kueue evicted the job's workload

    def error(self, when: str = "") -> errors.AttemptLost:
        """The lost attempt as the job's loop handles it (a restart, or exit 71; 72 when preempted)."""
        return errors.AttemptLost(f"pod {self.pod} {self.reason}{when}",
                                  exitcodes.PREEMPTED if self.preempted else exitcodes.WORKER_LOST)


@dataclass(frozen=True)
class TimedOut:
    """The deadline came first."""

    waiting_for: dict[str, str]  # pod name -> why it is not there yet


Outcome = AttemptStarted | ChiefStarted | ChiefFinished | PodLost | TimedOut

# How long a chief's failure waits for its workers' status: a worker lost under the ranks
# (its node, its sshd) often fails the chief at once, over the broken ssh connection,
# while the kubelet reports the worker's own end only after its next relist and status
# update (one to a few seconds; more under load). Without the wait, the job would read
# as the training script's failure, which is never restarted.
WORKER_STATUS_LAG_S = 15.0
Judge = Callable[[Mapping[str, dict]], Outcome | None]


def lost(name: str, pod: dict | None) -> PodLost | None:
    """The pod ``name`` lost: ended, deleted or being deleted."""
    if (gone := podstate.gone(pod)) is not None:
        return PodLost(name, gone, podstate.evicted_by_kueue(pod))
    if podstate.is_finished(pod):
        code = podstate.exit_code(pod)
        return PodLost(name, f"ended ({podstate.phase(pod)}, exit code {code})")
    return None


def attempt_started(chief: str, workers: list[str]) -> Judge:
    """Done when every worker is Ready and the chief is bound (it may still pull its image:
    it holds its GPUs from the start and waits for the hosts); lost when a pod ends or vanishes;
    finished when the chief ended on its own first."""

    def judge(pods: Mapping[str, dict]) -> Outcome | None:
        for name in workers:
            if found := lost(name, pods.get(name)):
                return found
        if podstate.gone(pods.get(chief)) is not None:
            return lost(chief, pods.get(chief))
        if podstate.is_finished(pods[chief]):
            # It ended on its own before training (an image it cannot run in, say): its end is
            # the job's, as post-training reads it, not a loss to restart.
            code = podstate.exit_code(pods[chief])
            return ChiefFinished(1 if code is None else code)
        if not podstate.node(pods[chief]):
            return None
        if all(podstate.is_ready(pods[name]) and podstate.address(pods[name]) for name in workers):
            return AttemptStarted(tuple((podstate.address(pods[name]), podstate.gpus_of(pods[name])) for name in workers))
        return None

    return judge


def chief_started(chief: str, workers: list[str]) -> Judge:
    """Done once the chief runs (or already ended); lost when a pod vanishes first."""
    finished = chief_finished(chief, workers)

    def judge(pods: Mapping[str, dict]) -> Outcome | None:
        outcome = finished(pods)
        if outcome is None and podstate.phase(pods[chief]) == "Running":
            return ChiefStarted()
        return outcome

    return judge


def chief_finished(chief: str, workers: list[str]) -> Judge:
    """Done when the chief ends; lost when a worker (or the chief) vanishes first."""

    def judge(pods: Mapping[str, dict]) -> Outcome | None:
        pod = pods.get(chief)
        code = podstate.exit_code(pod) if pod is not None and podstate.is_finished(pod) else None
        if code == 0:
            return ChiefFinished(0)
        # A lost worker is the root cause when the chief failed with it: report the worker.
        for name in workers:
            if found := lost(name, pods.get(name)):
                return found
        if pod is not None and podstate.is_finished(pod):
            return ChiefFinished(1 if code is None else code)
        if podstate.gone(pod) is not None:
            return lost(chief, pod)
        return None

    return judge


def worker_lost(workers: list[str]) -> Judge:
    """The first of ``workers`` lost (ended, deleted or being deleted)."""

    def judge(pods: Mapping[str, dict]) -> Outcome | None:
        return next((found for name in workers if (found := lost(name, pods.get(name)))), None)

    return judge


def pending_reasons(pods: Mapping[str, dict], expected: list[str]) -> dict[str, str]:
    reasons = {}
    for name in expected:
        pod = pods.get(name)
        if pod is None:
            reasons[name] = "does not exist"
        elif not podstate.is_ready(pod):
            reasons[name] = podstate.why_not_ready(pod) or "Ready"
    return reasons


def wait_until_gone(pods: Informer, deadline: float, only: set[str] | None = None) -> set[str]:
    """Wait until no worker or chief of ``pods`` (of ``only``, if given) is left, each deleted,
    its grace period over; return those still there at ``deadline`` (of the informer's
    clock: a pod on a dead node may stay terminating for ever)."""

    def job_pods_left(pods: Mapping[str, dict]) -> set[str]:
        return {name for name, pod in pods.items()
                if podstate.is_training_pod(pod)
                and (only is None or name in only)}

    result = pods.wait_until(lambda view: True if not job_pods_left(view) else None, deadline)
    return set() if isinstance(result, Satisfied) else job_pods_left(result.last_view)


def watch_job(pods: Informer, judge: Judge, deadline: float, expected: list[str]) -> Outcome:
    """Follow the job's pods (``ProcessState.pods``) until ``judge`` returns an outcome,
    or TimedOut at ``deadline``."""
    result = pods.wait_until(judge, deadline)
    return result.value if isinstance(result, Satisfied) else TimedOut(pending_reasons(result.last_view, expected))
