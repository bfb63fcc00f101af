"""Nodes with room besides their GPUs, other tenants' pods, and a job's ledger of them:
what the fit tests (``test_podfit``, ``test_booking``) build."""

from distributetrain.core.inventory import GpuLedger
from distributetrain.core.podfit import JobFit
from distributetrain.core.settings import JobSettings

GPU = "nvidia.com/gpu"
GIB = 2**30
JOB = JobSettings(job_name="j", namespace="ns", num_gpus=4, image="i", owner_uid="uid-1")
TIME_SLICED = {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4",
               "nvidia.com/gpu.count": "2", "nvidia.com/gpu.product": "Tesla-T4-SHARED"}


def node(name, gpus, cpu="64", memory="512Gi", pods="110", labels=None):
    allocatable = {GPU: str(gpus), "cpu": cpu, "memory": memory, "pods": pods}
    return {"metadata": {"name": name, "labels": labels or {}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": allocatable}}


def tenant(node_name, cpu="0", memory="0", gpus=0, phase="Running", labels=None):
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
