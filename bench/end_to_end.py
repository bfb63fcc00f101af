"""End to end: a training job through the manager against bare horovodrun on the same pods.

Why: users compare against what they would do by hand: start sshd containers on the
machines and run ``horovodrun`` across them. The ratio says what the manager's whole
lifecycle (placement, pods, SSH checks, waits, teardown) costs on top of the training.

Both arms train the same job (``base_image/train.py``, 3 Horovod ranks: 2 on one node,
1 on another) on the same two nodes of our own, alternating, ``REPETITIONS`` times each:
- managed: the manager in this process (``lifecycle.execute``, as ``manager.sh`` runs
  it), timed from its start to its return, teardown included;
- bare: the same worker and SSH Secret, built by the manifests module and created by
  this script; once the worker is Ready, a chief pod on the other node runs only
  ``horovodrun`` over the same hostfile, and reports how long horovodrun took by its own
  clock. That is the hand-run baseline: machines already up, one command.
The bare arm's full cycle (create, Ready, chief, exit) is reported too, for context.

Run: ``bench/isolated.sh python -m bench.end_to_end`` (root; needs the project's images,
which hold TensorFlow and Horovod; about 6 minutes).
"""

from __future__ import annotations

import re
import statistics
import time

import matplotlib.pyplot as plt
from kubernetes import client

from bench import report, testbed
from distributetrain.core.pods import manifests
from distributetrain.core import names
from distributetrain.core.placement import placement
from distributetrain.core.clock import RealClock
from distributetrain.core.pods.sshkeys import JobKeys
from distributetrain.kube.client import Kube
from distributetrain.manager.job import lifecycle

NODES = {"a": 2, "b": 1}  # GPUs; the plan is a 2-slot worker on a and the chief on b
NUM_GPUS = sum(NODES.values())
TRAIN_ARGS = ("--epochs=3",)
REPETITIONS = 5
JOB_DEADLINE_S = 900
CHIEF_TIMEOUT_S = 900.0
NAME = "end-to-end"

# The bare chief: the hostfile as the manager's chief writes it, then horovodrun alone,
# timed by the pod itself (no SSH pre-checks: the worker's readiness probe saw sshd).
BARE_CHIEF_SCRIPT = """\
set -eu
hostfile=$(mktemp)
printf '%s slots=%s\\n' "$DT_CHIEF_ADDRESS" "$DT_CHIEF_SLOTS" > "$hostfile"
for worker in $DT_WORKERS; do
  printf '%s slots=%s\\n' "${worker%:*}" "${worker##*:}" >> "$hostfile"
done
echo "bench: start $(date +%s.%N)"
horovodrun -np "$DT_NUM_PROCS" -hostfile "$hostfile" -p "$DT_PORT" python "$DT_FILENAME" "$@"
echo "bench: end $(date +%s.%N)"
"""
BENCH_CLOCK = re.compile(r"^bench: (start|end) ([0-9.]+)$", re.MULTILINE)


def settings_for(job: str, namespace: str, owner_uid: str, selector: str):
    return testbed.job_settings(
        namespace, f"--job-name={job}", f"--owner-uid={owner_uid}", f"--num-gpus={NUM_GPUS}",
        "--image=distributetrain/base:0.1.0", f"--node-selector={selector}",
        f"--active-deadline={JOB_DEADLINE_S}s", script_args=TRAIN_ARGS,
    )


def managed(api_client, namespace: str, job: str, selector: str) -> dict:
    owner_uid = testbed.stand_in_manager(api_client, namespace, job)
    settings = settings_for(job, namespace, owner_uid, selector)
    started = time.monotonic()
    clock = RealClock()
    exit_code = lifecycle.execute(Kube(api_client, clock), settings, "run", clock)
    wall_s = time.monotonic() - started
    chief_log = testbed.pod_log(api_client, namespace, names.chief_name(job))
    testbed.delete_pods(api_client, namespace)
    if exit_code != 0:
        raise RuntimeError(f"managed job {job} exited with {exit_code}; chief's log ends:\n{chief_log[-3000:]}")
    return {"wall_s": wall_s, "training": training_line(chief_log)}


