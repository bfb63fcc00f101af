"""Installing a controller's objects, and releasing what a stopped one leaves (localcluster/localcluster/controllers.py,
kueue.release_finalizers, karpenter.release)."""

import json
from types import SimpleNamespace

import pytest
from kubernetes import client

from localcluster import controllers, karpenter, kueue


def conflict(status):
    return client.ApiException(status=status, reason="Conflict" if status == 409 else "Error")


def test_a_replace_that_lost_a_race_is_read_and_tried_again():
    """Seen in a full test run: the CRD existed, and the apiserver updated its status
    between the read and the replace."""
    versions, replaced = iter(["5", "6"]), []

    def replace(version):
        replaced.append(version)
        if version == "5":
            raise conflict(409)

    def create():
        raise conflict(409)

    controllers.create_or_replace(create, replace, lambda: SimpleNamespace(metadata=SimpleNamespace(
        resource_version=next(versions))))
    assert replaced == ["5", "6"]


def test_other_errors_and_endless_conflicts_are_raised():
    read = lambda: SimpleNamespace(metadata=SimpleNamespace(resource_version="1"))  # noqa: E731

    def exists():
        raise conflict(409)

    def always(status):
        def replace(version):
            raise conflict(status)
        return replace

    with pytest.raises(client.ApiException) as refused:
        controllers.create_or_replace(exists, always(403), read)
    assert refused.value.status == 403
    with pytest.raises(client.ApiException) as conflicted:
        controllers.create_or_replace(exists, always(409), read)
    assert conflicted.value.status == 409


class Cluster:
    """The calls `down` makes to release a controller's leftovers: objects of its kinds
    by plural (or the status listing them answers: 404 where the CRD was never installed),
    and every call that changed one."""

    def __init__(self, custom_objects: dict[str, list[dict] | int], pods=(), nodes=()):
        self.custom_objects, self.pods, self.nodes, self.calls = custom_objects, list(pods), list(nodes), []

    def list_cluster_custom_object(self, group, version, plural):
        answer = self.custom_objects[plural]
        if isinstance(answer, int):
            raise client.ApiException(status=answer)
        return {"items": answer}

    def call_api(self, path, method, query_params, header_params, **_):
        """GET /api/v1/pods as PartialObjectMetadataList, paged by ``limit``."""
        assert (path, method, header_params["Accept"]) == ("/api/v1/pods", "GET", controllers.METADATA_ONLY)
        query = dict(query_params)
        start = int(query.get("continue", 0))
        end = start + query["limit"]
        page = {"items": [{"metadata": vars(pod.metadata)} for pod in self.pods[start:end]],
                "metadata": {"continue": str(end) if end < len(self.pods) else ""}}
        return SimpleNamespace(data=json.dumps(page).encode())

    def list_node(self):
        return SimpleNamespace(items=self.nodes)

    def __getattr__(self, name):  # delete_..., patch_...: recorded
        if not name.startswith(("delete_", "patch_")):
            raise AttributeError(name)
        return lambda *args: self.calls.append((name, *args))


def in_cluster(monkeypatch, cluster: Cluster) -> None:
    monkeypatch.setattr(client, "CoreV1Api", lambda api_client: cluster)
    monkeypatch.setattr(client, "CustomObjectsApi", lambda api_client: cluster)


def test_every_object_of_a_kind_and_none_where_its_crd_was_never_installed():
    cluster = Cluster({"workloads": [{"metadata": {"name": "w"}}], "nodeclaims": 404, "nodepools": 403})
    assert controllers.all_objects(cluster, "kueue.x-k8s.io", "v1beta1", "workloads") == [{"metadata": {"name": "w"}}]
    assert controllers.all_objects(cluster, "karpenter.sh", "v1", "nodeclaims") == []
    with pytest.raises(client.ApiException) as refused:
        controllers.all_objects(cluster, "karpenter.sh", "v1", "nodepools")
    assert refused.value.status == 403


def test_kueue_s_finalizers_are_released_from_pods_and_workloads_and_others_kept(monkeypatch):
    pod = SimpleNamespace(metadata=SimpleNamespace(name="p", namespace="ml", finalizers=["kueue.x-k8s.io/managed"]))
    other = SimpleNamespace(metadata=SimpleNamespace(name="q", namespace="ml", finalizers=["example.com/keep"]))
    workload = {"metadata": {"name": "w", "namespace": "ml",
                             "finalizers": ["kueue.x-k8s.io/resource-in-use", "example.com/keep"]}}
    cluster = Cluster({"workloads": [workload]}, pods=[pod, other])
    in_cluster(monkeypatch, cluster)
    monkeypatch.setattr(controllers, "POD_PAGE", 1)  # every page read, not only the first
    assert kueue.release_finalizers(cluster) == ["pod/ml/p", "workload/ml/w"]
    assert cluster.calls == [
        ("patch_namespaced_pod", "p", "ml", {"metadata": {"finalizers": None}}),
        ("patch_namespaced_custom_object", kueue.API_GROUP, kueue.API_VERSION, "ml", "workloads", "w",
         {"metadata": {"finalizers": ["example.com/keep"]}})]
    # Kueue never installed: its pods' finalizers still go.
    cluster = Cluster({"workloads": 404}, pods=[pod])
    in_cluster(monkeypatch, cluster)
    assert kueue.release_finalizers(cluster) == ["pod/ml/p"]


def test_karpenter_s_nodeclaims_are_deleted_and_its_node_finalizers_released(monkeypatch):
    claims = [{"metadata": {"name": "c1", "finalizers": ["karpenter.sh/termination"]}}, {"metadata": {"name": "c2"}}]
    node = SimpleNamespace(metadata=SimpleNamespace(name="n", finalizers=["karpenter.sh/termination", "x/y"]))
    cluster = Cluster({"nodeclaims": claims}, nodes=[node])
    in_cluster(monkeypatch, cluster)
    assert karpenter.release(None) == ["nodeclaim/c1", "nodeclaim/c2", "node/n"]
    group = (karpenter.API_GROUP, karpenter.API_VERSION, "nodeclaims")
    assert cluster.calls == [
        ("delete_cluster_custom_object", *group, "c1"),
        ("patch_cluster_custom_object", *group, "c1", {"metadata": {"finalizers": None}}),
        ("delete_cluster_custom_object", *group, "c2"),
        ("patch_node", "n", [{"op": "replace", "path": "/metadata/finalizers", "value": ["x/y"]}])]
    # Karpenter never installed: its nodes' finalizers still go.
    cluster = Cluster({"nodeclaims": 404}, nodes=[node])
    in_cluster(monkeypatch, cluster)
    assert karpenter.release(None) == ["node/n"]


def test_a_stopped_controller_s_finalizers_are_dropped_and_the_others_kept():
    finalizers = ["kueue.x-k8s.io/managed", "example.com/keep", "kueue.x-k8s.io/resource-in-use"]
    kept = controllers.finalizers_without(finalizers, "kueue.x-k8s.io/")
    assert kept == ["example.com/keep"]
    assert controllers.finalizers_without(["kueue.x-k8s.io/managed"], "kueue.x-k8s.io/") == []


def test_an_object_without_the_controller_s_finalizers_needs_no_patch():
    assert controllers.finalizers_without(["example.com/keep"], "karpenter.sh/") is None
    assert controllers.finalizers_without([], "karpenter.sh/") is None
    assert controllers.finalizers_without(None, "karpenter.sh/") is None
