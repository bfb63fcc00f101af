"""Karpenter on the local cluster: a Pending GPU pod makes it launch a real node (kubelet and
containerd of their own), which registers, runs the pod and goes once it is empty (unless
marked do-not-disrupt); a NodePool's limits keep it from launching past them. Karpenter is started for this module
and stopped after it (with every node it launched).

Each test's NodePool is tainted for the test's namespace and its pods select the pool, so
no other test's pods get Karpenter nodes and these pods get no other test's nodes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal

import pytest
from kubernetes import client
from kubernetes.utils.quantity import parse_quantity

from karpenterharness import (CLEANUP_TIMEOUT_S, INSTANCE_TYPE, ISOLATION_TAINT, claims_of, karpenter_pool,
                               running_karpenter)
from localcluster import hostnetwork, karpenter, netsetup, nodeclaims
from localcluster.nodegroups import NodeGroupRegistry
from harness.polling import poll_until

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("karpenter")]

BOOT_DELAY = "2s"  # the NodeClass's nodeRegistrationDelay: a cloud GPU node's minutes, in seconds
CLAIM_TIMEOUT_S = 60  # Karpenter batches pending pods for 1-10 s, then creates the NodeClaim
NODE_UP_TIMEOUT_S = 120  # boot delay, containerd, the kubelet's registration, Karpenter's
POD_RUNNING_TIMEOUT_S = 60
# consolidateAfter, Karpenter's 10 s disruption passes and its 15 s validation, the drain,
# then the node's stop
CONSOLIDATED_TIMEOUT_S = 180
LIMIT_EVENT_TIMEOUT_S = 60
# Two of Karpenter's 10 s disruption passes and its 15 s validation of a command: an empty,
# consolidatable node that outlives them was held.
DISRUPTION_PASSES_S = 40
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
REPAIR_TOLERATION_S = 20  # node repair's: kwok's 10 minutes, in seconds
# the controller-manager's node-monitor grace period (the Node goes Unknown), the toleration,
# then the NodeClaim's termination
REPAIR_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def karpenter_running(cluster):
    """Karpenter, for one module: stopped after it, with every node it launched."""
    with running_karpenter(cluster, REPAIR_TOLERATION_S):
        yield cluster


@contextmanager
def pool_of(cluster, api_client, namespace: str, gpu_limit: int) -> Iterator[str]:
    """The test's NodePool of 8-GPU nodes (``karpenterharness``), booting in BOOT_DELAY."""
    with karpenter_pool(cluster, api_client, namespace, gpu_limit, BOOT_DELAY) as pool:
        yield pool


def gpu_pod(name: str, pool: str, namespace: str, gpus: int) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeSelector": {"karpenter.sh/nodepool": pool},
                     "tolerations": [{"key": ISOLATION_TAINT, "operator": "Equal", "value": namespace,
                                      "effect": "NoSchedule"}],
                     "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                     "resources": {"limits": {"nvidia.com/gpu": str(gpus)},
                                                   "requests": {"cpu": "10m", "memory": "16Mi"}}}]}}


def launched_claim(custom: client.CustomObjectsApi, pool: str) -> dict:
    """The pool's first NodeClaim once Karpenter has launched it (the provider gave its providerID)."""
    return poll_until(lambda: [claim for claim in claims_of(custom, pool) if claim.get("status", {}).get("providerID")],
                      CLAIM_TIMEOUT_S, "a NodeClaim for the pending pod, launched")[0]


def initialized_node(core: client.CoreV1Api, custom: client.CustomObjectsApi, pool: str, name: str):
    """Node `name` once its kubelet has registered it and Karpenter has initialized it."""
    def initialized():
        nodes = core.list_node(field_selector=f"metadata.name={name}").items
        return nodes[0] if nodes and (nodes[0].metadata.labels or {}).get("karpenter.sh/initialized") == "true" else None

    return poll_until(initialized, NODE_UP_TIMEOUT_S,
                      lambda: f"node {name} registered and initialized by Karpenter; claim status "
                              f"{[claim.get('status', {}).get('conditions') for claim in claims_of(custom, pool)]}")


