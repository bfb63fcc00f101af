"""What the manager tells the world: annotations on its own pod, Events regarding it,
its log and its termination message.

``distributetrain status``, ``submit --follow`` and ``kubectl describe`` read these.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

from distributetrain.core import errors
from distributetrain.core.placement import podstate
from distributetrain.core.job import record
from distributetrain.core.watching import startprogress
from distributetrain.core.clock import Clock
from distributetrain.core.placement.placement import Plan
from distributetrain.core.job.record import JobRecord
from distributetrain.core.settings import JobSettings
from distributetrain.core.watching.startprogress import Stage
from distributetrain.kube.api import KubeApi
from distributetrain.kube.events import EventRecorder
from distributetrain.manager.reporting import jobevents

log = logging.getLogger(__name__)

T = TypeVar("T")

TERMINATION_LOG = "/dev/termination-log"
# The waiting annotation is written at most this often: 64 workers starting change it
# some 300 times, which would otherwise be 300 requests in the watch loop.
WAITING_WRITE_INTERVAL_S = 1.0
WAITING_FLUSH_TIMEOUT_S = 5.0  # when a wait ends, how long it waits for the last write


class Reporter:
    def __init__(self, kube: KubeApi, settings: JobSettings, recorder: EventRecorder):
        self.kube = kube
        self.settings = settings
        self.events = recorder

    @property
    def _has_pod(self) -> bool:
        # Outside a manager pod (e.g. `distributetrain run` from a laptop) there is nothing to annotate.
        return bool(self.settings.owner_uid)

    def _annotate(self, annotations: dict[str, str | None]) -> None:
        if self._has_pod:
            self.kube.patch("Pod", self.settings.own_namespace, self.settings.job_name,
                            {"metadata": {"annotations": annotations}})

    def phase(self, phase: str) -> None:
        log.info("job %s: %s", self.settings.job_name, phase)
        try:
            self._annotate(record.phase(phase))
        except errors.DistributeTrainError as e:
            log.warning("could not record phase %s: %s", phase, e)

    def spec(self) -> None:
        """Record the job's settings (read by ``distributetrain status`` and ``list``). Best effort."""
        try:
            self._annotate(record.spec(self.settings))
        except errors.DistributeTrainError as e:
            log.warning("could not record the job's spec: %s", e)

    def planned(self, plan: Plan, domains: str = "") -> None:
        """Record the attempt's plan and its domains (shown by ``distributetrain status``)."""
        self._annotate(record.planned(plan, domains))

    def waiting(self, reasons: Mapping[str, str]) -> None:
        """Why each pod is not Ready yet (none: remove the annotation). Best effort."""
        try:
            self._annotate(record.waiting(reasons))
        except errors.DistributeTrainError as e:
            log.warning("could not record why pods wait: %s", e)

    def queue_position(self, position: int | None) -> bool:
        """The job's place in its Kueue queue (None: not known now). Best effort: whether
        it was recorded."""
        try:
            self._annotate(record.queue_position(position))
        except errors.DistributeTrainError as e:
            log.warning("could not record the queue position: %s", e)
            return False
        return True

    def record(self) -> JobRecord:
        """The job's record as the manager pod holds it now (written by this process, an
        earlier container of it, or pre-training); empty outside a manager pod."""
        if not self._has_pod:
            return JobRecord()
        return JobRecord.of(self.kube.read("Pod", self.settings.own_namespace, self.settings.job_name) or {})

    def record_attempt(self, attempt: int) -> None:
        """Before creating an attempt's pods, so every later phase and a restarted manager
        follow (and tear down) the pods under their new names."""
        self._annotate(record.attempt(attempt))

    def restarting(self, used: int, allowed: int, cause: str, attempt: int, backoff_s: float) -> None:
        """Record a restart before it starts: the budget, the cause, the next attempt."""
        note = f"{cause}; restart {used} of {allowed} (attempt {attempt}) in {backoff_s:.0f}s"
        log.warning("job %s: %s", self.settings.job_name, note)
        self.events.record(jobevents.RESTARTING, note)
        self._annotate(record.restarting(used, cause, attempt))

    def finished(self, exit_code: int, reason: str) -> None:
        phase = "Succeeded" if exit_code == 0 else "Failed"
        log.info("job %s %s (exit code %d): %s", self.settings.job_name, phase.lower(), exit_code, reason)
        self.events.record(jobevents.SUCCEEDED if exit_code == 0 else jobevents.FAILED, f"{reason} (exit code {exit_code})")
        try:
            self._annotate(record.finished(exit_code, reason))
        except errors.DistributeTrainError as e:
            log.warning("could not record the outcome: %s", e)
        try:
            with open(TERMINATION_LOG, "w") as f:
                f.write(reason[:4000])
        except OSError:
            pass  # not in a pod


