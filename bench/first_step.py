"""From a job's submission to its first training step: on warm nodes, on nodes Karpenter adds
from zero, and with a slow image pull, side by side, and which part is the manager's own.

Why: a user waits from the submission to the first step, and most of that wait is the
cluster's (a GPU node booting, a multi-GB image pulled) or the training's (horovodrun,
TensorFlow's import). The question is what the manager adds to it, and whether it adds
more where nodes are added or images pulled (issue 33).

Three arms of the same job (2 GPUs over 2 nodes, one worker and the chief, 1 GPU each,
``base_image/train.py --samples=512 --epochs=1``: 4 steps a rank, ``--cpu-per-gpu=250m``),
interleaved, ``REPETITIONS`` each, after one unmeasured warm-up job (the first start on
fresh nodes reads the image from a cold disk):
- warm: two GPU nodes of the benchmark's own running, the image on them;
- from zero: no GPU node; Karpenter with a NodePool of ``gpu-1x`` instances (1 GPU) that
  boot in ``BOOT_DELAY_S``; the job with ``--scale-up-node-gpus=1 --wait-for-gpus=4m``.
  The nodes start with the image (as nodes booted from a machine image that has it);
- slow pull: the warm arm's nodes, which forget the image first; the local registry
  holds each node's pull for ``PULL_DELAY_S`` (localcluster/slowpulls.py), a stand-in
  for a multi-GB transfer (the layers stay on the node, so the rest of the pull is short).
Both delays are shorter than a cloud's (a GPU node takes 2-5 minutes to boot and join, a
10 GB image 1-3 minutes to pull) to fit the run in 20 minutes; those two parts grow with
them and nothing else does.

The manager runs in this process (``lifecycle.execute(kube, settings, "run")``, the code
``manager.sh`` runs, with its own API client and a stand-in manager pod that owns the
job's objects), as in bench/control_plane.py: its log records are then on this process's
clock, to the millisecond, and so is the manager's part. A real manager pod would add
its own start (scheduled on a running node, the manager image present: interpreter and
imports, about 1 s, section 3), the same in every arm; it is left out, and said so.

The instants, each the last of the job's pods to get there (``bench/startparts.py`` cuts
them into parts):
- submitted, pods created, hosts published: the manager's log records;
- bound, chief Running, workers Ready: a watch on the namespace's pods (``PodTimeline``);
- first NodeClaim, nodes Ready, Pulling and Pulled Events: polled every ``POLL_S``;
- first step: the chief's log read with ``timestamps=True``, rank 0's ``epoch=1`` line
  (the kubelet's timestamp, on the same host's clock).

Run: ``bench/isolated.sh python -m bench.first_step`` (root; the project's images and
Karpenter, built by ``make setup``; about 9 minutes).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import statistics
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import urllib3
from kubernetes import client

from bench import report, startparts, testbed
from distributetrain.core import names
from distributetrain.core.clock import RealClock
from distributetrain.kube.client import Kube
from distributetrain.kube.connection import load_api_client
from distributetrain.manager.job import lifecycle
from localcluster import karpenter

NAME = "first-step"
STATIC_NODES = {"a": 1, "b": 1}  # GPUs: the warm and slow-pull arms' nodes
NUM_GPUS = 2
TRAIN_ARGS = ("--samples=512", "--epochs=1")  # 512 / 2 ranks / batch 64: 4 steps in the first epoch
# gpu-1x has 1 CPU and 4Gi: the job's pod (and sshd, TensorFlow) must fit it.
SIZING = ("--cpu-per-gpu=250m", "--memory-per-gpu=2Gi")
IMAGE = "distributetrain/base:0.1.0"
REPETITIONS = 3
PULL_DELAY_S = 60.0
BOOT_DELAY_S = 45.0
INSTANCE_TYPE = "gpu-1x"  # localcluster/karpenter.py: 1 GPU, 1 CPU, 4Gi
POOL_GPU_LIMIT = 4  # two nodes for the job, and room for Karpenter's own slack
KARPENTER_TAINT = "distributetrain.bench/karpenter"  # only the from-zero job tolerates the pool's nodes
WAIT_FOR_GPUS = "4m"  # Karpenter's nodes take BOOT_DELAY_S and some 20 s more
JOB_DEADLINE_S = 300  # a job that hangs fails instead of stalling the benchmark (the slowest takes ~2 min)
POLL_S = 0.5
NODES_GONE_TIMEOUT_S = 180.0
FIRST_STEP = re.compile(r"\bepoch=1 loss=")
HOROVODRUN = re.compile(r"^distributetrain: horovodrun ")  # the chief has its hosts and checked SSH
WARM, FROM_ZERO, SLOW_PULL = "warm", "from zero", "slow pull"
ARMS = (WARM, FROM_ZERO, SLOW_PULL)
SLUGS = {WARM: "warm", FROM_ZERO: "zero", SLOW_PULL: "slow"}
COLOURS = {startparts.MANAGER_PLAN: "tab:blue", startparts.KARPENTER: "tab:purple", startparts.NODES: "tab:red",
           startparts.POD_START: "tab:olive", startparts.PULL: "tab:orange", startparts.MANAGER_HOSTS: "tab:cyan",
           startparts.TRAINING: "tab:gray"}


class JobFailed(RuntimeError):
    """The job did not reach its first step, or a mark of its start is missing."""


@dataclass
class Bench:
    """What every run uses: the cluster, the namespace, the two kinds of nodes."""

    cluster: object
    api_client: object
    namespace: str
    static_selector: str
    static_nodes: list[str]
    pool: str  # the Karpenter NodePool (and its nodes' label value)


@dataclass
class ClusterSampler:
    """Polls what no pod watch shows: Karpenter's NodeClaims and nodes, and the pods' Events.

    Each is kept with the time it was first seen (``time.time()``); POLL_S late at most."""

    api_client: object
    namespace: str
    pool: str
    claims: dict[str, float] = field(default_factory=dict)
    nodes_ready: dict[str, float] = field(default_factory=dict)
    events: dict[tuple[str, str], tuple[float, str]] = field(default_factory=dict)  # (pod, reason) -> (seen, message)
    disturbed: bool = False
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> ClusterSampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()

    def _run(self) -> None:
        core, custom = client.CoreV1Api(self.api_client), client.CustomObjectsApi(self.api_client)
        selector = f"karpenter.sh/nodepool={self.pool}"
        while not self._stop.wait(POLL_S):
            try:
                now, claims = time.time(), custom.list_cluster_custom_object(
                    karpenter.API_GROUP, karpenter.API_VERSION, "nodeclaims", label_selector=selector)["items"]
                for claim in claims:
                    self.claims.setdefault(claim["metadata"]["name"], now)
                now, nodes = time.time(), _items(core.list_node(label_selector=selector, _preload_content=False))
                for node in nodes:
                    if testbed.is_ready(node):
                        self.nodes_ready.setdefault(node["metadata"]["name"], now)
                now, events = time.time(), _items(core.list_namespaced_event(self.namespace, _preload_content=False))
                for event in events:
                    key = (event["involvedObject"].get("name", ""), event.get("reason", ""))
                    self.events.setdefault(key, (now, event.get("message", "")))
            except (client.ApiException, urllib3.exceptions.HTTPError, OSError):
                self.disturbed = True


def _items(response) -> list[dict]:
    return json.loads(response.data)["items"]


def job_flags(bench: Bench, arm: str, job: str, owner_uid: str) -> list[str]:
    flags = [f"--job-name={job}", f"--owner-uid={owner_uid}", f"--num-gpus={NUM_GPUS}", f"--image={IMAGE}",
             f"--active-deadline={JOB_DEADLINE_S}s", *SIZING]
    if arm == FROM_ZERO:
        return flags + [f"--node-selector={testbed.NODE_LABEL}={bench.pool}",
                        f"--toleration={KARPENTER_TAINT}=true:NoSchedule",
                        "--scale-up-node-gpus=1", f"--wait-for-gpus={WAIT_FOR_GPUS}"]
    return flags + [f"--node-selector={bench.static_selector}"]


def run_arm(bench: Bench, arm: str, job: str) -> dict:
    """One job of one arm, from a clean slate to a clean slate; its start's parts."""
    if arm == FROM_ZERO:
        wait_pool_empty(bench)
    if arm == SLOW_PULL:
        for node in bench.static_nodes:  # as fresh nodes: every job pod pulls
            bench.cluster.forget_images(node)
    try:
        return measured_job(bench, arm, job)
    finally:
        testbed.delete_pods(bench.api_client, bench.namespace)  # the stand-in, and with it the kept chief
        if arm == FROM_ZERO:
            release_nodes(bench)


