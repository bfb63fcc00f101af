"""The unit tests' one module of builders: Nodes as the kubelet reports them, pods (the
manager's own, other tenants', any pod as the API lists it) and a job's ledger of them.
Each returns a whole object, so a test states only what matters to it.
"""

from __future__ import annotations

import copy

from distributetrain.core import names
from distributetrain.core.placement.inventory import GpuLedger
from distributetrain.core.placement.podfit import JobFit
from distributetrain.core.settings import JobSettings

GPU = "nvidia.com/gpu"
GIB = 2**30
JOB = JobSettings(job_name="j", namespace="ns", num_gpus=4, image="i", owner_uid="uid-1")
TIME_SLICED = {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4",
               "nvidia.com/gpu.count": "2", "nvidia.com/gpu.product": "Tesla-T4-SHARED"}
GKE_TIME_SHARED = {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
                   "cloud.google.com/gke-gpu-sharing-strategy": "time-sharing",
                   "cloud.google.com/gke-max-shared-clients-per-gpu": "3"}
MIG_SLICED = {"nvidia.com/mig.strategy": "single", "nvidia.com/mig.capable": "true",
              "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"}


MANAGER_POD = "demo"


class NodeBuilder:
    """A Node, built fluently as Kueue's test wrappers build objects: ``make_node("a").gpus(4).obj()``.
    Ready, schedulable and with nothing allocatable until told otherwise."""

    def __init__(self, name: str):
        self._node = {"kind": "Node", "metadata": {"name": name, "labels": {}}, "spec": {},
                      "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": {}}}

    def labels(self, labels: dict | None) -> NodeBuilder:
        self._node["metadata"]["labels"].update(labels or {})
        return self

    def hostname(self) -> NodeBuilder:
        """The kubelet's hostname label, the node's name."""
        return self.labels({names.HOSTNAME_LABEL: self._node["metadata"]["name"]})

    def ready(self, ready: bool = True) -> NodeBuilder:
        self._node["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
        return self

    def cordoned(self) -> NodeBuilder:
        self._node["spec"]["unschedulable"] = True
        return self

    def taint(self, key: str, effect: str = "NoSchedule") -> NodeBuilder:
        self._node["spec"].setdefault("taints", []).append({"key": key, "effect": effect})
        return self

    def allocatable(self, resources: dict[str, str]) -> NodeBuilder:
        self._node["status"]["allocatable"].update(resources)
        return self

    def gpus(self, gpus: int) -> NodeBuilder:
        """Allocatable and capacity both: the device plugin advertises them all."""
        self._node["status"]["capacity"] = {GPU: str(gpus)}
        return self.allocatable({GPU: str(gpus)})

    def obj(self) -> dict:
        return copy.deepcopy(self._node)


def make_node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


class PodBuilder:
    """A Pod, built fluently: ``make_pod("p").on("a").gpus(2).phase("Failed").obj()``.
    Running, on no node and asking for nothing until told otherwise."""

    def __init__(self, name: str, namespace: str = "ns"):
        self._pod = {"kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": {}},
                     "spec": {}, "status": {"phase": "Running"}}

    def uid(self, uid: str) -> PodBuilder:
        self._pod["metadata"]["uid"] = uid
        return self

    def version(self, resource_version: str) -> PodBuilder:
        self._pod["metadata"]["resourceVersion"] = resource_version
        return self

    def labels(self, labels: dict | None) -> PodBuilder:
        self._pod["metadata"]["labels"].update(labels or {})
        return self

    def phase(self, phase: str) -> PodBuilder:
        self._pod["status"]["phase"] = phase
        return self

    def on(self, node_name: str) -> PodBuilder:
        """Bound to ``node_name`` (the scheduler's nodeName)."""
        self._pod["spec"]["nodeName"] = node_name
        return self

    def pinned(self, node_name: str) -> PodBuilder:
        """Pinned to ``node_name`` by a required node affinity, as the manager pins its pods."""
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
        self._pod["spec"]["affinity"] = {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
        return self

    def resources(self, resources: dict) -> PodBuilder:
        """One container, named c, with these resources (requests, limits)."""
        self._pod["spec"]["containers"] = [{"name": "c", "resources": resources}]
        return self

    def gpus(self, gpus: int) -> PodBuilder:
        return self.resources({"limits": {GPU: str(gpus)}} if gpus else {})

    def obj(self) -> dict:
        return copy.deepcopy(self._pod)


def make_pod(name: str, namespace: str = "ns") -> PodBuilder:
    return PodBuilder(name, namespace)


def node(name: str, gpus: int = 8, ready: bool = True, labels: dict | None = None) -> dict:
    """A GPU node as the kubelet reports it (hostname label = name)."""
    return make_node(name).hostname().labels(labels).ready(ready).gpus(gpus).obj()


def sized_node(name, gpus, cpu="64", memory="512Gi", pods="110", labels=None):
    """A Ready node with room besides its GPUs (what the fit tests size pods against)."""
    return make_node(name).labels(labels).allocatable({GPU: str(gpus), "cpu": cpu, "memory": memory,
                                                       "pods": pods}).obj()


def manager_pod(name: str = MANAGER_POD, namespace: str = "ml", uid: str = "uid-1",
                restart_policy: str = "Never") -> dict:
    """The manager's own pod: the job's record is kept in its annotations."""
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid, "annotations": {}},
            "spec": {"restartPolicy": restart_policy}, "status": {"phase": "Running"}}


