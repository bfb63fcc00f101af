"""Many jobs at once on a large cluster: N managers booking together, ours and the code before.

Why: a cluster of 5,000 nodes runs many jobs, and they start together (a sweep of trials,
a burst of Kueue admissions). Before issue 46 every booking held the cluster-wide Lease
through a full inventory (some 4 s at 150,000 pods), so job starts went one at a time at
that pace. Now the survey of the cluster is taken outside the Lease, once for the
managers starting together, and the Lease is held only for the bookings' list, the plan
and the creates (docs/architecture.md, "The placement Lease").

Setup, in a cluster of its own (``bench/isolated.sh``): 5,000 Node objects (Ready, 8
GPUs) and pods bound to them by ``spec.nodeName``, in steps of ``POD_SERIES``, as
``bench.inventory_scale`` makes them; then the controller manager is stopped, so no node
is ever judged NotReady (no kubelet heartbeats them) and nothing else moves. A round is
N managers (``MANAGER_COUNTS``), each a process of its own (``bench/manager_probe.py``)
booking one job of 1-16 GPUs (seeded) on those nodes; each waits at a barrier once it
has imported and built its job, and all are released at once: what is timed is the
booking from that moment to the job's pods created, per manager, and for the round
until the last one. The same round runs with today's code and with the manager's code
of ``BEFORE_COMMIT`` (its tree extracted with ``git archive``), on the same cluster.
After each round every booked pod is checked against its node: the GPUs booked on a
node, with what the bench's pods hold there, must fit its 8 (double bookings: must be 0).
Then the round's objects are deleted. The API server's own pace for the same pods is
measured by a bare client creating them (``bare_pods_per_s``).

Run: ``bench/isolated.sh python -m bench.many_managers`` (root; long and CPU-heavy: the
managers share the machine's cores with the API server, as they would not on a real
cluster, which is why their start-up is left out of the timing). A run of some points
(``--pods``, ``--managers``, ``--approaches``) replaces those rounds in the results file
and keeps the others (``merged``): each round says when it was measured, and on which
commit.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import matplotlib.pyplot as plt
from kubernetes import client

from bench import inventory_scale as scale
from bench import report, testbed
from bench.inventory_probe import GPU_RESOURCE, admin_client
from distributetrain.core import names
from distributetrain.core.placement.inventory import pinned_node

NAME = "many-managers"
BEFORE_COMMIT = "57a26ab"  # main before issue 46: the full inventory under the Lease
APPROACHES = ("ours", "before")
POD_SERIES = (30_000, 150_000)
MANAGER_COUNTS = (1, 10, 50, 100)
GPUS_PER_JOB = (1, 16)
GPUS_USED_MAX = 4  # of each node's 8, by the bench's own pods: room for every round
ROUND_TIMEOUT_S = 1200.0  # a round still booking after this is cut short (reported)
READY_TIMEOUT_S = 600.0  # for every manager process to have imported and built its job
STOP_GRACE_S = 10.0  # for a straggler to exit on SIGTERM before SIGKILL
SEED = 46


def probe_tree(approach: str, before: Path) -> Path:
    """Where a manager of ``approach`` runs from: this checkout, or the extracted tree of
    ``BEFORE_COMMIT`` with this checkout's probe beside its own bench modules."""
    if approach == "ours":
        return report.REPO_ROOT
    shutil.copy(report.REPO_ROOT / "bench" / "manager_probe.py", before / "bench" / "manager_probe.py")
    return before


def start_managers(tree: Path, namespace: str, selector: str, jobs: dict[str, int],
                   uids: dict[str, str], logs: Path) -> dict[str, subprocess.Popen]:
    """A process per job, its stderr in ``logs/<job>.log``."""
    managers = {}
    for job, gpus in jobs.items():
        with open(logs / f"{job}.log", "w") as log:
            managers[job] = subprocess.Popen(
                [sys.executable, "-m", "bench.manager_probe", f"--namespace={namespace}", f"--job={job}",
                 f"--gpus={gpus}", f"--selector={selector}", f"--uid={uids[job]}"],
                cwd=tree, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True)
    return managers


