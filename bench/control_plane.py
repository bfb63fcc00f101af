"""What the manager itself adds to a job's wall time, and how many API requests it makes.

Why: the seeds slept 30 s before creating the chief and polled every 20 s for its end
(DESIGN.md); the port watches instead. The targets: under 1 s of manager overhead at
64 workers beyond the pods' own start-up, and teardown begun within 1 s of the chief's
exit. Everything between is the cluster's (scheduling, the kubelets starting pods)
or the training's (horovodrun), and is reported only for context.

Setup: 65 one-GPU nodes of our own on the local cluster; a job of ``W`` workers asks for
``W + 1`` GPUs, so the plan is ``W`` workers and the chief, one per node. The manager runs
in this process (``lifecycle.execute``, the code ``manager.sh`` runs in two processes),
with a stand-in manager pod that owns the job's objects and carries its annotations,
so every API request of the real manager happens. The training script exits at once.

Intervals, from the manager's log records and a watch on the namespace's pods:
- start -> workers created: manager start to the last worker's create request returned
  (pre-flight dry runs, Lease, inventory, plan, Secret, workers);
- last worker Ready -> hosts published: the chief, created with the workers (holding
  its GPUs from the start), asks the manager for their addresses, which it publishes
  once every worker is Ready;
- chief exit -> teardown begun / done: the chief's terminal phase seen on the watch, to
  the start of the manager's first pod delete request (since issue 36 one
  deletecollection; before, the first of one delete per pod, taken when it returned),
  and to its last teardown request;
and, for context, worker start-up (last worker created -> last Ready, the kubelets'
work) and chief run (hosts published -> exit: SSH checks and horovodrun).

After each run, the same creates and deletes by a plain client loop (``bare_client``):
``bare_create_s`` and ``bare_delete_s``, and ``manager_over_bare`` = (start -> workers
created + chief exit -> teardown done) / (bare creates + bare deletes), the ratio
section 3 publishes.

Each run also keeps a trace: every request's latency (``TracedKube``), and who had the
CPU while the workers were created and while the job was torn down (``CpuAccount``).

Run: ``bench/isolated.sh python -m bench.control_plane`` (root; 30-40 minutes on a loaded
2-core machine). ``--counts 64 --repetitions 1 --trace FILE`` is a diagnostic run that
leaves the published results alone.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import matplotlib.pyplot as plt

from bench import bare_client, report, testbed
from distributetrain.core import names
from distributetrain.core.clock import RealClock
from distributetrain.kube.client import Kube
from distributetrain.kube.connection import load_api_client
from distributetrain.manager.job import lifecycle

WORKER_COUNTS = (1, 4, 16, 64)
REPETITIONS = 3
# A run whose pod watch broke (API server restarted by a test), or whose job failed (its
# deadline passed under other sessions' load), is redone.
RUN_ATTEMPTS = 3
IMPORT_REPETITIONS = 5
JOB_DEADLINE_S = 600  # a job that hangs fails instead of stalling the benchmark
TEARDOWN_DELETES = ("delete pods", "delete Pod")  # TracedKube's kinds of teardown's pod deletes
OVERHEAD_TARGET_S = 1.0
SEEDS_CHIEF_SLEEP_S = 30.0  # the seeds' fixed wait before creating the chief (DESIGN.md)
SEEDS_POLL_S = 20.0  # the seeds' polling period for the chief's end
NOOP = '"""Stand-in training script: the benchmark measures everything around it."""\n'
NAME = "control-plane"
CPU_SAMPLE_S = 0.25  # /proc sampling period of the CPU account (cheap: a handful of files)
# Long-lived processes whose CPU is accounted separately; everything else (the
# containers themselves, other engineers' tests) is "other".
CPU_GROUPS = {"kube-apiserver": "apiserver", "etcd": "etcd", "kube-scheduler": "scheduler",
              "kube-controller-manager": "controller-manager", "kubelet": "kubelets",
              "containerd": "containerd (and its shims)"}


class TracedKube(Kube):
    """The manager's Kube, timing each request it makes: (what, start, end), wall clock."""

    def __init__(self, api_client):
        super().__init__(api_client, RealClock())
        self.calls: list[tuple[str, float, float]] = []

    def _call(self, operation, what="API call"):
        start = time.time()
        try:
            return super()._call(operation, what)
        finally:
            self.calls.append((what.split(" [")[0], start, time.time()))

    def latencies(self, what: str, since: float = 0.0) -> list[float]:
        return [end - start for kind, start, end in self.calls if kind == what and start >= since]


