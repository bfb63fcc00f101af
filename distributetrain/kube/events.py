"""Kubernetes Events (events.k8s.io/v1) on the manager pod: the job's story in
``kubectl describe pod MANAGER``.

Controllers say what they do to an object with Events regarding it; the manager does
the same for its own pod at each step of the job. This module writes them; which
reasons there are, and each one's type and action, is the manager's (``manager/reporting/jobevents``):
the recorder is given that table.

Events are best effort. One background thread sends them in the order they happened,
each call bounded, so a slow, failing or refusing API server never delays or fails the
job; at the end the job waits at most ``FLUSH_TIMEOUT_S`` for those still queued. An
occurrence already recorded by this process (same reason and note) is not repeated:
its Event's series count goes up instead, as client-go's recorder does, so a manager
waiting minutes for GPUs shows one Event "x12 over 2m", not twelve.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Mapping
from datetime import datetime, timezone

from kubernetes import client

from distributetrain.core import errors, names
from distributetrain.core.clock import Clock
from distributetrain.core.settings import JobSettings
from distributetrain.kube.calls import call, read_json
from distributetrain.kube.client import Kube

log = logging.getLogger(__name__)

Kind = tuple[str, str]  # an Event's type ("Normal", "Warning") and action, as its reason calls for

NOTE_MAX_BYTES = 1024  # events.k8s.io/v1 validation
REPORTING_INSTANCE_MAX_CHARS = 128  # events.k8s.io/v1 validation
TRUNCATED = "..."
CONNECT_TIMEOUT_S = 3.0  # one Event call: connecting
READ_TIMEOUT_S = 5.0  # one Event call: the answer
SEND_DEADLINE_S = 10.0  # a transient failure of one call is retried this long, in the background
FLUSH_TIMEOUT_S = 5.0  # at the end of a phase, how long the job waits for Events still queued
MAX_QUEUED = 256  # the API is not keeping up beyond this: later Events are dropped
MICRO_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"  # eventTime is a MicroTime
# A (connect, read) pair: the generated client ignores a float timeout altogether.
REQUEST_OPTIONS = {"_preload_content": False, "_request_timeout": (CONNECT_TIMEOUT_S, READ_TIMEOUT_S)}


def micro_time(at: float) -> str:
    return datetime.fromtimestamp(at, timezone.utc).strftime(MICRO_TIME_FORMAT)


def bounded_note(note: str) -> str:
    """At most NOTE_MAX_BYTES of UTF-8, cut on a character boundary."""
    encoded = note.encode()
    if len(encoded) <= NOTE_MAX_BYTES:
        return note
    return encoded[: NOTE_MAX_BYTES - len(TRUNCATED)].decode(errors="ignore") + TRUNCATED


def event_object(settings: JobSettings, name: str, reason: str, kind: Kind, note: str, at: float) -> dict:
    """One Event regarding the manager pod, valid for events.k8s.io/v1."""
    event_type, action = kind
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": settings.own_namespace},
        "eventTime": micro_time(at),
        "reportingController": names.EVENTS_CONTROLLER,
        "reportingInstance": settings.job_name[:REPORTING_INSTANCE_MAX_CHARS],
        "action": action,
        "reason": reason,
        "type": event_type,
        "note": bounded_note(note),
        "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": settings.own_namespace,
                      "name": settings.job_name, "uid": settings.owner_uid},
    }


def series_patch(count: int, at: float) -> dict:
    return {"series": {"count": count, "lastObservedTime": micro_time(at)}}


class EventsApi:
    """The recorder's calls, translated and retried like every other (``kube.call``), each bounded."""

    def __init__(self, api_client: client.ApiClient, clock: Clock):
        self.api = client.EventsV1Api(api_client)
        self.clock = clock  # of the retries

    def create(self, event: dict) -> None:
        namespace = event["metadata"]["namespace"]
        call(lambda: read_json(self.api.create_namespaced_event(namespace, event, **REQUEST_OPTIONS)), self.clock,
             deadline_s=SEND_DEADLINE_S)

    def patch(self, namespace: str, name: str, patch: dict) -> None:
        call(lambda: read_json(self.api.patch_namespaced_event(name, namespace, patch, **REQUEST_OPTIONS)), self.clock,
             deadline_s=SEND_DEADLINE_S)


