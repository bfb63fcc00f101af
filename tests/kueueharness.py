"""Kueue for tests that queue jobs: Kueue running, a queue of GPUs for one test, the
Kueue objects of the job's attempts, and rbac/kueue/ applied as docs/kueue.md tells a
Kueue user.

Every queue is a ClusterQueue of its own (StrictFIFO, covering cpu, memory and the GPUs)
behind a LocalQueue in the test's namespace; everything is removed afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from kubernetes import client

from harness.polling import poll_until
from projectrbac import apply_rbac, delete_shared_bindings

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
GPU = "nvidia.com/gpu"
LOCAL_QUEUE = "team"
# Kueue marks a queue Active once its caches hold it. On a Kueue just started, pods queued
# before that were once left unadmitted past a test's minute.
ACTIVE_TIMEOUT_S = 30


@dataclass(frozen=True)
class Queue:
    name: str  # the LocalQueue, as --queue names it
    cluster_queue: str


def custom(api_client) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


@contextmanager
def gpu_queue(api_client, namespace: str, gpus: int, preemption: dict | None = None) -> Iterator[Queue]:
    """A LocalQueue of ``gpus`` GPUs (its own ClusterQueue and flavor) in ``namespace``,
    with rbac/kueue/ applied there."""
    api = custom(api_client)
    name = f"cq-{uuid.uuid4().hex[:6]}"
    flavor = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor", "metadata": {"name": name}}
    spec = {"namespaceSelector": {}, "queueingStrategy": "StrictFIFO", "resourceGroups": [{
        "coveredResources": ["cpu", "memory", GPU],
        "flavors": [{"name": name, "resources": [{"name": "cpu", "nominalQuota": 100},
                                                 {"name": "memory", "nominalQuota": "200Gi"},
                                                 {"name": GPU, "nominalQuota": gpus}]}]}]}
    if preemption:
        spec["preemption"] = preemption
    cluster_queue = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue", "metadata": {"name": name},
                     "spec": spec}
    local = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue",
             "metadata": {"name": LOCAL_QUEUE, "namespace": namespace}, "spec": {"clusterQueue": name}}
    api.create_cluster_custom_object(GROUP, VERSION, "resourceflavors", flavor)
    api.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", cluster_queue)
    api.create_namespaced_custom_object(GROUP, VERSION, namespace, "localqueues", local)
    documents = apply_rbac(api_client, namespace, folder="rbac/kueue")
    try:
        poll_until(lambda: _condition_true(api.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", name), "Active")
                   and _condition_true(api.get_namespaced_custom_object(GROUP, VERSION, namespace, "localqueues",
                                                                        LOCAL_QUEUE), "Active"),
                   ACTIVE_TIMEOUT_S, f"ClusterQueue {name} and LocalQueue {LOCAL_QUEUE} Active")
        yield Queue(LOCAL_QUEUE, name)
    finally:
        delete_shared_bindings(api_client, documents)
        # The test's namespace goes with its pods and workloads; the cluster-wide objects here.
        _delete(lambda: api.delete_namespaced_custom_object(GROUP, VERSION, namespace, "localqueues", LOCAL_QUEUE))
        _delete(lambda: api.delete_cluster_custom_object(GROUP, VERSION, "clusterqueues", name))
        _delete(lambda: api.delete_cluster_custom_object(GROUP, VERSION, "resourceflavors", name))


@contextmanager
def priority_classes(api_client, **values: int) -> Iterator[dict[str, str]]:
    """WorkloadPriorityClasses {logical name: value}; yields {logical name: its name}."""
    api = custom(api_client)
    suffix = uuid.uuid4().hex[:6]
    names = {logical: f"{logical}-{suffix}" for logical in values}
    for logical, value in values.items():
        api.create_cluster_custom_object(GROUP, VERSION, "workloadpriorityclasses", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "WorkloadPriorityClass",
            "metadata": {"name": names[logical]}, "value": value})
    try:
        yield names
    finally:
        for name in names.values():
            _delete(lambda: api.delete_cluster_custom_object(GROUP, VERSION, "workloadpriorityclasses", name))


def workloads(api_client, namespace: str) -> list[dict]:
    return custom(api_client).list_namespaced_custom_object(GROUP, VERSION, namespace, "workloads")["items"]


def is_admitted(workload: dict) -> bool:
    return _condition_true(workload, "Admitted")


def gpus_reserved(api_client, cluster_queue: str) -> int:
    """The GPUs the ClusterQueue's admitted workloads hold (its flavors' reservation)."""
    status = custom(api_client).get_cluster_custom_object(GROUP, VERSION, "clusterqueues", cluster_queue).get(
        "status") or {}
    return sum(int(resource.get("total", "0")) for flavor in status.get("flavorsReservation") or ()
               for resource in flavor.get("resources") or () if resource["name"] == GPU)


def _condition_true(obj: dict, condition: str) -> bool:
    return any(c["type"] == condition and c["status"] == "True" for c in (obj.get("status") or {}).get("conditions") or ())


def _delete(call) -> None:
    try:
        call()
    except client.ApiException as error:
        if error.status != 404:
            raise
