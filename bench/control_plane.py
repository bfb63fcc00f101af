"""What the manager itself adds to a job's wall time, and how many API requests it makes.

Why: the seeds slept 30 s before creating the chief and polled every 20 s for its end
(DESIGN.md); the port watches instead. The targets: under 1 s of manager overhead at
64 workers beyond the pods' own start-up, and teardown begun within 1 s of the chief's
exit. Everything between is the cluster's (scheduling, the node agent starting pods)
or the training's (horovodrun), and is reported only for context.

Setup: 65 one-GPU nodes of our own on the local cluster; a job of ``W`` workers asks for
``W + 1`` GPUs, so the plan is ``W`` workers and the chief, one per node. The manager runs
in this process (``lifecycle.execute``, the code ``manager.sh`` runs in two processes),
with a stand-in manager pod that owns the job's objects and carries its annotations,
so every API request of the real manager happens. The training script exits at once.

Intervals, from the manager's log records and a watch on the namespace's pods:
- start -> workers created: manager start to the last worker's create request returned
  (pre-flight dry runs, Lease, inventory, plan, Secret, workers);
- last worker Ready -> chief created;
- chief exit -> teardown begun / done: the chief's terminal phase seen on the watch, to
  the manager's first delete, and to its last teardown request;
and, for context, worker start-up (last worker created -> last Ready, the node agent's
work) and chief run (created -> exit: SSH checks and horovodrun).

Run: ``bench/isolated.sh python -m bench.control_plane`` (root; about 20 minutes).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

import matplotlib.pyplot as plt

from bench import report, testbed
from distributetrain import lifecycle, names
from distributetrain.kube import Kube

WORKER_COUNTS = (1, 4, 16, 64)
REPETITIONS = 3
RUN_ATTEMPTS = 3  # a run whose pod watch broke (API server restarted by a test) is redone
IMPORT_REPETITIONS = 5
JOB_DEADLINE_S = 600  # a job that hangs fails instead of stalling the benchmark
OVERHEAD_TARGET_S = 1.0
SEEDS_CHIEF_SLEEP_S = 30.0  # the seeds' fixed wait before creating the chief (DESIGN.md)
SEEDS_POLL_S = 20.0  # the seeds' polling period for the chief's end
NOOP = '"""Stand-in training script: the benchmark measures everything around it."""\n'
NAME = "control-plane"


def manager_settings(job: str, namespace: str, owner_uid: str, workers: int, selector: str, claim: str):
    return testbed.job_settings(
        namespace, f"--job-name={job}", f"--owner-uid={owner_uid}", f"--num-gpus={workers + 1}",
        "--image=distributetrain/base:0.1.0", f"--node-selector={selector}",
        f"--pvc={claim}:{testbed.SCRIPT_MOUNT}", f"--filename={testbed.SCRIPT_MOUNT}/{testbed.NOOP_SCRIPT}",
        f"--active-deadline={JOB_DEADLINE_S}s",
    )


def run_job(api_client, namespace: str, job: str, workers: int, selector: str, claim: str) -> dict:
    owner_uid = testbed.stand_in_manager(api_client, namespace, job)
    settings = manager_settings(job, namespace, owner_uid, workers, selector, claim)
    kube = Kube(api_client)
    timeline = testbed.PodTimeline(api_client, namespace).start()
    with testbed.LogClock() as clock:
        started = time.time()
        exit_code = lifecycle.execute(kube, settings, "run")
        ended = time.time()
    time.sleep(testbed.WATCH_WINDOW_S)  # let the watch see the last deletions
    timeline.stop()
    chief_log = testbed.pod_log(api_client, namespace, names.chief_name(job))
    testbed.delete_pods(api_client, namespace)  # the stand-in, and with it the kept chief
    if exit_code != 0:
        raise RuntimeError(f"job {job} exited with {exit_code}; chief's log ends:\n{chief_log[-3000:]}")

    worker_names = [names.worker_name(job, i) for i in range(workers)]
    chief = names.chief_name(job)
    pods = timeline.pods
    workers_created = max(clock.first(f"created Pod [{namespace}/{w}]") for w in worker_names)
    last_ready = max(pods[w].ready for w in worker_names)
    chief_created = clock.first(f"created Pod [{namespace}/{chief}]")
    chief_exit = pods[chief].finished
    teardown_begun = clock.first("deleted Pod")
    teardown_done = clock.last("torn down")
    workers_gone = max(pods[w].deleted or float("nan") for w in worker_names)
    planned = clock.first("; plan ")
    deletes = [t for t, message in clock.records if message.startswith("deleted Pod")]
    result = {
        "start_to_workers_created_s": workers_created - started,
        "start_to_plan_s": planned - started,
        "plan_to_workers_created_s": workers_created - planned,
        # Mean time per pod create / delete request: the manager issues them one by one.
        "create_request_s": (workers_created - clock.first(f"created Pod [{namespace}/{worker_names[0]}]"))
        / max(1, workers - 1),
        "delete_request_s": (deletes[-1] - deletes[0]) / max(1, len(deletes) - 1),
        "worker_startup_s": last_ready - workers_created,
        "ready_to_chief_created_s": chief_created - last_ready,
        "chief_run_s": chief_exit - chief_created,
        "exit_to_teardown_begun_s": teardown_begun - chief_exit,
        "exit_to_teardown_done_s": teardown_done - chief_exit,
        "exit_to_workers_gone_s": workers_gone - chief_exit,
        "manager_return_after_exit_s": ended - chief_exit,
        "api_requests": kube.requests,
        "disturbed": timeline.disturbed,
    }
    result["manager_overhead_s"] = (result["start_to_workers_created_s"] + result["ready_to_chief_created_s"]
                                    + result["exit_to_teardown_done_s"])
    return result


def import_time_s() -> float:
    """Interpreter start and imports of one manager phase (``manager.sh`` runs two)."""
    times = []
    for _ in range(IMPORT_REPETITIONS):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import distributetrain.cli, distributetrain.lifecycle, "
                        "distributetrain.kube"], check=True, cwd=report.REPO_ROOT)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def summarise(runs: dict[int, list[dict]]) -> dict:
    return {
        str(workers): {key: {"median": statistics.median(r[key] for r in results),
                             "max": max(r[key] for r in results)}
                       for key in results[0]}
        for workers, results in runs.items()
    }


OVERHEAD_PARTS = (
    ("start_to_workers_created_s", "start -> workers created", "tab:blue"),
    ("ready_to_chief_created_s", "last worker Ready -> chief created", "tab:orange"),
    ("exit_to_teardown_done_s", "chief exit -> teardown done", "tab:green"),
)


def plot(summary: dict, path) -> None:
    counts = [str(w) for w in WORKER_COUNTS]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    ax = axes[0]
    bottoms = [0.0] * len(counts)
    for key, label, colour in OVERHEAD_PARTS:
        values = [summary[c][key]["median"] for c in counts]
        ax.bar(counts, values, bottom=bottoms, label=label, color=colour)
        bottoms = [b + v for b, v in zip(bottoms, values)]
    ax.axhline(OVERHEAD_TARGET_S, color="black", linewidth=1, label=f"target {OVERHEAD_TARGET_S:g} s")
    ax.set_xlabel("workers")
    ax.set_ylabel("seconds (median)")
    ax.set_title("Manager overhead")
    ax.legend(fontsize=8)

    ax = axes[1]
    for key, label, style in (
        ("worker_startup_s", "worker start-up (node agent)", "o-"),
        ("chief_run_s", "chief run (SSH checks + horovodrun)", "s-"),
        ("exit_to_teardown_begun_s", "chief exit -> teardown begun", "^-"),
        ("exit_to_workers_gone_s", "chief exit -> workers gone", "v-"),
    ):
        ax.plot(counts, [summary[c][key]["median"] for c in counts], style, label=label)
    ax.set_xlabel("workers")
    ax.set_ylabel("seconds (median)")
    ax.set_yscale("log")
    ax.set_title("Around the manager, for context")
    ax.legend(fontsize=8)

    ax = axes[2]
    ax.bar(counts, [summary[c]["api_requests"]["median"] for c in counts], color="tab:purple")
    ax.set_xlabel("workers")
    ax.set_ylabel("API requests per job")
    ax.set_title("Manager API requests")
    report.save_figure(fig, path)


def table(summary: dict) -> str:
    columns = (
        ("start_to_workers_created_s", "start -> workers created"),
        ("ready_to_chief_created_s", "last Ready -> chief created"),
        ("exit_to_teardown_begun_s", "chief exit -> teardown begun"),
        ("exit_to_teardown_done_s", "chief exit -> teardown done"),
        ("manager_overhead_s", "manager overhead"),
        ("start_to_plan_s", "of which start -> plan"),
        ("create_request_s", "per pod create"),
        ("delete_request_s", "per pod delete"),
        ("worker_startup_s", "worker start-up (context)"),
        ("chief_run_s", "chief run (context)"),
        ("api_requests", "API requests"),
    )
    header = ["workers"] + [f"{label} (s)" if key.endswith("_s") else label for key, label in columns]
    rows = []
    for workers in WORKER_COUNTS:
        cells = summary[str(workers)]
        rows.append([workers] + [
            f"{cells[key]['median']:.0f}" if key == "api_requests"
            else f"{cells[key]['median']:.2f} (max {cells[key]['max']:.2f})"
            for key, _ in columns
        ])
    return report.markdown_table(header, rows)


def main() -> None:
    prefix = f"bcp{testbed.short_id()}"
    nodes = {f"{i:02d}": 1 for i in range(max(WORKER_COUNTS) + 1)}
    runs: dict[int, list[dict]] = {w: [] for w in WORKER_COUNTS}
    with testbed.local_cluster() as cluster:
        api_client = cluster.api_client()
        with testbed.node_pool(cluster, prefix, nodes) as selector, \
                testbed.namespace(api_client, "bench-control-plane") as namespace, \
                testbed.script_volume(api_client, namespace, {testbed.NOOP_SCRIPT: NOOP}) as claim:
            # The first pods on fresh nodes start slower (agent caches); not measured.
            run_job(api_client, namespace, "cp-warmup", 1, selector, claim)
            for repetition in range(REPETITIONS):
                for workers in WORKER_COUNTS:  # interleaved, so drift hits every size alike
                    for attempt in range(RUN_ATTEMPTS):
                        job = f"cp-{workers}-r{repetition}-a{attempt}"
                        result = run_job(api_client, namespace, job, workers, selector, claim)
                        print(f"{job}: {result}", flush=True)
                        if not result.pop("disturbed"):
                            break
                    runs[workers].append(result)
    summary = summarise(runs)
    import_s = import_time_s()
    plot(summary, report.image_path(NAME))
    report.write_results(NAME, {
        "worker_counts": WORKER_COUNTS, "repetitions": REPETITIONS, "summary": summary,
        "runs": {str(w): r for w, r in runs.items()}, "phase_import_s": import_s,
        "seeds_reference": {"chief_sleep_s": SEEDS_CHIEF_SLEEP_S, "poll_s": SEEDS_POLL_S},
    })
    print(table(summary))
    print(f"interpreter start + imports of one manager phase: {import_s:.2f} s (manager.sh runs two)")


if __name__ == "__main__":
    main()
