"""Events on the manager pod: valid events.k8s.io/v1 objects, sent in order in the
background, a repeat counted on one Event, and never a failure or a hang for the job."""

import logging
import threading
import time

from distributetrain.core import errors, names, validation
from distributetrain.core.clock import FakeClock
from distributetrain.core.settings import JobSettings
from distributetrain.kube import events
from distributetrain.kube.events import EventRecorder
from distributetrain.manager.reporting import jobevents
from harness.events import FakeEventsApi

SETTINGS = JobSettings(job_name="demo", namespace="ml", num_gpus=6, image="img", owner_uid="uid-1",
                       manager_namespace="team")
AT = 1767355200.123456  # 2026-01-02T12:00:00.123456Z


def test_event_object_is_valid_for_events_k8s_io_v1():
    event = events.event_object(SETTINGS, "demo.188e0a1b2c3d4e5f", "Planned", ("Normal", "Plan"),
                                "6 GPUs on 2 nodes: a=5,b=1 (the chief's share last)", AT)
    assert event == {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "demo.188e0a1b2c3d4e5f", "namespace": "team"},
        "eventTime": "2026-01-02T12:00:00.123456Z",
        "reportingController": "distributetrain.io/manager",
        "reportingInstance": "demo",
        "action": "Plan",
        "reason": "Planned",
        "type": "Normal",
        "note": "6 GPUs on 2 nodes: a=5,b=1 (the chief's share last)",
        "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": "team", "name": "demo", "uid": "uid-1"},
    }
    assert validation.QUALIFIED_NAME.match(names.EVENTS_CONTROLLER)


def test_long_notes_are_cut_to_1024_bytes_on_a_character_boundary():
    note = "GPU 없음 " * 300
    bounded = events.bounded_note(note)
    assert len(bounded.encode()) <= 1024 and bounded.endswith("...") and note.startswith(bounded[:-3])
    assert events.bounded_note("short") == "short"


def test_series_patch():
    assert events.series_patch(3, AT) == {"series": {"count": 3, "lastObservedTime": "2026-01-02T12:00:00.123456Z"}}


def test_events_are_sent_in_order_and_a_repeat_counts_on_one_event():
    api = FakeEventsApi()
    recorder = EventRecorder(SETTINGS, api, FakeClock(), jobevents.KINDS)
    recorder.record(jobevents.PLANNED, "a=1,b=1")
    recorder.record(jobevents.WAITING_FOR_GPUS, "requested 2 GPUs but only 1 are free")
    recorder.record(jobevents.WAITING_FOR_GPUS, "requested 2 GPUs but only 1 are free")
    recorder.record(jobevents.WAITING_FOR_GPUS, "requested 2 GPUs but only 1 are free")
    recorder.record(jobevents.WAITING_FOR_GPUS, "requested 2 GPUs but only 0 are free")
    recorder.record(jobevents.SUCCEEDED, "training finished (exit code 0)")
    recorder.close()
    assert api.calls == [
        ("create", "Planned", "a=1,b=1"),
        ("create", "WaitingForGPUs", "requested 2 GPUs but only 1 are free"),
        ("patch", "WaitingForGPUs", 2),
        ("patch", "WaitingForGPUs", 3),
        ("create", "WaitingForGPUs", "requested 2 GPUs but only 0 are free"),
        ("create", "Succeeded", "training finished (exit code 0)"),
    ]
    assert len(set(api.stored)) == 4 and all(name.startswith("demo.") for name in api.stored)
    recorder.record(jobevents.FAILED, "after close")
    recorder.close()
    assert len(api.calls) == 6


def test_an_expired_event_is_recorded_afresh():
    api = FakeEventsApi(expire_at_once=True)
    recorder = EventRecorder(SETTINGS, api, FakeClock(), jobevents.KINDS)
    recorder.record(jobevents.POD_WAITING, "demo-worker-0: not scheduled")
    recorder.record(jobevents.POD_WAITING, "demo-worker-0: not scheduled")
    recorder.close()
    assert [call[0] for call in api.calls] == ["create", "create"]


def test_refused_events_are_said_once(caplog):
    api = FakeEventsApi(fail_with=errors.Forbidden(
        'events.events.k8s.io is forbidden: User "system:serviceaccount:team:distributetrain-manager" '
        'cannot create resource "events" in API group "events.k8s.io" in the namespace "team"'))
    recorder = EventRecorder(SETTINGS, api, FakeClock(), jobevents.KINDS)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            recorder.record(jobevents.PLANNED, "a=1,b=1")
        recorder.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and 'cannot create resource "events"' in warnings[0], warnings
    assert "rbac/role.yaml grants events create, patch and list" in warnings[0]


def test_a_refusal_is_not_final():
    """A restarted apiserver refuses everything until its RBAC cache syncs."""
    api = FakeEventsApi(refusals=2)
    recorder = EventRecorder(SETTINGS, api, FakeClock(), jobevents.KINDS)
    recorder.record(jobevents.PLANNED, "a=1,b=1")
    recorder.record(jobevents.WORKERS_CREATED, "demo-worker-0 on a (1 GPUs)")
    recorder.record(jobevents.SUCCEEDED, "training finished (exit code 0)")
    recorder.close()
    assert api.calls == [("create", "Succeeded", "training finished (exit code 0)")]


def test_failures_never_reach_the_job(caplog):
    api = FakeEventsApi(fail_with=errors.TransientApiError("cannot reach the Kubernetes API"))
    recorder = EventRecorder(SETTINGS, api, FakeClock(), jobevents.KINDS)
    with caplog.at_level(logging.DEBUG):
        recorder.record(jobevents.PLANNED, "a=1,b=1")
        recorder.record(jobevents.FAILED, "x (exit code 1)")
        recorder.close()
    assert [r.levelno for r in caplog.records if "could not record Event" in r.getMessage()] == [
        logging.WARNING, logging.DEBUG]


def test_a_hung_api_neither_blocks_recording_nor_the_end_of_the_job():
    block = threading.Event()
    recorder = EventRecorder(SETTINGS, FakeEventsApi(block=block), FakeClock(), jobevents.KINDS)
    started = time.monotonic()
    for _ in range(events.MAX_QUEUED + 10):
        recorder.record(jobevents.PLANNED, "a=1,b=1")
    recorder.close(timeout_s=0.2)
    assert time.monotonic() - started < 2
    block.set()


def test_nothing_is_recorded_outside_a_manager_pod():
    recorder = EventRecorder.for_manager(kube=None, settings=SETTINGS.replace(owner_uid=""), clock=FakeClock(),
                                         kinds=jobevents.KINDS)
    recorder.record(jobevents.PLANNED, "a=1,b=1")
    recorder.close()
    assert recorder._thread is None
