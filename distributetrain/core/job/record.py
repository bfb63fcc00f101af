"""The job's record: what the manager keeps in its own pod's annotations.

One reading and one writing of those annotations for everyone: the manager (a restarted
manager container, or post-training after pre-training, picks the job up from them) and
the command line's ``status``, ``list`` and ``submit --follow``. A record read from a pod
is lenient: a missing or mangled value reads as "not recorded".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from distributetrain.core.job import jobspec
from distributetrain.core import names
from distributetrain.core.placement.inventory import TERMINAL_PHASES
from distributetrain.core.placement.placement import Plan, format_plan, parse_plan
from distributetrain.core.settings import JobSettings

MAX_REASON_CHARS = 1000  # an annotation is no log: the whole text is in the manager's log
MAX_WAITING_REASON_CHARS = 500  # per pod (all of a pod's annotations share 256 KiB)
QUEUED = "Queued"  # the phase of a job whose pods wait in a Kueue queue


@dataclass(frozen=True)
class JobRecord:
    phase: str = ""  # the manager's own phase (Planning, StartingWorkers, Training, ...)
    plan: tuple[tuple[str, int], ...] = ()  # the current attempt's shares, the chief's last
    attempt: int = 0  # which start of the job's pods is current (their names' -r<k>)
    restarts: int = 0  # used of --max-restarts
    last_restart_reason: str = ""
    exit_code: int | None = None
    reason: str = ""  # the outcome in one line
    waiting: tuple[tuple[str, str], ...] = ()  # (pod, why it is not Ready yet)
    queue_position: int | None = None  # 1: next in its LocalQueue; meaningful while Queued
    spec: JobSettings | None = None  # the job's settings; None from a manager not started yet, or of an older release
    domains: str = ""  # with --topology: the domains the plan got, outermost level first
    started_at: float | None = None  # the manager pod's start (status.startTime), seconds since the epoch

    @property
    def finished(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @classmethod
    def of(cls, pod: Mapping) -> JobRecord:
        """The record kept on a manager pod."""
        annotations = ((pod.get("metadata") or {}).get("annotations")) or {}
        return cls(
            phase=annotations.get(names.ANNOTATION_PHASE, ""),
            plan=tuple(parse_plan(annotations.get(names.ANNOTATION_PLAN, ""))),
            attempt=_count(annotations.get(names.ANNOTATION_ATTEMPT)),
            restarts=_count(annotations.get(names.ANNOTATION_RESTARTS)),
            last_restart_reason=annotations.get(names.ANNOTATION_RESTART_REASON, ""),
            exit_code=_exit_code(annotations.get(names.ANNOTATION_EXIT_CODE)),
            reason=annotations.get(names.ANNOTATION_REASON, ""),
            waiting=_waiting(annotations.get(names.ANNOTATION_WAITING)),
            queue_position=_position(annotations.get(names.ANNOTATION_QUEUE_POSITION)),
            spec=_spec(annotations.get(names.ANNOTATION_SPEC)),
            domains=annotations.get(names.ANNOTATION_DOMAINS, ""),
            started_at=_time((pod.get("status") or {}).get("startTime")),
        )


def _count(text: str | None) -> int:
    return int(text) if text and text.isdigit() else 0


def _exit_code(text: str | None) -> int | None:
    return int(text) if text and text.lstrip("-").isdigit() else None


def _position(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() and int(text) > 0 else None


def _time(text: str | None) -> float | None:
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp() if text else None
    except ValueError:
        return None


def _waiting(text: str | None) -> tuple[tuple[str, str], ...]:
    try:
        reasons = json.loads(text) if text else {}
    except ValueError:
        return ()
    return tuple((str(pod), str(why)) for pod, why in reasons.items()) if isinstance(reasons, dict) else ()


def _spec(text: str | None) -> JobSettings | None:
    try:
        return jobspec.from_json(text) if text else None
    except ValueError:
        return None


# What each change writes: merge-patch values, None removing the annotation.

def phase(phase: str) -> dict[str, str | None]:
    # A place in the queue is news only while queued.
    return {names.ANNOTATION_PHASE: phase, **({} if phase == QUEUED else queue_position(None))}


def spec(settings: JobSettings) -> dict[str, str | None]:
    return {names.ANNOTATION_SPEC: jobspec.to_json(settings)}


def planned(plan: Plan, domains: str = "") -> dict[str, str | None]:
    """The attempt's plan and, with --topology, its domains (none: an earlier attempt's go)."""
    return {names.ANNOTATION_PLAN: format_plan(plan), names.ANNOTATION_DOMAINS: domains or None}


def attempt(attempt: int) -> dict[str, str | None]:
    return {names.ANNOTATION_ATTEMPT: str(attempt)}


def waiting(reasons: Mapping[str, str]) -> dict[str, str | None]:
    text = json.dumps({pod: why[:MAX_WAITING_REASON_CHARS] for pod, why in reasons.items()}) if reasons else None
    return {names.ANNOTATION_WAITING: text}


def queue_position(position: int | None) -> dict[str, str | None]:
    return {names.ANNOTATION_QUEUE_POSITION: str(position) if position is not None else None}


def restarting(used: int, cause: str, next_attempt: int) -> dict[str, str | None]:
    return {names.ANNOTATION_RESTARTS: str(used), names.ANNOTATION_RESTART_REASON: cause[:MAX_REASON_CHARS],
            **attempt(next_attempt), **phase("Restarting")}


def finished(exit_code: int, reason: str) -> dict[str, str | None]:
    return {**phase("Succeeded" if exit_code == 0 else "Failed"), names.ANNOTATION_EXIT_CODE: str(exit_code),
            names.ANNOTATION_REASON: reason[:MAX_REASON_CHARS], names.ANNOTATION_WAITING: None}
