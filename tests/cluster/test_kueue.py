"""Kueue on the local cluster: its webhook gates a queue's pod group, it admits the
group as one workload against the ClusterQueue's quota, and pods outside a queue are
left alone. Kueue is started for this module and stopped after it (its webhooks go
first: they fail closed)."""

import pytest
from kubernetes import client

from distributetrain.core.pods import podgroup
from localcluster import kueue
from kueueharness import gpu_queue
from harness.polling import poll_until

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("kueue")]

ADMISSION_TIMEOUT_S = 60
DELETED_TIMEOUT_S = 30


@pytest.fixture
def queue(kueue_running, api_client, namespace):
    """A LocalQueue in the test's namespace, on a ClusterQueue of 2 GPUs of its own."""
    with gpu_queue(api_client, namespace, 2) as made:
        yield made.name


def member(name, queue, group, size, gpus):
    """A pod of a group, gated by the job as the manager creates them (never scheduled here)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {podgroup.QUEUE_LABEL: queue, podgroup.GROUP_LABEL: group},
                         "annotations": {podgroup.GROUP_COUNT_ANNOTATION: str(size)}},
            "spec": {"schedulingGates": [{"name": podgroup.PLACEMENT_GATE}],
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                     "resources": {"limits": {"nvidia.com/gpu": str(gpus)},
                                                   "requests": {"cpu": "10m", "memory": "16Mi"}}}]}}


def gate_names(core, namespace, name):
    return [gate.name for gate in core.read_namespaced_pod(name, namespace).spec.scheduling_gates or ()]


def test_a_group_within_quota_is_admitted_whole_and_one_beyond_it_waits(queue, api_client, namespace):
    core = client.CoreV1Api(api_client)
    for name, gpus in (("a-0", 1), ("a-1", 1)):
        core.create_namespaced_pod(namespace, member(name, queue, "a", 2, gpus))
    core.create_namespaced_pod(namespace, member("b-0", queue, "b", 1, 1))
    # Kueue's webhook gated every member; its admission of group a (2 of 2 GPUs) removes
    # its own gates only, the job's stays.
    poll_until(lambda: all(gate_names(core, namespace, n) == [podgroup.PLACEMENT_GATE] for n in ("a-0", "a-1")),
               ADMISSION_TIMEOUT_S, lambda: f"group a admitted: gates {gate_names(core, namespace, 'a-0')}")
    assert any(gate.startswith(podgroup.KUEUE_GATE_PREFIX) for gate in gate_names(core, namespace, "b-0"))


def test_a_pod_outside_any_queue_is_left_alone(kueue_running, api_client, namespace):
    core = client.CoreV1Api(api_client)
    pod = member("alone", "", "", 1, 1)
    del pod["metadata"]["labels"][podgroup.QUEUE_LABEL]
    del pod["metadata"]["labels"][podgroup.GROUP_LABEL]
    del pod["metadata"]["annotations"][podgroup.GROUP_COUNT_ANNOTATION]
    core.create_namespaced_pod(namespace, pod)
    assert gate_names(core, namespace, "alone") == [podgroup.PLACEMENT_GATE]
    assert kueue.ready()


def test_a_stopped_kueue_leaves_no_pod_undeletable(kueue_running, queue, api_client, namespace):
    """Kueue's finalizer on a queued pod, with Kueue gone, would keep the pod (and its
    namespace) for ever: stopping Kueue takes it off."""
    core = client.CoreV1Api(api_client)
    core.create_namespaced_pod(namespace, member("held", queue, "held", 1, 1))
    assert any(f.startswith("kueue.x-k8s.io/") for f in core.read_namespaced_pod("held", namespace).metadata.finalizers)
    try:
        kueue_running.stop_kueue()
        core.delete_namespaced_pod("held", namespace, grace_period_seconds=0)
        poll_until(lambda: "held" not in {p.metadata.name for p in core.list_namespaced_pod(namespace).items},
                   DELETED_TIMEOUT_S, lambda: "the held pod to be deleted")
    finally:
        kueue_running.start_kueue()