def run_round(api_client, namespace: str, selector: str, tree: Path, jobs: dict[str, int], logs: Path) -> dict:
    """Every manager started, waited ready, released at once; their results."""
    core = client.CoreV1Api(api_client)
    uids = {job: testbed.stand_in_manager(api_client, namespace, job) for job in jobs}
    managers = start_managers(tree, namespace, selector, jobs, uids, logs)
    try:
        for job, process in managers.items():
            if process.stdout.readline().strip() != "ready":
                said = (logs / f"{job}.log").read_text()[-2000:]
                raise RuntimeError(f"manager {job} did not get ready (exit {process.poll()}):\n{said}")
        released = time.monotonic()
        for process in managers.values():
            process.stdin.write("\n")
            process.stdin.flush()
        results = []
        for job, process in managers.items():
            line = process.stdout.readline().strip()
            results.append(json.loads(line) if line else {
                "job": job, "failed": process.wait(ROUND_TIMEOUT_S), "said": (logs / f"{job}.log").read_text()[-1500:]})
        wall_s = time.monotonic() - released
    finally:
        stop_all(managers.values())
    return {"wall_s": wall_s, "managers": results, "double_bookings": double_bookings(core, namespace)}


def stop_all(processes) -> None:
    """SIGTERM, so each exits through its atexit (its kubeconfig's key files in /tmp
    deleted); SIGKILL for one still there after STOP_GRACE_S."""
    running = [process for process in processes if process.poll() is None]
    for process in running:
        process.terminate()
    give_up_at = time.monotonic() + STOP_GRACE_S
    for process in running:
        try:
            process.wait(max(0.1, give_up_at - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def double_bookings(core: client.CoreV1Api, namespace: str) -> dict[str, int]:
    """Nodes holding more GPUs than they have: the bench's pods and every booked pod."""
    held: Counter = Counter()
    for pod in json.loads(core.list_namespaced_pod(namespace, _preload_content=False).data)["items"]:
        node = pod["spec"].get("nodeName") or pinned_node(pod["spec"])
        limits = [c.get("resources", {}).get("limits", {}) for c in pod["spec"]["containers"]]
        held[node] += sum(int(limit.get(GPU_RESOURCE, 0)) for limit in limits)
    return {node: gpus for node, gpus in held.items() if node and gpus > scale.GPUS_PER_NODE}


def clean_round(api_client, namespace: str) -> None:
    """The round's objects: its managers' pods, Secrets, NetworkPolicies and the shared survey."""
    core = client.CoreV1Api(api_client)
    for role in (*names.BOOKING_ROLES, names.ROLE_MANAGER):
        core.delete_collection_namespaced_pod(namespace, label_selector=f"{names.LABEL_ROLE}={role}",
                                              grace_period_seconds=0)
    core.delete_collection_namespaced_secret(namespace, label_selector=f"{names.LABEL_APP}={names.APP}")
    client.NetworkingV1Api(api_client).delete_collection_namespaced_network_policy(
        namespace, label_selector=f"{names.LABEL_APP}={names.APP}")
    for shared in ("distributetrain-cluster-view", "distributetrain-booking-journal"):
        try:
            core.delete_namespaced_config_map(shared, "default")
        except client.ApiException as error:
            if error.status != 404:
                raise
    testbed.delete_pods(api_client, namespace, f"{names.LABEL_ROLE} in (worker,chief,manager)")


def bare_pods_per_s(api_client, namespace: str, prefix: str, count: int) -> float:
    """The API server's own pace: ``count`` pinned job-like pods created by 16 threads."""
    core = client.CoreV1Api(api_client)

    def create(index: int) -> None:
        body = {"metadata": {"name": f"bare-{index}", "labels": {names.LABEL_ROLE: names.ROLE_WORKER}},
                "spec": {"nodeName": scale.node_name(prefix, index % scale.NODES),
                         "containers": [{"name": "c", "image": "distributetrain/none:bench"}]}}
        core.create_namespaced_pod(namespace, body, _preload_content=False)

    started = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(create, range(count)))
    seconds = time.monotonic() - started
    testbed.delete_pods(api_client, namespace, f"{names.LABEL_ROLE}={names.ROLE_WORKER}")
    return count / seconds


def round_key(measured: dict) -> tuple[int, int, str]:
    return measured["pods"], measured["count"], measured["approach"]


def merged(previous: list[dict], measured: list[dict]) -> list[dict]:
    """The results file's rounds with this run's in place of those of the same pods,
    managers and code, in the series' order: a run of a few points updates them, and
    the rest of the published series stays."""
    replaced = {round_key(r) for r in measured}
    kept = [r for r in previous if round_key(r) not in replaced]
    return sorted(kept + measured, key=lambda r: (r["pods"], r["count"], APPROACHES.index(r["approach"])))


def complete(rounds: list[dict]) -> bool:
    """Whether every point of the series is measured."""
    return {round_key(r) for r in rounds} >= {(pods, count, approach) for pods in POD_SERIES
                                               for count in MANAGER_COUNTS for approach in APPROACHES}


def previous_rounds() -> list[dict]:
    """The rounds of the results file ([] if there is none, or it cannot be read)."""
    try:
        return json.loads(report.results_path(NAME).read_text())["rounds"]
    except (FileNotFoundError, ValueError, KeyError):
        return []


def commit_of(approach: str) -> str:
    """The commit a round's code is: the ``before`` arm's, or this checkout's HEAD (marked
    "+changes" when the manager's or the bench's code differs from it)."""
    if approach == "before":
        return BEFORE_COMMIT
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=report.REPO_ROOT, capture_output=True,
                          text=True, check=False).stdout.strip() or "unknown"
    # Not the results file: the run itself rewrites it after its first round.
    changed = subprocess.run(["git", "status", "--porcelain", "--", "distributetrain", "bench", ":!bench/results"],
                             cwd=report.REPO_ROOT, capture_output=True, text=True, check=False).stdout.strip()
    return f"{head}+changes" if changed else head


