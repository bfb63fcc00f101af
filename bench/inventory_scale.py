"""Inventory at scale: 5,000 nodes and up to 150,000 pods: ours, ours before issue 36, the seeds'.

Why: the manager lists every node and every pod to find free GPUs, under the placement
Lease. The seeds listed everything in one request, deserialised into client models. Ours
lets the server drop terminal pods and folds each pod into a ledger as it arrives, so
memory stays flat while the seeds' grows with the cluster; since issue 36 it asks for
pods in protobuf, in one unpaginated request served from the API server's watch cache,
reads only the fields the inventory needs (``kube/podwire``) as the list arrives, and
folds a pod in one pass.
*before* is the manager's code of ``BEFORE_COMMIT`` (JSON pages of 500, a pass per
resource), the 17 s this benchmark published for 150,000 pods, run in the same cluster
from that commit's tree (``git archive``) so the three are measured side by side.

Setup: in the local API server, 5,000 Node objects (status patched to Ready with 8
allocatable GPUs) and pods bound to them by ``spec.nodeName`` (nothing schedules or runs
them), in a namespace of their own, created by ``CREATE_THREADS`` threads. Pods are
added in steps (``POD_SERIES``); at each step the three inventories run, each in a fresh
process (``bench/inventory_probe.py``, which imports only what the manager imports),
timed, with the process's peak resident memory: a manager's peak memory. If creating the
next step would not fit in ``CREATE_BUDGET_S``, the series stops and the rest is
extrapolated linearly, as the report says.

No kubelet heartbeats these nodes, so after about a minute the node lifecycle controller
marks them NotReady and taints them; the inventories then refuse them (they are still
listed and folded in, so the cost is the same). The nodes get a zone of their own so the
controller's disruption handling never touches real nodes, and the pods tolerate every
taint so none is evicted. After each step the cluster settles for ``SETTLE_S`` before the
inventories run. In a cluster of its own (``bench/isolated.sh``) the pods go with the
cluster and only the nodes are deleted (one collection, before ``down`` would delete them
one by one as orphans); in a shared cluster everything is deleted afterwards.

Run: ``bench/isolated.sh python -m bench.inventory_scale`` (root; up to about 40
minutes and CPU-heavy: run it when nobody else is testing). In the isolated cluster the
inventories see only these objects.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

import matplotlib.pyplot as plt
from kubernetes import client

from bench import report, testbed
from bench.inventory_probe import GPU_RESOURCE, admin_client
from distributetrain.core import errors
from distributetrain.core.clock import RealClock
from distributetrain.kube.calls import call

CLOCK = RealClock()  # this benchmark's process: the retries' delays and deadlines
NODES = 5_000
GPUS_PER_NODE = 8
POD_SERIES = (10_000, 30_000, 60_000, 150_000)
TARGET_PODS = POD_SERIES[-1]
CREATE_THREADS = 12
CREATE_BUDGET_S = 20 * 60  # creating pods beyond this is replaced by extrapolation
REPETITIONS = 3  # inventories per approach and step, each in a fresh process
# The manager's inventory as issue 36 found it (docs/benchmarks.md §4 before that issue).
BEFORE_COMMIT = "68618a7"
APPROACHES = ("ours", "before", "seeds")
DELETE_CHUNKS = 30  # pods carry a chunk label so deletion runs as parallel collections
MEASURE_TIMEOUT_S = 900
# After a step's pods are created the controllers work through them for a while (the node
# lifecycle controller's taints, the taint-eviction controller over every pod): what is
# measured is the inventory of a settled cluster, not that churn beside it.
SETTLE_S = 60
DELETE_TIMEOUT_S = 900
SERVICE_ACCOUNT_WAIT_S = 60
CHUNK_LABEL = "distributetrain.bench/chunk"
ZONE_LABEL = "topology.kubernetes.io/zone"
SEED = 20_240_808
NAME = "inventory-scale"


def node_name(prefix: str, index: int) -> str:
    return f"{prefix}-{index:05d}"


def node_body(prefix: str, index: int) -> dict:
    name = node_name(prefix, index)
    return {"metadata": {"name": name, "labels": {
        "kubernetes.io/hostname": name, testbed.NODE_LABEL: prefix, ZONE_LABEL: f"bench-{prefix}"}}}


def node_status(now: str) -> dict:
    resources = {GPU_RESOURCE: str(GPUS_PER_NODE), "cpu": "64", "memory": "512Gi", "pods": "110"}
    return {"status": {"capacity": resources, "allocatable": resources, "conditions": [{
        "type": "Ready", "status": "True", "reason": "KubeletReady", "message": "benchmark node",
        "lastHeartbeatTime": now, "lastTransitionTime": now}]}}


def pod_body(prefix: str, index: int, gpus_used: list[int]) -> dict:
    """Pod ``index`` sits on node ``index % NODES``; a node's first pods hold its used GPUs."""
    node = index % NODES
    container = {"name": "c", "image": "distributetrain/none:bench"}
    if index // NODES < gpus_used[node]:
        container["resources"] = {"limits": {GPU_RESOURCE: "1"}}
    return {"metadata": {"name": f"p-{index:06d}", "labels": {CHUNK_LABEL: str(index % DELETE_CHUNKS)}},
            "spec": {"nodeName": node_name(prefix, node), "containers": [container],
                     "tolerations": [{"operator": "Exists"}], "automountServiceAccountToken": False,
                     "terminationGracePeriodSeconds": 0, "enableServiceLinks": False}}


