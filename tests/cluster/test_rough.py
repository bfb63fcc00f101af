"""The local cluster made as rough as users' clusters: each rough edge shown on real nodes.

One node group runs this module's nodes, one node per rough edge (so a cordon or a kubelet
restart touches no other test's pods); they are tainted so other sessions' pods stay off them.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from kubernetes import client

from jobharness import node_pool
from harness.polling import poll_until
from roughness import (
    create_pod, drain, eks_nodes, gpu_pod, gpu_quota, other_tenants, pinned_to_node, read_pod, uncordon,
)

pytestmark = pytest.mark.cluster

IMAGE = "distributetrain/base:0.1.0"
TAINT_KEY = "distributetrain.test/rough-nodes"
START_TIMEOUT_S = 60
CHANGE_TIMEOUT_S = 45
KUBELET_DOWN_S = 2
# Shorter than the kubelet's patience (it calls the node not Ready after about 30 s).
CONTAINERD_DOWN_S = 15
# Long enough that the kubelet's status writer, slow on a loaded host, reports the wait before it ends.
PULL_DELAY_S = 8
DRAIN_TIMEOUT_S = 15


@dataclass(frozen=True)
class RoughNodes:
    eks: str  # named as on EKS: Node ip-10-0-N-<hex>.ec2.internal, hostname label ip-10-0-N-<hex>
    eks_hostname: str
    restart: str
    pulls: str
    drain: str
    tenant: str
    toleration: dict


@pytest.fixture(scope="module")
def nodes(cluster) -> Iterator[RoughNodes]:
    suffix = uuid.uuid4().hex[:5]
    eks_hostname = f"ip-10-0-7-{suffix}"
    names = {"eks": f"{eks_hostname}.ec2.internal", "restart": f"rg{suffix}-restart", "pulls": f"rg{suffix}-pulls",
             "drain": f"rg{suffix}-drain", "tenant": f"rg{suffix}-tenant"}
    spec = {name: 2 if role == "tenant" else 1 for role, name in names.items()}
    taint = f"{TAINT_KEY}={suffix}:NoSchedule"
    group = cluster.add_nodes(spec, taints=[taint], hostnames={names["eks"]: eks_hostname})
    try:
        yield RoughNodes(**names, eks_hostname=eks_hostname,
                         toleration={"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"})
    finally:
        group.stop()


@pytest.fixture
def core(api_client) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)




def pod_on(name: str, nodes: RoughNodes, affinity: dict, command: list[str], **spec) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **spec.pop("metadata", {})},
        "spec": {"affinity": affinity, "tolerations": [nodes.toleration], "terminationGracePeriodSeconds": 1,
                 "restartPolicy": "Never", "containers": [{"name": "main", "image": IMAGE, "command": command}],
                 **spec},
    }


def hostname_is(value: str) -> dict:
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [value]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def phase(core, namespace: str, name: str) -> str | None:
    pod = read_pod(core, namespace, name)
    return pod["status"].get("phase") if pod else None


def condition(obj: dict, kind: str) -> dict:
    return next((c for c in obj["status"].get("conditions") or [] if c["type"] == kind), {})


def events(core, namespace: str, pod: str) -> list[client.CoreV1Event]:
    listed = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod}").items
    return sorted(listed, key=lambda event: event.metadata.creation_timestamp)


def sleeping(seconds: str) -> list[str]:
    return ["sleep", seconds]


def marker() -> str:
    """A `sleep` argument no other process on the host has."""
    return f"{80000 + uuid.uuid4().int % 9999}.{uuid.uuid4().int % 10**6:06d}"


def processes_with(text: str) -> list[int]:
    result = subprocess.run(["pgrep", "-f", f"sleep {text}"], capture_output=True, text=True)
    return sorted(int(pid) for pid in result.stdout.split())


# --- node name != hostname label ----------------------------------------------------------------


def test_a_node_named_unlike_its_hostname_is_found_by_name_not_by_hostname_label(core, namespace, nodes):
    node = json.loads(core.read_node(nodes.eks, _preload_content=False).data)
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == nodes.eks_hostname

    create_pod(core, namespace, pod_on("by-name", nodes, pinned_to_node(nodes.eks), sleeping("600")))
    create_pod(core, namespace, pod_on("by-node-name-as-hostname", nodes, hostname_is(nodes.eks), sleeping("600")))
    create_pod(core, namespace, pod_on("host-network", nodes, hostname_is(nodes.eks_hostname), ["hostname"],
                                       hostNetwork=True))

    poll_until(lambda: phase(core, namespace, "by-name") == "Running", START_TIMEOUT_S, "by-name Running")
    assert read_pod(core, namespace, "by-name")["spec"]["nodeName"] == nodes.eks
    unschedulable = poll_until(
        lambda: condition(read_pod(core, namespace, "by-node-name-as-hostname"), "PodScheduled").get("message"),
        START_TIMEOUT_S, "the scheduler's verdict on the pod pinned by hostname label = node name")
    assert "didn't match Pod's node affinity/selector" in unschedulable
    assert phase(core, namespace, "by-node-name-as-hostname") == "Pending"
    # A hostNetwork pod sees the machine's hostname: the label, not the Node's name.
    poll_until(lambda: phase(core, namespace, "host-network") == "Succeeded", START_TIMEOUT_S, "host-network done")
    assert core.read_namespaced_pod_log("host-network", namespace).strip() == nodes.eks_hostname


# --- kubelet restart --------------------------------------------------------------------------


def test_kubelet_and_containerd_restarts_leave_containers_running(cluster, core, namespace, nodes):
    """The kubelet killed and started again, then containerd: the pod's container runs on
    (same container, same process, no restart), and the node stays Ready."""
    tag = marker()
    create_pod(core, namespace, pod_on("survivor", nodes, pinned_to_node(nodes.restart), sleeping(tag)))
    before = poll_until(lambda: (pod := read_pod(core, namespace, "survivor")) and condition(pod, "Ready").get(
        "status") == "True" and pod, START_TIMEOUT_S, "survivor Ready")
    pids = poll_until(lambda: processes_with(tag), START_TIMEOUT_S, "the survivor's process")
    group = cluster.node_group(nodes.restart)
    kubelet = group.kubelet_pid(nodes.restart)

    cluster.restart_kubelet(nodes.restart, down_s=KUBELET_DOWN_S)
    assert group.kubelet_pid(nodes.restart) not in (None, kubelet)

    def ready() -> dict:
        return condition(json.loads(core.read_node(nodes.restart, _preload_content=False).data), "Ready")

    cluster.restart_containerd(nodes.restart, down_s=CONTAINERD_DOWN_S)
    poll_until(lambda: ready().get("status") == "True", CHANGE_TIMEOUT_S, "the node Ready")
    poll_until(lambda: condition(read_pod(core, namespace, "survivor"), "Ready").get("status") == "True",
             CHANGE_TIMEOUT_S, "the pod Ready after the restarts")
    after = read_pod(core, namespace, "survivor")
    status, status_before = after["status"]["containerStatuses"][0], before["status"]["containerStatuses"][0]
    assert (status["containerID"], status["restartCount"], status["state"]) == (
        status_before["containerID"], 0, status_before["state"])
    assert processes_with(tag) == pids, "the container's process was replaced"


# --- slow image pulls -------------------------------------------------------------------------


def test_a_slow_pull_waits_in_container_creating_once_per_node(cluster, core, namespace, nodes):
    cluster.forget_images(nodes.pulls)  # the node slot's image store outlives clusters
    cluster.set_pull_delays({IMAGE: PULL_DELAY_S}, nodes=[nodes.pulls])
    on_node = pinned_to_node(nodes.pulls)
    started = time.monotonic()
    create_pod(core, namespace, pod_on("first", nodes, on_node, ["true"]))
    waiting = poll_until(lambda: (pod := read_pod(core, namespace, "first")) and pod["status"].get(
        "containerStatuses") and pod, START_TIMEOUT_S, "first's container status")
    assert waiting["status"]["containerStatuses"][0]["state"] == {"waiting": {"reason": "ContainerCreating"}}
    poll_until(lambda: phase(core, namespace, "first") == "Succeeded", START_TIMEOUT_S, "first done")
    assert time.monotonic() - started >= PULL_DELAY_S
    pulling, pulled = [(e.reason, e.message) for e in events(core, namespace, "first")
                       if e.reason in ("Pulling", "Pulled")]
    assert pulling == ("Pulling", f'Pulling image "{IMAGE}"')
    took = re.fullmatch(rf'Successfully pulled image "{IMAGE}" in (\d+(?:\.\d+)?)s \(\d+(?:\.\d+)?s including waiting\)\. '
                        r"Image size: [1-9]\d* bytes\.", pulled[1])
    assert took and float(took[1]) >= PULL_DELAY_S, pulled

    # The node has it now, like a node's image cache.
    started = time.monotonic()
    create_pod(core, namespace, pod_on("second", nodes, on_node, ["true"]))
    poll_until(lambda: phase(core, namespace, "second") == "Succeeded", START_TIMEOUT_S, "second done")
    assert time.monotonic() - started < PULL_DELAY_S + 10
    assert [(e.reason, e.message) for e in events(core, namespace, "second") if e.reason.startswith("Pull")] == [
        ("Pulled", f'Container image "{IMAGE}" already present on machine')]

    # Until it forgets it.
    cluster.forget_images(nodes.pulls)
    create_pod(core, namespace, pod_on("third", nodes, on_node, ["true"]))
    poll_until(lambda: phase(core, namespace, "third") == "Succeeded", START_TIMEOUT_S, "third done")
    assert [e.reason for e in events(core, namespace, "third") if e.reason.startswith("Pull")] == [
        "Pulling", "Pulled"]


# --- other tenants, quota, drain ------------------------------------------------------------


def test_other_tenants_take_gpus_on_a_chosen_node(api_client, core, nodes):
    with other_tenants(api_client) as tenants:
        first = tenants.take(nodes.tenant, 2, tolerations=[nodes.toleration])
        assert tenants.wait_running(first)["spec"]["nodeName"] == nodes.tenant
        late = tenants.take(nodes.tenant, 1, tolerations=[nodes.toleration])
        verdict = poll_until(lambda: condition(read_pod(core, tenants.namespace, late), "PodScheduled").get("message"),
                           START_TIMEOUT_S, "the late tenant unschedulable")
        assert "Insufficient nvidia.com/gpu" in verdict
        tenants.release(first)
        tenants.wait_running(late)
        namespace = tenants.namespace
    try:
        assert core.read_namespace(namespace).status.phase == "Terminating"
    except client.ApiException as error:
        assert error.status == 404


def test_a_gpu_quota_refuses_pods_beyond_it(api_client, core, namespace, nodes):
    with gpu_quota(api_client, namespace, 1):
        with pytest.raises(client.ApiException) as refused:
            create_pod(core, namespace, gpu_pod("too-big", nodes.tenant, 2))
        assert refused.value.status == 403 and "exceeded quota" in refused.value.body
        create_pod(core, namespace, gpu_pod("fits", nodes.tenant, 1))
    assert core.list_namespaced_resource_quota(namespace).items == []


def test_drain_evicts_pods_but_a_disruption_budget_refuses(api_client, core, namespace, nodes):
    on_node = pinned_to_node(nodes.drain)
    create_pod(core, namespace, pod_on("free", nodes, on_node, sleeping("600")))
    create_pod(core, namespace, pod_on("guarded", nodes, on_node, sleeping("600"),
                                       metadata={"labels": {"app": "guarded"}}))
    client.PolicyV1Api(api_client).create_namespaced_pod_disruption_budget(namespace, {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "guarded"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
    })
    for name in ("free", "guarded"):
        poll_until(lambda: phase(core, namespace, name) == "Running", START_TIMEOUT_S, f"{name} Running")
    # The disruption controller must have counted the guarded pod healthy: the refusal is the budget's.
    poll_until(lambda: (client.PolicyV1Api(api_client).read_namespaced_pod_disruption_budget("guarded", namespace)
                      .status.current_healthy == 1), CHANGE_TIMEOUT_S, "the budget to count the guarded pod")
    try:
        outcome = drain(api_client, nodes.drain, timeout_s=DRAIN_TIMEOUT_S)
        assert core.read_node(nodes.drain).spec.unschedulable is True
        assert outcome.evicted == (f"{namespace}/free",) and outcome.terminating == ()
        assert list(outcome.refused) == [f"{namespace}/guarded"]
        assert outcome.refused[f"{namespace}/guarded"].startswith("429 Cannot evict pod as it would violate the "
                                                                   "pod's disruption budget")
        assert read_pod(core, namespace, "free") is None
        assert phase(core, namespace, "guarded") == "Running"
    finally:
        uncordon(api_client, nodes.drain)


def test_eks_nodes_join_a_test_s_pool_named_unlike_their_hostnames(cluster, core):
    with node_pool(cluster, {"b": 1}) as pool, eks_nodes(cluster, pool, {"a": 1}):
        assert pool.node("a") == f"{pool.prefix}-a.ec2.internal"
        labels = core.read_node(pool.node("a")).metadata.labels
        assert labels["kubernetes.io/hostname"] == f"{pool.prefix}-a"
        selected = core.list_node(label_selector=pool.selector).items
        assert sorted(node.metadata.name for node in selected) == sorted([pool.node("a"), pool.node("b")])