class CpuAccount:
    """Samples /proc: the machine's busy CPU, and the control plane's and nodes' share."""

    def __init__(self):
        self.samples: list[tuple[float, float, dict[str, float]]] = []  # (time, busy s, group -> s)
        self._pids = {pid: group for pid, group in self._find_groups().items()}
        self._pids[os.getpid()] = "benchmark + manager"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _find_groups() -> dict[int, str]:
        found = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                for needle, group in CPU_GROUPS.items():
                    if needle in cmdline.split(" --")[0]:
                        found[int(entry.name)] = group
        return found

    def _sample(self) -> tuple[float, float, dict[str, float]]:
        ticks = os.sysconf("SC_CLK_TCK")
        fields_ = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        busy = (sum(fields_) - fields_[3] - fields_[4]) / ticks  # all but idle and iowait
        groups: dict[str, float] = {}
        for pid, group in self._pids.items():
            try:
                stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            used = int(stat[11]) + int(stat[12])  # utime, stime
            groups[group] = groups.get(group, 0.0) + used / ticks
        return time.time(), busy, groups

    def _run(self) -> None:
        while not self._stop.wait(CPU_SAMPLE_S):
            self.samples.append(self._sample())

    def __enter__(self) -> CpuAccount:
        self.samples.append(self._sample())
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append(self._sample())

    def between(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds per group between the samples nearest ``start`` and ``end`` (2 cores: up to 2 s/s)."""
        first = max((s for s in self.samples if s[0] <= start), key=lambda s: s[0], default=self.samples[0])
        last = min((s for s in self.samples if s[0] >= end), key=lambda s: s[0], default=self.samples[-1])
        span = max(last[0] - first[0], 1e-9)
        used = {group: last[2].get(group, 0.0) - first[2].get(group, 0.0) for group in last[2]}
        used["other"] = (last[1] - first[1]) - sum(used.values())
        return {"span_s": span, "busy_cores": (last[1] - first[1]) / span,
                **{f"{group}_cores": value / span for group, value in used.items()}}


def manager_settings(job: str, namespace: str, owner_uid: str, workers: int, selector: str, claim: str):
    return testbed.job_settings(
        namespace, f"--job-name={job}", f"--owner-uid={owner_uid}", f"--num-gpus={workers + 1}",
        "--image=distributetrain/base:0.1.0", f"--node-selector={selector}",
        f"--pvc={claim}:{testbed.SCRIPT_MOUNT}", f"--filename={testbed.SCRIPT_MOUNT}/{testbed.NOOP_SCRIPT}",
        f"--active-deadline={JOB_DEADLINE_S}s",
    )


class TrainingFailed(RuntimeError):
    """The job failed (its chief, or its --active-deadline on a machine loaded by other sessions): redo the run."""


def run_job(cluster, api_client, namespace: str, job: str, workers: int, selector: str, claim: str) -> dict:
    owner_uid = testbed.stand_in_manager(api_client, namespace, job)
    settings = manager_settings(job, namespace, owner_uid, workers, selector, claim)
    # The manager's own API client, as manager.sh builds it (timeouts, no urllib3 retries,
    # its connection pool), not the benchmark's.
    kube = TracedKube(load_api_client(kubeconfig=str(cluster.kubeconfig)))
    timeline = testbed.PodTimeline(api_client, namespace).start()
    with testbed.LogClock() as clock, CpuAccount() as cpu:
        started = time.time()
        exit_code = lifecycle.execute(kube, settings, "run", kube.clock)
        ended = time.time()
    time.sleep(testbed.WATCH_WINDOW_S)  # let the watch see the last deletions
    timeline.stop()
    chief_log = testbed.pod_log(api_client, namespace, names.chief_name(job))
    testbed.delete_pods(api_client, namespace)  # the stand-in, and with it the kept chief
    if exit_code != 0:
        raise TrainingFailed(f"job {job} exited with {exit_code}; chief's log ends:\n{chief_log[-3000:]}")

    worker_names = [names.worker_name(job, i) for i in range(workers)]
    chief = names.chief_name(job)
    pods = timeline.pods
    workers_created = max(clock.first(f"created Pod [{namespace}/{w}]") for w in worker_names)
    last_ready = max(pods[w].ready for w in worker_names)
    # The chief is created with the workers (it holds its GPUs from the start) and asks
    # the manager for their addresses.
    hosts_published = clock.first(f"job {job}: the chief has its")
    chief_exit = pods[chief].finished
    # The job's pods go in one deletecollection ("delete pods"), or one by one ("delete Pod") under an older Role.
    teardown_begun = min(start for kind, start, _ in kube.calls
                         if kind in TEARDOWN_DELETES and start >= hosts_published)
    teardown_done = clock.last("torn down")
    workers_gone = max(pods[w].deleted or float("nan") for w in worker_names)
    planned = clock.first("; plan ")
    deletes = [end for kind, _, end in kube.calls if kind in TEARDOWN_DELETES and end >= hosts_published]
    result = {
        "start_to_workers_created_s": workers_created - started,
        "start_to_plan_s": planned - started,
        "plan_to_workers_created_s": workers_created - planned,
        # The span from the first to the last create / delete, per pod (API_CONCURRENCY in flight).
        "create_request_s": (workers_created - clock.first(f"created Pod [{namespace}/{worker_names[0]}]"))
        / max(1, workers - 1),
        "delete_request_s": (deletes[-1] - deletes[0]) / max(1, len(deletes) - 1),
        "worker_startup_s": last_ready - workers_created,
        "ready_to_hosts_published_s": hosts_published - last_ready,
        "chief_run_s": chief_exit - hosts_published,
        "exit_to_teardown_begun_s": teardown_begun - chief_exit,
        "exit_to_teardown_done_s": teardown_done - chief_exit,
        "exit_to_workers_gone_s": workers_gone - chief_exit,
        "manager_return_after_exit_s": ended - chief_exit,
        "api_requests": kube.requests,
        "disturbed": timeline.disturbed,
    }
    result["manager_overhead_s"] = (result["start_to_workers_created_s"] + result["ready_to_hosts_published_s"]
                                    + result["exit_to_teardown_done_s"])
    # Where the manager's time goes: each request's own latency, and who had the CPU meanwhile.
    creates = kube.latencies("create Pod", since=planned)
    deletes_s = [s for kind in TEARDOWN_DELETES for s in kube.latencies(kind, since=hosts_published)]
    result["trace"] = {
        "create_latency_s": _spread(creates),
        "delete_latency_s": _spread(deletes_s),
        "requests_by_kind": _count(kind for kind, _, _ in kube.calls),
        "cpu_creating": cpu.between(planned, workers_created),
        "cpu_tearing_down": cpu.between(teardown_begun, teardown_done),
        "manager_log": [(round(t - started, 3), message) for t, message in clock.records
                        if not message.startswith(("created Pod", "deleted Pod", "deleted pods"))],
    }
    return result


def run_bare(api_client, namespace: str, job: str, workers: int, selector: str, claim: str, prefix: str) -> dict:
    """``bare_client``'s creates and deletes of the job's objects on the job's nodes; then a clean slate."""
    owner_uid = testbed.stand_in_manager(api_client, namespace, job)
    settings = manager_settings(job, namespace, owner_uid, workers, selector, claim)
    try:
        return bare_client.bare_run(api_client, settings, [f"{prefix}-{i:02d}" for i in range(workers + 1)])
    finally:
        testbed.delete_pods(api_client, namespace)


def _spread(values: list[float]) -> dict:
    if not values:
        return {}
    return {"n": len(values), "median": statistics.median(values), "max": max(values), "min": min(values)}


def _count(kinds) -> dict[str, int]:
    counts: dict[str, int] = {}
    for kind in kinds:
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def import_time_s() -> float:
    """Interpreter start and imports of one manager phase (``manager.sh`` runs two)."""
    times = []
    for _ in range(IMPORT_REPETITIONS):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import distributetrain.cli.main, distributetrain.manager.job.lifecycle, "
                        "distributetrain.kube.client"], check=True, cwd=report.REPO_ROOT)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def summarise(runs: dict[int, list[dict]]) -> dict:
    return {
        str(workers): {key: {"median": statistics.median(r[key] for r in results),
                             "max": max(r[key] for r in results)}
                       for key in results[0] if key != "trace"}
        for workers, results in runs.items()
    }


