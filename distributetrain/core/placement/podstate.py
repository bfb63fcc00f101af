"""Pure readings of pod objects: whose it is, is it ready, finished, why is it not Ready yet."""

from __future__ import annotations

from collections.abc import Mapping

from distributetrain.core.placement.inventory import TERMINAL_PHASES
from distributetrain.core import names
from distributetrain.core.names import ANNOTATION_DELETED_BECAUSE


def role(pod: Mapping) -> str | None:
    """The job role a pod was created with (worker, chief, manager), if any."""
    return ((pod.get("metadata") or {}).get("labels") or {}).get(names.LABEL_ROLE)


def is_training_pod(pod: Mapping) -> bool:
    """A worker or the chief: what an attempt consists of (never the manager)."""
    return role(pod) in (names.ROLE_WORKER, names.ROLE_CHIEF)


def worker_index(pod: Mapping) -> int:
    """A worker pod's index label; -1 for any other pod."""
    return int(((pod.get("metadata") or {}).get("labels") or {}).get(names.LABEL_WORKER_INDEX, "-1"))


def is_worker_of(pod: Mapping, attempt: names.Attempt) -> bool:
    """A worker of the job's given attempt: a worker of another attempt has another name."""
    return role(pod) == names.ROLE_WORKER and (pod.get("metadata") or {}).get("name") == attempt.worker(worker_index(pod))


def gpus_of(pod: Mapping) -> int:
    """The GPUs a job pod holds, as its manifest recorded them."""
    return int(((pod.get("metadata") or {}).get("annotations") or {}).get(names.ANNOTATION_GPUS, "0"))


def phase(pod: Mapping) -> str:
    return (pod.get("status") or {}).get("phase", "Pending")


def is_ready(pod: Mapping) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def is_terminating(pod: Mapping) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


# Kueue's mark on the pods of a workload it stops, before it deletes them (its pod
# integration, pkg/controller/jobs/pod): the reason says why, the message by whom.
KUEUE_STOPPED = "TerminationTarget"
# Kueue's reason for stopping the pods of an evicted workload: "WorkloadEvicted", or
# "WorkloadEvictedDueTo<why>" (Preempted, reclaimed quota...) when the eviction says why.
KUEUE_EVICTED = "WorkloadEvicted"


def deletion_cause(pod: Mapping) -> str:
    """Why a pod is being deleted, where someone said: the manager on a lost node's pods,
    the taint eviction controller in its DisruptionTarget condition, Kueue in its own;
    "" if unknown."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if cause := annotations.get(ANNOTATION_DELETED_BECAUSE):
        return cause
    status = pod.get("status") or {}
    if stopped := _condition(status, KUEUE_STOPPED):
        return _one_line(f"Kueue: {stopped.get('message') or stopped.get('reason', '')}")
    return _one_line(_condition(status, "DisruptionTarget").get("message", ""))


def evicted_by_kueue(pod: Mapping | None) -> bool:
    """Kueue stopped the pod because its workload was evicted (preempted, quota reclaimed)."""
    return pod is not None and (_condition(pod.get("status") or {}, KUEUE_STOPPED).get("reason") or "").startswith(
        KUEUE_EVICTED)


def gone(pod: Mapping | None) -> str | None:
    """How a pod is lost to its job ("was deleted", "is being deleted (why)"); None if it is not."""
    if pod is None:
        return "was deleted"
    if not is_terminating(pod):
        return None
    cause = deletion_cause(pod)
    return f"is being deleted ({cause})" if cause else "is being deleted"


def has_ended(pod: Mapping) -> bool:
    """The whole pod ended (Succeeded or Failed): every container, sidecars included, and it
    holds nothing any more."""
    return phase(pod) in TERMINAL_PHASES


def is_finished(pod: Mapping) -> bool:
    """The pod's own work ended: its main container terminated for good, or the pod ended.

    A sidecar a service mesh injects (Istio without native sidecars, Linkerd by default)
    runs on after the main container, and the pod stays Running for ever; a native sidecar
    (an init container with restartPolicy Always) is stopped only after it, so the pod
    ends a little later. Either way the main container's end is the pod's.
    """
    return has_ended(pod) or _main_container_ended(pod) is not None


def exit_code(pod: Mapping) -> int | None:
    """The main container's exit code once it has terminated for good (see ``is_finished``)."""
    terminated = _main_container_ended(pod)
    if terminated is None and has_ended(pod):
        terminated = ((main_container_status(pod) or {}).get("state") or {}).get("terminated")
    return None if terminated is None else int(terminated.get("exitCode", 1))


def ends_on_its_own(pod: Mapping) -> bool:
    """It ended, or every regular container did: the kubelet then stops its native sidecars
    and the pod ends. A classic sidecar still running keeps it (and its GPUs) for ever."""
    if has_ended(pod):
        return True
    statuses = {status.get("name"): status for status in (pod.get("status") or {}).get("containerStatuses") or ()}
    containers = (pod.get("spec") or {}).get("containers") or ()
    return bool(containers) and all(
        ((statuses.get(c.get("name")) or {}).get("state") or {}).get("terminated") is not None for c in containers)


