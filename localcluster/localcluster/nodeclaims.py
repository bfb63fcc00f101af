"""The local cloud behind Karpenter: a real node for each NodeClaim.

Karpenter's local cloud provider (localcluster/karpentercontroller) runs
`python -m localcluster nodeclaim launch|delete|list`, so a Karpenter node lives and dies
by the same code as every other node (node groups, realnode.py). `launch` is a cloud's
RunInstances: it reserves the node's index, records the instance and returns at once;
a detached booter (`nodeclaim boot`) waits out the boot delay (minutes for a cloud GPU
node, seconds in tests), then starts the kubelet and containerd, and the kubelet
registers with the NodeClaim's providerID, labels and taints. `delete` is a termination:
the node's processes, netns and cgroups go, then its Node. One JSON record per instance
under the run directory is the cloud's view that `list` reports.

The kubelet reports the host's CPU and memory; it reserves the difference
(`systemReserved`), so the Node's allocatable is what Karpenter simulated with.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from localcluster import processes
from localcluster.layout import PROJECT_ROOT, RunLayout
from localcluster.node.config import DEFAULT_GPU_RESOURCE, NodeSpec
from localcluster.nodegroups import NodeGroupRegistry

log = logging.getLogger(__name__)

BOOTER = "karpenter-boot"  # pid and log files: karpenter-boot-<name>
BOOTER_STOP_TIMEOUT_S = 10.0
# The kubelet's default hard eviction threshold on memory.available: it comes off allocatable.
KUBELET_EVICTION_HARD_MEMORY_BYTES = 100 * 2**20
STANDARD_RESOURCES = ("cpu", "memory", "pods", "ephemeral-storage")
# What a kubelet may label its own Node with in the kubernetes.io and k8s.io namespaces
# (k8s.io/kubelet's IsKubeletLabel); it refuses to start with any other label there.
# Karpenter syncs the NodeClaim's labels onto the Node at registration anyway.
KUBELET_LABELS = frozenset((
    "kubernetes.io/hostname", "topology.kubernetes.io/zone", "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type",
    "kubernetes.io/os", "kubernetes.io/arch", "beta.kubernetes.io/os", "beta.kubernetes.io/arch",
))
KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")
RESTRICTED_LABEL_NAMESPACES = ("kubernetes.io", "k8s.io")


class InstanceError(ValueError):
    """A launch the local cloud cannot run (bad document, an instance bigger than the host)."""


@dataclass(frozen=True)
class HostCapacity:
    """What the kubelet reports as the node's capacity: the host's CPUs and memory."""

    cpu_millis: int
    memory_bytes: int

    @classmethod
    def of_this_host(cls) -> HostCapacity:
        meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines() if ":" in line)
        return cls(cpu_millis=(os.cpu_count() or 1) * 1000,
                   memory_bytes=int(meminfo["MemTotal"].split()[0]) * 1024)


@dataclass(frozen=True)
class Instance:
    """One NodeClaim's node, as the cloud provider launched it (its JSON, kept whole)."""

    document: Mapping

    @property
    def name(self) -> str:
        return self.document["name"]

    @property
    def boot_delay_s(self) -> float:
        return float(self.document.get("bootDelaySeconds") or 0)

    def node_spec(self, gpu_resource_default: str, host: HostCapacity) -> NodeSpec:
        """The node to start (its index is its group's); InstanceError if it cannot be."""
        capacity = self.document.get("capacity") or {}
        gpu_resource, gpus = gpu_capacity(capacity, gpu_resource_default)
        reservations = kubelet_reservations(capacity, self.document.get("kubeReserved") or {},
                                            self.document.get("systemReserved") or {},
                                            self.document.get("evictionThreshold") or {}, host)
        return NodeSpec(
            name=self.name, index=0, gpus=gpus, gpu_resource=gpu_resource, hostname=self.name,
            labels=kubelet_labels(self.document.get("labels") or {}),
            taints=tuple(taint_text(taint) for taint in self.document.get("taints") or ()),
            provider_id=self.document["providerID"],
            kube_reserved=reservations["kubeReserved"], system_reserved=reservations["systemReserved"],
            max_pods=int(_quantity(capacity["pods"])) if "pods" in capacity else None,
        )


