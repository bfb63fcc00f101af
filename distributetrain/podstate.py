"""Pure readings of pod objects: is it ready, finished, why is it pending."""

from __future__ import annotations

from collections.abc import Mapping

from distributetrain.inventory import TERMINAL_PHASES


def phase(pod: Mapping) -> str:
    return (pod.get("status") or {}).get("phase", "Pending")


def is_ready(pod: Mapping) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def is_terminating(pod: Mapping) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def is_finished(pod: Mapping) -> bool:
    return phase(pod) in TERMINAL_PHASES


def exit_code(pod: Mapping) -> int | None:
    """The first container's exit code once it has terminated."""
    for status in (pod.get("status") or {}).get("containerStatuses") or ():
        terminated = (status.get("state") or {}).get("terminated")
        if terminated is not None:
            return int(terminated.get("exitCode", 1))
    return None


def address(pod: Mapping) -> str:
    return (pod.get("status") or {}).get("podIP", "")


def node(pod: Mapping) -> str:
    return (pod.get("spec") or {}).get("nodeName", "")


def waiting_reason(pod: Mapping) -> str:
    """A short why-not-ready: unschedulable message, container waiting reason, or phase."""
    status = pod.get("status") or {}
    for condition in status.get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return f"not scheduled: {condition.get('message') or condition.get('reason', 'Unschedulable')}"
    for container in status.get("containerStatuses") or ():
        waiting = (container.get("state") or {}).get("waiting")
        if waiting:
            return f"container waiting: {waiting.get('reason', '')} {waiting.get('message', '')}".strip()
    return f"phase {phase(pod)}, not ready"
