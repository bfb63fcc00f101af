"""`make demo`: one real Horovod job through the manager on the local cluster.

What a user would do on a GPU cluster, on this machine: bring up the cluster with two
fake-GPU nodes (2 + 1 GPUs), apply rbac/, `kubectl apply -f manager.yaml` with the
demo's values (3 GPUs, a volume for the checkpoints), follow the job to its end, then
show what happened and that nothing of the job is left, and take the cluster down.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(1, str(REPO / "localcluster"))  # the checkout's localcluster project

from distributetrain.core import names  # noqa: E402
from localcluster.cluster import Cluster  # noqa: E402

NAMESPACE = "default"
JOB = "distributetrain-demo"
# The first node is named as on EKS (Karpenter): its Node name is not its hostname label.
NODES = {"ip-10-0-1-7.ec2.internal": 2, "gpu-b": 1}
HOSTNAMES = {"ip-10-0-1-7.ec2.internal": "ip-10-0-1-7"}
CLAIM = "demo-train"
JOB_TIMEOUT_S = 600.0
CLAIM_BOUND_TIMEOUT_S = 60
# The manager's container waits with one of these when it can never start as it is.
STUCK_REASONS = ("ErrImageNeverPull", "ErrImagePull", "ImagePullBackOff", "InvalidImageName",
                 "CreateContainerConfigError", "CreateContainerError")
TRAIN_ARGS = ["--epochs=4", "--checkpoint-dir=/train/checkpoints"]


def step(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def kubectl(cluster: Cluster, *args: str, input: str | None = None, check: bool = True) -> str:
    shown = " ".join(a for a in args)
    print(f"$ kubectl {shown}", flush=True)
    result = cluster.kubectl(*args, input=input)
    if check and result.returncode != 0:
        raise SystemExit(f"kubectl {shown} failed: {result.stderr.strip()}")
    return result.stdout


def volume(directory: Path) -> str:
    """A PersistentVolume on this host (hostPath) and its claim: the seeds' shared /train."""
    return yaml.safe_dump_all([
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{CLAIM}-pv"},
         "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
                  "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": str(directory)},
                  "claimRef": {"namespace": NAMESPACE, "name": CLAIM}}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": CLAIM, "namespace": NAMESPACE},
         "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": f"{CLAIM}-pv",
                  "resources": {"requests": {"storage": "1Gi"}}}},
    ])


def demo_manager() -> str:
    """manager.yaml with the demo's values, as a user would edit it."""
    pod = yaml.safe_load((REPO / "manager.yaml").read_text())
    pod["metadata"]["name"] = JOB
    pod["spec"]["containers"][0]["args"] = [
        "--num-gpus=3", "--image=distributetrain/base:0.1.0", "--port=12345",
        # The local nodes are kubelets on this 2-core machine (2 CPUs each): the defaults,
        # 2 CPUs and 8Gi per GPU, are sized for real GPU nodes.
        "--cpu-per-gpu=250m", "--memory-per-gpu=2Gi",
        # Horovod's ranks negotiate every millisecond by default (for GPUs); on CPUs, every
        # 20 ms costs a quarter less CPU and trains as fast.
        "--env=HOROVOD_CYCLE_TIME=20",
        "--filename=/opt/distributetrain/train.py", "--host-network=false",
        f"--pvc={CLAIM}:/train", "--delete-chief", "--", *TRAIN_ARGS,
    ]
    return yaml.safe_dump(pod, sort_keys=False)


def manager_state(cluster: Cluster) -> dict:
    out = cluster.kubectl("get", "pod", JOB, "-n", NAMESPACE, "-o", "json")
    return json.loads(out.stdout) if out.returncode == 0 else {}


def container_state(pod: dict) -> tuple[str, dict]:
    """The manager container's state: ("waiting" | "running" | "terminated", its details)."""
    statuses = pod.get("status", {}).get("containerStatuses") or [{}]
    return next(iter((statuses[0].get("state") or {"waiting": {}}).items()))


def failure_reason(pod: dict) -> str | None:
    """Why the manager failed or never ran, from its pod's own status (image, start error)."""
    kind, details = container_state(pod)
    if kind == "terminated" and details.get("exitCode") == 0:
        return None
    if kind == "running":
        return None
    reason = details.get("reason") or "unknown"
    message = details.get("message") or "no message"
    code = f" (exit code {details['exitCode']})" if "exitCode" in details else ""
    return f"manager container {kind}{code}: {reason}: {message}"


