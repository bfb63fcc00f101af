"""The memory of a manager's informers at 5,000 nodes and 30,000 or 150,000 GPU pods (issue 46, item 3).

Why: a manager waiting for GPUs, or an elastic job short of them, follows every Node and
every pod holding GPUs (``freegpus``), and an elastic job follows the Nodes for its node
watch too (``nodewatch``). Its pod is limited to 512 MiB; what its informers keep must
not grow with what the cluster's objects carry, nor be kept twice.

Setup, no cluster needed: a stand-in API server (``ListedCluster``) serves the lists page
by page (500 objects, as ``Kube.list_pages`` asks), each page decoded from JSON as the
client decodes it (new strings for every object), of realistic objects: GPU nodes as a
cloud's kubelet reports them (30 labels, images, addresses, conditions, managed fields:
about 14 KB of JSON) and GPU pods as a job controller creates them (about 5 KB). Its watches
report nothing. In one process per run, an elastic job's worst case: ``NodeWatch`` and
``FreeGpuWatch`` open together, until both have listed; the process's resident memory is
read before (``VmRSS``) and at its high-water mark (``VmHWM``) after, and again once the
lists are in (what stays while the job waits).

Arms: *after*, this tree's ``distributetrain``; *before*, that of ``--before`` (default
``BEFORE_REV``: two Node informers, the free GPUs' holding each node's part), extracted with
``git archive`` and found first on the module path.

Run: ``python -m bench.informer_memory`` (10 to 30 minutes, CPU-bound, one core).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench import report
from bench.inventory_probe import memory_mib
from bench.waiting_managers import extract_package, git

NAME = "informer-memory"
BEFORE_REV = "6ac1af6"  # main before one informer per kind
NODES = 5_000
POD_SERIES = (30_000, 150_000)
PAGE = 500  # Kube.list_pages' page size
GPU = "nvidia.com/gpu"
RUN_TIMEOUT_S = 900
MIB = 2**20


def node_object(index: int) -> dict:
    """A GPU node as a cloud's kubelet and its controllers write it."""
    name = f"gpu-node-{index:05d}"
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
              "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
              "node.kubernetes.io/instance-type": "a2-highgpu-8g", "beta.kubernetes.io/instance-type": "a2-highgpu-8g",
              "topology.kubernetes.io/region": "us-central1", "topology.kubernetes.io/zone": f"us-central1-{'abc'[index % 3]}",
              "failure-domain.beta.kubernetes.io/region": "us-central1",
              "failure-domain.beta.kubernetes.io/zone": f"us-central1-{'abc'[index % 3]}",
              "cloud.google.com/gke-accelerator": "nvidia-tesla-a100", "cloud.google.com/gke-nodepool": "gpu-pool",
              "cloud.google.com/gke-os-distribution": "cos", "cloud.google.com/machine-family": "a2",
              "cloud.google.com/gke-boot-disk": "pd-balanced", "cloud.google.com/gke-container-runtime": "containerd",
              "cloud.google.com/private-node": "false", "cloud.google.com/gke-cpu-scaling-level": "12",
              "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
              "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "40960", "nvidia.com/cuda.driver.major": "535",
              "nvidia.com/gfd.timestamp": str(1_700_000_000 + index), "nvidia.com/mig.capable": "true",
              "network.topology.kubernetes.io/block": f"b{index // 500}",
              "network.topology.kubernetes.io/rack": f"r{index // 20}",
              "node.kubernetes.io/exclude-from-external-load-balancers": "true", "pool": "training"}
    conditions = [{"type": kind, "status": "False", "reason": f"No{kind}", "message": f"kubelet has no {kind}",
                   "lastHeartbeatTime": "2026-11-29T03:00:00Z", "lastTransitionTime": "2026-11-20T00:00:00Z"}
                  for kind in ("MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")]
    conditions.append({"type": "Ready", "status": "True", "reason": "KubeletReady",
                       "message": "kubelet is posting ready status", "lastHeartbeatTime": "2026-11-29T03:00:00Z",
                       "lastTransitionTime": "2026-11-20T00:00:00Z"})
    images = [{"names": [f"us-docker.pkg.dev/project/images/image-{i}@sha256:{i:064x}",
                         f"us-docker.pkg.dev/project/images/image-{i}:v1.{i}"], "sizeBytes": 100_000_000 + i}
              for i in range(30)]
    allocatable = {"cpu": "95690m", "ephemeral-storage": "47060071478", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
                   "memory": "1300000000Ki", GPU: "8", "pods": "110"}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": f"{index:08d}-0000-4000-8000-000000000000", "resourceVersion": "1",
                     "creationTimestamp": "2026-11-20T00:00:00Z", "labels": labels,
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                     "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                                     "csi.volume.kubernetes.io/nodeid": json.dumps({"pd.csi.storage.gke.io": name}),
                                     "container.googleapis.com/instance_id": str(8_000_000_000_000 + index)},
                     "managedFields": [{"manager": manager, "operation": "Update", "apiVersion": "v1",
                                        "time": "2026-11-29T03:00:00Z", "fieldsType": "FieldsV1",
                                        "fieldsV1": {"f:metadata": {"f:labels": {f"f:{key}": {} for key in labels}}}}
                                       for manager in ("kubelet", "gpu-feature-discovery", "kube-controller-manager")]},
        "spec": {"podCIDR": f"10.{index // 250}.{index % 250}.0/24", "providerID": f"gce://project/zone/{name}",
                 "taints": [{"key": GPU, "value": "present", "effect": "NoSchedule"}]},
        "status": {"capacity": dict(allocatable, cpu="96", memory="1400000000Ki"), "allocatable": allocatable,
                   "conditions": conditions,
                   "addresses": [{"type": "InternalIP", "address": f"10.128.{index // 250}.{index % 250}"},
                                 {"type": "Hostname", "address": name}],
                   "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                   "nodeInfo": {"machineID": f"{index:032x}", "systemUUID": f"{index:032x}", "bootID": f"{index:032x}",
                                "kernelVersion": "6.1.100+", "osImage": "Container-Optimized OS from Google",
                                "containerRuntimeVersion": "containerd://1.7.20", "kubeletVersion": "v1.33.2",
                                "kubeProxyVersion": "v1.33.2", "operatingSystem": "linux", "architecture": "amd64"},
                   "images": images},
    }


