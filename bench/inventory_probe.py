"""One inventory of the benchmark cluster, ours or the seeds', timed, in a fresh process.

Run by ``bench.inventory_scale`` for each measurement. It imports what the manager
imports (the Kubernetes client and ``distributetrain``) and nothing heavier, so its
memory is a manager's: the baseline is the resident set after the imports, the peak
the process's high-water mark after the inventory. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict

from kubernetes import client, config

from bench import testbed
from distributetrain.core.clock import RealClock
from distributetrain.kube.client import Kube
from distributetrain.manager.placement import booking, clusterview
from localcluster.cluster import Cluster

GPU_RESOURCE = "nvidia.com/gpu"


def admin_client(cluster: Cluster, pool_size: int = 1) -> client.ApiClient:
    """An admin client whose connection pool serves ``pool_size`` threads."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=configuration)
    configuration.connection_pool_maxsize = pool_size
    return client.ApiClient(configuration)


def seeds_inventory(api_client: client.ApiClient) -> int:
    """The seeds' DistributeTrain_PreTraining.py inventory, as DESIGN.md describes it.

    One unpaginated list each of nodes and pods, deserialised into client models; GPU
    capacity (not allocatable) minus the first container's limit of every pod on the
    node, whatever its phase. (The seeds crash on nodes without the resource; here they
    count as 0 so the benchmark can run.) Returns the number of pods seen.
    """
    core = client.CoreV1Api(api_client)
    nodes = core.list_node().items
    pods = core.list_pod_for_all_namespaces().items
    used: dict[str, int] = defaultdict(int)
    for pod in pods:
        limits = pod.spec.containers[0].resources.limits if pod.spec.containers[0].resources else None
        if pod.spec.node_name:
            used[pod.spec.node_name] += int((limits or {}).get(GPU_RESOURCE, 0))
    free = sorted((int((n.status.capacity or {}).get(GPU_RESOURCE, 0)) - used[n.metadata.name] for n in nodes),
                  reverse=True)
    assert len(free) == len(nodes)
    return len(pods)


def our_inventory(api_client: client.ApiClient, namespace: str, selector: str) -> int:
    """The manager's survey of the cluster (``clusterview.take``: what one manager lists
    for all that book within a while of it), folded into a job's ledger; returns its API requests."""
    settings = testbed.job_settings(namespace, "--job-name=bench-inventory", "--num-gpus=1",
                                    "--image=distributetrain/base:0.1.0", f"--node-selector={selector}")
    kube = Kube(api_client, RealClock())
    ledger = clusterview.take(kube, kube.clock, settings.lease_namespace).ledger(
        booking._job_ledger(settings), settings.tolerations, dict(settings.node_selector))
    assert ledger.allocatable or ledger.refused
    return kube.requests


def memory_mib(field: str) -> float:
    """``VmRSS`` (resident now) or ``VmHWM`` (resident high-water mark) of this process."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise LookupError(field)


def measure(approach: str, namespace: str, selector: str) -> dict:
    api_client = admin_client(Cluster.attach())
    baseline_mib = memory_mib("VmRSS")
    started = time.perf_counter()
    if approach == "seeds":
        outcome = {"pods_listed": seeds_inventory(api_client)}
    else:
        outcome = {"api_requests": our_inventory(api_client, namespace, selector)}
    seconds = time.perf_counter() - started
    peak_mib = memory_mib("VmHWM")
    return {"seconds": seconds, "baseline_rss_mib": baseline_mib, "peak_rss_mib": peak_mib,
            "extra_rss_mib": peak_mib - baseline_mib, **outcome}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("approach", choices=("ours", "seeds"))
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--selector", required=True)
    args = parser.parse_args()
    print(json.dumps(measure(args.approach, args.namespace, args.selector)))


if __name__ == "__main__":
    main()
