"""Rough edges of real clusters, for tests to bring on at the moments they choose.

- `eks_nodes`: nodes added to a test's pool, named as on EKS (Karpenter) or kops/OpenStack:
  Node `<pool>-a.ec2.internal`, label `kubernetes.io/hostname=<pool>-a`.
- `other_tenants`: another team's plain pods requesting GPUs on a chosen node.
- `gpu_quota`: a ResourceQuota on `requests.nvidia.com/gpu` in a namespace.
- `drain`: `kubectl drain` (cordon, then the policy/v1 Eviction API, PodDisruptionBudgets
  honoured: a 429 is retried until a deadline), and `uncordon`.

Kubelet restarts and slow image pulls are the cluster's own: `cluster.restart_kubelet(node)`,
`cluster.set_pull_delays({image: s}, nodes=[...])`, `cluster.forget_images(node)`.
Everything here is undone when its context ends, so tests sharing the cluster never see it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from kubernetes import client

from clusterfixtures import TEST_NAMESPACE_LABEL
from harness.polling import poll_until
from jobharness import TEST_NODE_LABEL, NodePool, create_pod  # noqa: F401 - the tests' one pod creation

GPU_RESOURCE = "nvidia.com/gpu"
TENANT_IMAGE = "distributetrain/base:0.1.0"
EKS_DOMAIN = "ec2.internal"
POLL_S = 0.2
QUOTA_COUNTED_TIMEOUT_S = 30.0
RUNNING_TIMEOUT_S = 60.0
GONE_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 60.0
# kubectl drain retries a refused eviction every 5 s; tests are shorter.
EVICTION_RETRY_S = 1.0
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"


def eks_node_name(hostname: str) -> str:
    """The Node name EKS gives the machine whose hostname (and hostname label) is `hostname`."""
    return f"{hostname}.{EKS_DOMAIN}"


@contextmanager
def eks_nodes(cluster, pool: NodePool, spec: dict[str, int], **kwargs) -> Iterator:
    """Like jobharness.more_nodes (yields the node group), but each node is named as on EKS:
    `pool.node("a")` is `<prefix>-a.ec2.internal`, its kubernetes.io/hostname label `<prefix>-a`.

        with node_pool(cluster, {"b": 1}) as pool, eks_nodes(cluster, pool, {"a": 1}):
    """
    hostnames = {logical: f"{pool.prefix}-{logical}" for logical in spec}
    pool.names.update({logical: eks_node_name(hostname) for logical, hostname in hostnames.items()})
    group = cluster.add_nodes({pool.names[k]: v for k, v in spec.items()}, labels={TEST_NODE_LABEL: pool.prefix},
                              hostnames={pool.names[k]: hostname for k, hostname in hostnames.items()}, **kwargs)
    try:
        yield group
    finally:
        group.stop()


# --- other tenants -------------------------------------------------------------------------


def pinned_to_node(node: str) -> dict:
    """Required node affinity on the Node's name (as the DaemonSet controller pins pods)."""
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def gpu_pod(name: str, node: str, gpus: int, gpu_resource: str = GPU_RESOURCE, image: str = TENANT_IMAGE,
            tolerations: Sequence[dict] = ()) -> dict:
    """A plain pod asking for `gpus` GPUs on `node`, placed by the scheduler, that runs until deleted."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"distributetrain.test/tenant": "other"}},
        "spec": {
            "affinity": pinned_to_node(node),
            "terminationGracePeriodSeconds": 1,
            "tolerations": list(tolerations),
            "containers": [{"name": "main", "image": image, "command": ["sleep", "infinity"],
                            "resources": {"limits": {gpu_resource: str(gpus)}}}],
        },
    }


def read_pod(core: client.CoreV1Api, namespace: str, name: str) -> dict | None:
    try:
        return json.loads(core.read_namespaced_pod(name, namespace, _preload_content=False).data)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise


@dataclass
class OtherTenants:
    """Another team's GPU pods, in a namespace of their own."""

    core: client.CoreV1Api
    namespace: str
    gpu_resource: str = GPU_RESOURCE
    pods: list[str] = field(default_factory=list)

    def take(self, node: str, gpus: int, name: str = "", tolerations: Sequence[dict] = ()) -> str:
        """Create a pod asking for `gpus` GPUs on `node` (the scheduler places it, or leaves it
        Pending if they are not free); returns its name at once."""
        name = name or f"tenant-{uuid.uuid4().hex[:6]}"
        create_pod(self.core, self.namespace, gpu_pod(name, node, gpus, self.gpu_resource, tolerations=tolerations))
        self.pods.append(name)
        return name

    def wait_running(self, name: str, timeout_s: float = RUNNING_TIMEOUT_S) -> dict:
        """The pod once it runs; AssertionError with its status if it does not in time."""
        def running() -> dict | None:
            pod = read_pod(self.core, self.namespace, name)
            return pod if pod and pod["status"].get("phase") == "Running" else None

        return poll_until(running, timeout_s, lambda: f"tenant pod {name} Running, its status: "
                          f"{json.dumps((read_pod(self.core, self.namespace, name) or {}).get('status'))[:2000]}",
                          POLL_S)

    def release(self, name: str, timeout_s: float = GONE_TIMEOUT_S) -> None:
        """Delete the pod and wait until it is gone (its GPUs free)."""
        try:
            self.core.delete_namespaced_pod(name, self.namespace)
        except client.ApiException as error:
            if error.status != 404:
                raise
        poll_until(lambda: read_pod(self.core, self.namespace, name) is None, timeout_s,
                   f"tenant pod {name} gone after its deletion", POLL_S)