def validate_launch(document: Mapping) -> None:
    """InstanceError unless `document` names a node to start, with its providerID and capacity."""
    missing = [key for key in ("name", "providerID", "capacity") if not document.get(key)]
    if missing:
        raise InstanceError(f"the launch lacks {', '.join(missing)}: {json.dumps(document)[:300]}")
    if not isinstance(document.get("labels") or {}, dict) or not isinstance(document.get("taints") or [], list):
        raise InstanceError("labels must be an object and taints a list of {key, value, effect}")


def kubelet_reservations(capacity: Mapping[str, str], kube_reserved: Mapping[str, str],
                         system_reserved: Mapping[str, str], eviction_threshold: Mapping[str, str],
                         host: HostCapacity) -> dict[str, dict[str, str]]:
    """The kubelet's kubeReserved and systemReserved that make its allocatable CPU and memory
    the instance type's (Karpenter's: capacity minus the overhead's kube- and system-reserved
    and eviction threshold): the host's capacity beyond the instance's is reserved for the
    "system", less the kubelet's own hard eviction threshold on memory, which it takes off too.
    InstanceError when the instance is bigger than the host."""
    cpu = {name: int(_quantity(values.get("cpu", "0")) * 1000)
           for name, values in (("capacity", capacity), ("kube", kube_reserved), ("system", system_reserved))}
    memory = {name: int(_quantity(values.get("memory", "0")))
              for name, values in (("capacity", capacity), ("kube", kube_reserved), ("system", system_reserved),
                                   ("eviction", eviction_threshold))}
    system_cpu = host.cpu_millis - cpu["capacity"] + cpu["system"]
    system_memory = (host.memory_bytes - memory["capacity"] + memory["system"] + memory["eviction"]
                     - KUBELET_EVICTION_HARD_MEMORY_BYTES)
    if cpu["capacity"] > host.cpu_millis or system_memory < 0:
        raise InstanceError(
            f"an instance of {capacity.get('cpu')} CPUs and {capacity.get('memory')} memory does not fit this host "
            f"({host.cpu_millis // 1000} CPUs, {host.memory_bytes // 2**20}Mi, less "
            f"{KUBELET_EVICTION_HARD_MEMORY_BYTES // 2**20}Mi the kubelet keeps free)")
    return {
        "kubeReserved": {"cpu": f"{cpu['kube']}m", "memory": str(memory["kube"])},
        "systemReserved": {"cpu": f"{system_cpu}m", "memory": str(system_memory)},
    }


def gpu_capacity(capacity: Mapping[str, str], default_resource: str) -> tuple[str, int]:
    """The instance's one extended resource and its count ((default, 0) for a CPU instance)."""
    extended = {name: value for name, value in capacity.items() if name not in STANDARD_RESOURCES}
    if len(extended) > 1:
        raise InstanceError(f"a local node advertises one extended resource, not {sorted(extended)}")
    for name, value in extended.items():
        return name, int(_quantity(value))
    return default_resource, 0


def kubelet_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """The labels a kubelet may register its Node with (see KUBELET_LABELS)."""
    return {key: value for key, value in labels.items() if _kubelet_may_set(key)}


def _kubelet_may_set(key: str) -> bool:
    if key in KUBELET_LABELS:
        return True
    namespace = key.rpartition("/")[0]
    if any(namespace == allowed or namespace.endswith(f".{allowed}") for allowed in KUBELET_LABEL_NAMESPACES):
        return True
    return not any(namespace == restricted or namespace.endswith(f".{restricted}")
                   for restricted in RESTRICTED_LABEL_NAMESPACES)


def taint_text(taint: Mapping[str, str]) -> str:
    """{key, value, effect} as "key[=value]:Effect" (NodeSpec's form)."""
    value = taint.get("value") or ""
    return f"{taint['key']}{'=' + value if value else ''}:{taint['effect']}"


def _quantity(text: object) -> Decimal:
    from kubernetes.utils.quantity import parse_quantity  # slow import, for the callers that parse

    try:
        return parse_quantity(str(text))
    except ValueError as error:
        raise InstanceError(f"not a resource quantity: {text!r}") from error


