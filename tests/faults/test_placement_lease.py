"""The placement Lease on the local cluster: managers of different namespaces share it
(by default), so they never book the same GPUs; a holder keeps it past its duration by
renewing it."""

import threading
import time

import pytest
from kubernetes import client

from clusterfixtures import TEST_NAMESPACE_LABEL, namespace_name
from distributetrain.core import errors
from distributetrain.core.clock import RealClock
from distributetrain.kube.client import Kube
from distributetrain.kube.lock import PlacementLock
from jobharness import SCRIPTS, Jobs, job_args, node_pool, script_volume
from projectrbac import apply_rbac, delete_shared_bindings

pytestmark = pytest.mark.cluster

JOBS_PER_NAMESPACE = 2  # with room for two jobs at a time
SHORT_LEASE_S = 3  # renewed every second
HOLD_LEASE_DURATIONS = 3  # the holder keeps the Lease this many durations


@pytest.fixture
def second_namespace(api_client):
    core = client.CoreV1Api(api_client)
    name = namespace_name("second-namespace")
    core.create_namespace({"metadata": {"name": name, "labels": {TEST_NAMESPACE_LABEL: "true"}}})
    documents = apply_rbac(api_client, name)
    try:
        yield name
    finally:
        delete_shared_bindings(api_client, documents)
        core.delete_namespace(name)


def volume_dir(tmp_path, name):
    (tmp_path / name).mkdir()
    return tmp_path / name


def gpus_in_use(job_sets: list[Jobs]) -> dict[str, int]:
    """GPUs of every scheduled, unfinished job pod, per node."""
    used: dict[str, int] = {}
    for jobs in job_sets:
        for pod in jobs.pods().values():
            node = pod["spec"].get("nodeName")
            if node and pod["status"].get("phase") in ("Pending", "Running"):
                for c in pod["spec"]["containers"]:
                    used[node] = used.get(node, 0) + int((c.get("resources", {}).get("limits") or {})
                                                         .get("nvidia.com/gpu", 0))
    return used


def test_managers_in_two_namespaces_never_book_the_same_gpus(cluster, api_client, namespace, jobs, second_namespace,
                                                             tmp_path):
    allocatable = {"a": 2, "b": 2}
    other = Jobs(api_client, second_namespace)
    with node_pool(cluster, allocatable) as pool, \
            script_volume(api_client, namespace, SCRIPTS, volume_dir(tmp_path, "a")) as claim, \
            script_volume(api_client, second_namespace, SCRIPTS, volume_dir(tmp_path, "b")) as other_claim:
        overbooked: list[str] = []
        stop = threading.Event()

        def check_no_double_booking():
            while not stop.is_set():
                used = gpus_in_use([jobs, other])
                overbooked.extend(f"{logical}: {used[pool.node(logical)]}" for logical, count in allocatable.items()
                                  if used.get(pool.node(logical), 0) > count)
                time.sleep(0.2)

        checker = threading.Thread(target=check_no_double_booking, daemon=True)
        checker.start()
        names = [f"two-{i}" for i in range(JOBS_PER_NAMESPACE)]
        try:
            # Interleaved, so both namespaces' managers plan at the same moments.
            for name in names:
                jobs.submit(name, job_args(pool, claim, 2, "--wait-for-gpus=5m", script_args=("0", "1")))
                other.submit(name, job_args(pool, other_claim, 2, "--wait-for-gpus=5m", script_args=("0", "1")))
            codes = {(ns.namespace, n): ns.exit_code(n, timeout_s=300) for ns in (jobs, other) for n in names}
        finally:
            stop.set()
            checker.join()
        assert set(codes.values()) == {0}, codes
        assert overbooked == []
        # A plan on GPUs another namespace's job had just taken would leave pods
        # unschedulable, released after --worker-ready-timeout and planned again.
        for ns in (jobs, other):
            for name in names:
                log = ns.logs(name)
                assert log.count("; plan ") == 1 and "released them" not in log, log[-3000:]


def test_a_holder_past_its_lease_duration_is_not_taken_over(api_client, namespace):
    clock = RealClock()
    kube = Kube(api_client, clock)
    name = "placement-test"  # a Lease of the test's own: real managers never wait on it
    taken_over = threading.Event()

    def contend():
        try:
            with PlacementLock(kube, namespace, "test/contender", HOLD_LEASE_DURATIONS * SHORT_LEASE_S - 1, name,
                               clock, duration_s=SHORT_LEASE_S):
                taken_over.set()
        except errors.JobFailed:
            pass  # gave up: the holder kept it

    with PlacementLock(kube, namespace, "test/holder", 10, name, clock, duration_s=SHORT_LEASE_S):
        contender = threading.Thread(target=contend)
        contender.start()
        contender.join()
        assert not taken_over.is_set()
    assert not taken_over.is_set()
    with PlacementLock(kube, namespace, "test/next", 1, name, clock, duration_s=SHORT_LEASE_S):
        pass  # released on exit: taken at once
