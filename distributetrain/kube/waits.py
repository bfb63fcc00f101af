"""Waiting on selected pods: a watch (never a sleep loop), a deadline, a judge.

``watch_until`` follows the pods of a label selector with an ``Informer`` (one list, then
a watch from that version), handing the current pods to a pure ``judge`` after every
change, until it returns something or the deadline passes. Anything that ends the watch
early ("410 Gone", a watch ERROR event, the API unreachable past the retry deadline)
means listing again: a wait is never aborted for it. What the pods mean is the caller's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from distributetrain.core.clock import Clock
from distributetrain.kube.client import KubeApi
from distributetrain.kube.informer import Informer, Satisfied

T = TypeVar("T")


@dataclass(frozen=True)
class Judged(Generic[T]):
    """The judge's answer, and the pods it gave it on."""

    outcome: T
    pods: Mapping[str, dict]


@dataclass(frozen=True)
class DeadlinePassed:
    """No answer by the deadline: the pods as last seen."""

    pods: Mapping[str, dict]


def watch_until(
    kube: KubeApi, namespace: str, selector: str, judge: Callable[[Mapping[str, dict]], T | None], deadline: float,
    clock: Clock,
) -> Judged[T] | DeadlinePassed:
    """List, then watch, the selected pods until ``judge`` returns an outcome or ``deadline``
    (monotonic) passes."""
    return judged(selected_pods(kube, namespace, selector, clock), judge, deadline)


def selected_pods(kube: KubeApi, namespace: str, selector: str, clock: Clock) -> Informer:
    """The selected pods, followed: listed at the first wait, then watched, so each later
    wait of a phase reads the same live store instead of listing again."""
    return Informer(kube, "Pod", namespace, selectors={"label_selector": selector}, clock=clock)


def judged(informer: Informer, judge: Callable[[Mapping[str, dict]], T | None],
           deadline: float) -> Judged[T] | DeadlinePassed:
    """``judge``'s outcome on the informer's pods, or ``DeadlinePassed`` at ``deadline``."""
    result = informer.wait_until(judge, deadline)
    if isinstance(result, Satisfied):
        return Judged(result.value, dict(informer.store))
    return DeadlinePassed(result.last_view)