def main_container_status(pod: Mapping) -> Mapping | None:
    """The status of the container that does the pod's work: the one named as its role
    (chief, worker, manager: see ``manifests``), whatever the sidecars injected beside it,
    before or after; a pod without one has its first container."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or ()
    named = role(pod)
    if named and any(c.get("name") == named for c in ((pod.get("spec") or {}).get("containers") or ())):
        return next((status for status in statuses if status.get("name") == named), None)
    return next(iter(statuses), None)


def _main_container_ended(pod: Mapping) -> Mapping | None:
    """The main container's terminated state, if it will not be restarted."""
    terminated = ((main_container_status(pod) or {}).get("state") or {}).get("terminated")
    if terminated is None:
        return None
    # The kubelet restarts it (restartPolicy OnFailure, as a manager pod may have, or Always).
    restart_policy = (pod.get("spec") or {}).get("restartPolicy", "Always")
    if restart_policy == "Always" or (restart_policy == "OnFailure" and terminated.get("exitCode") != 0):
        return None
    return terminated


def address(pod: Mapping) -> str:
    return (pod.get("status") or {}).get("podIP", "")


def node(pod: Mapping) -> str:
    return (pod.get("spec") or {}).get("nodeName", "")


# Container waiting reasons that only take time; any other (ErrImagePull, ImagePullBackOff,
# ErrImageNeverPull, CreateContainerConfigError, CrashLoopBackOff, ...) needs someone to act.
PASSING_WAITING_REASONS = frozenset({"ContainerCreating", "PodInitializing"})


def _one_line(text: str) -> str:
    # Log lines and annotations hold one line per pod; messages may span several.
    return " ".join(text.split())


def _condition(status: Mapping, kind: str) -> Mapping:
    return next((c for c in status.get("conditions") or () if c.get("type") == kind), {})


def _containers(status: Mapping) -> list[Mapping]:
    """Init containers first: they run, and fail, before the others start."""
    return [*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ())]


def container_waiting_reasons(pod: Mapping) -> list[str]:
    """Why each container that waits does (init containers first): ContainerCreating, ErrImagePull..."""
    return [((c.get("state") or {}).get("waiting") or {}).get("reason") or "Waiting"
            for c in _containers(pod.get("status") or {}) if (c.get("state") or {}).get("waiting") is not None]


def _explained(label: str, reason: str, message: str) -> str:
    return f"{label}: {reason}" + (f": {_one_line(message)}" if message else "")


def _ended_container(status: Mapping) -> str:
    """The first container that ended badly, e.g. "container worker: StartError: …"."""
    for container in _containers(status):
        terminated = (container.get("state") or {}).get("terminated") or {}
        if terminated and (terminated.get("exitCode") or terminated.get("reason") == "StartError"):
            reason = terminated.get("reason") or f"exit code {terminated.get('exitCode')}"
            return _explained(f"container {container.get('name', '')}", reason, terminated.get("message", ""))
    return ""


def _why_not_ready(pod: Mapping) -> tuple[str, bool] | None:
    """(why the pod is not Ready, whether someone must act), or None once it is Ready."""
    if is_ready(pod):
        return None
    if is_terminating(pod):
        return "being deleted", False
    status = pod.get("status") or {}
    if is_finished(pod):
        ended = _ended_container(status)
        return f"ended ({phase(pod)})" + (f": {ended}" if ended else ""), bool(ended)
    scheduled = _condition(status, "PodScheduled")
    if scheduled.get("status") == "False":
        return f"not scheduled: {_one_line(scheduled.get('message') or scheduled.get('reason') or 'Unschedulable')}", True
    if not node(pod):
        return "waiting for the scheduler", False
    for container in _containers(status):
        waiting = (container.get("state") or {}).get("waiting")
        if waiting is None:
            continue
        reason = waiting.get("reason") or "Waiting"
        label = f"container {container.get('name', '')}"
        if reason in PASSING_WAITING_REASONS:
            return f"{label}: {reason}", False
        last = ((container.get("lastState") or {}).get("terminated")) or {}
        if last.get("reason") == "StartError":
            # CrashLoopBackOff's own message only says it waits; the cause is the last start.
            return _explained(label, f"{reason} after StartError", last.get("message", "")), True
        return _explained(label, reason, waiting.get("message", "")), True
    if phase(pod) == "Running":
        ready = _condition(status, "Ready")
        return "running, not Ready" + (f": {_one_line(ready['message'])}" if ready.get("message") else ""), False
    if phase(pod) == "Pending":
        return f"scheduled to {node(pod)}, starting", False
    return f"phase {phase(pod)}", False


def why_not_ready(pod: Mapping) -> str | None:
    """Why the pod is not Ready yet, in one line; None once it is Ready.

    The scheduler's message when it cannot place the pod, a container's error (image,
    configuration, start), else how far it has come (scheduled, created, running).
    """
    found = _why_not_ready(pod)
    return found[0] if found else None


def needs_attention(pod: Mapping) -> bool:
    """Whether the pod waits on something time will not fix (unschedulable, image or start errors)."""
    found = _why_not_ready(pod)
    return bool(found and found[1])
