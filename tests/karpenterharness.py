"""Karpenter on the local cluster, for the tests that need nodes it adds: the controller
for one module, and a NodePool of the test's own.

Each test's NodePool is tainted for the test's namespace (its pods tolerate
``ISOLATION_TAINT=<namespace>``), so no other test's pods get Karpenter's nodes; its nodes
may carry labels of the test's own (``jobharness.TEST_NODE_LABEL``) for a job's
``--node-selector``."""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from kubernetes import client

from clusterfixtures import NAMESPACE_SUFFIX_HEX_CHARS
from localcluster import binaries, karpenter, nodeclaims
from harness.polling import poll_until
from prerequisites import unavailable

NODE_CLASS_API = f"{karpenter.NODE_CLASS_GROUP}/{karpenter.NODE_CLASS_VERSION}"
ISOLATION_TAINT = "distributetrain.test/karpenter"
INSTANCE_TYPE = "gpu-8x"  # 8 GPUs, 1900m CPU and 16Gi allocatable (localcluster/localcluster/karpenter.py)
CLEANUP_TIMEOUT_S = 120


@contextmanager
def running_karpenter(cluster, repair_toleration_s: float | None = None) -> Iterator:
    """Karpenter, started (built first if need be) and stopped after, with every node it launched."""
    try:
        binaries.karpenter()
    except binaries.BuildError:
        if shutil.which("go") is None:
            unavailable("Karpenter is not built and there is no Go toolchain to build it (make setup)")
        raise
    if repair_toleration_s is None:
        cluster.start_karpenter()
    else:
        cluster.start_karpenter(repair_toleration_s=repair_toleration_s)
    try:
        yield cluster
    finally:
        cluster.stop_karpenter()


def node_class(name: str, boot_delay: str) -> dict:
    """Its ``nodeRegistrationDelay``: a cloud GPU node's minutes, in seconds."""
    return {"apiVersion": NODE_CLASS_API, "kind": "KWOKNodeClass", "metadata": {"name": name},
            "spec": {"nodeRegistrationDelay": boot_delay}}


def node_pool(name: str, namespace: str, gpu_limit: int, labels: Mapping[str, str] | None = None) -> dict:
    """Nodes of INSTANCE_TYPE, at most ``gpu_limit`` GPUs in all, consolidated soon after they
    empty; tainted for ``namespace``'s pods alone, and carrying ``labels``."""
    template_spec = {
        "nodeClassRef": {"group": karpenter.NODE_CLASS_GROUP, "kind": "KWOKNodeClass", "name": name},
        "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [INSTANCE_TYPE]}],
        "taints": [{"key": ISOLATION_TAINT, "value": namespace, "effect": "NoSchedule"}],
        "expireAfter": "Never",
    }
    return {
        "apiVersion": f"{karpenter.API_GROUP}/{karpenter.API_VERSION}", "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {**({"metadata": {"labels": dict(labels)}} if labels else {}), "spec": template_spec},
            "limits": {"nvidia.com/gpu": str(gpu_limit)},
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "5s"},
        },
    }


def claims_of(custom: client.CustomObjectsApi, pool: str) -> list[dict]:
    return custom.list_cluster_custom_object(karpenter.API_GROUP, karpenter.API_VERSION, "nodeclaims",
                                             label_selector=f"karpenter.sh/nodepool={pool}")["items"]


@contextmanager
def karpenter_pool(cluster, api_client, namespace: str, gpu_limit: int, boot_delay: str,
                   labels: Mapping[str, str] | None = None) -> Iterator[str]:
    """A KWOKNodeClass and a NodePool named for the test's namespace (yielded); deleted after,
    with the namespace's pods, and every node of the pool gone (Karpenter terminates them;
    the local cloud, if it did not)."""
    custom = client.CustomObjectsApi(api_client)
    name = f"gpu-{namespace[-NAMESPACE_SUFFIX_HEX_CHARS:]}"  # short: NodeClaims and nodes are named after it
    custom.create_cluster_custom_object(karpenter.NODE_CLASS_GROUP, karpenter.NODE_CLASS_VERSION, "kwoknodeclasses",
                                        node_class(name, boot_delay))
    try:
        custom.create_cluster_custom_object(karpenter.API_GROUP, karpenter.API_VERSION, "nodepools",
                                            node_pool(name, namespace, gpu_limit, labels))
        yield name
    finally:
        client.CoreV1Api(api_client).delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        claimed = [claim["metadata"]["name"] for claim in claims_of(custom, name)]
        for kind, group, version in (("nodepools", karpenter.API_GROUP, karpenter.API_VERSION),
                                     ("kwoknodeclasses", karpenter.NODE_CLASS_GROUP, karpenter.NODE_CLASS_VERSION)):
            try:
                custom.delete_cluster_custom_object(group, version, kind, name)
            except client.ApiException as error:
                if error.status != 404:
                    raise
        try:
            poll_until(lambda: not claims_of(custom, name) and not any(
                           nodeclaims.Instances(cluster.layout).get(claim) for claim in claimed),
                       CLEANUP_TIMEOUT_S, f"NodePool {name}'s NodeClaims and their nodes to go")
        finally:
            for claim in claimed:  # what Karpenter did not terminate, the local cloud does
                nodeclaims.delete(cluster, claim)
