"""One stream of jobs through a Kueue queue and through managers waiting for GPUs.

Why: without a queue, a submitted job either finds its GPUs or waits
(``--wait-for-gpus``), and whichever waiting manager takes the placement Lease first
wins: small jobs keep slipping past a large one. Through Kueue (``--queue``, StrictFIFO)
jobs are admitted in their order, all or nothing. The question is what each costs: how
long the whole stream takes, how busy the GPUs are, and how long the largest job waits.

Setup: a local cluster of its own (``bench/isolated.sh``) with Kueue, two nodes of 4 and
2 GPUs, and the same stream for each arm, one arm after the other: ``JOBS`` jobs, each
submitted at its arrival time as a real manager pod (rbac/ and rbac/kueue/ applied),
each rank sleeping for the job's duration (``hello.py``, Horovod across the job's pods).
- *queue*: ``--queue`` into a LocalQueue whose ClusterQueue holds the 6 GPUs;
- *wait*: ``--wait-for-gpus``, no queue.
Every ``SAMPLE_S`` the GPUs held by running job pods are counted (a pod's GPUs are
held from Running to its end). Per arm: *makespan* (first submission to the last
manager's end), *mean GPU utilisation* (GPUs held, averaged over the makespan, of 6),
and the *largest job's wait* (its submission to its chief Running).

Run: ``bench/isolated.sh python -m bench.queueing`` (root; Kueue built by ``make setup``).
"""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass

import matplotlib.pyplot as plt
import yaml
from kubernetes import client

from bench import report, testbed
from distributetrain.core import names
from distributetrain.core.placement import podstate
from tests import projectrbac

NAME = "queueing"
NODES = {"a": 4, "b": 2}
TOTAL_GPUS = sum(NODES.values())
SEED = 24
JOBS = 10
SIZES = (1, 1, 2, 2, 3, 4, 6)  # GPUs; 6 is the whole cluster
DURATION_S = (20, 60)
MEAN_ARRIVAL_GAP_S = 8.0
SAMPLE_S = 1.0
ARM_TIMEOUT_S = 1800.0
GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
LOCAL_QUEUE = "bench"
LOCAL_NODE_SIZING = ("--cpu-per-gpu=100m", "--memory-per-gpu=1Gi")
HELLO = """\
import os, sys, time
time.sleep(float(sys.argv[1]))
"""


@dataclass(frozen=True)
class Job:
    name: str
    arrival_s: float
    gpus: int
    duration_s: float


def stream() -> list[Job]:
    """The arm's jobs, the same for both: a seeded Poisson arrival, mixed sizes."""
    rng = random.Random(SEED)
    at, jobs = 0.0, []
    for index in range(JOBS):
        jobs.append(Job(f"j{index:02d}", at, rng.choice(SIZES), float(rng.randint(*DURATION_S))))
        at += rng.expovariate(1 / MEAN_ARRIVAL_GAP_S)
    return jobs


def manager_pod(namespace: str, job: Job, selector: str, claim: str, arm_flags: list[str]) -> dict:
    pod = yaml.safe_load((report.REPO_ROOT / "manager.yaml").read_text())
    pod["metadata"].update(name=job.name, namespace=namespace)
    pod["metadata"]["labels"][names.LABEL_JOB] = job.name
    pod["spec"]["nodeSelector"] = dict([selector.split("=", 1)])
    pod["spec"]["containers"][0]["args"] = [
        *LOCAL_NODE_SIZING, f"--num-gpus={job.gpus}", "--image=distributetrain/base:0.1.0",
        f"--node-selector={selector}", f"--pvc={claim}:/bench", "--filename=/bench/hello.py",
        "--worker-ready-timeout=120s", *arm_flags, "--", str(job.duration_s)]
    return pod


def queue_objects(namespace: str) -> list[tuple[str, dict]]:
    """(plural, object) of a flavor, a ClusterQueue of every GPU (StrictFIFO), the LocalQueue."""
    cluster_queue = f"bench-{namespace}"
    return [
        ("resourceflavors", {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor",
                             "metadata": {"name": cluster_queue}}),
        ("clusterqueues", {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue",
                           "metadata": {"name": cluster_queue},
                           "spec": {"namespaceSelector": {}, "queueingStrategy": "StrictFIFO", "resourceGroups": [{
                               "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                               "flavors": [{"name": cluster_queue, "resources": [
                                   {"name": "cpu", "nominalQuota": 100}, {"name": "memory", "nominalQuota": "500Gi"},
                                   {"name": "nvidia.com/gpu", "nominalQuota": TOTAL_GPUS}]}]}]}}),
        ("localqueues", {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue",
                         "metadata": {"name": LOCAL_QUEUE, "namespace": namespace},
                         "spec": {"clusterQueue": cluster_queue}}),
    ]


class GpuSampler:
    """GPUs held by the namespace's running job pods, every SAMPLE_S, and when each
    job's chief was first seen Running."""

    def __init__(self, api_client, namespace: str):
        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace
        self.samples: list[tuple[float, int]] = []
        self.chief_running: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> GpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.time()
            raw = self.core.list_namespaced_pod(self.namespace, _preload_content=False)
            held = 0
            for pod in json.loads(raw.data)["items"]:
                if not podstate.is_training_pod(pod) or (pod.get("status") or {}).get("phase") != "Running":
                    continue
                held += podstate.gpus_of(pod)
                if podstate.role(pod) == names.ROLE_CHIEF:
                    self.chief_running.setdefault(pod["metadata"]["labels"][names.LABEL_JOB], now)
            self.samples.append((now, held))
            self._stop.wait(SAMPLE_S)


