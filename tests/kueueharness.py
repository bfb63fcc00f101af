"""Kueue for tests that queue jobs: Kueue running, a queue of GPUs for one test (its
flavor as a platform team writes one: node labels, tolerations, a Topology for TAS), the
Kueue objects of the job's attempts, rbac/kueue/ applied as docs/kueue.md tells a Kueue
user, and Kueue's queues served in v1beta1 only, as Kueue v0.14 and earlier serve them.

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
DISCOVERY_TIMEOUT_S = 30  # a CRD's versions changed: the API server's discovery follows within a second or two


@dataclass(frozen=True)
class Queue:
    name: str  # the LocalQueue, as --queue names it
    cluster_queue: str


def custom(api_client) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


@contextmanager
def gpu_queue(api_client, namespace: str, gpus: int, preemption: dict | None = None,
              flavor_spec: dict | None = None) -> Iterator[Queue]:
    """A LocalQueue of ``gpus`` GPUs (its own ClusterQueue and flavor, of ``flavor_spec``:
    nodeLabels, tolerations, topologyName) in ``namespace``, with rbac/kueue/ applied there."""
    api = custom(api_client)
    name = f"cq-{uuid.uuid4().hex[:6]}"
    flavor = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor", "metadata": {"name": name},
              **({"spec": flavor_spec} if flavor_spec else {})}
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
def topology(api_client, levels: list[str]) -> Iterator[str]:
    """A Kueue Topology of node label ``levels``, outermost first (yielded: its name), for a
    flavor's ``topologyName``: Topology Aware Scheduling, on by default since Kueue v0.14."""
    api = custom(api_client)
    name = f"topology-{uuid.uuid4().hex[:6]}"
    api.create_cluster_custom_object(GROUP, VERSION, "topologies", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Topology", "metadata": {"name": name},
        "spec": {"levels": [{"nodeLabel": level} for level in levels]}})
    try:
        yield name
    finally:
        _delete(lambda: api.delete_cluster_custom_object(GROUP, VERSION, "topologies", name))


@contextmanager
def served_in_v1beta1_only(api_client, plurals=("localqueues", "clusterqueues", "resourceflavors")) -> Iterator[None]:
    """Kueue's kinds ``plurals`` served in v1beta1 only, as Kueue v0.14 and earlier serve
    them: their CRDs' v1beta2 (still the storage version) not served, then served again.
    Meanwhile Kueue itself, which reads them in v1beta2, keeps what its caches hold."""
    extensions = client.ApiextensionsV1Api(api_client)

    def serve_v1beta2(served: bool) -> None:
        for plural in plurals:
            crd = extensions.read_custom_resource_definition(f"{plural}.{GROUP}")
            index = next(i for i, version in enumerate(crd.spec.versions) if version.name == "v1beta2")
            extensions.patch_custom_resource_definition(f"{plural}.{GROUP}", [
                {"op": "test", "path": f"/spec/versions/{index}/name", "value": "v1beta2"},
                {"op": "replace", "path": f"/spec/versions/{index}/served", "value": served}])
        poll_until(lambda: set(plurals) <= _discovered(api_client, "v1beta2") if served
                   else not set(plurals) & _discovered(api_client, "v1beta2"),
                   DISCOVERY_TIMEOUT_S, f"{GROUP}/v1beta2 {'serving' if served else 'not serving'} {plurals}")

    serve_v1beta2(False)
    try:
        yield
    finally:
        serve_v1beta2(True)


def _discovered(api_client, version: str) -> set[str]:
    """The resources a version of Kueue's group lists in discovery."""
    try:
        document = api_client.call_api(f"/apis/{GROUP}/{version}", "GET", auth_settings=["BearerToken"],
                                       response_type="object", _return_http_data_only=True)
    except client.ApiException as error:
        if error.status == 404:
            return set()
        raise
    return {resource["name"] for resource in document.get("resources") or ()}


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