def measured_job(bench: Bench, arm: str, job: str) -> dict:
    api, namespace = bench.api_client, bench.namespace
    owner_uid = testbed.stand_in_manager(api, namespace, job)
    settings = testbed.job_settings(namespace, *job_flags(bench, arm, job, owner_uid), script_args=TRAIN_ARGS)
    real = RealClock()
    kube = Kube(load_api_client(kubeconfig=str(bench.cluster.kubeconfig)), real)  # the manager's own client
    timeline = testbed.PodTimeline(api, namespace).start()
    sampler = ClusterSampler(bench.cluster.api_client(), namespace, bench.pool).start()
    try:
        with testbed.LogClock() as clock:
            submitted = time.time()
            exit_code = lifecycle.execute(kube, settings, "run", real)
            ended = time.time()
    finally:
        sampler.stop()
        timeline.stop()
    chief = names.chief_name(job)
    chief_log = timestamped_log(api, namespace, chief)
    if exit_code != 0:
        raise JobFailed(f"{arm} job {job} exited with {exit_code}; chief's log ends:\n{chief_log[-3000:]}")
    pods = [names.worker_name(job, 0), chief]
    marks = marks_of(job, submitted, clock, timeline, sampler, pods, chief_log)
    parts = startparts.split(marks)
    bound = [timeline.pods[pod].bound for pod in pods if pod in timeline.pods and timeline.pods[pod].bound]
    instants = {key: value for key, value in vars(marks).items() if isinstance(value, float)}
    instants["last pod bound"] = max(bound, default=None)
    instants["horovodrun"] = startparts.first_line_time(chief_log, HOROVODRUN)
    return {
        "job": job, "parts": parts, "total_s": marks.first_step - marks.submitted,
        "instants_s": {key: round(value - submitted, 3) for key, value in instants.items() if value is not None},
        "manager_s": startparts.manager_share(parts), "wall_s": ended - submitted,
        "pulled": {pod: sampler.events.get((pod, "Pulled"), (0.0, ""))[1] for pod in pods},
        "nodes_added": sorted(sampler.claims), "disturbed": timeline.disturbed or sampler.disturbed,
    }