def follow(cluster: Cluster) -> dict:
    """Stream the chief's output while the job runs; return the manager pod at its end."""
    give_up_at = time.monotonic() + JOB_TIMEOUT_S
    streamed = False
    while time.monotonic() < give_up_at:
        pod = manager_state(cluster)
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            return pod
        kind, details = container_state(pod)
        if kind == "waiting" and details.get("reason") in STUCK_REASONS:
            return pod
        if not streamed and cluster.kubectl("get", "pod", f"{JOB}-chief", "-n", NAMESPACE).returncode == 0:
            step("Training (the chief's output: horovodrun across the pods over SSH)")
            argv = [str(cluster.binaries().kubernetes("kubectl")), f"--kubeconfig={cluster.kubeconfig}",
                    "logs", "-f", f"{JOB}-chief", "-n", NAMESPACE]
            # The chief is created only after the workers are Ready; wait until it runs.
            while cluster.kubectl("logs", f"{JOB}-chief", "-n", NAMESPACE).returncode != 0:
                if time.monotonic() > give_up_at:
                    break
                time.sleep(0.5)
            subprocess.run(argv, timeout=max(1.0, give_up_at - time.monotonic()))
            streamed = True
        time.sleep(0.5)
    raise SystemExit(f"the demo job did not finish within {JOB_TIMEOUT_S:.0f}s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keep-cluster", action="store_true", help="leave the local cluster up afterwards")
    options = parser.parse_args()

    step(f"Local cluster: real control plane, fake-GPU nodes {NODES}")
    cluster = Cluster.up(nodes=NODES, hostnames=HOSTNAMES)
    exit_code = 1
    try:
        print(kubectl(cluster, "get", "nodes", "-o",
                      "custom-columns=NODE:.metadata.name,HOSTNAME:.metadata.labels.kubernetes\\.io/hostname,"
                      "GPUS:.status.allocatable.nvidia\\.com/gpu,STATUS:.status.conditions[-1].type"))
        step("RBAC, once per cluster")
        print(kubectl(cluster, "apply", "-f", str(REPO / "rbac")))
        workdir = Path(tempfile.mkdtemp(prefix="distributetrain-demo-"))
        workdir.chmod(0o755)
        # The job's pods run as their non-root user, and a hostPath volume ignores fsGroup:
        # the checkpoints' directory is that user's, as a provisioner honouring fsGroup makes it.
        os.chown(workdir, names.JOB_USER_UID, names.JOB_USER_UID)
        print(kubectl(cluster, "apply", "-f", "-", input=volume(workdir)))
        # Submit on a Bound claim, so the timeline below is the manager's own.
        print(kubectl(cluster, "wait", "--for=jsonpath={.status.phase}=Bound", f"pvc/{CLAIM}", "-n", NAMESPACE,
                      f"--timeout={CLAIM_BOUND_TIMEOUT_S}s"))

        step("Submit: kubectl apply -f manager.yaml (3 GPUs, train.py, checkpoints on the volume)")
        print(kubectl(cluster, "apply", "-f", "-", input=demo_manager()))
        pod = follow(cluster)

        step("What happened")
        annotations = pod["metadata"].get("annotations", {})
        kind, details = container_state(pod)
        exit_code = details.get("exitCode", 1) if kind == "terminated" else 1
        status = pod["status"]["containerStatuses"][0]
        print(f"manager image: {status['image']} ({status.get('imageID') or 'never created'})")
        reason = failure_reason(pod)
        if reason:
            print(reason)
        print(f"plan (node=GPUs, chief last): {annotations.get('distributetrain.io/plan')}")
        print(f"outcome: {annotations.get('distributetrain.io/phase')} - "
              f"{annotations.get('distributetrain.io/reason', '')}")
        print(f"manager exit code: {exit_code}")
        print("manager log:")
        print(kubectl(cluster, "logs", JOB, "-n", NAMESPACE, check=False))
        checkpoints = sorted(p.name for p in (workdir / "checkpoints").glob("*")) if (workdir / "checkpoints").exists() else []
        print(f"trained model on the volume ({workdir}/checkpoints): {', '.join(checkpoints) or 'none'}")

        step("Nothing of the job is left")
        print(kubectl(cluster, "get", "pods,secrets", "-n", NAMESPACE, "-l", f"distributetrain.io/job={JOB}"))
        kubectl(cluster, "delete", "pod", JOB, "-n", NAMESPACE, "--wait=true")
        kubectl(cluster, "delete", "-f", "-", input=volume(workdir), check=False)
    finally:
        if options.keep_cluster:
            print("\nthe cluster is still up: python -m localcluster down")
        else:
            step("Taking the local cluster down")
            cluster.down()
    print(f"\ndemo {'succeeded' if exit_code == 0 else 'FAILED'} (exit code {exit_code})")
    return exit_code


if __name__ == "__main__":
    raise SystemExit(main())