class Instances:
    """The instance records of one run directory, and the booters that start their nodes."""

    def __init__(self, layout: RunLayout):
        self.layout = layout
        self.directory = layout.karpenter_instances

    def get(self, name: str) -> Instance | None:
        try:
            return Instance(json.loads(self._record(name).read_text()))
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def list(self) -> list[Instance]:
        """The instances that exist: a record whose node group is gone (stopped by a `down` that
        did not know of Karpenter, or reclaimed after a killed run) is forgotten, not reported."""
        if not self.directory.exists():
            return []
        grouped = {name for record in NodeGroupRegistry(self.layout).records() for name in record.names}
        instances = []
        for path in sorted(self.directory.glob("*.json")):
            instance = self.get(path.stem)
            if instance is None:
                continue
            if instance.name not in grouped:  # launch allocates before it records; delete forgets first
                log.warning("forgetting instance %s: its node is gone", instance.name)
                self.forget(instance.name)
                continue
            instances.append(instance)
        return instances

    def launch(self, document: Mapping, python: str) -> Instance:
        """Reserve the node's index, record the instance and start its booter; idempotent by
        name (a NodeClaim's launch retried finds its instance)."""
        validate_launch(document)
        existing = self.get(document["name"])
        if existing is not None:
            return existing
        Instance(document).node_spec("", HostCapacity.of_this_host())  # refuse what cannot boot, now
        NodeGroupRegistry(self.layout).allocate([document["name"]])
        launched_at = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
        instance = Instance({**document, "launchedAt": launched_at.isoformat().replace("+00:00", "Z")})
        self.directory.mkdir(parents=True, exist_ok=True)
        temporary = self._record(instance.name).with_suffix(".tmp")
        temporary.write_text(json.dumps(instance.document, indent=2) + "\n")
        temporary.replace(self._record(instance.name))
        env = {**processes.environment_without_proxy(), "PYTHONPATH": str(PROJECT_ROOT)}
        processes.start_detached([python, "-m", "localcluster", "nodeclaim", "boot", instance.name],
                                 self._booter_pid_file(instance.name), self.layout.log_file(f"{BOOTER}-{instance.name}"),
                                 cwd=self.layout.root, env=env)
        log.info("launched instance %s (%s, boots in %gs)", instance.name, document.get("instanceType"),
                 instance.boot_delay_s)
        return instance

    def booting(self, name: str) -> bool:
        return processes.read_pid(self._booter_pid_file(name)) is not None

    def forget(self, name: str) -> None:
        """Stop the instance's booter and drop its record (its node is the caller's to stop)."""
        pid = processes.read_pid(self._booter_pid_file(name))
        if pid is not None:
            processes.stop(pid, f"booter of {name}", BOOTER_STOP_TIMEOUT_S)
        self._booter_pid_file(name).unlink(missing_ok=True)
        self._record(name).unlink(missing_ok=True)

    def _record(self, name: str) -> Path:
        return self.directory / f"{name}.json"

    def _booter_pid_file(self, name: str) -> Path:
        return self.layout.pid_file(f"{BOOTER}-{name}")


def boot(cluster, name: str) -> None:
    """The booter: wait out the instance's boot delay, then start its node and wait until it is
    Ready and advertises its GPUs (Karpenter then registers and initializes it)."""
    instance = Instances(cluster.layout).get(name)
    if instance is None:
        raise InstanceError(f"no instance {name} to boot")
    time.sleep(instance.boot_delay_s)
    spec = instance.node_spec(DEFAULT_GPU_RESOURCE, HostCapacity.of_this_host())
    cluster.node_group(name).start_nodes([spec])
    log.info("instance %s is up: node %s is Ready", name, name)


def delete(cluster, name: str) -> bool:
    """Terminate the instance: its booter, its node (processes, netns, cgroups) and its Node.
    Returns whether there was one; idempotent."""
    instances = Instances(cluster.layout)
    existed = instances.get(name) is not None
    instances.forget(name)  # the booter first, so it starts nothing after the node is stopped
    groups = [group for group in cluster.node_groups() if name in group.names]
    for group in groups:
        group.stop()
    if existed or groups:
        log.info("terminated instance %s", name)
    return existed or bool(groups)


def delete_all(cluster) -> list[str]:
    """Terminate every instance (Karpenter stopped, or the cluster going down)."""
    names = [instance.name for instance in Instances(cluster.layout).list()]
    for name in names:
        delete(cluster, name)
    return names


def python_executable() -> str:
    """The interpreter the cloud provider runs this package with: this one."""
    return sys.executable