def marks_of(job: str, submitted: float, clock: testbed.LogClock, timeline: testbed.PodTimeline,
             sampler: ClusterSampler, pods: list[str], chief_log: str) -> startparts.Marks:
    """The run's instants; JobFailed naming any that is missing."""
    worker, chief = pods
    created = [t for t, message in clock.records if message.startswith("created Pod [")]
    pulls = tuple((sampler.events[(pod, "Pulling")][0], sampler.events[(pod, "Pulled")][0]) for pod in pods
                  if (pod, "Pulling") in sampler.events and (pod, "Pulled") in sampler.events)
    times = {pod: timeline.pods.get(pod, testbed.PodTimes()) for pod in pods}
    found = {
        "pods created": max(created, default=None),
        "worker Ready": times[worker].ready,
        "chief Running": times[chief].running,
        "hosts published": clock.first(f"job {job}: the chief has its"),
        "first step": startparts.first_line_time(chief_log, FIRST_STEP),
    }
    missing = [what for what, instant in found.items() if instant is None]
    if missing:
        raise JobFailed(f"job {job}: no {', '.join(missing)} seen; chief's log ends:\n{chief_log[-2000:]}")
    return startparts.Marks(
        submitted=submitted, pods_created=found["pods created"],
        first_nodeclaim=min(sampler.claims.values(), default=None),
        nodes_ready=max(sampler.nodes_ready.values(), default=None), pulls=pulls,
        pods_started=max(found["worker Ready"], found["chief Running"]),
        hosts_published=found["hosts published"], first_step=found["first step"],
    )


