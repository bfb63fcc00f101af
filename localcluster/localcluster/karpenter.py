"""Karpenter on the local cluster: GPU nodes that scale from zero and are consolidated.

Karpenter's core (sigs.k8s.io/karpenter, built from its Go module with the local cloud
provider of localcluster/karpentercontroller) runs as a host process outside the cluster,
as the control plane does, with the admin kubeconfig and no leader election. Its CRDs
(NodePool, NodeClaim, NodeOverlay) and kwok's KWOKNodeClass come from the module at the
pinned version. Its instance types are kwok's JSON format, plus a `bootDelay` each: how
long a node of that type takes to come up (a NodeClass's `nodeRegistrationDelay`
overrides it). Each NodeClaim becomes a real node (localcluster/nodeclaims.py).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from localcluster import binaries, controllers, nodeclaims, processes
from localcluster.components import KARPENTER
from localcluster.layout import PROJECT_ROOT, RunLayout, cache_dir
from localcluster.nodeclaims import HostCapacity, InstanceError, kubelet_reservations
from localcluster.probe import wait_until

READY_TIMEOUT_S = 60.0
NAMESPACE = "karpenter"  # SYSTEM_NAMESPACE: where Karpenter would run in a cluster
# Not Karpenter's defaults (8080, 8081), and clear of Kueue's 18081 and 18082.
METRICS_PORT = 18090
HEALTH_PORT = 18091
API_GROUP = "karpenter.sh"
API_VERSION = "v1"
NODE_CLASS_GROUP = "karpenter.kwok.sh"
NODE_CLASS_VERSION = "v1alpha1"
NODE_FINALIZER = "karpenter.sh/termination"
FINALIZER_PREFIX = "karpenter.sh/"
# Node repair (replace a node NotReady for long) is a feature gate, off by default upstream.
FEATURE_GATES = "NodeRepair=true"
REPAIR_TOLERATION_ENV = "LOCALCLUSTER_REPAIR_TOLERATION"  # the provider's (karpentercontroller/cloudprovider)
# A cloud GPU node takes minutes to boot and join; `up --karpenter-boot-delay` changes it.
DEFAULT_BOOT_DELAY_S = 120.0
# Each instance type is offered on demand in two zones, zone-b for a little more: nodes go
# to zone-a unless a pod requires zone-b (a job keeping its running shares' zone), as a
# cloud's cheapest offering wins.
ZONES = {"zone-a": 1.0, "zone-b": 1.05}  # zone -> price factor


def start(layout: RunLayout, api, instance_types: Sequence[Mapping], repair_toleration_s: float | None) -> None:
    """Karpenter's CRDs and its controller (a host process, like the control plane), with the
    local cloud provider: a real node per NodeClaim (see Cluster.start_karpenter). Idempotent:
    a running Karpenter keeps its settings. Returns once Karpenter answers /readyz."""
    validate_instance_types(instance_types, HostCapacity.of_this_host())
    binary = binaries.karpenter()
    module = module_dir(binaries.KARPENTER_BUILD_SCRIPT.parent / "go.mod", cache_dir() / "gomod")
    crds = install(api, module)
    wait_until(lambda: established(api, crds), READY_TIMEOUT_S, "Karpenter's CRDs to be served")
    if processes.read_pid(layout.pid_file(KARPENTER)) is None:
        types_file = layout.root / "karpenter-instance-types.json"
        types_file.write_text(json.dumps(list(instance_types), indent=2) + "\n")
        env = environment(layout.kubeconfig, types_file, nodeclaims.python_executable(),
                          processes.prepend_path(str(PROJECT_ROOT), os.environ.get("PYTHONPATH")),
                          processes.environment_without_proxy(), repair_toleration_s)
        processes.start_detached([str(binary)], layout.pid_file(KARPENTER), layout.log_file(KARPENTER),
                                 cwd=layout.root, env=env)
    wait_until(ready, READY_TIMEOUT_S, "Karpenter's /readyz")


def on_demand_in(zone: str) -> list[dict]:
    return [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]


def instance_types(boot_delay_s: float = DEFAULT_BOOT_DELAY_S) -> list[dict]:
    """The default instance types (kwok's format): GPU nodes of 8, 4 and 1 GPUs, priced by
    GPU, each fitting this 2-CPU host's kubelet."""
    def instance_type(name: str, cpu: str, memory: str, gpus: int, price: float) -> dict:
        return {"name": name, "architecture": "amd64", "operatingSystems": ["linux"],
                "resources": {"cpu": cpu, "memory": memory, "pods": "110", "nvidia.com/gpu": str(gpus)},
                "offerings": [{"Price": round(price * factor, 3), "Available": True, "Requirements": on_demand_in(zone)}
                              for zone, factor in ZONES.items()],
                "bootDelay": f"{boot_delay_s:g}s"}

    return [instance_type("gpu-8x", "2", "16Gi", 8, 8.0), instance_type("gpu-4x", "2", "8Gi", 4, 4.2),
            instance_type("gpu-1x", "1", "4Gi", 1, 1.1)]


def validate_instance_types(types: Sequence[Mapping], host: HostCapacity) -> None:
    """InstanceError for an instance type whose node this host cannot give its allocatable
    (more CPUs or memory than the host), before Karpenter simulates with it."""
    names = [t.get("name") for t in types]
    if not types or not all(names) or len(set(names)) != len(names):
        raise InstanceError(f"instance types need distinct names, got {names}")
    for instance_type in types:
        try:
            kubelet_reservations(instance_type.get("resources") or {}, {}, {}, {}, host)
        except InstanceError as error:
            raise InstanceError(f"instance type {instance_type['name']}: {error}") from error


def module_dir(binary_go_mod: Path, gomodcache: Path) -> Path:
    """Karpenter's module source at the version the wrapper pins (its CRDs)."""
    version = re.search(r"^\s*(?:require\s+)?sigs\.k8s\.io/karpenter (v\S+)", binary_go_mod.read_text(), re.M).group(1)
    return gomodcache / f"sigs.k8s.io/karpenter@{version}"


def crd_files(module: Path) -> list[Path]:
    return sorted((module / "pkg/apis/crds").glob("*.yaml")) + sorted((module / "kwok/apis/crds").glob("*.yaml"))


def environment(kubeconfig: Path, instance_types_file: Path, python: str, python_path: str,
                base: Mapping[str, str], repair_toleration_s: float | None = None) -> dict[str, str]:
    """Karpenter's settings (its environment variables), and what its cloud provider needs to
    run `python -m localcluster nodeclaim` (the interpreter and this package's path; how long
    a node may be NotReady before node repair replaces it, kwok's 10 minutes by default)."""
    repair = {} if repair_toleration_s is None else {REPAIR_TOLERATION_ENV: f"{repair_toleration_s:g}s"}
    return {
        **base,
        "KUBECONFIG": str(kubeconfig),
        "DISABLE_LEADER_ELECTION": "true",
        "SYSTEM_NAMESPACE": NAMESPACE,
        "METRICS_PORT": str(METRICS_PORT),
        "HEALTH_PROBE_PORT": str(HEALTH_PORT),
        "INSTANCE_TYPES_FILE_PATH": str(instance_types_file),
        "FEATURE_GATES": FEATURE_GATES,
        "LOCALCLUSTER_PYTHON": python,
        "PYTHONPATH": python_path,
        **repair,
    }


def install(api_client, module: Path) -> list[str]:
    """Karpenter's namespace and CRDs (created or replaced), idempotently; returns the CRDs' names."""
    crds = controllers.read_crds(crd_files(module))
    return controllers.install_crds(api_client, NAMESPACE, crds)


def established(api_client, crd_names: Iterable[str]) -> bool:
    """Whether the API server serves every one of these CRDs (Karpenter's informers need them)."""
    return controllers.crds_established(api_client, crd_names)


def release(api_client) -> list[str]:
    """Once Karpenter is stopped and its nodes gone: delete its NodeClaims (their instances are
    gone) and take its finalizers off them and off Nodes, which no one would remove any more.
    Returns what was released, as kind/name."""
    from kubernetes import client

    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    released = []
    for claim in controllers.all_objects(custom, API_GROUP, API_VERSION, "nodeclaims"):
        name = claim["metadata"]["name"]
        controllers.ignore_gone(lambda: custom.delete_cluster_custom_object(API_GROUP, API_VERSION, "nodeclaims", name))
        if claim["metadata"].get("finalizers"):
            controllers.ignore_gone(lambda: custom.patch_cluster_custom_object(
                API_GROUP, API_VERSION, "nodeclaims", name, {"metadata": {"finalizers": None}}))
        released.append(f"nodeclaim/{name}")
    for node in core.list_node().items:
        kept = controllers.finalizers_without(node.metadata.finalizers, FINALIZER_PREFIX)
        if kept is not None:
            # A JSON patch: a strategic merge patch would merge the list, not replace it.
            controllers.ignore_gone(lambda: core.patch_node(node.metadata.name, [
                {"op": "replace", "path": "/metadata/finalizers", "value": kept}]))
            released.append(f"node/{node.metadata.name}")
    return released


def ready() -> bool:
    """Karpenter's health endpoint answers /readyz with 200."""
    return controllers.readyz(HEALTH_PORT)
