"""Waiting for an attempt to start on a fake clock: pulls pause --worker-ready-timeout,
anything else does not, and a pull has its own bound."""

import json

import pytest

from distributetrain.core.clock import FakeClock
from distributetrain.core.settings import JobSettings
from distributetrain.kube import waits
from distributetrain.manager.watching import podwaits
from distributetrain.manager.reporting.reporting import PodWaits, Reporter
from distributetrain.manager.watching.startwatch import RECHECK_S, StartWatch
from harness.events import recording
from harness.kube import FakeKube

# --worker-ready-timeout 5m, --image-pull-timeout 30m
SETTINGS = JobSettings(job_name="demo", namespace="ml", num_gpus=2, image="reg/base:1", owner_uid="uid-1")
WORKER = "demo-worker-0"
CREATING = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [{"name": "worker", "state": {"waiting": {"reason": "ContainerCreating"}}}]}
READY = {"phase": "Running", "podIP": "10.0.0.2", "conditions": [
    {"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]}


class WrittenAtOnce:
    """The annotation writer without its background thread: every value set is written,
    at the fake clock's time (the real one skips values superseded before their turn)."""

    def __init__(self, write):
        self.set = write

    def close(self):
        pass


def kubelet_event(reason, message, at):
    return {"kind": "Event", "reason": reason, "message": message, "lastTimestamp": at, "source": {"host": "a"},
            "involvedObject": {"kind": "Pod", "name": WORKER}, "metadata": {"name": f"{WORKER}.{reason}"}}


PULLING = kubelet_event("Pulling", 'Pulling image "reg/base:1"', "2026-11-26T20:00:00Z")
PULLED = kubelet_event("Pulled", 'Successfully pulled image "reg/base:1" in 6m0s', "2026-11-26T20:06:00Z")


def worker_pod():
    return {"metadata": {"name": WORKER, "labels": {}}, "spec": {"nodeName": "a"}, "status": CREATING}


def wait(kube, clock, settings=SETTINGS):
    """The attempt's start as pre-training waits for it (one worker; no chief to bind)."""
    pod_waits = PodWaits(Reporter(kube, settings, recording(settings, clock)[0]), [WORKER], kube.clock, write_interval_s=0)
    pod_waits.annotation = WrittenAtOnce(pod_waits.reporter.waiting)
    with StartWatch(kube, settings, clock) as starting:
        outcome = starting.wait(waits.selected_pods(kube, "ml", "", clock), ready,
                                [WORKER], clock.monotonic() + 3600, pod_waits)
    pod_waits.done()
    return outcome, clock.monotonic()


def ready(pods):
    return "started" if pods.get(WORKER, {}).get("status") == READY else None


def checks(seconds):
    """Pod watches that show nothing new for ``seconds`` of the fake clock, one re-check each."""
    return [None] * int(seconds / RECHECK_S)


def test_a_six_minute_pull_under_a_five_minute_timeout_starts_fine():
    clock = FakeClock()
    kube = FakeKube(pods=[worker_pod()], clock=clock)
    kube.events = [PULLING]
    kube.pod_watches = [*checks(360), [lambda fake: (fake.put(PULLED) or (WORKER, READY))]]
    started_at = clock.monotonic()
    outcome, ended_at = wait(kube, clock)
    assert outcome == "started" and ended_at - started_at == pytest.approx(360)
    shown = [json.loads(value)[WORKER] for value in kube.annotation_history("distributetrain.io/waiting") if value]
    assert shown[0] == 'pulling image "reg/base:1" on a for 0s'
    assert all(why.startswith('pulling image "reg/base:1" on a for ') for why in shown), shown


def test_a_pod_neither_pulling_nor_ready_is_late_after_the_timeout():
    clock = FakeClock()
    kube = FakeKube(pods=[worker_pod()], clock=clock)
    kube.pod_watches = checks(400)
    started_at = clock.monotonic()
    outcome, ended_at = wait(kube, clock)
    assert outcome == podwaits.TimedOut({WORKER: "container worker: ContainerCreating"})
    assert ended_at - started_at == pytest.approx(300)


def test_a_pull_past_the_image_pull_timeout_is_late_saying_so():
    clock = FakeClock()
    kube = FakeKube(pods=[worker_pod()], clock=clock)
    kube.events = [PULLING]
    kube.pod_watches = checks(700)
    outcome, _ = wait(kube, clock, SETTINGS.replace(image_pull_timeout_s=600.0))
    assert outcome == podwaits.TimedOut({WORKER: 'pulling image "reg/base:1" on a for 10m0s'})