def timestamped_log(api_client, namespace: str, pod: str) -> str:
    try:
        return client.CoreV1Api(api_client).read_namespaced_pod_log(pod, namespace, timestamps=True)
    except client.ApiException as error:
        return f"(no log: {error.status} {error.reason})"


# --- Karpenter's nodes --------------------------------------------------------------


def node_class(name: str, boot_delay_s: float) -> dict:
    return {"apiVersion": f"{karpenter.NODE_CLASS_GROUP}/{karpenter.NODE_CLASS_VERSION}", "kind": "KWOKNodeClass",
            "metadata": {"name": name}, "spec": {"nodeRegistrationDelay": f"{boot_delay_s:g}s"}}


def node_pool(name: str) -> dict:
    """gpu-1x nodes labelled for the from-zero job's --node-selector, tainted for it alone."""
    return {
        "apiVersion": f"{karpenter.API_GROUP}/{karpenter.API_VERSION}", "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": {testbed.NODE_LABEL: name}},
                "spec": {
                    "nodeClassRef": {"group": karpenter.NODE_CLASS_GROUP, "kind": "KWOKNodeClass", "name": name},
                    "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                      "values": [INSTANCE_TYPE]}],
                    "taints": [{"key": KARPENTER_TAINT, "value": "true", "effect": "NoSchedule"}],
                    "expireAfter": "Never",
                },
            },
            "limits": {"nvidia.com/gpu": str(POOL_GPU_LIMIT)},
            # The benchmark deletes the job's nodes itself (release_nodes): none may go mid-start.
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"},
        },
    }


@contextmanager
def karpenter_pool(cluster, api_client, name: str, boot_delay_s: float) -> Iterator[str]:
    """Karpenter running, with a NodeClass and a NodePool of our own; all gone after."""
    cluster.start_karpenter(instance_types=karpenter.instance_types(boot_delay_s))
    custom = client.CustomObjectsApi(api_client)
    try:
        custom.create_cluster_custom_object(karpenter.NODE_CLASS_GROUP, karpenter.NODE_CLASS_VERSION,
                                            "kwoknodeclasses", node_class(name, boot_delay_s))
        custom.create_cluster_custom_object(karpenter.API_GROUP, karpenter.API_VERSION, "nodepools", node_pool(name))
        yield name
    finally:
        for group, version, plural in ((karpenter.API_GROUP, karpenter.API_VERSION, "nodepools"),
                                       (karpenter.NODE_CLASS_GROUP, karpenter.NODE_CLASS_VERSION, "kwoknodeclasses")):
            try:
                custom.delete_cluster_custom_object(group, version, plural, name)
            except client.ApiException as error:
                if error.status != 404:
                    raise
        cluster.stop_karpenter()  # it terminates every node Karpenter launched


def claims_and_nodes(api_client, pool: str) -> list[str]:
    selector = f"karpenter.sh/nodepool={pool}"
    claims = client.CustomObjectsApi(api_client).list_cluster_custom_object(
        karpenter.API_GROUP, karpenter.API_VERSION, "nodeclaims", label_selector=selector)["items"]
    nodes = client.CoreV1Api(api_client).list_node(label_selector=selector).items
    return [f"nodeclaim/{c['metadata']['name']}" for c in claims] + [f"node/{n.metadata.name}" for n in nodes]


