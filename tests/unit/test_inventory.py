"""Inventory: quantities, the Kubernetes request rule, and which nodes are candidates."""

import pytest

from distributetrain import names
from distributetrain.inventory import GpuLedger, free_gpus, gpu_count, pod_request, tolerates

GPU = "nvidia.com/gpu"


def node(name, allocatable="8", capacity="8", ready="True", unschedulable=False, taints=(), labels=None, resource=GPU):
    status = {"conditions": [{"type": "Ready", "status": ready}], "allocatable": {}, "capacity": {}}
    if allocatable is not None:
        status["allocatable"][resource] = allocatable
        status["capacity"][resource] = capacity
    spec = {"unschedulable": unschedulable} if unschedulable else {}
    if taints:
        spec["taints"] = list(taints)
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec, "status": status}


def container(gpus=None, requests=None):
    resources = {}
    if gpus is not None:
        resources["limits"] = {GPU: str(gpus)}
    if requests is not None:
        resources["requests"] = {GPU: str(requests)}
    return {"name": "c", "resources": resources}


def pod(node_name, containers, phase="Running", init=(), uid="u", annotations=None, affinity_node=None):
    spec = {"containers": list(containers), "initContainers": list(init)}
    if node_name:
        spec["nodeName"] = node_name
    if affinity_node:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [affinity_node]}]}]}}}
    return {"metadata": {"name": "p", "uid": uid, "annotations": annotations or {}}, "spec": spec,
            "status": {"phase": phase}}


@pytest.mark.parametrize("text,count", [("4", 4), (4, 4), ("4000m", 4), ("1500m", 2), ("0", 0), ("2k", 2000)])
def test_quantities(text, count):
    assert gpu_count(text) == count


@pytest.mark.parametrize("bad", ["four", "-1", "1x"])
def test_bad_quantities(bad):
    with pytest.raises(ValueError):
        gpu_count(bad)


def test_allocatable_not_capacity():
    assert free_gpus([node("a", allocatable="6", capacity="8")], [], GPU) == {"a": 6}


def test_every_container_counted_and_limits_stand_for_requests():
    spec = {"containers": [container(2), container(requests=1), {"name": "cpu-only"}]}
    assert pod_request(spec, GPU) == 3


def test_init_containers_by_the_kubernetes_rule():
    # max(sum of app containers, largest init container)
    assert pod_request({"containers": [container(1)], "initContainers": [container(4)]}, GPU) == 4
    assert pod_request({"containers": [container(3)], "initContainers": [container(2)]}, GPU) == 3


def test_sidecar_init_containers_add_to_the_app():
    sidecar = container(1) | {"restartPolicy": "Always"}
    assert pod_request({"containers": [container(2)], "initContainers": [sidecar, container(2)]}, GPU) == 3


def test_terminal_pods_free_their_gpus():
    pods = [pod("a", [container(2)], phase="Succeeded"), pod("a", [container(3)], phase="Failed"),
            pod("a", [container(1)], phase="Running"), pod("a", [container(1)], phase="Pending")]
    assert free_gpus([node("a")], pods, GPU) == {"a": 6}


def test_unbound_pods_pinned_by_affinity_count_against_their_node():
    assert free_gpus([node("a"), node("b")], [pod(None, [container(5)], phase="Pending", affinity_node="b")], GPU) == {
        "a": 8, "b": 3}


def test_other_managers_reservations_count_but_not_our_own():
    reserving = pod(None, [], phase="Running", uid="other", annotations={names.ANNOTATION_RESERVATION: "a=3"})
    ours = pod(None, [], phase="Running", uid="me", annotations={names.ANNOTATION_RESERVATION: "a=2"})
    assert free_gpus([node("a")], [reserving, ours], GPU, own_pod_uid="me") == {"a": 5}


def test_overcommitted_node_reports_zero_not_negative():
    assert free_gpus([node("a", allocatable="2")], [pod("a", [container(3)])], GPU) == {"a": 0}


def test_not_ready_cordoned_tainted_and_resource_less_nodes_are_not_candidates():
    nodes = [
        node("ready"),
        node("not-ready", ready="False"),
        node("unknown", ready="Unknown"),
        node("cordoned", unschedulable=True),
        node("tainted", taints=[{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]),
        node("prefer", taints=[{"key": "soft", "effect": "PreferNoSchedule"}]),
        node("cpu-only", allocatable=None),
    ]
    ledger = GpuLedger(GPU)
    for n in nodes:
        ledger.add_node(n)
    assert ledger.free() == {"ready": 8, "prefer": 8}
    assert set(ledger.refused) == {"not-ready", "unknown", "cordoned", "tainted", "cpu-only"}
    assert ledger.advertised


def test_tolerated_taints_and_node_selector():
    taint = {"key": "dedicated", "value": "train", "effect": "NoSchedule"}
    nodes = [node("pool", taints=[taint], labels={"pool": "train"}), node("other", labels={"pool": "infer"})]
    toleration = [{"key": "dedicated", "operator": "Equal", "value": "train", "effect": "NoSchedule"}]
    assert free_gpus(nodes, [], GPU, toleration, {"pool": "train"}) == {"pool": 8}


@pytest.mark.parametrize(
    "toleration,expected",
    [
        ({"key": "k", "operator": "Exists"}, True),
        ({"operator": "Exists"}, True),
        ({"key": "k", "operator": "Equal", "value": "v"}, True),
        ({"key": "k", "operator": "Equal", "value": "w"}, False),
        ({"key": "k", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "other", "operator": "Exists"}, False),
    ],
)
def test_toleration_rule(toleration, expected):
    assert tolerates([toleration], {"key": "k", "value": "v", "effect": "NoSchedule"}) is expected


def test_other_gpu_vendors():
    amd = "amd.com/gpu"
    assert free_gpus([node("a", resource=amd), node("b")], [], amd) == {"a": 8}
