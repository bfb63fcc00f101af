"""Starting slowly is progress: a pod that pulls its image, or waits for a node being
made for it, is on its way, not stuck.

A multi-GB image on a fresh node takes minutes, and so does a node that an autoscaler
launches; neither should count as a failure to start (``startbudget``). What a pod is
doing is read from the Events recorded about it (core/v1, ``involvedObject`` the pod):
- the kubelet's ``Pulling`` ("Pulling image "X""), then ``Pulled`` ("Successfully
  pulled image "X" in 5s", or "Container image "X" already present on machine") or
  ``Failed`` ("Failed to pull image "X": ..."). An image whose last of these is
  ``Pulling`` is being pulled, while the pod's containers wait in ``ContainerCreating``;
  a failed pull shows in the container's own state (ErrImagePull, ImagePullBackOff) and
  is reported as any error is (``podstate``);
- an autoscaler acting for an unscheduled pod: Karpenter's ``Nominated`` ("Pod should
  schedule on: nodeclaim/..."), the cluster autoscaler's ``TriggeredScaleUp``, until it
  says it cannot (``refusal``): Karpenter's own ``FailedScheduling`` ("Failed to schedule
  pod, ... all available instance types exceed limits for nodepool"), the cluster
  autoscaler's ``NotTriggerScaleUp`` ("pod didn't trigger scale-up: ...") or
  ``FailedScaleUp``. A pod the manager created to make the cluster grow says so itself
  (``awaitingpods.awaits_new_node``).

Pure: Events in, stages out. Times are the Events' own (wall clock), used only to order
one pod's Events; how long a stage lasts is measured on the manager's clock
(``StageClocks``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from distributetrain.core.placement import awaitingpods, podstate

PULLING = "Pulling"
PULLED = "Pulled"
PULL_FAILED = "Failed"
NOMINATED = "Nominated"  # Karpenter: the pod should schedule on a NodeClaim (or a node) it launched
TRIGGERED_SCALE_UP = "TriggeredScaleUp"  # the cluster autoscaler grows a node group for the pod
FAILED_SCHEDULING = "FailedScheduling"  # the scheduler's (not kept: the pod's condition says it) or Karpenter's
SCHEDULER = "default-scheduler"
# An autoscaler adds no node for the pod: Karpenter's FailedScheduling, the cluster autoscaler's two.
SCALE_UP_REFUSED = frozenset({FAILED_SCHEDULING, "NotTriggerScaleUp", "FailedScaleUp"})
# What makes a refusal one for now: it may change while nobody changes the job or the
# autoscaler, as other nodes go or the cloud has capacity again. A Karpenter NodePool or
# a node group at its limits (Karpenter v1.8's "all available instance types exceed
# limits for nodepool"; the cluster autoscaler's "max node group size reached", "max
# cluster cpu limit reached"), a node group backing off after a failed scale-up, a cloud
# out of quota or capacity (FailedScaleUp: "GCE quota exceeded", "out of resources").
# Every other refusal is final: no node the autoscaler can add would ever hold the pod
# (requirements, taints, instance types: Karpenter's "incompatible requirements", "no
# instance type ...", "did not tolerate taint"; "didn't match Pod's node affinity").
# (Not "capacity" alone: Karpenter's final words list requirements on karpenter.sh/capacity-type.)
FOR_NOW_WORDS = ("exceed limits", "max node group size reached", "limit reached", "backoff", "quota",
                 "out of resources", "insufficientinstancecapacity")
PULL_REASONS = frozenset({PULLING, PULLED, PULL_FAILED})
SCALE_UP_REASONS = frozenset({NOMINATED, TRIGGERED_SCALE_UP, *SCALE_UP_REFUSED})
FOLLOWED_REASONS = PULL_REASONS | SCALE_UP_REASONS
# Events of pods only: the field selector of the Event informer.
POD_EVENTS_SELECTOR = "involvedObject.kind=Pod"

_IMAGE = re.compile(r'image "([^"]+)"')
_TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%S"


@dataclass(frozen=True)
class PodEvent:
    """What matters of one Event about a pod."""

    pod: str
    reason: str
    at: float  # the Event's last occurrence, wall seconds: orders one pod's Events
    image: str = ""  # pull Events name theirs
    node: str = ""  # where the kubelet that recorded it runs
    uid: str = ""  # of the pod: an earlier pod of the same name has another
    said: str = ""  # an autoscaler's words (its Event's message), passed on as said


def _seconds(text: str | None) -> float:
    """An Event's timestamp (RFC 3339, seconds or microseconds) as seconds; 0 if absent."""
    if not text:
        return 0.0
    whole, _, fraction = text.rstrip("Z").partition(".")
    at = datetime.strptime(whole, _TIMESTAMP_FORMAT).replace(tzinfo=timezone.utc).timestamp()
    return at + (float(f"0.{fraction}") if fraction.isdigit() else 0.0)