def release_nodes(bench: Bench) -> None:
    """Delete the pool's NodeClaims, as consolidation would a little later, and wait until
    Karpenter has terminated them and their nodes."""
    custom = client.CustomObjectsApi(bench.api_client)
    for entry in claims_and_nodes(bench.api_client, bench.pool):
        kind, _, name = entry.partition("/")
        if kind == "nodeclaim":
            try:
                custom.delete_cluster_custom_object(karpenter.API_GROUP, karpenter.API_VERSION, "nodeclaims", name)
            except client.ApiException as error:
                if error.status != 404:
                    raise
    wait_pool_empty(bench)


def wait_pool_empty(bench: Bench) -> None:
    give_up_at = time.monotonic() + NODES_GONE_TIMEOUT_S
    while left := claims_and_nodes(bench.api_client, bench.pool):
        if time.monotonic() > give_up_at:
            raise TimeoutError(f"Karpenter's {', '.join(left)} not gone after {NODES_GONE_TIMEOUT_S:.0f}s")
        time.sleep(POLL_S)


# --- results ------------------------------------------------------------------------


def summarise(runs: dict[str, list[dict]]) -> dict:
    """Per arm: median and max of each part, of the total and of the manager's share."""
    summary = {}
    for arm, results in runs.items():
        if not results:
            continue
        values = {part: [r["parts"][part] for r in results] for part in startparts.PARTS}
        values["total_s"] = [r["total_s"] for r in results]
        values["manager_s"] = [r["manager_s"] for r in results]
        summary[arm] = {key: {"median": statistics.median(v), "max": max(v), "n": len(v)} for key, v in values.items()}
    return summary


