"""Replacement workers of elastic jobs never book a GPU twice: ten jobs, each one GPU
short, plan their replacements at once against the local cluster's API server, under
the real placement Lease, for three free GPUs; a checker watching every pod meanwhile
(as the ten-managers test does) never sees a node booked beyond its GPUs."""

import json
import logging
import threading
import time

import pytest
from kubernetes import client

from distributetrain.core.placement import inventory
from distributetrain.core import names
from distributetrain.core.clock import RealClock
from distributetrain.core.names import Attempt
from distributetrain.core.settings import JobSettings
from distributetrain.kube import events, waits
from distributetrain.kube.client import Kube
from distributetrain.manager.reporting import jobevents
from distributetrain.manager.pods.discovery import HostList
from distributetrain.manager.placement.elastic import ElasticFollower
from distributetrain.manager.reporting.reporting import Reporter
from distributetrain.manager.processstate import ProcessState
from harness.polling import poll_until
from jobharness import node_pool

pytestmark = pytest.mark.cluster

JOBS = 10
NODES = {"a": 1, "b": 1, "c": 1}
# The node lifecycle controller looks at every node each second (--node-monitor-period): its
# first look at a new node, from a cache that may still hold the kubelet's first status,
# can taint it not-ready after it was seen Ready (once in CI), and lifts that at its next.
SETTLED_S = 3.0
SETTLE_TIMEOUT_S = 60.0


def booked_per_node(core, namespace) -> dict[str, int]:
    """GPUs of live job pods per node: scheduled, or pinned and still Pending."""
    booked: dict[str, int] = {}
    for pod in json.loads(core.list_namespaced_pod(namespace, _preload_content=False).data)["items"]:
        if pod["status"].get("phase") not in ("Pending", "Running") or pod["metadata"].get("deletionTimestamp"):
            continue
        node = pod["spec"].get("nodeName") or inventory.pinned_node(pod["spec"])
        booked[node] = booked.get(node, 0) + int(pod["metadata"]["annotations"][names.ANNOTATION_GPUS])
    return booked


def nodes_as_surveyed(core, pool) -> str:
    """What a survey reads of each of the pool's nodes: its GPUs, taints, cordon and Ready."""
    said = []
    for logical in NODES:
        node = json.loads(core.read_node(pool.node(logical), _preload_content=False).data)
        ready = [c.get("status") for c in node["status"].get("conditions") or () if c["type"] == "Ready"]
        said.append(f"{pool.node(logical)}: allocatable {node['status'].get('allocatable')}, "
                    f"taints {node['spec'].get('taints')}, unschedulable {node['spec'].get('unschedulable')}, "
                    f"Ready {ready}")
    return "\n".join(said)


def untainted(core, pool) -> bool:
    return all(not json.loads(core.read_node(pool.node(logical), _preload_content=False).data)["spec"].get("taints")
               for logical in NODES)


def settle(core, pool) -> None:
    """Until the pool's nodes have carried no taint for SETTLED_S (three of the controller's looks)."""
    untainted_since: list[float] = []

    def settled() -> bool:
        if not untainted(core, pool):
            untainted_since.clear()
            return False
        untainted_since[:] = untainted_since or [time.monotonic()]
        return time.monotonic() - untainted_since[0] >= SETTLED_S

    poll_until(settled, SETTLE_TIMEOUT_S, lambda: f"the nodes never settled:\n{nodes_as_surveyed(core, pool)}", 0.2)


def test_ten_elastic_jobs_replacing_workers_at_once_never_book_a_gpu_twice(cluster, api_client, namespace, caplog):
    # What each follower saw is in its log (a shortage names the GPUs it found unavailable, and why).
    caplog.set_level(logging.INFO, logger="distributetrain")
    core = client.CoreV1Api(api_client)
    with node_pool(cluster, NODES) as pool:
        settle(core, pool)  # every GPU free for the followers to book, as the last assertion counts
        followers = []
        for i in range(JOBS):
            settings = JobSettings(job_name=f"flex-{i}", namespace=namespace, num_gpus=1, min_gpus=1,
                                   image="distributetrain/base:0.1.0", node_selector=(tuple(pool.selector.split("=", 1)),),
                                   discovery_url="http://192.0.2.1:8470/hosts")
            clock = RealClock()
            kube = Kube(api_client, clock)
            reporter = Reporter(kube, settings, events.EventRecorder(settings, None, clock, jobevents.KINDS))
            state = ProcessState(settings, reporter, Attempt(settings.job_name), clock.monotonic() + 120,
                                 clock.monotonic(), HostList(), clock,
                                 waits.selected_pods(kube, namespace, settings.selector, clock))
            followers.append(ElasticFollower(kube, state))
        overbooked, stop = [], threading.Event()

        def check():
            while not stop.is_set():
                for node, gpus in booked_per_node(core, namespace).items():
                    if gpus > 1:
                        overbooked.append(f"{node}: {gpus}")
                time.sleep(0.1)

        checker = threading.Thread(target=check, daemon=True)
        checker.start()
        # No chief and no worker: each job is its whole --num-gpus short.
        planners = [threading.Thread(target=f._replace_if_short, args=({},)) for f in followers]
        try:
            for planner in planners:
                planner.start()
            for planner in planners:
                planner.join(timeout=180)
        finally:
            stop.set()
            checker.join()
            for follower in followers:  # those left short follow free GPUs (an informer) until closed
                follower.free_gpus.close()
        assert overbooked == []
        booked = booked_per_node(core, namespace)
        assert booked == {pool.node(logical): 1 for logical in NODES}, nodes_as_surveyed(core, pool)  # every GPU used, once