def create_all(work, count: int, what: str) -> float:
    """Run ``work(i)`` for i in range(count) on the thread pool; return the seconds taken."""
    started = time.monotonic()
    done = 0
    with ThreadPoolExecutor(CREATE_THREADS) as pool:
        for _ in pool.map(work, range(count), chunksize=64):
            done += 1
            if done % 10_000 == 0:
                print(f"  {what}: {done:,}/{count:,} in {time.monotonic() - started:.0f} s", flush=True)
    return time.monotonic() - started


def idempotent(operation) -> None:
    try:
        call(operation, CLOCK)
    except errors.AlreadyExists:
        pass  # a retried create that had gone through


def create_nodes(core: client.CoreV1Api, prefix: str) -> float:
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    def work(index: int) -> None:
        idempotent(lambda: core.create_node(node_body(prefix, index), _preload_content=False))
        call(lambda: core.patch_node_status(node_name(prefix, index), node_status(now), _preload_content=False), CLOCK)

    return create_all(work, NODES, "nodes")


def create_pods(core: client.CoreV1Api, namespace: str, prefix: str, first: int, last: int,
                gpus_used: list[int]) -> float:
    def work(offset: int) -> None:
        body = pod_body(prefix, first + offset, gpus_used)
        idempotent(lambda: core.create_namespaced_pod(namespace, body, _preload_content=False))

    return create_all(work, last - first, "pods")


def wait_for_service_account(core: client.CoreV1Api, namespace: str) -> None:
    """Pod admission needs the namespace's default ServiceAccount (made by a controller)."""
    give_up_at = time.monotonic() + SERVICE_ACCOUNT_WAIT_S
    while not core.list_namespaced_service_account(namespace, field_selector="metadata.name=default").items:
        if time.monotonic() > give_up_at:
            raise TimeoutError(f"no default ServiceAccount in {namespace}")
        time.sleep(testbed.POLL_S)


def delete_everything(core: client.CoreV1Api, namespace: str, prefix: str, pods: bool = True) -> float:
    """The pods first, unless they go with the cluster (all at once, grace 0: no kubelet
    would confirm), then the nodes, as one collection each."""
    started = time.monotonic()
    if pods:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda chunk: delete_pods(core, namespace, chunk), range(DELETE_CHUNKS)))
    call(lambda: core.delete_collection_node(label_selector=f"{testbed.NODE_LABEL}={prefix}",
                                            _request_timeout=DELETE_TIMEOUT_S, _preload_content=False), CLOCK)
    return time.monotonic() - started