def plot(summary: dict, pull_delay_s: float, boot_delay_s: float, path) -> None:
    """Left: every part, stacked in the order they happen. Right: the manager's own two, enlarged."""
    arms = list(summary)
    fig, (ax, zoom) = plt.subplots(1, 2, figsize=(12, 5), gridspec_kw={"width_ratios": [2.2, 1]})
    for axes, parts in ((ax, startparts.PARTS), (zoom, startparts.MANAGER_PARTS)):
        bottoms = [0.0] * len(arms)
        for part in parts:
            values = [summary[arm][part]["median"] for arm in arms]
            axes.bar(arms, values, bottom=bottoms, label=part, color=COLOURS[part],
                     hatch="//" if part in startparts.MANAGER_PARTS else None, edgecolor="white")
            bottoms = [b + v for b, v in zip(bottoms, values)]
        axes.set_ylim(0, max(bottoms) * 1.25)
    for i, arm in enumerate(arms):
        total, manager = summary[arm]["total_s"]["median"], summary[arm]["manager_s"]["median"]
        ax.annotate(f"{total:.1f} s", (i, total), ha="center", va="bottom", fontsize=9)
        zoom.annotate(f"{manager:.2f} s", (i, manager), ha="center", va="bottom", fontsize=9)
    ax.set_ylabel("seconds from submission (median of each part)")
    ax.set_title(f"Submission to first training step, 2 GPUs on 2 nodes\n"
                 f"(nodes boot in {boot_delay_s:g} s, the registry holds a pull {pull_delay_s:g} s)", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    zoom.set_ylabel("seconds (median)")
    zoom.set_title("Of which the manager's own", fontsize=10)
    zoom.legend(fontsize=8, loc="upper left")
    report.save_figure(fig, path)


def table(summary: dict) -> str:
    arms = list(summary)
    rows = [[part] + [cell(summary[arm][part]) for arm in arms] for part in startparts.PARTS]
    rows.append(["**submission -> first step**"] + [cell(summary[arm]["total_s"]) for arm in arms])
    rows.append(["**of which the manager's own**"] + [cell(summary[arm]["manager_s"]) for arm in arms])
    rows.append(["runs"] + [str(summary[arm]["total_s"]["n"]) for arm in arms])
    return report.markdown_table(["part (s), median (max)"] + arms, rows)


def cell(stats: dict) -> str:
    return f"{stats['median']:.2f} ({stats['max']:.2f})"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repetitions", type=int, default=REPETITIONS, help="runs per arm (default: %(default)s)")
    parser.add_argument("--pull-delay", type=float, default=PULL_DELAY_S, metavar="S",
                        help="how long the registry holds each node's pull, slow-pull arm (default: %(default)s)")
    parser.add_argument("--boot-delay", type=float, default=BOOT_DELAY_S, metavar="S",
                        help="how long a Karpenter node takes to boot, from-zero arm (default: %(default)s)")
    parser.add_argument("--budget", type=float, default=None, metavar="S",
                        help="start no repetition that would end more than S seconds after the start, "
                             "by the longest one so far (default: no limit)")
    return parser.parse_args(argv)


def repetitions(bench: Bench, args: argparse.Namespace, began: float) -> tuple[dict[str, list[dict]], list[dict]]:
    """The measured runs; saved after each repetition, so a run cut short keeps what it measured."""
    runs: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    failures: list[dict] = []
    longest = 0.0
    for repetition in range(args.repetitions):
        if args.budget is not None and time.monotonic() - began + longest > args.budget:
            print(f"repetition {repetition} and later skipped: the budget of {args.budget:.0f} s", flush=True)
            break
        repetition_began = time.monotonic()
        for arm in ARMS:  # interleaved, so drift hits every arm alike
            job = f"fs-{SLUGS[arm]}-r{repetition}"
            try:
                runs[arm].append(run_arm(bench, arm, job))
                print(f"{arm}: {runs[arm][-1]}", flush=True)
            except Exception as failure:  # one run on a shared machine: note it, clean up, go on with the others
                failures.append({"arm": arm, "job": job, "error": "".join(traceback.format_exception(failure))})
                print(f"{arm}: {job} FAILED: {failures[-1]['error']}", flush=True)
        longest = max(longest, time.monotonic() - repetition_began)
        save(args, runs, failures, time.monotonic() - began)
    return runs, failures


def save(args: argparse.Namespace, runs: dict[str, list[dict]], failures: list[dict], duration_s: float) -> dict:
    summary = summarise(runs)
    if summary:
        plot(summary, args.pull_delay, args.boot_delay, report.image_path(NAME))
    report.write_results(NAME, {
        "static_nodes": STATIC_NODES, "num_gpus": NUM_GPUS, "train_args": TRAIN_ARGS, "sizing": SIZING,
        "pull_delay_s": args.pull_delay, "boot_delay_s": args.boot_delay, "instance_type": INSTANCE_TYPE,
        "repetitions": args.repetitions, "duration_s": duration_s, "summary": summary, "runs": runs,
        "failures": failures,
    })
    return summary


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    # The manager's and the local cluster's records on the console: a failed run says why.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    began = time.monotonic()
    prefix = f"bfs{testbed.short_id()}"
    with testbed.local_cluster() as cluster:
        api_client = cluster.api_client()
        with testbed.node_pool(cluster, prefix, STATIC_NODES) as selector, \
                karpenter_pool(cluster, api_client, f"{prefix}-k", args.boot_delay) as pool, \
                testbed.namespace(api_client, "bench-first-step") as namespace:
            static_nodes = [f"{prefix}-{name}" for name in STATIC_NODES]
            cluster.set_pull_delays({IMAGE: args.pull_delay}, nodes=static_nodes)
            bench = Bench(cluster, api_client, namespace, selector, static_nodes, pool)
            try:
                print(f"warm-up (not measured): {run_arm(bench, WARM, 'fs-warmup')}", flush=True)
            except Exception as failure:  # the measured runs may still succeed; the failure is printed
                print(f"warm-up FAILED: {failure}", flush=True)
            runs, failures = repetitions(bench, args, began)
    duration_s = time.monotonic() - began
    summary = save(args, runs, failures, duration_s)
    print(table(summary))
    print(f"{sum(len(r) for r in runs.values())} runs, {len(failures)} failed, in {duration_s:.0f} s")


if __name__ == "__main__":
    main()
