"""Pod status exactly as the kubelet reports it, built from the agent's view of its containers.

Pure functions: phase (kubelet_pods.go getPhase), conditions (Initialized,
ContainersReady, Ready, PodReadyToStartContainers), and container statuses with
waiting / running / terminated states. The manager reads these fields to
decide what happened, so their values and reasons follow the kubelet.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass, field

PENDING = "Pending"
RUNNING = "Running"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
TERMINAL_PHASES = (SUCCEEDED, FAILED)

WAITING = "waiting"
RUNNING_STATE = "running"
TERMINATED = "terminated"

def rfc3339(moment: datetime.datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def terminated_reason(exit_code: int) -> str:
    return "Completed" if exit_code == 0 else "Error"


@dataclass
class Termination:
    """How one run of a container ended."""

    exit_code: int
    reason: str
    started_at: datetime.datetime | None
    finished_at: datetime.datetime
    container_id: str
    message: str = ""

    def to_api(self) -> dict:
        terminated = {
            "exitCode": self.exit_code,
            "reason": self.reason,
            "startedAt": rfc3339(self.started_at),
            "finishedAt": rfc3339(self.finished_at),
            "containerID": self.container_id,
        }
        if self.message:
            terminated["message"] = self.message
        return {"terminated": terminated}


@dataclass
class ContainerView:
    """What the agent knows about one container, in the terms of its status."""

    name: str
    image: str
    image_id: str = ""  # the local image the container was created from, once it was
    state: str = WAITING
    waiting_reason: str = "ContainerCreating"
    waiting_message: str = ""
    container_id: str = ""
    started_at: datetime.datetime | None = None
    termination: Termination | None = None
    last_termination: Termination | None = None
    restart_count: int = 0
    ready: bool = False
    started: bool = False

    @property
    def succeeded(self) -> bool:
        return self.state == TERMINATED and self.termination is not None and self.termination.exit_code == 0

    @property
    def failed(self) -> bool:
        """Terminated non-zero, or waiting to restart after a non-zero exit."""
        if self.state == TERMINATED:
            return self.termination is not None and self.termination.exit_code != 0
        return self.state == WAITING and self.last_termination is not None and self.last_termination.exit_code != 0

    def to_api(self) -> dict:
        if self.state == RUNNING_STATE:
            state = {"running": {"startedAt": rfc3339(self.started_at)}}
        elif self.state == TERMINATED and self.termination is not None:
            state = self.termination.to_api()
        else:
            waiting = {"reason": self.waiting_reason}
            if self.waiting_message:
                waiting["message"] = self.waiting_message
            state = {"waiting": waiting}
        status = {
            "name": self.name,
            "image": self.image,
            "imageID": self.image_id,
            "ready": self.ready,
            "restartCount": self.restart_count,
            "started": self.started,
            "state": state,
            "lastState": self.last_termination.to_api() if self.last_termination else {},
        }
        if self.container_id:
            status["containerID"] = self.container_id
        return status


@dataclass
class PodView:
    """The agent's view of one pod, from which its API status is built."""

    init_containers: list[ContainerView]
    containers: list[ContainerView]
    restart_policy: str
    pod_ip: str = ""
    host_ip: str = ""
    start_time: datetime.datetime | None = None
    sandbox_ready: bool = False
    # Set once the pod is being killed for good (deleted, past its deadline):
    # when nothing runs any more, it ends Succeeded or Failed whatever its restartPolicy.
    terminating: bool = False
    reason: str = ""
    message: str = ""
    readiness_gates_ready: bool = True
    # metadata.generation of the spec this status describes (kubelets since 1.33 report it).
    observed_generation: int | None = None
    transitions: dict[str, tuple[str, str]] = field(default_factory=dict)