OVERHEAD_PARTS = (
    ("start_to_workers_created_s", "start -> workers created", "tab:blue"),
    ("ready_to_hosts_published_s", "last worker Ready -> hosts published", "tab:orange"),
    ("exit_to_teardown_done_s", "chief exit -> teardown done", "tab:green"),
)


def plot(summary: dict, path) -> None:
    counts = list(summary)
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
        ("worker_startup_s", "worker start-up (kubelets)", "o-"),
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
        ("ready_to_hosts_published_s", "last Ready -> hosts published"),
        ("exit_to_teardown_begun_s", "chief exit -> teardown begun"),
        ("exit_to_teardown_done_s", "chief exit -> teardown done"),
        ("manager_overhead_s", "manager overhead"),
        ("start_to_plan_s", "of which start -> plan"),
        ("create_request_s", "per pod create"),
        ("delete_request_s", "per pod delete"),
        ("worker_startup_s", "worker start-up (context)"),
        ("chief_run_s", "chief run (context)"),
        ("api_requests", "API requests"),
        ("bare_create_s", "bare client: creates"),
        ("bare_delete_s", "bare client: deletes"),
        ("manager_over_bare", "manager / bare"),
    )
    header = ["workers"] + [f"{label} (s)" if key.endswith("_s") else label for key, label in columns]
    rows = []
    for workers, cells in summary.items():
        rows.append([workers] + [
            f"{cells[key]['median']:.0f}" if key == "api_requests"
            else f"{cells[key]['median']:.2f}" if key == "manager_over_bare"
            else f"{cells[key]['median']:.2f} (max {cells[key]['max']:.2f})"
            for key, _ in columns
        ])
    return report.markdown_table(header, rows)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--counts", type=int, nargs="+", default=list(WORKER_COUNTS), metavar="W",
                        help="worker counts to measure (default: %(default)s)")
    parser.add_argument("--repetitions", type=int, default=REPETITIONS, help="runs per count (default: %(default)s)")
    parser.add_argument("--trace", type=Path, metavar="FILE",
                        help="a diagnostic run: write every run (API latencies, CPU, manager log) to FILE "
                             "and leave bench/results and the plot alone")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    prefix = f"bcp{testbed.short_id()}"
    nodes = {f"{i:02d}": 1 for i in range(max(args.counts) + 1)}
    runs: dict[int, list[dict]] = {w: [] for w in args.counts}
    with testbed.local_cluster() as cluster:
        api_client = cluster.api_client()
        with testbed.node_pool(cluster, prefix, nodes) as selector, \
                testbed.namespace(api_client, "bench-control-plane") as namespace, \
                testbed.script_volume(api_client, namespace, {testbed.NOOP_SCRIPT: NOOP}) as claim:
            # The first pods on fresh nodes start slower (their image stores); not measured.
            run_job(cluster, api_client, namespace, "cp-warmup", 1, selector, claim)
            for repetition in range(args.repetitions):
                for workers in args.counts:  # interleaved, so drift hits every size alike
                    for attempt in range(RUN_ATTEMPTS):
                        job = f"cp-{workers}-r{repetition}-a{attempt}"
                        try:
                            result = run_job(cluster, api_client, namespace, job, workers, selector, claim)
                        except TrainingFailed as failure:
                            if attempt == RUN_ATTEMPTS - 1:
                                raise
                            print(f"{job}: redone: {failure}", flush=True)
                            continue
                        print(f"{job}: {_brief(result)}", flush=True)
                        if not result.pop("disturbed"):
                            break
                    result.update(run_bare(api_client, namespace, f"{job}-bare", workers, selector, claim, prefix))
                    result["manager_over_bare"] = (
                        (result["start_to_workers_created_s"] + result["exit_to_teardown_done_s"])
                        / (result["bare_create_s"] + result["bare_delete_s"]))
                    runs[workers].append(result)
    summary = summarise(runs)
    if args.trace:
        args.trace.write_text(json.dumps({"summary": summary, "runs": runs}, indent=1) + "\n")
        print(table(summary))
        return
    import_s = import_time_s()
    plot(summary, report.image_path(NAME))
    report.write_results(NAME, {
        "worker_counts": args.counts, "repetitions": args.repetitions, "summary": summary,
        "runs": {str(w): r for w, r in runs.items()}, "phase_import_s": import_s,
        "seeds_reference": {"chief_sleep_s": SEEDS_CHIEF_SLEEP_S, "poll_s": SEEDS_POLL_S},
    })
    print(table(summary))
    print(f"interpreter start + imports of one manager phase: {import_s:.2f} s (manager.sh runs two)")


def _brief(result: dict) -> dict:
    """A run's line on the console: the trace's manager log is for the results file."""
    trace = {key: value for key, value in result.get("trace", {}).items() if key != "manager_log"}
    return {**{key: value for key, value in result.items() if key != "trace"}, "trace": trace}


if __name__ == "__main__":
    main()