def trainer_on_a_launched_node(core: client.CoreV1Api, custom: client.CustomObjectsApi, pool: str,
                               namespace: str) -> str:
    """A 4-GPU pod "trainer" of the pool, pending until Karpenter launches a node for it:
    that node's name, once it is initialized."""
    core.create_namespaced_pod(namespace, gpu_pod("trainer", pool, namespace, 4))
    name = launched_claim(custom, pool)["metadata"]["name"]
    initialized_node(core, custom, pool, name)
    return name


def node_index(layout, name: str) -> int | None:
    for record in NodeGroupRegistry(layout).records():
        if name in record.names:
            return record.first_index
    return None


def quantity(text: str) -> Decimal:
    return parse_quantity(text)


def test_a_pending_gpu_pod_gets_a_real_node_that_goes_once_it_is_empty(karpenter_running, api_client, namespace):
    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    layout = karpenter_running.layout
    with pool_of(karpenter_running, api_client, namespace, gpu_limit=16) as pool:
        core.create_namespaced_pod(namespace, gpu_pod("trainer", pool, namespace, 4))
        claim = launched_claim(custom, pool)
        name = claim["metadata"]["name"]
        assert (claim["status"]["providerID"], claim["metadata"]["labels"]["node.kubernetes.io/instance-type"]) == (
            f"localcluster://{name}", INSTANCE_TYPE)
        node = initialized_node(core, custom, pool, name)
        assert node.spec.provider_id == f"localcluster://{name}"
        labels = node.metadata.labels
        assert (labels["node.kubernetes.io/instance-type"], labels["topology.kubernetes.io/zone"],
                labels["karpenter.sh/capacity-type"], labels["karpenter.sh/registered"]) == (
            INSTANCE_TYPE, "zone-a", "on-demand", "true")
        taints = {taint.key for taint in node.spec.taints or ()}
        assert "karpenter.sh/unregistered" not in taints and ISOLATION_TAINT in taints
        # The kubelet reserved the host beyond the instance type: allocatable is what Karpenter
        # simulated with (the instance type's capacity less kwok's 100m and 10Mi kube-reserved).
        allocatable = node.status.allocatable
        assert (quantity(allocatable["cpu"]), quantity(allocatable["memory"]), allocatable["nvidia.com/gpu"]) == (
            Decimal("1.9"), quantity("16Gi") - quantity("10Mi"), "8")

        def running_there():
            pod = core.read_namespaced_pod("trainer", namespace)
            return pod.status.phase == "Running" and pod.spec.node_name == name

        poll_until(running_there, POD_RUNNING_TIMEOUT_S, f"the pod running on node {name}")
        index = node_index(layout, name)
        assert index is not None and netsetup.node_netns(index) in hostnetwork.cluster_netns()
        kubelet = karpenter_running.node_group(name).kubelet_pid(name)
        assert kubelet is not None

        core.delete_namespaced_pod("trainer", namespace, grace_period_seconds=0)
        poll_until(lambda: not claims_of(custom, pool) and not core.list_node(
                       field_selector=f"metadata.name={name}").items,
                   CONSOLIDATED_TIMEOUT_S, f"Karpenter to consolidate the empty node {name}")
        assert netsetup.node_netns(index) not in hostnetwork.cluster_netns()
        assert not nodeclaims.processes.alive(kubelet)
        assert nodeclaims.Instances(layout).get(name) is None


def test_a_node_pool_at_its_limits_launches_no_node(karpenter_running, api_client, namespace):
    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    with pool_of(karpenter_running, api_client, namespace, gpu_limit=4) as pool:
        core.create_namespaced_pod(namespace, gpu_pod("trainer", pool, namespace, 4))

        def refused():
            events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=trainer").items
            return [event.message for event in events if "exceed limits" in (event.message or "")]

        poll_until(refused, LIMIT_EVENT_TIMEOUT_S, "Karpenter to say the NodePool's limits leave no instance type")
        assert claims_of(custom, pool) == []
        assert core.read_namespaced_pod("trainer", namespace).status.phase == "Pending"