def pod_phase(view: PodView) -> str:
    """kubelet getPhase, plus its rule that a pod killed for good ends Succeeded or Failed.

    As the kubelet since 1.27, a pod reaches a terminal phase only once none of its
    containers runs (a deadline-exceeded pod stays Running through its grace period).
    """
    if view.reason == "DeadlineExceeded" and not any(
            c.state == RUNNING_STATE for c in view.init_containers + view.containers):
        return FAILED
    running = stopped = succeeded = waiting = 0
    for container in view.containers:
        if container.state == RUNNING_STATE:
            running += 1
        elif container.state == TERMINATED:
            stopped += 1
            succeeded += container.succeeded
        elif container.last_termination is not None:
            stopped += 1
        else:
            waiting += 1
    init_running = any(c.state == RUNNING_STATE for c in view.init_containers)
    if view.terminating and running == 0 and not init_running:
        everything = view.init_containers + view.containers
        return SUCCEEDED if all(c.succeeded for c in everything) else FAILED
    if view.restart_policy == "Never" and any(c.failed for c in view.init_containers):
        return FAILED
    if not all(c.succeeded for c in view.init_containers) or waiting > 0:
        return PENDING
    if running > 0:
        return RUNNING
    if stopped > 0:
        if view.restart_policy == "Always":
            return RUNNING
        if stopped == succeeded:
            return SUCCEEDED
        if view.restart_policy == "Never":
            return FAILED
        return RUNNING
    return PENDING


def pod_conditions(view: PodView, phase: str, now: datetime.datetime) -> list[dict]:
    """The conditions the kubelet owns, keeping each one's last transition time."""
    terminal = phase in TERMINAL_PHASES
    not_initialized = [c.name for c in view.init_containers if not c.succeeded]
    not_ready = [c.name for c in view.containers if not c.ready]
    values: list[tuple[str, bool, str, str]] = [
        ("PodReadyToStartContainers", view.sandbox_ready, "", ""),
    ]
    if terminal and not not_initialized:
        values.append(("Initialized", True, "PodCompleted", ""))
    elif not_initialized and not terminal:
        values.append(("Initialized", False, "ContainersNotInitialized", _names("incomplete", not_initialized)))
    else:
        values.append(("Initialized", not not_initialized, "", ""))
    if terminal:
        ready_values = [("ContainersReady", False, "PodCompleted", ""), ("Ready", False, "PodCompleted", "")]
    elif not_ready:
        message = _names("unready", not_ready)
        ready_values = [("ContainersReady", False, "ContainersNotReady", message),
                        ("Ready", False, "ContainersNotReady", message)]
    elif not view.readiness_gates_ready:
        ready_values = [("ContainersReady", True, "", ""),
                        ("Ready", False, "ReadinessGatesNotReady", "the status of pod readiness gates is not \"True\"")]
    else:
        ready_values = [("ContainersReady", True, "", ""), ("Ready", True, "", "")]
    values.extend(ready_values)
    conditions = []
    for kind, value, reason, message in values:
        status = "True" if value else "False"
        previous_status, since = view.transitions.get(kind, ("", ""))
        if previous_status != status:
            since = rfc3339(now)
            view.transitions[kind] = (status, since)
        condition = {"type": kind, "status": status, "lastProbeTime": None, "lastTransitionTime": since}
        if view.observed_generation is not None:
            condition["observedGeneration"] = view.observed_generation
        if reason:
            condition["reason"] = reason
        if message:
            condition["message"] = message
        conditions.append(condition)
    return conditions


def build_status(view: PodView, now: datetime.datetime) -> dict:
    """The status fields the kubelet owns, as a strategic merge patch body.

    Conditions merge by type, so PodScheduled and conditions set by others
    stay; null removes a field (e.g. a reason that no longer applies); the
    address lists replace what is stored, so an address never accumulates.
    """
    phase = pod_phase(view)
    status: dict = {
        "observedGeneration": view.observed_generation,
        "phase": phase,
        "conditions": pod_conditions(view, phase, now),
        "hostIP": view.host_ip or None,
        "hostIPs": _replace_list([{"ip": view.host_ip}]) if view.host_ip else None,
        "podIP": view.pod_ip or None,
        "podIPs": _replace_list([{"ip": view.pod_ip}]) if view.pod_ip else None,
        "startTime": rfc3339(view.start_time),
        "containerStatuses": [c.to_api() for c in view.containers],
        "initContainerStatuses": [c.to_api() for c in view.init_containers] or None,
        "reason": view.reason or None,
        "message": view.message or None,
    }
    return status


def _replace_list(items: list[dict]) -> list[dict]:
    """A list that replaces the stored one: podIPs/hostIPs would otherwise merge by IP."""
    return [{"$patch": "replace"}, *items]


def _names(what: str, names: Sequence[str]) -> str:
    return f"containers with {what} status: [{' '.join(names)}]"