def pod_object(index: int, nodes: int) -> dict:
    """A training pod holding one GPU, as a job controller creates it and the kubelet reports it."""
    name = f"train-{index // 8:06d}-worker-{index % 8}"
    labels = {"app": "train", "job-name": f"train-{index // 8:06d}", "batch.kubernetes.io/job-name": f"train-{index // 8:06d}",
              "controller-uid": f"{index // 8:08d}-1111-4000-8000-000000000000", "team": f"team-{index % 40}"}
    container = {"name": "trainer", "image": "us-docker.pkg.dev/project/images/trainer:v3.1",
                 "command": ["python", "train.py"], "args": ["--epochs", "90", "--batch-size", "256"],
                 "env": [{"name": f"ENV_{i}", "value": f"value-{i}"} for i in range(12)],
                 "resources": {"limits": {GPU: "1", "cpu": "10", "memory": "120Gi"},
                               "requests": {GPU: "1", "cpu": "10", "memory": "120Gi"}},
                 "volumeMounts": [{"name": "data", "mountPath": "/data"}, {"name": "shm", "mountPath": "/dev/shm"},
                                  {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                                   "readOnly": True}],
                 "terminationMessagePath": "/dev/termination-log", "imagePullPolicy": "IfNotPresent"}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": f"team-{index % 40}", "uid": f"{index:08d}-2222-4000-8000-000000000000",
                     "resourceVersion": "1", "creationTimestamp": "2026-11-29T00:00:00Z", "labels": labels,
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": labels["job-name"],
                                          "uid": labels["controller-uid"], "controller": True}]},
        "spec": {"nodeName": f"gpu-node-{index % nodes:05d}", "containers": [container], "restartPolicy": "Never",
                 "serviceAccountName": "default", "schedulerName": "default-scheduler",
                 "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
                 "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "dataset"}},
                             {"name": "shm", "emptyDir": {"medium": "Memory"}}]},
        "status": {"phase": "Running", "hostIP": "10.128.0.1", "podIP": f"10.{index % 250}.{index // 250 % 250}.7",
                   "startTime": "2026-11-29T00:00:05Z", "qosClass": "Guaranteed",
                   "conditions": [{"type": kind, "status": "True", "lastTransitionTime": "2026-11-29T00:00:10Z"}
                                  for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
                   "containerStatuses": [{"name": "trainer", "ready": True, "restartCount": 0, "started": True,
                                          "image": container["image"], "imageID": f"sha256:{index:064x}",
                                          "containerID": f"containerd://{index:064x}",
                                          "state": {"running": {"startedAt": "2026-11-29T00:00:09Z"}}}]},
    }


PLURALS = {"Node": "nodes", "Pod": "pods"}