def run_arm(api_client, namespace: str, selector: str, claim: str, jobs: list[Job], arm_flags: list[str]) -> dict:
    core = client.CoreV1Api(api_client)
    submitted: dict[str, float] = {}
    with GpuSampler(api_client, namespace) as sampler:
        started = time.time()
        for job in jobs:
            time.sleep(max(0.0, started + job.arrival_s - time.time()))
            core.create_namespaced_pod(namespace, manager_pod(namespace, job, selector, claim, arm_flags))
            submitted[job.name] = time.time()
        ended: dict[str, tuple[float, int]] = {}
        give_up_at = time.monotonic() + ARM_TIMEOUT_S
        while len(ended) < len(jobs):
            if time.monotonic() > give_up_at:
                raise TimeoutError(f"jobs not done after {ARM_TIMEOUT_S:.0f}s: {sorted(set(submitted) - set(ended))}")
            for job in jobs:
                if job.name in ended:
                    continue
                pod = core.read_namespaced_pod(job.name, namespace)
                if pod.status.phase in ("Succeeded", "Failed"):
                    ended[job.name] = (time.time(), pod.status.container_statuses[0].state.terminated.exit_code)
            time.sleep(SAMPLE_S)
    makespan = max(at for at, _ in ended.values()) - started
    within = [held for at, held in sampler.samples if started <= at <= started + makespan]
    largest = max(jobs, key=lambda job: (job.gpus, -job.arrival_s))
    return {
        "makespan_s": round(makespan, 1),
        "mean_gpu_utilisation": round(sum(within) / len(within) / TOTAL_GPUS, 3) if within else 0.0,
        "largest_job": largest.name, "largest_job_gpus": largest.gpus,
        "largest_job_wait_s": round(sampler.chief_running.get(largest.name, float("nan")) - submitted[largest.name], 1),
        "exit_codes": {name: code for name, (_, code) in sorted(ended.items())},
        "held": [(round(at - started, 1), held) for at, held in sampler.samples if at >= started],
    }


def plot(results: dict) -> None:
    fig, axes = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
    for axis, (arm, result) in zip(axes, results.items()):
        times, held = zip(*result["held"]) if result["held"] else ((), ())
        axis.step(times, held, where="post")
        axis.axhline(TOTAL_GPUS, color="grey", linewidth=0.8)
        axis.set_ylabel("GPUs held")
        axis.set_title(f"{arm}: makespan {result['makespan_s']:.0f} s, utilisation "
                       f"{result['mean_gpu_utilisation']:.0%}, largest job waited {result['largest_job_wait_s']:.0f} s")
    axes[-1].set_xlabel("seconds since the first submission")
    report.save_figure(fig, report.image_path(NAME))


def main() -> None:
    jobs = stream()
    results = {}
    with testbed.local_cluster() as cluster:
        cluster.start_kueue()
        api_client = cluster.api_client()
        custom = client.CustomObjectsApi(api_client)
        try:
            with testbed.node_pool(cluster, f"q{testbed.short_id()}", NODES) as selector:
                for arm, flags in (("queue", [f"--queue={LOCAL_QUEUE}"]), ("wait", ["--wait-for-gpus=30m"])):
                    with testbed.namespace(api_client, f"bench-{arm}") as namespace, \
                            testbed.script_volume(api_client, namespace, {"hello.py": HELLO}) as claim:
                        rbac = projectrbac.apply_rbac(api_client, namespace)
                        rbac += projectrbac.apply_rbac(api_client, namespace, folder="rbac/kueue")
                        objects = queue_objects(namespace) if arm == "queue" else []
                        for plural, obj in objects:
                            if plural == "localqueues":
                                custom.create_namespaced_custom_object(GROUP, VERSION, namespace, plural, obj)
                            else:
                                custom.create_cluster_custom_object(GROUP, VERSION, plural, obj)
                        try:
                            results[arm] = run_arm(api_client, namespace, selector, claim, jobs, flags)
                        finally:
                            projectrbac.delete_shared_bindings(api_client, rbac)
                            for plural, obj in reversed(objects):
                                if plural != "localqueues":
                                    custom.delete_cluster_custom_object(GROUP, VERSION, plural, obj["metadata"]["name"])
        finally:
            cluster.stop_kueue()
    report.write_results(NAME, {"jobs": [job.__dict__ for job in jobs], "arms": results})
    plot(results)
    print(report.markdown_table(
        ["arm", "makespan (s)", "mean GPU utilisation", "largest job (GPUs)", "its wait (s)", "exit codes"],
        [[arm, r["makespan_s"], f"{r['mean_gpu_utilisation']:.0%}", f"{r['largest_job']} ({r['largest_job_gpus']})",
          r["largest_job_wait_s"], ",".join(str(c) for c in r["exit_codes"].values())] for arm, r in results.items()]))


if __name__ == "__main__":
    main()