@contextmanager
def other_tenants(api_client, gpu_resource: str = GPU_RESOURCE) -> Iterator[OtherTenants]:
    """Another team's namespace for GPU pods; deleted, with its pods, at the end.

        with other_tenants(api_client) as tenants:
            tenants.wait_running(tenants.take(pool.node("a"), 1))
    """
    core = client.CoreV1Api(api_client)
    namespace = f"tenant-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": namespace, "labels": {TEST_NAMESPACE_LABEL: "true"}}})
    try:
        yield OtherTenants(core, namespace, gpu_resource)
    finally:
        # The pods first, at once: the namespace's deletion would give each its grace period.
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        core.delete_namespace(namespace)


# --- quota ---------------------------------------------------------------------------------


@contextmanager
def gpu_quota(api_client, namespace: str, gpus: int, gpu_resource: str = GPU_RESOURCE,
              name: str = "gpus") -> Iterator[str]:
    """A ResourceQuota of `gpus` on `requests.<gpu_resource>` in `namespace`, counted by the quota
    controller before this yields (until then the apiserver refuses every pod that asks for GPUs);
    deleted at the end. Yields its name.

        with gpu_quota(api_client, namespace, 2):
    """
    core = client.CoreV1Api(api_client)
    resource = f"requests.{gpu_resource}"
    core.create_namespaced_resource_quota(namespace, {
        "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name},
        "spec": {"hard": {resource: str(gpus)}},
    })
    try:
        poll_until(lambda: resource in (core.read_namespaced_resource_quota(name, namespace).status.hard or {}),
                   QUOTA_COUNTED_TIMEOUT_S, f"quota {name} counted ({resource} in its status)", POLL_S)
        yield name
    finally:
        try:
            core.delete_namespaced_resource_quota(name, namespace)
        except client.ApiException as error:
            if error.status != 404:
                raise


# --- drain ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class DrainOutcome:
    """What a drain did, pods as "namespace/name".

    evicted: pods the Eviction API accepted (or that were gone already).
    refused: pods it still refused at the deadline, with its last answer (429: a
        PodDisruptionBudget allows no disruption).
    terminating: evicted pods still there at the deadline.
    """

    evicted: tuple[str, ...]
    refused: dict[str, str]
    terminating: tuple[str, ...]

    @property
    def complete(self) -> bool:
        return not self.refused and not self.terminating


def cordon(api_client, node: str, unschedulable: bool = True) -> None:
    client.CoreV1Api(api_client).patch_node(node, {"spec": {"unschedulable": unschedulable}})


def uncordon(api_client, node: str) -> None:
    cordon(api_client, node, unschedulable=False)


def drain(api_client, node: str, timeout_s: float = DRAIN_TIMEOUT_S, grace_s: int | None = None) -> DrainOutcome:
    """`kubectl drain --ignore-daemonsets`: cordon `node`, evict each of its pods through the
    policy/v1 Eviction API, retrying refusals (429) until `timeout_s`, then wait for the
    evicted pods to go. `grace_s` overrides the pods' own grace periods, as --grace-period.

        outcome = drain(api_client, pool.node("a"), timeout_s=30)
    """
    core = client.CoreV1Api(api_client)
    give_up_at = time.monotonic() + timeout_s
    cordon(api_client, node)
    listing = json.loads(core.list_pod_for_all_namespaces(
        field_selector=f"spec.nodeName={node}", _preload_content=False).data)
    pending = {f"{pod['metadata']['namespace']}/{pod['metadata']['name']}": pod["metadata"]["uid"]
               for pod in listing["items"] if _evictable(pod)}
    evicted: dict[str, str] = {}
    refused: dict[str, str] = {}
    while pending:
        for key in list(pending):
            answer = _evict(core, key, pending[key], grace_s)
            if answer is None:
                evicted[key] = pending.pop(key)
                refused.pop(key, None)
            else:
                refused[key] = answer
        if not pending or time.monotonic() > give_up_at:
            break
        time.sleep(EVICTION_RETRY_S)
    terminating = [key for key, uid in evicted.items() if _still_there(core, key, uid)]
    while terminating and time.monotonic() < give_up_at:
        time.sleep(POLL_S)
        terminating = [key for key in terminating if _still_there(core, key, evicted[key])]
    return DrainOutcome(tuple(evicted), refused, tuple(terminating))


def _evictable(pod: dict) -> bool:
    """kubectl drain leaves DaemonSet pods (--ignore-daemonsets) and mirror pods alone."""
    owners = pod["metadata"].get("ownerReferences") or []
    daemon = any(owner.get("kind") == "DaemonSet" and owner.get("controller") for owner in owners)
    mirror = MIRROR_POD_ANNOTATION in (pod["metadata"].get("annotations") or {})
    return not daemon and not mirror


def _evict(core: client.CoreV1Api, key: str, uid: str, grace_s: int | None) -> str | None:
    """None once the pod is evicted (or gone); the refusal's message while it is refused (429)."""
    namespace, name = key.split("/", 1)
    options = client.V1DeleteOptions(grace_period_seconds=grace_s, preconditions=client.V1Preconditions(uid=uid))
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace), delete_options=options)
    try:
        core.create_namespaced_pod_eviction(name, namespace, body)
    except client.ApiException as error:
        if error.status == 429:
            return f"429 {_message(error)}"
        if error.status in (404, 409):  # gone, or replaced by a pod of the same name
            return None
        raise
    return None


def _still_there(core: client.CoreV1Api, key: str, uid: str) -> bool:
    namespace, name = key.split("/", 1)
    pod = read_pod(core, namespace, name)
    return pod is not None and pod["metadata"]["uid"] == uid


def _message(error: client.ApiException) -> str:
    try:
        return json.loads(error.body).get("message", "")
    except (TypeError, ValueError):
        return str(error.body)