def summarise(rounds: list[dict]) -> list[dict]:
    rows = []
    for r in rounds:
        done = [m for m in r["managers"] if "seconds" in m]
        rows.append({
            "pods": r["pods"], "managers": r["count"], "approach": r["approach"], "wall_s": r["wall_s"],
            "placed": len(done), "starts_per_min": len(done) / r["wall_s"] * 60 if r["wall_s"] else 0,
            "median_s": statistics.median(m["seconds"] for m in done) if done else None,
            "peak_rss_mib": max((m["peak_rss_mib"] for m in done), default=None),
            "requests_median": statistics.median(m["requests"] for m in done) if done else None,
            "requests_max": max((m["requests"] for m in done), default=None),
            "double_bookings": len(r["double_bookings"]), "bare_pods_per_s": r.get("bare_pods_per_s")})
    return rows


def table(rows: list[dict]) -> str:
    header = ["pods", "managers", "code", "all placed in (s)", "placed", "starts/min", "median booking (s)",
              "peak RSS (MiB)", "requests (median / max)", "double bookings"]
    return report.markdown_table(header, [[
        f"{r['pods']:,}", r["managers"], r["approach"], f"{r['wall_s']:.1f}", f"{r['placed']}/{r['managers']}",
        f"{r['starts_per_min']:.0f}", f"{r['median_s']:.2f}" if r["median_s"] is not None else "-",
        f"{r['peak_rss_mib']:.0f}" if r["peak_rss_mib"] else "-",
        f"{r['requests_median']:.0f} / {r['requests_max']}" if r["requests_median"] is not None else "-",
        r["double_bookings"]] for r in rows])


