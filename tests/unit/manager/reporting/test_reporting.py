"""What the manager reports while it waits on pods: one log line per change, an Event
when someone must act, the current reasons on its pod; and the outcome."""

import json
import logging

from distributetrain.core.settings import JobSettings
from distributetrain.core.watching.startprogress import Pulling
from distributetrain.manager.reporting import jobevents
from distributetrain.manager.reporting.reporting import PodWaits, Reporter
from harness.events import recording
from harness.kube import FakeKube
from harness.waiting import WatchedClock, wait_until

SETTINGS = JobSettings(job_name="demo", namespace="ml", num_gpus=2, image="img", owner_uid="uid-1")
UNSCHEDULABLE = "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims."


def patches(kube):
    """The annotation patches of the manager pod, in order."""
    return [patch for name, patch in kube.annotated if name == "demo"]


def worker(name, phase="Pending", node="", scheduled_message="", ready=False, waiting=None):
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    if scheduled_message:
        conditions.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                           "message": scheduled_message})
    containers = [{"name": "worker", "state": {"waiting": waiting} if waiting else {"running": {}}}]
    return {"metadata": {"name": name}, "spec": {"nodeName": node} if node else {},
            "status": {"phase": phase, "conditions": conditions, "containerStatuses": containers}}


def waiting_annotations(kube):
    return [None if a["distributetrain.io/waiting"] is None else json.loads(a["distributetrain.io/waiting"])
            for a in patches(kube)]


def in_order_within(written, states) -> bool:
    """Written in the background, newest first: some states may be skipped, never reordered."""
    remaining = iter(states)
    return all(any(value == state for state in remaining) for value in written)


def test_each_change_is_reported_once(caplog):
    kube = FakeKube()
    recorder, api = recording(SETTINGS, kube.clock)
    waits = PodWaits(Reporter(kube, SETTINGS, recorder), ["demo-worker-0", "demo-worker-1"], kube.clock, write_interval_s=0)
    views = [
        {"demo-worker-0": worker("demo-worker-0")},
        {"demo-worker-0": worker("demo-worker-0", scheduled_message=UNSCHEDULABLE),
         "demo-worker-1": worker("demo-worker-1", node="n2", waiting={"reason": "ContainerCreating"})},
        # Another change elsewhere: nothing new about these two.
        {"demo-worker-0": worker("demo-worker-0", scheduled_message=UNSCHEDULABLE),
         "demo-worker-1": worker("demo-worker-1", node="n2", waiting={"reason": "ContainerCreating"})},
        {"demo-worker-0": worker("demo-worker-0", node="n1", waiting={"reason": "ContainerCreating"}),
         "demo-worker-1": worker("demo-worker-1", phase="Running", node="n2", ready=True)},
        {"demo-worker-0": worker("demo-worker-0", phase="Running", node="n1", ready=True),
         "demo-worker-1": worker("demo-worker-1", phase="Running", node="n2", ready=True)},
    ]
    with caplog.at_level(logging.INFO, logger="distributetrain.manager.reporting.reporting"):
        for view in views:
            waits.observe(view)
        waits.done()
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", "job demo: demo-worker-0 waits: waiting for the scheduler"),
        ("WARNING", f"job demo: demo-worker-0 waits: not scheduled: {UNSCHEDULABLE}"),
        ("INFO", "job demo: demo-worker-1 waits: container worker: ContainerCreating"),
        ("INFO", "job demo: demo-worker-0 waits: container worker: ContainerCreating"),
        ("INFO", "job demo: demo-worker-1 is Ready"),
        ("INFO", "job demo: demo-worker-0 is Ready"),
    ]
    recorder.close()
    assert api.recorded() == [(jobevents.POD_WAITING, f"demo-worker-0: not scheduled: {UNSCHEDULABLE}")]
    written = waiting_annotations(kube)
    assert written[-1] is None and in_order_within(written, [
        {"demo-worker-0": "waiting for the scheduler"},
        {"demo-worker-0": f"not scheduled: {UNSCHEDULABLE}",
         "demo-worker-1": "container worker: ContainerCreating"},
        {"demo-worker-0": "container worker: ContainerCreating"},
        None,
    ]), written


