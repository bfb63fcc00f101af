"""The unit tests' one module of builders: Nodes as the kubelet reports them, pods (the
manager's own, other tenants', any pod as the API lists it) and a job's ledger of them.
Each returns a whole object, so a test states only what matters to it.
"""

from __future__ import annotations

from distributetrain.core import names
from distributetrain.core.inventory import GpuLedger
from distributetrain.core.podfit import JobFit
from distributetrain.core.settings import JobSettings

GPU = "nvidia.com/gpu"
GIB = 2**30
JOB = JobSettings(job_name="j", namespace="ns", num_gpus=4, image="i", owner_uid="uid-1")
TIME_SLICED = {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4",
               "nvidia.com/gpu.count": "2", "nvidia.com/gpu.product": "Tesla-T4-SHARED"}


MANAGER_POD = "demo"


def node(name: str, gpus: int = 8, ready: bool = True, labels: dict | None = None) -> dict:
    """A GPU node as the kubelet reports it (hostname label = name)."""
    return {"metadata": {"name": name, "labels": {names.HOSTNAME_LABEL: name, **(labels or {})}}, "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                       "allocatable": {GPU: str(gpus)}, "capacity": {GPU: str(gpus)}}}


def sized_node(name, gpus, cpu="64", memory="512Gi", pods="110", labels=None):
    """A Ready node with room besides its GPUs (what the fit tests size pods against)."""
    allocatable = {GPU: str(gpus), "cpu": cpu, "memory": memory, "pods": pods}
    return {"metadata": {"name": name, "labels": labels or {}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": allocatable}}


def manager_pod(name: str = MANAGER_POD, namespace: str = "ml", uid: str = "uid-1",
                restart_policy: str = "Never") -> dict:
    """The manager's own pod: the job's record is kept in its annotations."""
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid, "annotations": {}},
            "spec": {"restartPolicy": restart_policy}, "status": {"phase": "Running"}}


def pod(name: str, namespace: str = "ns", phase: str = "Running", labels: dict | None = None) -> dict:
    """Any pod as the API lists it: a name, labels and a phase."""
    return {"kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
            "status": {"phase": phase}}


def tenant(node_name, cpu="0", memory="0", gpus=0, phase="Running", labels=None):
    """Another tenant's pod on ``node_name``, requesting what it is given."""
    resources = {"requests": {"cpu": cpu, "memory": memory}, "limits": {GPU: str(gpus)} if gpus else {}}
    return {"metadata": {"name": "t", "uid": f"t-{node_name}", "labels": labels or {}},
            "spec": {"nodeName": node_name, "containers": [{"name": "c", "resources": resources}]},
            "status": {"phase": phase}}


def ledger_of(nodes, pods=(), settings=JOB):
    ledger = GpuLedger(GPU, fit=JobFit.of_job(settings), levels=settings.topology)
    for n in nodes:
        ledger.add_node(n)
    for p in pods:
        ledger.add_pod(p)
    return ledger