def plot(rows: list[dict], path: Path) -> None:
    fig, axes = plt.subplots(1, len(POD_SERIES), figsize=(12, 4.4), squeeze=False)
    # Both series on the same decades, up to the slowest round's (the code before passes 1,000 s).
    top = 10 ** max(3, math.ceil(math.log10(max((r["wall_s"] for r in rows), default=1))))
    for ax, pods in zip(axes[0], POD_SERIES):
        for approach, colour in (("ours", "tab:blue"), ("before", "tab:red")):
            points = [(r["managers"], r["wall_s"]) for r in rows if r["pods"] == pods and r["approach"] == approach]
            if points:
                ax.plot(*zip(*points), "o-", color=colour, label=f"{approach}: until the last job's pods exist")
        ax.axhline(60, color="grey", linestyle=":", label="60 s")
        ax.set_xlabel("managers submitted at once")
        ax.set_xlim(0, max(MANAGER_COUNTS) * 1.05)  # the same axes for a series measured in part
        ax.set_ylabel("seconds")
        ax.set_yscale("log")
        ax.set_ylim(1, top)
        ax.set_title(f"{pods:,} pods on {scale.NODES:,} nodes")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    report.save_figure(fig, path)


def main() -> None:
    # Stopped (bench/isolated.sh passes its SIGTERM on), a round's managers are stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, nargs="*", default=list(POD_SERIES))
    parser.add_argument("--managers", type=int, nargs="*", default=list(MANAGER_COUNTS))
    parser.add_argument("--approaches", nargs="*", default=list(APPROACHES))
    parser.add_argument("--keep-logs", type=Path, help="a directory to keep every manager's log in, by round")
    args = parser.parse_args()
    rng = random.Random(SEED)
    prefix = f"bmm{testbed.short_id()}"
    selector = f"{testbed.NODE_LABEL}={prefix}"
    gpus_used = [rng.randint(0, GPUS_USED_MAX) for _ in range(scale.NODES)]
    rounds: list[dict] = []
    published = previous_rounds()

    def save() -> list[dict]:
        every = merged(published, rounds)
        report.write_results(NAME, {"complete": complete(every), "rounds": every, "rows": summarise(every)})
        return every

    with tempfile.TemporaryDirectory(prefix="distributetrain-bench-before-") as scratch, \
            testbed.local_cluster() as cluster:
        before = scale.extract_before(Path(scratch)) if "before" in args.approaches else Path(scratch)
        api_client = admin_client(cluster, pool_size=16)
        core = client.CoreV1Api(api_client)
        with testbed.namespace(api_client, "bench-many") as namespace:
            scale.wait_for_service_account(core, namespace)
            print(f"{scale.NODES:,} nodes in {scale.create_nodes(core, prefix):.0f} s", flush=True)
            cluster.stop_component("kube-controller-manager")  # no node is judged NotReady from here on
            created = 0
            for target in sorted(args.pods):
                scale.create_pods(core, namespace, prefix, created, target, gpus_used)
                created = target
                bare = bare_pods_per_s(api_client, namespace, prefix, 400)
                for count in args.managers:
                    jobs = {f"job-{count}-{i:03d}": rng.randint(*GPUS_PER_JOB) for i in range(count)}
                    for approach in args.approaches:
                        logs = (args.keep_logs or Path(scratch) / "logs") / f"{target}-{count}-{approach}"
                        logs.mkdir(parents=True)
                        result = run_round(api_client, namespace, selector, probe_tree(approach, before), jobs, logs)
                        rounds.append({"pods": target, "count": count, "approach": approach,
                                       "measured_at": report.now(), "commit": commit_of(approach),
                                       "bare_pods_per_s": bare, **result})
                        print(f"{target:,} pods, {count} managers, {approach}: {result['wall_s']:.1f} s, "
                              f"double bookings {result['double_bookings']}", flush=True)
                        save()  # each round kept as it ends: a run cut short still says what it measured
                        clean_round(api_client, namespace)
    rows = summarise(save())
    plot(rows, report.image_path(NAME))
    print(table(rows))


if __name__ == "__main__":
    main()
