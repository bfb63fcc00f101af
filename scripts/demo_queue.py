"""`make demo-queue`: three jobs through one Kueue queue on the local cluster.

What a team on a cluster that runs Kueue sees: the local cluster with Kueue and two
fake-GPU nodes (2 + 1 GPUs), rbac/ and rbac/kueue/, a ClusterQueue of 3 GPUs behind the
LocalQueue `team`, then three jobs of 2, 3 and 1 GPUs submitted at once with
`distributetrain submit --queue team`. Kueue admits them in their order, each as one
workload, all or nothing: the 3-GPU job waits Queued (#1) while the 2-GPU one trains,
and the 1-GPU one waits behind it (#2, StrictFIFO). Each is planned when admitted. Then what
happened, that nothing is left, and the cluster goes down.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(REPO / "localcluster"))  # the checkout's localcluster project

from localcluster.cluster import Cluster  # noqa: E402

NAMESPACE = "default"
NODES = {"gpu-a": 2, "gpu-b": 1}
QUEUE = "team"
CLUSTER_QUEUE = "demo-gpus"
JOBS = {"first-2gpu": 2, "second-3gpu": 3, "third-1gpu": 1}
TRAIN_ARGS = ["--epochs=1"]
JOBS_TIMEOUT_S = 900.0
POLL_S = 2.0
KUEUE = "kueue.x-k8s.io/v1beta2"


def step(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def kubectl(cluster: Cluster, *args: str, input: str | None = None, check: bool = True) -> str:
    print(f"$ kubectl {' '.join(args)}", flush=True)
    result = cluster.kubectl(*args, input=input)
    if check and result.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def distributetrain(cluster: Cluster, *args: str) -> subprocess.CompletedProcess:
    print(f"$ distributetrain {' '.join(args)}", flush=True)
    command, *rest = args  # the kubeconfig before a job's `--`, after which all is the script's
    return subprocess.run([sys.executable, "-m", "distributetrain", command, "--kubeconfig", str(cluster.kubeconfig),
                           *rest], capture_output=True, text=True, timeout=60)


def queue_objects() -> str:
    """A flavor, a ClusterQueue of 3 GPUs (StrictFIFO) and the team's LocalQueue."""
    return yaml.safe_dump_all([
        {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "default-flavor"}},
        {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": CLUSTER_QUEUE},
         "spec": {"namespaceSelector": {}, "queueingStrategy": "StrictFIFO", "resourceGroups": [{
             "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
             "flavors": [{"name": "default-flavor", "resources": [
                 {"name": "cpu", "nominalQuota": 8}, {"name": "memory", "nominalQuota": "32Gi"},
                 {"name": "nvidia.com/gpu", "nominalQuota": 3}]}]}]}},
        {"apiVersion": KUEUE, "kind": "LocalQueue", "metadata": {"name": QUEUE, "namespace": NAMESPACE},
         "spec": {"clusterQueue": CLUSTER_QUEUE}},
    ])


def job_states(cluster: Cluster) -> dict[str, dict]:
    listed = distributetrain(cluster, "list", "--namespace", NAMESPACE, "-o", "json")
    return {item["name"]: item for item in json.loads(listed.stdout or '{"items": []}')["items"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keep-cluster", action="store_true", help="leave the local cluster up afterwards")
    options = parser.parse_args()

    step(f"Local cluster with Kueue: fake-GPU nodes {NODES}")
    cluster = Cluster.up(nodes=NODES)
    cluster.start_kueue()
    failed = True
    try:
        step("RBAC, and what a Kueue user adds (rbac/kueue/); a queue of 3 GPUs")
        print(kubectl(cluster, "apply", "-f", str(REPO / "rbac")))
        print(kubectl(cluster, "apply", "-f", str(REPO / "rbac" / "kueue")))
        print(kubectl(cluster, "apply", "-f", "-", input=queue_objects()))
        # Kueue admits from a queue once it is Active (in Kueue's caches, its flavor known).
        print(kubectl(cluster, "wait", "--for=condition=Active", "--timeout=30s", f"clusterqueue/{CLUSTER_QUEUE}"))
        print(kubectl(cluster, "wait", "--for=condition=Active", "--timeout=30s", f"localqueue/{QUEUE}",
                      "--namespace", NAMESPACE))

        step(f"Three jobs at once: {', '.join(f'{name} ({gpus} GPUs)' for name, gpus in JOBS.items())}")
        for name, gpus in JOBS.items():
            submitted = distributetrain(cluster, "submit", "--name", name, "--namespace", NAMESPACE, "--queue", QUEUE,
                                        "--num-gpus", str(gpus), "--image", "distributetrain/base:0.1.0",
                                        "--cpu-per-gpu=250m", "--memory-per-gpu=2Gi", "--delete-chief",
                                        # Horovod negotiating every 20 ms, not 1: less CPU (scripts/demo.py)
                                        "--env=HOROVOD_CYCLE_TIME=20",
                                        "--", *TRAIN_ARGS)
            if submitted.returncode != 0:
                raise SystemExit(f"submit {name} failed: {submitted.stderr.strip()}")
            time.sleep(1)  # Kueue orders by creation: one second apart, the order is plain

        step("The queue at work (distributetrain list, every few seconds)")
        seen: dict[str, str] = {}
        give_up_at = time.monotonic() + JOBS_TIMEOUT_S
        while time.monotonic() < give_up_at:
            states = job_states(cluster)
            for name in JOBS:
                state = states.get(name, {})
                phase = state.get("phase", "?") + (f" #{state['queuePosition']}" if state.get("queuePosition") else "")
                if seen.get(name) != phase:
                    print(f"{time.strftime('%H:%M:%S')}  {name:<12} {phase}", flush=True)
                    seen[name] = phase
            if all(seen.get(name) in ("Succeeded", "Failed") for name in JOBS):
                break
            time.sleep(POLL_S)
        else:
            raise SystemExit(f"the jobs did not finish within {JOBS_TIMEOUT_S:.0f}s")

        step("What happened")
        print(distributetrain(cluster, "list", "--namespace", NAMESPACE).stdout)
        for name in JOBS:
            print(distributetrain(cluster, "status", name, "--namespace", NAMESPACE).stdout)
        print(kubectl(cluster, "get", "workloads.kueue.x-k8s.io", "--namespace", NAMESPACE, check=False))
        failed = any(seen[name] != "Succeeded" for name in JOBS)

        step("Nothing of the jobs is left but their managers")
        for name in JOBS:
            kubectl(cluster, "delete", "pod", name, "--namespace", NAMESPACE, "--wait=true")
        print(kubectl(cluster, "get", "pods,secrets", "--namespace", NAMESPACE, "-l", "app.kubernetes.io/name=distributetrain"))
        kubectl(cluster, "delete", "-f", "-", input=queue_objects(), check=False)
    finally:
        if options.keep_cluster:
            print("\nthe cluster is still up (with Kueue): python -m localcluster down")
        else:
            step("Taking the local cluster down")
            cluster.down()
    print(f"\ndemo-queue {'FAILED' if failed else 'succeeded'}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