class LatestWriter(Generic[T]):
    """Writes the newest of a changing value in the background, at most once per
    ``interval_s``: the caller never waits on a write, and values superseded before
    their turn are never written."""

    def __init__(self, write: Callable[[T], None], clock: Clock, interval_s: float = WAITING_WRITE_INTERVAL_S):
        self._write = write
        self._interval_s = interval_s
        self._clock = clock
        self._changed = threading.Condition()
        self._pending: list[T] = []  # the newest value not written yet, if any
        self._closed = False
        self._thread: threading.Thread | None = None

    def set(self, value: T) -> None:
        with self._changed:
            self._pending[:] = [value]
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="annotations", daemon=True)
                self._thread.start()
            self._changed.notify()

    def close(self, timeout_s: float = WAITING_FLUSH_TIMEOUT_S) -> None:
        """Write the newest value now, waiting at most ``timeout_s``; then stop."""
        with self._changed:
            self._closed = True
            self._changed.notify()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._pending or self._closed)
                if not self._pending:
                    return
                value = self._pending.pop()
            self._write(value)
            with self._changed:
                # Changes within the interval are written once, at its end (at once when closing).
                until = self._clock.monotonic() + self._interval_s
                while not self._closed and self._clock.monotonic() < until:
                    self._clock.wait(self._changed, until - self._clock.monotonic())


class PodWaits:
    """Why each pod the manager waits on is not Ready, reported as soon as it changes.

    Fed every view of the job's pods by the watch (``startwatch``), it logs one line
    per pod per change, records an Event when a pod needs someone to act (unschedulable,
    image or start errors) or starts slowly (``Pulling``, ``AwaitingNode``: once per
    stage), and keeps the current reasons on the manager pod, where
    ``distributetrain status`` and ``submit --follow`` show them.
    """

    def __init__(self, reporter: Reporter, pods: list[str], clock: Clock,
                 write_interval_s: float = WAITING_WRITE_INTERVAL_S):
        self.reporter = reporter
        self.pods = pods
        self.reasons: dict[str, str | None] = {}  # last reported, without time so far; None: Ready
        self.annotated: dict[str, str] = {}
        self.annotation = LatestWriter(reporter.waiting, clock, write_interval_s)

    def observe(self, pods: Mapping[str, dict], slow: Mapping[str, tuple[Stage, float]] | None = None,
                now: float = 0.0) -> None:
        """``slow``: the pods starting slowly (``startprogress``), each with since when on
        the clock of ``now``: their reason says for how long, refreshed in the annotation
        while it lasts; the log and an Event say each stage once."""
        slow = slow or {}
        waiting: dict[str, str] = {}
        for name in self.pods:
            pod = pods.get(name)
            if pod is None:
                continue  # not created yet, or gone: the judge says which
            stage = slow.get(name)
            reason = startprogress.reason(*stage, now) if stage else podstate.why_not_ready(pod)
            if reason is not None:
                waiting[name] = reason
            self._report_change(name, pod, reason, stage[0] if stage else None)
        if waiting != self.annotated:
            self.annotation.set(waiting)
            self.annotated = waiting

    def _report_change(self, name: str, pod: Mapping, reason: str | None, stage: Stage | None) -> None:
        """One log line (and maybe an Event) when the pod's reason changed, its time so far aside."""
        job = self.reporter.settings.job_name
        key = None if reason is None else startprogress.without_elapsed(reason)
        unchanged = self.reasons[name] == key if name in self.reasons else key is None
        self.reasons[name] = key
        if unchanged:
            return  # (a pod Ready when first seen is no news either)
        if key is None:
            log.info("job %s: %s is Ready", job, name)
        elif stage is not None:
            log.info("job %s: %s waits: %s", job, name, key)
            self.reporter.events.record(jobevents.SLOW_START_REASONS[type(stage)], f"{name}: {key}")
        elif podstate.needs_attention(pod):
            log.warning("job %s: %s waits: %s", job, name, key)
            self.reporter.events.record(jobevents.POD_WAITING, f"{name}: {key}")
        else:
            log.info("job %s: %s waits: %s", job, name, key)

    def done(self) -> None:
        """The wait is over: nothing is waited on any more."""
        if self.annotated:
            self.annotation.set({})
            self.annotated = {}
        self.annotation.close()
