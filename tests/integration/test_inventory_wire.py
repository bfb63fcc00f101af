"""The inventory reads pods in the API server's protobuf encoding: the real server's bytes
give the same pods, cut to what the inventory reads, as its JSON does, whole or in pages
(as from a server that reads them from etcd); and its errors in protobuf read as its JSON
errors."""

import json
import math

import pytest
from kubernetes import client

from distributetrain.core.placement import inventory
from distributetrain.core.clock import RealClock
from distributetrain.kube import podlist, podwire, protowire
from distributetrain.kube.client import Kube

pytestmark = pytest.mark.cluster

UNSCHEDULABLE = {"no-such-label": "anywhere"}  # nothing runs them: only their API objects matter


def pods(namespace):
    def pod(name, **spec):
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace, "labels": {"wire": name, "empty": ""}},
                "spec": {"nodeSelector": UNSCHEDULABLE, "terminationGracePeriodSeconds": 0, **spec}}

    def container(name, **resources):
        return {"name": name, "image": "distributetrain/base:0.1.0", "resources": resources}

    gpus = {"limits": {"nvidia.com/gpu": "2"}}
    sidecar = container("sidecar", requests={"cpu": "100m"}) | {"restartPolicy": "Always"}
    pinned = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-node-7"]}]}]}}}
    return [
        pod("plain", containers=[container("c")]),
        pod("gpus", containers=[container("a", **gpus), container("b", requests={"cpu": "1500m", "memory": "1Gi"})]),
        pod("init", containers=[container("c", **gpus)], initContainers=[
            sidecar, container("prepare", requests={"memory": "2Gi"}, limits={"memory": "2Gi"})]),
        pod("pinned", containers=[container("c", **gpus)], affinity=pinned),
    ]


def test_the_servers_protobuf_pods_are_its_json_pods_cut_to_what_the_inventory_reads(api_client, namespace,
                                                                                    monkeypatch):
    core = client.CoreV1Api(api_client)
    for body in pods(namespace):
        core.create_namespaced_pod(namespace, body)
    selector = f"metadata.namespace={namespace}"
    response = api_client.call_api("/api/v1/pods", "GET", query_params=[("fieldSelector", selector)],
                                   header_params={"Accept": podwire.ACCEPT}, auth_settings=["BearerToken"],
                                   _return_http_data_only=True, _preload_content=False)
    assert response.headers["Content-Type"].startswith(podwire.PROTOBUF)
    from_protobuf = []
    version, token = podwire.read_pod_list(response.headers["Content-Type"], [response.data], from_protobuf.append)
    as_json, _ = Kube(api_client, RealClock()).list_all("Pod", namespace)
    assert sorted(from_protobuf, key=lambda p: p["metadata"]["name"]) == \
        sorted((podwire.slim(p) for p in as_json), key=lambda p: p["metadata"]["name"])
    assert int(version) > 0 and token == ""
    by_name = {p["metadata"]["name"]: p for p in from_protobuf}
    assert by_name["init"]["spec"]["initContainers"][0] == {
        "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}}
    assert by_name["gpus"]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    assert by_name["pinned"]["spec"]["affinity"]["nodeAffinity"]
    # What the inventory lists: the same pods, read as they arrive.
    listed = []
    assert int(Kube(api_client, RealClock()).each_pod_request(listed.append, listed.clear, field_selector=selector)) > 0
    assert sorted(listed, key=lambda p: p["metadata"]["name"]) == sorted(from_protobuf, key=lambda p: p["metadata"]["name"])
    # In pages, as from a server older than 1.31, the inventory's own query (every pod of
    # the cluster): each page a request with the server's own continue token, one snapshot,
    # each pod once, and this namespace's pods the same.
    monkeypatch.setattr(podlist, "LIST_FROM_CACHE_SINCE", (99, 0))
    monkeypatch.setattr(podlist, "PAGE_SIZE", 5)
    paged, restarts = [], []

    def restart() -> None:
        restarts.append(len(paged))
        paged.clear()

    kube = Kube(api_client, RealClock())
    assert int(kube.each_pod_request(paged.append, restart, field_selector=inventory.ACTIVE_PODS_SELECTOR)) > 0
    uids = [p["metadata"]["uid"] for p in paged]
    assert restarts == [0] and len(uids) == len(set(uids)), restarts
    ours = [p for p in paged if p["metadata"].get("namespace") == namespace]
    assert sorted(ours, key=lambda p: p["metadata"]["name"]) == sorted(listed, key=lambda p: p["metadata"]["name"])
    assert kube.requests >= 1 + math.ceil(len(paged) / 5)  # the server's version, then pages of 5


def raw(api_client, path: str, headers: dict) -> bytes:
    """The body of a GET the server refuses, as it sent it."""
    with pytest.raises(client.ApiException) as refused:
        api_client.call_api(path, "GET", header_params=headers, auth_settings=["BearerToken"],
                            _return_http_data_only=True, _preload_content=False)
    return refused.value.body


@pytest.mark.parametrize("what", ["forbidden", "not found"])
def test_the_servers_errors_in_protobuf_read_as_its_errors_in_json(api_client, namespace, what):
    path, headers = {"forbidden": ("/api/v1/pods", {"Impersonate-User": "nobody"}),
                     "not found": (f"/api/v1/namespaces/{namespace}/pods/missing", {})}[what]
    as_protobuf = raw(api_client, path, {**headers, "Accept": podwire.ACCEPT})
    assert as_protobuf.startswith(protowire.MAGIC)
    assert protowire.status(as_protobuf) == json.loads(raw(api_client, path, {**headers, "Accept": "application/json"}))
