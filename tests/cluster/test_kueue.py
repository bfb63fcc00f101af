"""Kueue on the local cluster: its webhook gates a queue's pod group, it admits the
group as one workload against the ClusterQueue's quota, and pods outside a queue are
left alone. Kueue is started for this module and stopped after it (its webhooks go
first: they fail closed)."""

import uuid

import pytest
from kubernetes import client

from distributetrain.core import podgroup
from localcluster import kueue
from polling import poll_until

pytestmark = pytest.mark.cluster

ADMISSION_TIMEOUT_S = 60
GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"


@pytest.fixture(scope="module")
def kueue_running(cluster):
    cluster.start_kueue()
    try:
        yield cluster
    finally:
        cluster.stop_kueue()


@pytest.fixture
def queue(kueue_running, api_client, namespace):
    """A LocalQueue in the test's namespace, on a ClusterQueue of 2 GPUs of its own."""
    custom = client.CustomObjectsApi(api_client)
    name = f"cq-{uuid.uuid4().hex[:6]}"
    flavor = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor", "metadata": {"name": name}}
    cluster_queue = {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue", "metadata": {"name": name},
        "spec": {"namespaceSelector": {}, "queueingStrategy": "StrictFIFO", "resourceGroups": [{
            "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
            "flavors": [{"name": name, "resources": [{"name": "cpu", "nominalQuota": 100},
                                                     {"name": "memory", "nominalQuota": "100Gi"},
                                                     {"name": "nvidia.com/gpu", "nominalQuota": 2}]}]}]}}
    local = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue",
             "metadata": {"name": "team", "namespace": namespace}, "spec": {"clusterQueue": name}}
    custom.create_cluster_custom_object(GROUP, VERSION, "resourceflavors", flavor)
    custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", cluster_queue)
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "localqueues", local)
    try:
        yield "team"
    finally:
        client.CoreV1Api(api_client).delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "localqueues", "team")
        custom.delete_cluster_custom_object(GROUP, VERSION, "clusterqueues", name)
        custom.delete_cluster_custom_object(GROUP, VERSION, "resourceflavors", name)


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
    core.create_namespaced_pod(namespace, pod)
    assert gate_names(core, namespace, "alone") == [podgroup.PLACEMENT_GATE]
    assert kueue.ready()