def test_stopping_karpenter_terminates_every_node_it_launched(karpenter_running, api_client, namespace):
    """What `down` does first: no node of Karpenter's outlives it, nor its NodeClaims."""
    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    layout = karpenter_running.layout
    with pool_of(karpenter_running, api_client, namespace, gpu_limit=8) as pool:
        name = trainer_on_a_launched_node(core, custom, pool, namespace)
        index = node_index(layout, name)
        kubelet = karpenter_running.node_group(name).kubelet_pid(name)
        try:
            karpenter_running.stop_karpenter()
            assert not karpenter.ready()
            assert claims_of(custom, pool) == [] and nodeclaims.Instances(layout).list() == []
            assert netsetup.node_netns(index) not in hostnetwork.cluster_netns()
            assert not nodeclaims.processes.alive(kubelet)
            poll_until(lambda: not core.list_node(field_selector=f"metadata.name={name}").items, CLEANUP_TIMEOUT_S,
                       f"Node {name} deleted, Karpenter's finalizer released")
        finally:
            core.delete_namespaced_pod("trainer", namespace, grace_period_seconds=0)  # or it gets a node again
            karpenter_running.start_karpenter(repair_toleration_s=REPAIR_TOLERATION_S)


def test_a_node_marked_do_not_disrupt_outlives_its_emptiness(karpenter_running, api_client, namespace):
    """Emptied and consolidatable, the node stays while `karpenter.sh/do-not-disrupt` is on it
    (past Karpenter's disruption passes), and goes once the annotation is taken off."""
    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    with pool_of(karpenter_running, api_client, namespace, gpu_limit=8) as pool:
        name = trainer_on_a_launched_node(core, custom, pool, namespace)
        core.patch_node(name, {"metadata": {"annotations": {DO_NOT_DISRUPT: "true"}}})
        core.delete_namespaced_pod("trainer", namespace, grace_period_seconds=0)

        def consolidatable():
            conditions = claims_of(custom, pool)[0].get("status", {}).get("conditions", [])
            return any(c["type"] == "Consolidatable" and c["status"] == "True" for c in conditions)

        poll_until(consolidatable, CONSOLIDATED_TIMEOUT_S, f"NodeClaim {name} consolidatable once empty")
        held_until = time.monotonic() + DISRUPTION_PASSES_S
        while time.monotonic() < held_until:
            assert [claim["metadata"]["name"] for claim in claims_of(custom, pool)] == [name]
            time.sleep(1)
        core.patch_node(name, {"metadata": {"annotations": {DO_NOT_DISRUPT: None}}})
        poll_until(lambda: not claims_of(custom, pool), CONSOLIDATED_TIMEOUT_S,
                   f"Karpenter to consolidate node {name} once it may")


def test_a_node_whose_kubelet_died_is_repaired(karpenter_running, api_client, namespace):
    """Node repair: the kubelet gone, the Node goes Unknown; past the toleration Karpenter
    deletes the NodeClaim and the local cloud stops what was left of the node."""
    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    layout = karpenter_running.layout
    with pool_of(karpenter_running, api_client, namespace, gpu_limit=8) as pool:
        name = trainer_on_a_launched_node(core, custom, pool, namespace)
        index = node_index(layout, name)
        kubelet = karpenter_running.node_group(name).kubelet_pid(name)
        nodeclaims.processes.kill(kubelet, f"kubelet of {name}", 15.0)
        poll_until(lambda: name not in [claim["metadata"]["name"] for claim in claims_of(custom, pool)]
                   and nodeclaims.Instances(layout).get(name) is None,
                   REPAIR_TIMEOUT_S, f"Karpenter to repair node {name} (its NodeClaim and instance gone)")
        assert netsetup.node_netns(index) not in hostnetwork.cluster_netns()