class ListedCluster:
    """The calls the informers make: lists page by page, decoded from JSON as the client
    decodes them; watches that report nothing."""

    def __init__(self, nodes: int, pods: int):
        self.counts = {"nodes": nodes, "pods": pods}
        self.lists = {"nodes": 0, "pods": 0}

    def list_pages(self, kind: str, namespace: str | None = None, **selectors: str):
        kind = PLURALS.get(kind, kind)  # a tree from before the generic API layer names plurals
        self.lists[kind] += 1
        make = node_object if kind == "nodes" else lambda index: pod_object(index, self.counts["nodes"])
        for first in range(0, max(self.counts[kind], 1), PAGE):  # an empty list is one empty page
            # The response's body, then its objects, as the client reads them: only the body
            # and its decoded objects are alive while the informer reads the page.
            body = "[" + ",".join(json.dumps(make(index)) for index in range(first, min(first + PAGE, self.counts[kind]))) + "]"
            page = json.loads(body)
            del body
            yield page, "1"

    def _quiet(self, timeout_s: float):
        time.sleep(min(timeout_s, 0.5))
        return iter(())

    def watch(self, kind: str, namespace, resource_version: str, timeout_s: float, **selectors: str):
        return self._quiet(timeout_s)

    def watch_nodes(self, resource_version: str, timeout_s: float):  # a tree from before the generic API layer
        return self._quiet(timeout_s)

    def watch_pods(self, namespace, resource_version: str, timeout_s: float, **selectors: str):
        return self._quiet(timeout_s)


def run(pods: int) -> dict:
    """In this process: the node watch and the free GPUs open together until both listed."""
    from distributetrain.core.clock import RealClock
    from distributetrain.core.settings import JobSettings
    from distributetrain.manager.placement.freegpus import FreeGpuWatch
    from distributetrain.manager.watching.nodewatch import NodeWatch

    cluster, clock = ListedCluster(NODES, pods), RealClock()
    settings = JobSettings(job_name="j", namespace="ns", num_gpus=16, image="i", min_gpus=1)
    baseline = memory_mib("VmRSS")
    started = time.perf_counter()
    with NodeWatch(cluster, settings, None, clock), \
            FreeGpuWatch(cluster, settings, clock, client=lambda same: same) as free_gpus:
        while free_gpus.free() is None or not free_gpus.nodes.synced:
            time.sleep(0.2)
        seconds = time.perf_counter() - started
        held = memory_mib("VmRSS")
        return {"pods": pods, "nodes": NODES, "seconds": round(seconds, 1), "baseline_rss_mib": round(baseline, 1),
                "peak_extra_mib": round(memory_mib("VmHWM") - baseline, 1),
                "held_extra_mib": round(held - baseline, 1), "lists": dict(cluster.lists),
                "informer_threads": sum(t.name.startswith(("informer-", "node-watch")) for t in threading.enumerate())}


def run_process(code: Path, pods: int) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(dict.fromkeys([str(code), str(report.REPO_ROOT)])))
    done = subprocess.run([sys.executable, "-P", "-m", "bench.informer_memory", "--run", str(pods)], env=env,
                          cwd=report.REPO_ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"run of {pods} pods failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(runs: list[dict]) -> str:
    rows = [[run["arm"], f"{run['nodes']:,}", f"{run['pods']:,}", run["peak_extra_mib"], run["held_extra_mib"],
             run["lists"]["nodes"]] for run in runs]
    return report.markdown_table(["arm", "nodes", "GPU pods", "peak MiB", "held MiB", "Node lists"], rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", default=BEFORE_REV, metavar="REV",
                        help="the commit whose distributetrain is the 'before' arm (default: %(default)s)")
    parser.add_argument("--run", type=int, help=argparse.SUPPRESS)  # a child process: one run of this many pods
    args = parser.parse_args(argv)
    if args.run is not None:
        print(json.dumps(run(args.run)), flush=True)
        return
    runs = []
    with tempfile.TemporaryDirectory(prefix="dt-bench-before-") as before:
        extract_package(args.before, Path(before))
        for arm, code, commit in (("before", Path(before), git("rev-parse", "--short", args.before)),
                                  ("after", report.REPO_ROOT, git("describe", "--always", "--dirty"))):
            for pods in POD_SERIES:
                runs.append(run_process(code, pods) | {"arm": arm, "commit": commit})
                print(json.dumps(runs[-1]), flush=True)
    report.write_results(NAME, {"runs": runs})
    print(table(runs))


if __name__ == "__main__":
    main()
