"""Turns at the placement Lease: first come, first served, one update a hand-off.

Were every manager waiting for the Lease to try to take it at each release, all but one
would fail: for 100 managers starting together, some 5,000 conflicting writes in 100
turns, the turns' main cost on a small API server. So:

- a manager that finds the Lease busy joins the queue: it labels its own pod with the
  moment it began waiting (``names.LABEL_PLACEMENT_WAITING``, sortable) and says who it is
  (``names.ANNOTATION_PLACEMENT_HOLDER``, its identity in the Lease);
- the holder, letting the Lease go, hands it to the first of the queue: the earliest of
  the manager pods so labelled that have not ended, another than itself (``kube.lock``'s
  successor);
- that manager takes the Lease by the usual update (the others see it held and wait), and
  leaves the queue in the write that fences its bookings (``booking.fence``), or at the
  end of its wait if it never got the Lease;
- the queue is listed as the holder's turn begins, beside the turn's own requests
  (``look_ahead``): finding the labelled pods scans every pod of the cluster (0.1 s at
  150,000), which the hand-off waited on at each turn. A manager that joins meanwhile
  waits for the next turn's list, or takes a Lease let go free.

Exclusion does not rest on the queue: taking the Lease is still an update that only one
writer wins. A successor that is gone (killed between joining and its turn) holds the
Lease until it expires (30 s), as a dead holder does. A manager outside a pod has no place
in the queue: it takes the Lease when it is free (no one waits, or the queue could not be
read).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from datetime import datetime, timezone

from distributetrain.core import errors, names
from distributetrain.core.beside import beside
from distributetrain.core.placement import inventory
from distributetrain.core.clock import Clock
from distributetrain.core.settings import JobSettings
from distributetrain.kube.client import Kube

log = logging.getLogger(__name__)

PLACE_FORMAT = "%Y%m%dT%H%M%S%fZ"  # a label value that sorts as time does


def identity(settings: JobSettings) -> str:
    """The job's name as the placement Lease names its holder."""
    return f"{settings.namespace}/{settings.job_name}"


def first_in_line(pods: Iterable[Mapping], own: str) -> str | None:
    """The identity of the manager that has waited longest among ``pods`` (labelled as
    waiting), but ``own``'s; None if no other waits."""
    waiting = []
    for pod in pods:
        metadata = pod.get("metadata") or {}
        since = (metadata.get("labels") or {}).get(names.LABEL_PLACEMENT_WAITING)
        holder = (metadata.get("annotations") or {}).get(names.ANNOTATION_PLACEMENT_HOLDER)
        if since and holder and holder != own:
            waiting.append((since, holder))
    return min(waiting)[1] if waiting else None


class Turns:
    """One booking's place in the queue (``join`` once the Lease is found busy)."""

    def __init__(self, kube: Kube, settings: JobSettings, clock: Clock):
        self.kube, self.settings, self.clock = kube, settings, clock
        self.identity = identity(settings)
        self.waiting = False  # labelled, not yet served
        self.ahead: Future | None = None  # the queue as this turn began (``look_ahead``)

    def join(self) -> None:
        """Take a place in the queue (best effort: without one the Lease is taken when free)."""
        settings = self.settings
        if not settings.owner_uid:
            return
        try:
            self.kube.patch("Pod", settings.own_namespace, settings.job_name,
                            {"metadata": {"labels": {names.LABEL_PLACEMENT_WAITING: _place(self.clock)},
                                          "annotations": {names.ANNOTATION_PLACEMENT_HOLDER: self.identity}}})
        except errors.DistributeTrainError as e:
            log.warning("job %s: waiting for the placement Lease without a place in its queue: %s",
                        settings.job_name, e)
            return
        self.waiting = True

    def leaving(self) -> dict[str, str | None]:
        """The labels the fence writes: out of the queue, where this manager is in it."""
        return {names.LABEL_PLACEMENT_WAITING: None} if self.waiting else {}

    def left(self) -> None:
        """The fence wrote ``leaving``'s labels."""
        self.waiting = False

    def leave(self) -> None:
        """Out of the queue at the end of a wait that did not get the Lease (best effort:
        a place left behind is skipped once its pod has ended)."""
        if not self.waiting:
            return
        self.waiting = False
        try:
            self.kube.patch("Pod", self.settings.own_namespace, self.settings.job_name,
                            {"metadata": {"labels": {names.LABEL_PLACEMENT_WAITING: None}}})
        except errors.DistributeTrainError as e:
            log.warning("job %s: could not leave the placement Lease's queue: %s", self.settings.job_name, e)

    def look_ahead(self) -> None:
        """The Lease just taken: the queue listed on a thread of its own, for ``successor``
        (the list has its request deadline: the release never waits past it)."""
        self.ahead = beside(self._first_in_line, "placement-queue")

    def successor(self) -> str | None:
        """Who the Lease goes to when this manager lets it go: the first in line as its turn
        began (``look_ahead``), else now."""
        ahead, self.ahead = self.ahead, None
        return ahead.result() if ahead is not None else self._first_in_line()

    def _first_in_line(self) -> str | None:
        pods, _ = self.kube.list_all("Pod", None, label_selector=names.LABEL_PLACEMENT_WAITING,
                                     field_selector=inventory.ACTIVE_PODS_SELECTOR)
        return first_in_line(pods, self.identity)


def _place(clock: Clock) -> str:
    """Now, as a place in the queue."""
    return datetime.fromtimestamp(clock.now(), timezone.utc).strftime(PLACE_FORMAT)
