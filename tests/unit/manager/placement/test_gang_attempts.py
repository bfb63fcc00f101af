"""A job on a cluster that serves PodGroups (Kubernetes 1.37 with gang scheduling): each
attempt's pods one gang, its PodGroup created before them and deleted at teardown; on a
cluster that serves none, or a manager refused them, the job is what it was. On an
in-memory API, pre- and post-training as manager.sh runs them."""

import socket

import pytest

from distributetrain.core import errors
from distributetrain.core.pods import gang
from distributetrain.core.clock import FakeClock
from distributetrain.core.settings import JobSettings
from distributetrain.kube import events
from distributetrain.manager.job import lifecycle
from harness.builders import node
from harness.events import FakeEventsApi
from harness.kube import FakeKube


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


SETTINGS = JobSettings(job_name="demo", namespace="ml", num_gpus=2, image="reg/base:1", owner_uid="uid-1",
                       worker_ready_timeout_s=0.5, wait_for_gpus_s=60.0, termination_grace_period_s=0.0,
                       discovery_url=f"http://127.0.0.1:{free_port()}/hosts")
UNSCHEDULED = {"phase": "Pending", "conditions": [
    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
     "message": "0/4 nodes are available: waiting for minCount pods from a gang to be scheduled"}]}
RUNNING = {"phase": "Running", "podIP": "10.0.0.2", "conditions": [
    {"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]}
ENDED = {"phase": "Succeeded", "podIP": "10.0.0.3",
         "containerStatuses": [{"name": "chief", "state": {"terminated": {"exitCode": 0}}}]}
# The first attempt's gang is never scheduled (another job holds its nodes); the second trains.
RE_PLANNED = [[("demo-worker-0", UNSCHEDULED), ("demo-chief", UNSCHEDULED)], None, None,
              [("demo-worker-0-r1", RUNNING), ("demo-chief-r1", RUNNING)], [("demo-chief-r1", ENDED)]]


@pytest.fixture
def run(monkeypatch, tmp_path):
    monkeypatch.setattr(events, "EventsApi", lambda api_client, clock: FakeEventsApi())
    monkeypatch.setattr("distributetrain.manager.reporting.reporting.TERMINATION_LOG", str(tmp_path / "termination-log"))

    def run(served: bool, on_create=()) -> tuple[int, FakeKube, list[dict]]:
        kube = FakeKube([node(name, 1) for name in "abcd"], clock=FakeClock())
        kube.pod_groups_served = served
        sent: list[dict] = []  # every object sent to be created, dry runs too, as it was sent
        kube.on_create = [*on_create, lambda obj: sent.append(obj)]
        kube.pod_watches = [list(watch) if watch else watch for watch in RE_PLANNED]
        kube.pods_stay_terminating = True  # the lost attempt's pods are waited out before the next plans
        codes = [lifecycle.execute(kube, SETTINGS, phase, kube.clock) for phase in ("pre-training", "post-training")]
        return codes[-1], kube, sent

    return run


def created(kube: FakeKube) -> list[tuple[str, str]]:
    return [(kind, name) for verb, kind, name in kube.actions if verb == "create" and kind in ("PodGroup", "Pod")]


def test_each_attempt_is_a_gang_of_its_own_whose_group_goes_at_teardown(run):
    code, kube, sent = run(served=True)
    assert code == 0
    assert created(kube) == [("PodGroup", "demo-gang-uid-1"), ("Pod", "demo-worker-0"), ("Pod", "demo-chief"),
                             ("PodGroup", "demo-gang-r1-uid-1"), ("Pod", "demo-worker-0-r1"), ("Pod", "demo-chief-r1")]
    groups = {obj["metadata"]["name"]: obj for obj in sent if obj["kind"] == "PodGroup"}
    assert groups == {"demo-gang-uid-1": gang.pod_group(SETTINGS, 0, 2), "demo-gang-r1-uid-1": gang.pod_group(SETTINGS, 1, 2)}
    pods = [obj for obj in sent if obj["kind"] == "Pod"]
    # Each pod joins its attempt's group (the preflight's server-side dry runs too: the first attempt's names).
    assert {(pod["metadata"]["name"], pod["spec"]["schedulingGroup"]["podGroupName"]) for pod in pods} == {
        ("demo-worker-0", "demo-gang-uid-1"), ("demo-chief", "demo-gang-uid-1"),
        ("demo-worker-0-r1", "demo-gang-r1-uid-1"), ("demo-chief-r1", "demo-gang-r1-uid-1")}
    # The lost attempt's group went with its pods, the last one's at the end: nothing left.
    assert [name for verb, kind, name in kube.actions if verb == "delete" and kind == "PodGroup"] == [
        "demo-gang-uid-1", "demo-gang-r1-uid-1"]
    assert kube.pod_groups == {}


def test_on_a_cluster_without_pod_groups_the_job_is_what_it_was(run):
    code, kube, sent = run(served=False)
    assert code == 0
    assert created(kube) == [("Pod", "demo-worker-0"), ("Pod", "demo-chief"), ("Pod", "demo-worker-0-r1"),
                             ("Pod", "demo-chief-r1")]
    assert [obj for obj in sent if obj["kind"] == "PodGroup" or "schedulingGroup" in obj.get("spec", {})] == []
    assert not [action for action in kube.actions if action[1] == "PodGroup"]


def test_a_manager_refused_pod_groups_runs_its_job_without_them(run):
    def refuse(obj):
        if obj["kind"] == gang.KIND:
            raise errors.Forbidden('podgroups.scheduling.k8s.io is forbidden: User "system:serviceaccount:ml:'
                                   'distributetrain-manager" cannot create resource "podgroups"')

    code, kube, sent = run(served=True, on_create=[refuse])
    assert code == 0
    assert created(kube) == [("Pod", "demo-worker-0"), ("Pod", "demo-chief"), ("Pod", "demo-worker-0-r1"),
                             ("Pod", "demo-chief-r1")]
    # Only the preflight's dry run named a group; the refusal ended its use.
    assert [pod["metadata"]["name"] for pod in sent if "schedulingGroup" in pod.get("spec", {})] == [
        "demo-worker-0", "demo-chief"]