def delete_pods(core: client.CoreV1Api, namespace: str, chunk: int) -> None:
    call(lambda: core.delete_collection_namespaced_pod(
        namespace, label_selector=f"{CHUNK_LABEL}={chunk}", grace_period_seconds=0,
        _request_timeout=DELETE_TIMEOUT_S, _preload_content=False), CLOCK)


def extract_before(into: Path) -> Path:
    """The tree of ``BEFORE_COMMIT`` (its ``distributetrain`` and ``bench``) under ``into``:
    run from there, its probe imports that commit's manager code, not the checkout's."""
    archive = subprocess.run(["git", "archive", "--format=tar", BEFORE_COMMIT, "distributetrain", "bench"],
                             cwd=report.REPO_ROOT, capture_output=True, check=False)
    if archive.returncode != 0:
        raise RuntimeError(f"git archive {BEFORE_COMMIT} failed (a shallow clone?): {archive.stderr.decode()[-500:]}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


def measure(approach: str, namespace: str, selector: str, before_tree: Path) -> dict:
    """One inventory in a fresh process; *before* runs its own commit's probe from its tree
    (``python -m`` puts the working directory first on the import path)."""
    probe_approach, cwd = ("ours", before_tree) if approach == "before" else (approach, report.REPO_ROOT)
    completed = subprocess.run(
        [sys.executable, "-m", "bench.inventory_probe", probe_approach, f"--namespace={namespace}",
         f"--selector={selector}"],
        capture_output=True, text=True, timeout=MEASURE_TIMEOUT_S, cwd=cwd,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"{approach} inventory failed ({completed.returncode}):\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


# --- the series, the fit and the report ------------------------------------------------

def linear_fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares (slope, intercept)."""
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / sum((x - mean_x) ** 2 for x in xs)
    return slope, mean_y - slope * mean_x


def summarise(steps: list[dict]) -> dict:
    summary = {"steps": []}
    for step in steps:
        row = {"pods": step["pods"], "create_s": step["create_s"]}
        for approach in APPROACHES:
            runs = step[approach]
            row[approach] = {key: statistics.median(r[key] for r in runs)
                             for key in ("seconds", "baseline_rss_mib", "peak_rss_mib", "extra_rss_mib")}
            row[approach]["max_seconds"] = max(r["seconds"] for r in runs)
            if approach != "seeds":
                row[approach]["api_requests"] = runs[0]["api_requests"]
        summary["steps"].append(row)
    measured = [s["pods"] for s in summary["steps"]]
    if TARGET_PODS not in measured and len(measured) >= 2:
        summary["extrapolated_to"] = TARGET_PODS
        for approach in APPROACHES:
            summary[f"{approach}_extrapolated"] = {
                key: sum(c * v for c, v in zip(linear_fit(measured, [s[approach][key] for s in summary["steps"]]),
                                               (TARGET_PODS, 1)))
                for key in ("seconds", "peak_rss_mib")
            }
    return summary


TITLES = {
    "ours": ("tab:blue", "ours (one protobuf list read as it arrives, cut to the inventory's fields)"),
    "before": ("tab:green", f"ours before issue 36 ({BEFORE_COMMIT}: JSON pages of 500)"),
    "seeds": ("tab:red", "seeds (one list, client models)"),
}


def plot(summary: dict, path) -> None:
    pods = [s["pods"] for s in summary["steps"]]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4))
    for ax, key, label in ((axes[0], "seconds", "inventory time (s)"),
                           (axes[1], "peak_rss_mib", "peak memory of the process (MiB)")):
        for approach in APPROACHES:
            colour, title = TITLES[approach]
            ax.plot(pods, [s[approach][key] for s in summary["steps"]], "o-", color=colour, label=title)
            extrapolated = summary.get(f"{approach}_extrapolated")
            if extrapolated:
                ax.plot([pods[-1], TARGET_PODS], [summary["steps"][-1][approach][key], extrapolated[key]],
                        "--", color=colour, alpha=0.6, label=f"{approach}, extrapolated")
        ax.set_xlabel(f"pods in the cluster (on {NODES:,} nodes)")
        ax.set_ylabel(label)
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"Inventory of a large cluster, median of {REPETITIONS} fresh processes", fontsize=11)
    report.save_figure(fig, path)


def table(summary: dict) -> str:
    header = ["pods", "ours: time (s)", "ours: peak RSS (MiB)", "ours: API requests",
              "before: time (s)", "before: peak RSS (MiB)", "before: API requests",
              "seeds: time (s)", "seeds: peak RSS (MiB)", "time to create the step (s)"]
    rows = [[f"{s['pods']:,}",
             *(cell for approach in ("ours", "before") for cell in (
                 f"{s[approach]['seconds']:.2f}", f"{s[approach]['peak_rss_mib']:.0f}", s[approach]["api_requests"])),
             f"{s['seeds']['seconds']:.2f}", f"{s['seeds']['peak_rss_mib']:.0f}", f"{s['create_s']:.0f}"]
            for s in summary["steps"]]
    if "extrapolated_to" in summary:
        rows.append([f"{TARGET_PODS:,} (extrapolated)",
                     *(cell for approach in ("ours", "before") for cell in (
                         f"{summary[approach + '_extrapolated']['seconds']:.1f}",
                         f"{summary[approach + '_extrapolated']['peak_rss_mib']:.0f}", "")),
                     f"{summary['seeds_extrapolated']['seconds']:.1f}",
                     f"{summary['seeds_extrapolated']['peak_rss_mib']:.0f}", ""])
    return report.markdown_table(header, rows)


def run_series() -> None:
    prefix = f"binv{testbed.short_id()}"
    selector = f"{testbed.NODE_LABEL}={prefix}"
    rng = random.Random(SEED)
    gpus_used = [rng.randint(0, GPUS_PER_NODE) for _ in range(NODES)]
    # In a cluster of its own the pods go with the cluster: deleting 150,000 of them would
    # take minutes for nothing.
    isolated = os.environ.get("DT_BENCH_ISOLATED") == "1"
    steps: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="distributetrain-bench-before-") as scratch, \
            testbed.local_cluster() as cluster:
        before_tree = extract_before(Path(scratch))
        api_client = admin_client(cluster)
        core = client.CoreV1Api(api_client)
        with testbed.namespace(api_client, "bench-inventory") as namespace:
            try:
                wait_for_service_account(core, namespace)
                nodes_s = create_nodes(core, prefix)
                print(f"{NODES:,} nodes in {nodes_s:.0f} s", flush=True)
                created, budget_left = 0, CREATE_BUDGET_S
                for target in POD_SERIES:
                    rate = created / (CREATE_BUDGET_S - budget_left) if created else None
                    if rate and (target - created) / rate > budget_left:
                        print(f"creating {target:,} pods would exceed the budget; extrapolating", flush=True)
                        break
                    create_s = create_pods(core, namespace, prefix, created, target, gpus_used)
                    budget_left -= create_s
                    created = target
                    time.sleep(SETTLE_S)
                    step = {"pods": target, "create_s": create_s, **{approach: [] for approach in APPROACHES}}
                    for _ in range(REPETITIONS):
                        for approach in APPROACHES:
                            step[approach].append(measure(approach, namespace, selector, before_tree))
                    print(f"{target:,} pods: {step}", flush=True)
                    steps.append(step)
            finally:
                delete_s = delete_everything(core, namespace, prefix, pods=not isolated)
                print(f"deleted {'the nodes' if isolated else 'everything'} in {delete_s:.0f} s", flush=True)
    summary = summarise(steps)
    plot(summary, report.image_path(NAME))
    report.write_results(NAME, {
        "nodes": NODES, "node_creation_s": nodes_s, "create_threads": CREATE_THREADS,
        "pods_per_s": created / (CREATE_BUDGET_S - budget_left), "delete_s": delete_s,
        "repetitions": REPETITIONS, "before_commit": BEFORE_COMMIT, "seed": SEED, "summary": summary, "raw": steps,
    })
    print(table(summary))


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    run_series()


if __name__ == "__main__":
    main()
