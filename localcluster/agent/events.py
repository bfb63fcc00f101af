"""Warning Events about pods, as the kubelet records them for `kubectl describe`.

Only what explains a stuck or failing pod is recorded (FailedMount, Failed,
BackOff, Unhealthy, Killing), not the Created/Started chatter of every
container, so 64 healthy pods cost no event writes. A repeated event bumps
the count of the first one, as the kubelet's event correlator does. Events
are best effort: one thread writes them and drops them if the apiserver fails.
"""

from __future__ import annotations

import datetime
import logging
import queue
import threading
import uuid
from dataclasses import dataclass

from localcluster.agent.kubeapi import ApiError, KubeApi, Unavailable, namespaced_path

log = logging.getLogger(__name__)

COMPONENT = "kubelet"
# Distinct (pod, reason, message) events remembered for counting repeats.
MAX_REMEMBERED = 4096


@dataclass(frozen=True)
class PodEvent:
    namespace: str
    pod_name: str
    pod_uid: str
    node: str
    reason: str
    message: str
    field_path: str = ""
    kind: str = "Warning"


def _stamp(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def event_object(event: PodEvent, name: str, now: datetime.datetime) -> dict:
    involved = {"apiVersion": "v1", "kind": "Pod", "namespace": event.namespace, "name": event.pod_name,
                "uid": event.pod_uid}
    if event.field_path:
        involved["fieldPath"] = event.field_path
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": event.namespace},
        "involvedObject": involved,
        "reason": event.reason,
        "message": event.message,
        "type": event.kind,
        "source": {"component": COMPONENT, "host": event.node},
        "reportingComponent": COMPONENT,
        "reportingInstance": event.node,
        "firstTimestamp": _stamp(now),
        "lastTimestamp": _stamp(now),
        "count": 1,
    }


class EventRecorder(threading.Thread):
    """Writes pod events in the background."""

    def __init__(self, api: KubeApi):
        super().__init__(name="events", daemon=True)
        self._api = api
        self._queue: queue.Queue[PodEvent] = queue.Queue()
        self._seen: dict[tuple[str, str, str], tuple[str, int]] = {}

    def record(self, event: PodEvent) -> None:
        self._queue.put(event)

    def run(self) -> None:
        while True:
            event = self._queue.get()
            try:
                self._write(event)
            except (Unavailable, ApiError) as error:
                log.debug("[%s/%s] event %s dropped: %s", event.namespace, event.pod_name, event.reason, error)

    def _write(self, event: PodEvent) -> None:
        now = datetime.datetime.now(datetime.timezone.utc)
        key = (event.pod_uid, event.reason, event.message)
        if key in self._seen:
            name, count = self._seen[key]
            patch = {"count": count + 1, "lastTimestamp": _stamp(now)}
            self._api.patch(namespaced_path("events", event.namespace, name), patch)
            self._seen[key] = (name, count + 1)
            return
        if len(self._seen) >= MAX_REMEMBERED:
            self._seen.clear()
        name = f"{event.pod_name}.{uuid.uuid4().hex[:16]}"
        self._api.create(namespaced_path("events", event.namespace), event_object(event, name, now))
        self._seen[key] = (name, 1)