def pod_event(event: Mapping) -> PodEvent | None:
    """A core/v1 Event as a ``PodEvent``; None for one that says nothing about a slow start."""
    reason = event.get("reason") or ""
    regarding = event.get("involvedObject") or {}
    if reason not in FOLLOWED_REASONS or regarding.get("kind") != "Pod":
        return None
    by = event.get("reportingComponent") or (event.get("source") or {}).get("component") or ""
    if reason == FAILED_SCHEDULING and by in ("", SCHEDULER):
        return None  # the scheduler's: what the pod's condition says, again at every try
    series = event.get("series") or {}
    at = max(_seconds(event.get("lastTimestamp")), _seconds(series.get("lastObservedTime")),
             _seconds(event.get("eventTime")), _seconds(event.get("firstTimestamp")))
    message = event.get("message") or ""
    image = _IMAGE.search(message)
    return PodEvent(pod=regarding.get("name", ""), reason=reason, at=at, image=image.group(1) if image else "",
                    node=(event.get("source") or {}).get("host", ""), uid=regarding.get("uid", ""),
                    said=" ".join(message.split()) if reason in SCALE_UP_REASONS else "")


@dataclass(frozen=True)
class Pulling:
    image: str
    node: str

    def describe(self) -> str:
        return f'pulling image "{self.image}" on {self.node}'


@dataclass(frozen=True)
class AwaitingNode:
    def describe(self) -> str:
        return "awaiting a new node"


Stage = Pulling | AwaitingNode


def _in_order(events: Iterable[PodEvent]) -> list[PodEvent]:
    # Timestamps have one-second steps: a pull that ends within the second it began
    # must read as ended, so at equal times the end comes after the start.
    return sorted(events, key=lambda e: (e.at, e.reason not in (PULLING, NOMINATED, TRIGGERED_SCALE_UP)))


def _pulling(pod: Mapping, events: list[PodEvent]) -> Pulling | None:
    """The image whose last pull Event is ``Pulling``, while no container waits on an error."""
    statuses = podstate.container_waiting_reasons(pod)
    if any(reason not in podstate.PASSING_WAITING_REASONS for reason in statuses):
        return None  # ErrImagePull, ImagePullBackOff...: reported as errors are
    last: dict[str, PodEvent] = {}
    for event in events:
        if event.reason not in PULL_REASONS:
            continue
        if event.image:
            last[event.image] = event
        else:  # a failure that names no image ends every pull
            last = {image: event for image in last}
    pulling = [event for event in last.values() if event.reason == PULLING]
    if not pulling:
        return None
    first = min(pulling, key=lambda e: e.at)
    return Pulling(first.image, podstate.node(pod) or first.node)


def _awaiting_node(pod: Mapping, events: list[PodEvent]) -> AwaitingNode | None:
    if podstate.node(pod):
        return None
    if awaitingpods.awaits_new_node(pod):
        return AwaitingNode()
    answer = _last_answer(events)
    return AwaitingNode() if answer is not None and answer.reason not in SCALE_UP_REFUSED else None