def pod(name: str, namespace: str = "ns", phase: str = "Running", labels: dict | None = None) -> dict:
    """Any pod as the API lists it: a name, labels and a phase."""
    return make_pod(name, namespace).labels(labels).phase(phase).obj()


def tenant(node_name, cpu="0", memory="0", gpus=0, phase="Running", labels=None):
    """Another tenant's pod on ``node_name``, requesting what it is given."""
    resources = {"requests": {"cpu": cpu, "memory": memory}, "limits": {GPU: str(gpus)} if gpus else {}}
    return make_pod("t").uid(f"t-{node_name}").labels(labels).on(node_name).resources(resources).phase(phase).obj()


def ledger_of(nodes, pods=(), settings=JOB):
    ledger = GpuLedger(GPU, fit=JobFit.of_job(settings), levels=settings.topology)
    for n in nodes:
        ledger.add_node(n)
    for p in pods:
        ledger.add_pod(p)
    return ledger


class ClaimBuilder:
    """A PersistentVolumeClaim as the API returns it: ``make_claim("data").modes(RWO).bound_to("pv-1").obj()``.
    ReadWriteMany, of no StorageClass, Pending until told otherwise."""

    def __init__(self, name: str, namespace: str = "ns"):
        self._claim = {"kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": namespace},
                       "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "",
                                "resources": {"requests": {"storage": "1Gi"}}},
                       "status": {"phase": "Pending"}}

    def modes(self, *modes: str) -> ClaimBuilder:
        self._claim["spec"]["accessModes"] = list(modes)
        return self

    def of_class(self, name: str) -> ClaimBuilder:
        self._claim["spec"]["storageClassName"] = name
        return self

    def annotations(self, annotations: dict) -> ClaimBuilder:
        self._claim["metadata"].setdefault("annotations", {}).update(annotations)
        return self

    def bound_to(self, volume: str) -> ClaimBuilder:
        """Bound, as the PV controller completes a binding: its volume's modes in its status."""
        self._claim["spec"]["volumeName"] = volume
        self._claim["status"] = {"phase": "Bound", "accessModes": self._claim["spec"]["accessModes"]}
        return self

    def obj(self) -> dict:
        return copy.deepcopy(self._claim)


def make_claim(name: str, namespace: str = "ns") -> ClaimBuilder:
    return ClaimBuilder(name, namespace)


class VolumeBuilder:
    """A PersistentVolume: ``make_volume("pv-1").modes(RWO).on_nodes(ZONE, "z1").obj()``; any node, ReadWriteMany."""

    def __init__(self, name: str):
        self._volume = {"kind": "PersistentVolume", "metadata": {"name": name, "labels": {}},
                        "spec": {"accessModes": ["ReadWriteMany"], "capacity": {"storage": "1Gi"}}}

    def modes(self, *modes: str) -> VolumeBuilder:
        self._volume["spec"]["accessModes"] = list(modes)
        return self

    def labels(self, labels: dict) -> VolumeBuilder:
        self._volume["metadata"]["labels"].update(labels)
        return self

    def node_affinity(self, *terms: dict) -> VolumeBuilder:
        """``spec.nodeAffinity.required`` with these node selector terms (ORed)."""
        self._volume["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": list(terms)}}
        return self

    def on_nodes(self, key: str, *values: str) -> VolumeBuilder:
        """Mountable where label ``key`` is one of ``values`` (a zonal disk's zone, a local volume's host)."""
        return self.node_affinity({"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]})

    def obj(self) -> dict:
        return copy.deepcopy(self._volume)


def make_volume(name: str) -> VolumeBuilder:
    return VolumeBuilder(name)


def storage_class(name: str, binding: str = "WaitForFirstConsumer", provisioner: str = "ebs.csi.aws.com",
                  topologies: list[dict] | None = None) -> dict:
    """A StorageClass; ``topologies`` its allowedTopologies' terms, each {label: [values]}."""
    found = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
             "provisioner": provisioner, "volumeBindingMode": binding}
    if topologies is not None:
        found["allowedTopologies"] = [{"matchLabelExpressions": [{"key": k, "values": v} for k, v in term.items()]}
                                      for term in topologies]
    return found