def bare(api_client, namespace: str, job: str, selector: str, free: dict[str, int]) -> dict:
    """Create the pods by hand from the manifests; time horovodrun inside the chief."""
    core = client.CoreV1Api(api_client)
    settings = settings_for(job, namespace, "", selector)
    plan = placement.plan(free, NUM_GPUS)
    *worker_shares, (chief_node, chief_share) = plan
    started = time.monotonic()
    core.create_namespaced_secret(namespace, manifests.ssh_secret(settings, JobKeys.generate(job)))
    workers = [manifests.worker_pod(settings, i, node, share) for i, (node, share) in enumerate(worker_shares)]
    for worker in workers:
        core.create_namespaced_pod(namespace, worker)
    addresses = [wait_for(core, namespace, w["metadata"]["name"], testbed.is_ready)["status"]["podIP"]
                 for w in workers]
    chief = manifests.chief_pod(settings, chief_node, chief_share)
    # args, as the manager's chief sets them: the image's ENTRYPOINT still runs, and a
    # `command` here would keep the chief's args and pass them on to train.py. The
    # workers' addresses are given, not asked of a manager.
    container = chief["spec"]["containers"][0]
    container["args"] = ["/bin/sh", "-c", BARE_CHIEF_SCRIPT, "bare-chief", *TRAIN_ARGS]
    container["env"].append({"name": "DT_WORKERS", "value": " ".join(
        f"{address}:{share}" for address, (_, share) in zip(addresses, worker_shares))})
    core.create_namespaced_pod(namespace, chief)
    done = wait_for(core, namespace, chief["metadata"]["name"],
                    lambda p: (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"))
    cycle_s = time.monotonic() - started
    chief_log = testbed.pod_log(api_client, namespace, chief["metadata"]["name"])
    testbed.delete_pods(api_client, namespace)
    core.delete_namespaced_secret(names.secret_name(job), namespace)
    clocks = dict(BENCH_CLOCK.findall(chief_log))
    if done["status"]["phase"] != "Succeeded" or set(clocks) != {"start", "end"}:
        raise RuntimeError(f"bare job {job} failed; chief's log ends:\n{chief_log[-3000:]}")
    return {"horovodrun_s": float(clocks["end"]) - float(clocks["start"]), "cycle_s": cycle_s,
            "training": training_line(chief_log)}


def wait_for(core: client.CoreV1Api, namespace: str, name: str, predicate) -> dict:
    give_up_at = time.monotonic() + CHIEF_TIMEOUT_S
    while time.monotonic() < give_up_at:
        pod = client.ApiClient().sanitize_for_serialization(core.read_namespaced_pod(name, namespace))
        if predicate(pod):
            return pod
        time.sleep(testbed.POLL_S)
    raise TimeoutError(f"pod {namespace}/{name} not there after {CHIEF_TIMEOUT_S:.0f}s")


def training_line(log: str) -> str:
    """train.py's summary line (rank 0), to show both arms trained the same.

    horovodrun prefixes each line with its rank, e.g. ``[1,0]<stdout>:done ...``.
    """
    return next((line.split(":", 1)[-1] for line in log.splitlines() if ">:done " in line or line.startswith("done ")), "")


def plot(summary: dict, path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.4))
    labels = ["bare horovodrun", "bare: create pods + horovodrun", "through the manager"]
    values = [summary["bare_horovodrun_s"], summary["bare_cycle_s"], summary["managed_wall_s"]]
    bars = ax.bar(labels, values, color=["tab:gray", "tab:olive", "tab:blue"])
    for bar, value in zip(bars, values):
        ax.annotate(f"{value:.1f} s\n({value / values[0]:.2f}x)", (bar.get_x() + bar.get_width() / 2, value),
                    ha="center", va="bottom", fontsize=9)
    ax.set_ylabel("wall time (s, median)")
    ax.set_ylim(0, max(values) * 1.25)
    ax.set_title(f"{NUM_GPUS} Horovod ranks on 2 nodes, train.py {' '.join(TRAIN_ARGS)}")
    ax.tick_params(axis="x", labelsize=9)
    report.save_figure(fig, path)


def main() -> None:
    prefix = f"be2e{testbed.short_id()}"
    results: dict[str, list[dict]] = {"managed": [], "bare": []}
    with testbed.local_cluster() as cluster:
        api_client = cluster.api_client()
        with testbed.node_pool(cluster, prefix, NODES) as selector, \
                testbed.namespace(api_client, "bench-end-to-end") as namespace:
            free = {f"{prefix}-{name}": gpus for name, gpus in NODES.items()}
            for repetition in range(REPETITIONS):  # alternating, so drift hits both arms alike
                results["managed"].append(managed(api_client, namespace, f"e2e-m{repetition}", selector))
                print(f"managed: {results['managed'][-1]}", flush=True)
                results["bare"].append(bare(api_client, namespace, f"e2e-b{repetition}", selector, free))
                print(f"bare: {results['bare'][-1]}", flush=True)
    summary = {
        "managed_wall_s": statistics.median(r["wall_s"] for r in results["managed"]),
        "bare_horovodrun_s": statistics.median(r["horovodrun_s"] for r in results["bare"]),
        "bare_cycle_s": statistics.median(r["cycle_s"] for r in results["bare"]),
    }
    summary["ratio_managed_to_bare"] = summary["managed_wall_s"] / summary["bare_horovodrun_s"]
    summary["ratio_managed_to_bare_cycle"] = summary["managed_wall_s"] / summary["bare_cycle_s"]
    summary["managed_minus_bare_s"] = summary["managed_wall_s"] - summary["bare_horovodrun_s"]
    plot(summary, report.image_path(NAME))
    report.write_results(NAME, {"nodes": NODES, "train_args": TRAIN_ARGS, "repetitions": REPETITIONS,
                                "summary": summary, "runs": results})
    print(report.markdown_table(
        ["arm", "median wall time (s)", "runs (s)", "vs bare horovodrun"],
        [["bare horovodrun", f"{summary['bare_horovodrun_s']:.1f}",
          ", ".join(f"{r['horovodrun_s']:.1f}" for r in results["bare"]), "1.00x"],
         ["bare: create pods + horovodrun", f"{summary['bare_cycle_s']:.1f}",
          ", ".join(f"{r['cycle_s']:.1f}" for r in results["bare"]),
          f"{summary['bare_cycle_s'] / summary['bare_horovodrun_s']:.2f}x"],
         ["through the manager", f"{summary['managed_wall_s']:.1f}",
          ", ".join(f"{r['wall_s']:.1f}" for r in results["managed"]), f"{summary['ratio_managed_to_bare']:.2f}x"]],
    ))


if __name__ == "__main__":
    main()