class EventRecorder:
    """Records the job's Events in the background; ``record`` never blocks and never raises."""

    def __init__(self, settings: JobSettings, api: EventsApi | None, clock: Clock, kinds: Mapping[str, Kind]):
        self.settings = settings
        self._clock = clock  # of the Events' times
        self.kinds = kinds  # reason -> (type, action), every reason the job records
        self._api = api  # None: nowhere to record (outside a manager pod)
        self._queue: queue.SimpleQueue[tuple[str, str, float] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._series: dict[tuple[str, str], tuple[str, int]] = {}  # (reason, note) -> (Event name, count)
        self._last_name_ns = 0
        self._failures = 0

    @classmethod
    def for_manager(cls, kube: Kube, settings: JobSettings, clock: Clock, kinds: Mapping[str, Kind]) -> "EventRecorder":
        # Outside a manager pod (e.g. `distributetrain run` from a laptop) no pod regards them.
        return cls(settings, EventsApi(kube.api_client, clock) if settings.owner_uid else None, clock, kinds)

    def record(self, reason: str, note: str) -> None:
        if self._api is None or self._closed:
            return
        if self._queue.qsize() >= MAX_QUEUED:
            log.debug("Event %s dropped: %d Events are still queued", reason, MAX_QUEUED)
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="events", daemon=True)
            self._thread.start()
        self._queue.put((reason, note, self._clock.now()))

    def close(self, timeout_s: float = FLUSH_TIMEOUT_S) -> None:
        """Send what is queued, waiting at most ``timeout_s``; later records are dropped."""
        if self._closed:
            return
        self._closed = True
        if self._thread is None:
            return
        self._queue.put(None)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            # A daemon thread: it cannot keep the process from exiting.
            log.warning("Events of job %s not all recorded within %.0fs; going on without them",
                        self.settings.job_name, timeout_s)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            self._send(*item)

    def _unique_name(self, at: float) -> str:
        # client-go names Events "<object>.<unix nanoseconds in hex>"; strictly increasing here.
        self._last_name_ns = max(int(at * 1e9), self._last_name_ns + 1)
        return f"{self.settings.job_name}.{self._last_name_ns:x}"

    def _send(self, reason: str, note: str, at: float) -> None:
        key = (reason, note)
        namespace = self.settings.own_namespace
        try:
            if key in self._series:
                name, count = self._series[key]
                try:
                    self._api.patch(namespace, name, series_patch(count + 1, at))
                    self._series[key] = (name, count + 1)
                    return
                except errors.NotFound:
                    pass  # Events expire (an hour by default): record it afresh
            name = self._unique_name(at)
            self._api.create(event_object(self.settings, name, reason, self.kinds[reason], note, at))
            self._series[key] = (name, 1)
        except errors.Forbidden as e:
            # Said once, but tried again: a restarted apiserver refuses until its RBAC cache syncs.
            self._failures += 1
            log.log(logging.WARNING if self._failures == 1 else logging.DEBUG,
                    "cannot record Events on pod [%s/%s] (%s); the job goes on without them "
                    "(rbac/role.yaml grants events create, patch and list)", namespace, self.settings.job_name, e)
        except Exception as e:  # noqa: BLE001 - an Event must never fail the job, whatever went wrong
            self._failures += 1
            log.log(logging.WARNING if self._failures == 1 else logging.DEBUG,
                    "could not record Event %s on pod [%s/%s]: %s", reason, namespace, self.settings.job_name, e)
