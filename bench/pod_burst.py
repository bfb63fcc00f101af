"""Where the manager's time goes when it creates and deletes a job's 64 workers.

Why: section 3's manager overhead at 64 workers is almost all two bursts of requests,
the workers' creates and teardown's deletes; the training between them (minutes of
``horovodrun`` over 65 ranks) is not the manager's and is skipped here. Each round
creates the workers of one job with the manager's own code (``Kube.create_all_owned``,
the manager's API client), waits until they are Ready, tears the job down
(``teardown.tear_down``), and waits until the pods are gone; it times every request
and samples who had the CPU meanwhile. Variants change one thing at a time: how many
requests are in flight, and whether responses the manager does not need are read
(an unread one keeps its connection out of the pool: the next request opens a new one).

Run: ``bench/isolated.sh python -m bench.pod_burst`` (root; a few minutes).
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from pathlib import Path

from bench import control_plane, testbed
from distributetrain.core.pods import manifests
from distributetrain.core import names
from distributetrain.core.placement import podstate
from distributetrain.core.clock import RealClock
from distributetrain.core.pods.sshkeys import JobKeys
from distributetrain.kube import client as kube_module, connection
from distributetrain.kube import waits
from distributetrain.manager.watching.teardown import tear_down

READY_DEADLINE_S = 300.0
# name -> (requests in flight, read unneeded responses, pods scheduled and started)
VARIANTS = {
    "before": (8, False, True),
    "drained": (8, True, True),
    "drained-16": (16, True, True),
    "drained-64": (64, True, True),
    # Pods pinned to nodes that do not exist stay Pending: the same requests, with no
    # container starting or stopping meanwhile (as with kubelets on other machines).
    "no-containers": (8, True, False),
}


class ConnectionCounter(logging.Handler):
    """Counts the connections urllib3 opens (its DEBUG line for each)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.opened = 0
        self._logger = logging.getLogger("urllib3.connectionpool")

    def __enter__(self) -> ConnectionCounter:
        self._logger.addHandler(self)
        self._logger.setLevel(logging.DEBUG)
        return self

    def __exit__(self, *exc_info) -> None:
        self._logger.removeHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("Starting new HTTP"):
            self.opened += 1


def all_ready(worker_names: list[str]):
    """The judge of the burst's end: every worker Ready."""
    return lambda pods: True if all(name in pods and podstate.is_ready(pods[name]) for name in worker_names) else None


def burst(cluster, api_client, namespace: str, job: str, workers: int, prefix: str, selector: str, claim: str,
          in_flight: int, drained: bool, containers: bool) -> dict:
    owner_uid = testbed.stand_in_manager(api_client, namespace, job)
    settings = control_plane.manager_settings(job, namespace, owner_uid, workers, selector, claim)
    kube_module.API_CONCURRENCY = in_flight
    connection.API_CONNECTIONS = in_flight + 3
    if not drained:
        kube_module.drain = lambda response: None
    manager_client = connection.load_api_client(kubeconfig=str(cluster.kubeconfig))
    kube = control_plane.TracedKube(manager_client)
    node = f"{prefix}-{{:02d}}" if containers else f"{prefix}-absent-{{:02d}}"
    pods = [manifests.worker_pod(settings, i, node.format(i), 1) for i in range(workers)]
    worker_names = [names.worker_name(job, i) for i in range(workers)]
    try:
        with control_plane.CpuAccount() as cpu, ConnectionCounter() as connections:
            started = time.time()
            kube.create_owned(manifests.ssh_secret(settings, JobKeys.generate(job)))
            kube.create_all_owned(pods)
            created = time.time()
            created_connections = connections.opened
            outcome = waits.watch_until(kube, namespace, settings.selector, all_ready(worker_names),
                                        time.monotonic() + (READY_DEADLINE_S if containers else 0), RealClock())
            ready = time.time()
            before_teardown = connections.opened
            tear_down(kube, settings, keep_chief=False)
            torn_down = time.time()
            teardown_connections = connections.opened - before_teardown
            testbed.delete_pods(api_client, namespace)
            gone = time.time()
    finally:
        kube_module.drain = DRAIN
    return {
        "ready": isinstance(outcome, waits.Judged) if containers else None,
        "create_all_s": created - started,
        "create_latency_s": control_plane._spread(kube.latencies("create Pod")),
        "create_connections": created_connections,
        "ready_s": ready - created,
        "teardown_s": torn_down - ready,
        "delete_latency_s": control_plane._spread([s for kind in control_plane.TEARDOWN_DELETES
                                                   for s in kube.latencies(kind)]),
        "list_latency_s": control_plane._spread(kube.latencies("list pods", since=ready)),
        "teardown_connections": teardown_connections,
        "gone_s": gone - torn_down,
        "cpu_creating": cpu.between(started, created),
        "cpu_tearing_down": cpu.between(ready, torn_down),
    }


DRAIN = kube_module.drain


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every variant, interleaved")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--out", type=Path, default=Path("/tmp/pod-burst.json"))
    args = parser.parse_args()
    prefix = f"bpb{testbed.short_id()}"
    results: dict[str, list[dict]] = {v: [] for v in args.variants}
    with testbed.local_cluster() as cluster:
        api_client = cluster.api_client()
        nodes = {f"{i:02d}": 1 for i in range(args.workers)}
        with testbed.node_pool(cluster, prefix, nodes) as selector, \
                testbed.namespace(api_client, "bench-pod-burst") as namespace, \
                testbed.script_volume(api_client, namespace, {testbed.NOOP_SCRIPT: control_plane.NOOP}) as claim:
            burst(cluster, api_client, namespace, "pb-warmup", 4, prefix, selector, claim, 8, True, True)
            for round_ in range(args.rounds):
                for variant in args.variants:
                    result = burst(cluster, api_client, namespace, f"pb-{variant}-{round_}", args.workers, prefix,
                                   selector, claim, *VARIANTS[variant])
                    print(f"{variant} round {round_}: {json.dumps(result)}", flush=True)
                    results[variant].append(result)
                    args.out.write_text(json.dumps(results, indent=1) + "\n")
    for variant, rounds in results.items():
        print(variant, "create_all_s", [round(r["create_all_s"], 2) for r in rounds],
              "teardown_s", [round(r["teardown_s"], 2) for r in rounds],
              "median", round(statistics.median(r["create_all_s"] + r["teardown_s"] for r in rounds), 2))


if __name__ == "__main__":
    main()