def _own(pod: Mapping, events: Iterable[PodEvent]) -> list[PodEvent]:
    """``pod``'s Events in order (an earlier pod of the same name has another uid)."""
    metadata = pod.get("metadata") or {}
    return _in_order(e for e in events if e.pod == metadata.get("name")
                     and (not e.uid or not metadata.get("uid") or e.uid == metadata["uid"]))


def _last_answer(own: list[PodEvent]) -> PodEvent | None:
    """An autoscaler's latest word about a pod: acting for it, or refusing."""
    return next((event for event in reversed(own) if event.reason in SCALE_UP_REASONS), None)


def stage(pod: Mapping, events: Iterable[PodEvent]) -> Stage | None:
    """The slow start ``pod`` is in, from its Events (any order; others' are skipped); None
    when it is Ready, ended, being deleted, failing, or simply not in one."""
    if podstate.is_ready(pod) or podstate.is_finished(pod) or podstate.is_terminating(pod):
        return None
    own = _own(pod, events)
    return _pulling(pod, own) or _awaiting_node(pod, own)


@dataclass(frozen=True)
class Refusal:
    """An autoscaler's latest word about an unscheduled pod: it adds no node for it."""

    words: str  # as it said them
    final: bool  # no node it can add would ever hold the pod (else: not for now, ``FOR_NOW_WORDS``)


def autoscaler_said(pod: Mapping, events: Iterable[PodEvent]) -> str | None:
    """What an autoscaler last said of ``pod`` (acting for it or refusing), None if nothing."""
    answer = _last_answer(_own(pod, events))
    return answer.said if answer is not None else None


def refusal(pod: Mapping, events: Iterable[PodEvent]) -> Refusal | None:
    """The autoscaler's refusal of a pod not yet on a node, if that is its latest word."""
    if podstate.node(pod):
        return None
    answer = _last_answer(_own(pod, events))
    if answer is None or answer.reason not in SCALE_UP_REFUSED:
        return None
    words = answer.said or answer.reason
    return Refusal(words, final=not any(marker in words.lower() for marker in FOR_NOW_WORDS))


def format_elapsed(seconds: float) -> str:
    """Time so far, in steps of 10 s so that a reason shown changes at most that often:
    0s, 10s, 2m10s, 1h0m0s."""
    total = max(0, int(seconds) // 10 * 10)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


_ELAPSED = re.compile(r" for (?:(\d+)h)?(?:(\d+)m)?(\d+)s$")


def without_elapsed(reason: str) -> str:
    """A reason without its time so far: the stage it names."""
    return _ELAPSED.sub("", reason)


def by_the_minute(reason: str) -> str:
    """A reason with its time so far in whole minutes: what changes once a minute while a
    stage lasts (``submit --follow`` prints a slow start then)."""

    def minutes(found: re.Match) -> str:
        hours, mins, _ = (int(part or 0) for part in found.groups())
        return f" for {hours * 60 + mins}m"

    return _ELAPSED.sub(minutes, reason)


class StageClocks:
    """Since when (the manager's monotonic clock, ``now`` passed in) each pod is in its
    stage: a new stage, or the same after another, starts its clock again."""

    def __init__(self) -> None:
        self.since: dict[str, tuple[Stage, float]] = {}

    def update(self, stages: Mapping[str, Stage | None], now: float) -> dict[str, tuple[Stage, float]]:
        """The pods in a stage now, each with since when; pods not named are forgotten."""
        kept = {}
        for pod, current in stages.items():
            if current is None:
                continue
            before = self.since.get(pod)
            kept[pod] = before if before is not None and before[0] == current else (current, now)
        self.since = kept
        return dict(kept)


def reason(current: Stage, since: float, now: float) -> str:
    """``pulling image "X" on node-a for 2m10s``."""
    return f"{current.describe()} for {format_elapsed(now - since)}"