def test_the_annotation_is_written_in_the_background_newest_first_at_most_once_per_interval():
    kube, clock = FakeKube(), WatchedClock()
    waits = PodWaits(Reporter(kube, SETTINGS, recording(SETTINGS, clock)[0]), ["demo-worker-0"], clock,
                     write_interval_s=1.0)
    waits.observe({"demo-worker-0": worker("demo-worker-0")})
    clock.wait_for_waiters(1)  # the writer waiting out its interval
    assert waiting_annotations(kube) == [{"demo-worker-0": "waiting for the scheduler"}]  # at once
    waits.observe({"demo-worker-0": worker("demo-worker-0", node="n1")})
    waits.observe({"demo-worker-0": worker("demo-worker-0", node="n1", waiting={"reason": "ContainerCreating"})})
    clock.advance(0.9)
    assert len(patches(kube)) == 1  # within the interval: not yet
    clock.advance(0.1)
    # The writer's patch, then its next wait on the clock.
    wait_until(lambda: len(patches(kube)) == 2 and clock.waiters() == 1, clock.changes, 5,
               "the newest change written once")
    assert waiting_annotations(kube)[-1] == {"demo-worker-0": "container worker: ContainerCreating"}
    waits.done()  # the end of the wait writes its newest state at once, its clock still: nothing waits any more
    assert waiting_annotations(kube) == [{"demo-worker-0": "waiting for the scheduler"},
                                         {"demo-worker-0": "container worker: ContainerCreating"}, None]


def test_pods_ready_when_first_seen_are_no_news(caplog):
    kube = FakeKube()
    waits = PodWaits(Reporter(kube, SETTINGS, recording(SETTINGS, kube.clock)[0]), ["demo-chief", "demo-worker-0"],
                     kube.clock)
    with caplog.at_level(logging.INFO, logger="distributetrain.manager.reporting.reporting"):
        waits.observe({"demo-worker-0": worker("demo-worker-0", phase="Running", node="n1", ready=True)})
        waits.observe({"demo-worker-0": worker("demo-worker-0", phase="Running", node="n1", ready=True),
                       "demo-chief": worker("demo-chief", phase="Running", node="n2", ready=True)})
        waits.done()
    assert caplog.records == [] and patches(kube) == []


def test_the_outcome_is_an_event_and_clears_what_was_waited_on(tmp_path, monkeypatch):
    monkeypatch.setattr("distributetrain.manager.reporting.reporting.TERMINATION_LOG", str(tmp_path / "termination-log"))
    kube = FakeKube()
    recorder, api = recording(SETTINGS, kube.clock)
    reporter = Reporter(kube, SETTINGS, recorder)
    reporter.finished(1, "chief exited with code 1")
    reporter.finished(0, "training finished")
    recorder.close()
    assert api.recorded() == [(jobevents.FAILED, "chief exited with code 1 (exit code 1)"),
                                 (jobevents.SUCCEEDED, "training finished (exit code 0)")]
    assert patches(kube)[0] == {
        "distributetrain.io/phase": "Failed", "distributetrain.io/exit-code": "1",
        "distributetrain.io/reason": "chief exited with code 1",
        "distributetrain.io/waiting": None, "distributetrain.io/queue-position": None}


def test_the_spec_is_recorded_on_the_manager_pod_and_a_failure_to_is_no_failure():
    from distributetrain.core import errors
    from distributetrain.core.job import jobspec

    kube = FakeKube()
    Reporter(kube, SETTINGS, recording(SETTINGS, kube.clock)[0]).spec()
    assert patches(kube) == [{"distributetrain.io/spec": jobspec.to_json(SETTINGS)}]
    kube.failures = {"annotate Pod": [errors.TransientApiError("the API server stayed unreachable for 30s")]}
    Reporter(kube, SETTINGS, recording(SETTINGS, kube.clock)[0]).spec()


def test_a_slow_start_shows_its_time_so_far_and_is_logged_and_recorded_once_per_stage(caplog):
    kube = FakeKube()
    recorder, api = recording(SETTINGS, kube.clock)
    waits = PodWaits(Reporter(kube, SETTINGS, recorder), ["demo-worker-0"], kube.clock, write_interval_s=0)
    pull = Pulling("reg/base:1", "n1")
    creating = {"demo-worker-0": worker("demo-worker-0", node="n1", waiting={"reason": "ContainerCreating"})}
    with caplog.at_level(logging.INFO, logger="distributetrain.manager.reporting.reporting"):
        for now in (100.0, 110.0, 230.0):
            waits.observe(creating, {"demo-worker-0": (pull, 100.0)}, now)
        waits.observe(creating)  # pulled: creating its container
        waits.done()
    assert [r.getMessage() for r in caplog.records] == [
        'job demo: demo-worker-0 waits: pulling image "reg/base:1" on n1',
        "job demo: demo-worker-0 waits: container worker: ContainerCreating"]
    recorder.close()
    assert api.recorded() == [(jobevents.PULLING, 'demo-worker-0: pulling image "reg/base:1" on n1')]
    assert in_order_within(waiting_annotations(kube), [
        {"demo-worker-0": 'pulling image "reg/base:1" on n1 for 0s'},
        {"demo-worker-0": 'pulling image "reg/base:1" on n1 for 10s'},
        {"demo-worker-0": 'pulling image "reg/base:1" on n1 for 2m10s'},
        {"demo-worker-0": "container worker: ContainerCreating"}, None])
