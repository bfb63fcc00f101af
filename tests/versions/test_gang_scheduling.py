"""Gang scheduling on a release that serves PodGroups (1.37): two jobs race for the same GPUs
and neither half-starts. Run by `make test-versions` on 1.37 only (scripts/test-versions.sh);
`make test` never collects tests/versions.

Two managers whose placement Leases differ (--lock-namespace), so nothing serialises them:
job A may use nodes a and b, job B nodes b and c, one GPU each, two GPUs a job: room for one
at a time, b being both's. Each plans on the bookings it lists under its Lease, so they plan
on the same free GPUs only when both list before either creates its pods: the test holds both
Leases while the managers survey, then lets both go at once, so both plan on b. a and c are
each one job's alone: without gangs, the job whose pod loses b has its other pod bound and
running while that one waits, unschedulable (half started, its GPU held idle until the other
job ends). As gangs, the scheduler binds a job's pods all or none: the loser waits whole,
then trains once b is free. Both exit 0, and nothing is left. A round whose managers did not
plan together (one listed the other's pods) proves nothing: up to ROUNDS rounds are run until
one does.
"""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
from kubernetes import client

from clusterfixtures import TEST_NAMESPACE_LABEL, namespace_name
from distributetrain.core.pods import gang
from distributetrain.core.placement import inventory
from distributetrain.core import names
from distributetrain.core.clock import RealClock
from distributetrain.kube.client import Kube
from distributetrain.kube.lock import PlacementLock
from harness.polling import poll_until
from jobharness import SCRIPTS, Jobs, job_args, node_pool, script_volume
from prerequisites import unavailable
from projectrbac import rbac_documents

pytestmark = pytest.mark.cluster

GROUP, VERSION = gang.API_VERSION.split("/")
SIDE = "distributetrain.test/gang-side"  # label key prefix: which job's nodes a node is
ROUNDS = 4
SURVEYED_TIMEOUT_S = 120.0  # both managers up, surveyed, at their Lease
AT_THE_LEASE_S = 2.0  # from a manager's objects before its Lease to its watch of the Lease
GONE_TIMEOUT_S = 60.0  # a PodGroup waits for its pods to be gone (the PodGroupProtection finalizer)


def serves_pod_groups(api_client) -> bool:
    groups = client.ApisApi(api_client).get_api_versions().groups
    return any(version.group_version == gang.API_VERSION for group in groups for version in group.versions)


@contextlib.contextmanager
def lock_namespaces(api_client, namespace: str):
    """Two Lease namespaces of the test's own, with rbac/'s grant of the placement Lease to the
    managers of ``namespace``: Leases no other manager waits on."""
    core, rbac = client.CoreV1Api(api_client), client.RbacAuthorizationV1Api(api_client)
    made = [namespace_name(f"gang-lock-{side}") for side in "ab"]
    for lock_namespace in made:
        core.create_namespace({"metadata": {"name": lock_namespace, "labels": {TEST_NAMESPACE_LABEL: "true"}}})
        for doc in rbac_documents(namespace, lease_namespace=lock_namespace):
            if doc["metadata"].get("namespace") == lock_namespace and doc["kind"] == "Role":
                rbac.create_namespaced_role(lock_namespace, doc)
            elif doc["metadata"].get("namespace") == lock_namespace and doc["kind"] == "RoleBinding":
                rbac.create_namespaced_role_binding(lock_namespace, doc)
    try:
        yield dict(zip("ab", made))
    finally:
        for lock_namespace in made:
            core.delete_namespace(lock_namespace)


class Watcher:
    """Every 0.2 s, each job's pods: a job half started (one pod bound, another of it not
    scheduled), both jobs' pods pinned to the shared node at once (they raced), the groups named."""

    def __init__(self, jobs: Jobs, job_names: tuple[str, ...], shared_node: str):
        self.jobs, self.job_names, self.shared_node = jobs, job_names, shared_node
        self.half_started: list[str] = []
        self.raced = False
        self.groups: set[str] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            self.look(self.jobs.pods())
            time.sleep(0.2)

    def look(self, pods: dict[str, dict]) -> None:
        on_shared = set()
        for job in self.job_names:
            mine = [p for p in pods.values() if (p["metadata"].get("labels") or {}).get(names.LABEL_JOB) == job
                    and names.is_booking(p["metadata"]["labels"]) and not p["metadata"].get("deletionTimestamp")]
            bound = sorted(p["metadata"]["name"] for p in mine if p["spec"].get("nodeName"))
            unschedulable = sorted(p["metadata"]["name"] for p in mine if any(
                c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
                for c in p["status"].get("conditions") or ()))
            seen = f"{job}: {bound} bound while {unschedulable} unschedulable"
            if bound and unschedulable and seen not in self.half_started:
                self.half_started.append(seen)
            if any(inventory.pinned_node(p["spec"]) == self.shared_node for p in mine):
                on_shared.add(job)
            self.groups |= {p["spec"]["schedulingGroup"]["podGroupName"] for p in mine
                            if p["spec"].get("schedulingGroup")}
        self.raced |= on_shared == set(self.job_names)

    def __enter__(self) -> Watcher:
        self.thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop.set()
        self.thread.join()


def release_together(locks: list[PlacementLock]) -> None:
    """Each Lease let go from a thread of its own, at the same moment."""
    barrier = threading.Barrier(len(locks))

    def release(lock: PlacementLock) -> None:
        barrier.wait()
        lock.__exit__(None, None, None)

    threads = [threading.Thread(target=release, args=(lock,)) for lock in locks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def race(kube: Kube, jobs: Jobs, pool, claim: str, locks: dict[str, str], round_: int) -> tuple[dict, Watcher]:
    """One round: both jobs submitted while the test holds their Leases, the Leases let go
    together once both managers have surveyed; their exit codes, and what was seen."""
    job_names = {side: f"gang-{side}{round_}" for side in "ab"}
    held = [PlacementLock(kube, locks[side], "test/gang-race", 10, names.LOCK_LEASE_NAME, RealClock()).__enter__()
            for side in "ab"]
    with Watcher(jobs, tuple(job_names.values()), pool.node("b")) as watcher:
        try:
            for side, job in job_names.items():
                jobs.submit(job, job_args(pool, claim, 2, f"--lock-namespace={locks[side]}",
                                          f"--node-selector={SIDE}-{side}=true",  # besides the pool's own
                                          "--wait-for-gpus=5m", script_args=("0", "3")))
            # A manager's Secret is made once it has surveyed, just before it takes its Lease.
            secrets = {names.secret_name(job) for job in job_names.values()}
            poll_until(lambda: secrets <= set(jobs.secrets("gang-")), SURVEYED_TIMEOUT_S,
                       lambda: f"both managers at their Lease: Secrets {jobs.secrets('gang-')}")
            time.sleep(AT_THE_LEASE_S)
        finally:
            release_together(held)
        codes = {job: jobs.exit_code(job, timeout_s=300) for job in job_names.values()}
    assert set(codes.values()) == {0}, f"{codes}\n" + "\n".join(jobs.report(job) for job in codes)
    return codes, watcher


def pod_groups(custom: client.CustomObjectsApi, namespace: str) -> list[str]:
    return sorted(g["metadata"]["name"] for g in custom.list_namespaced_custom_object(
        GROUP, VERSION, namespace, "podgroups")["items"])


def test_two_jobs_racing_for_the_same_gpus_never_both_half_start(cluster, api_client, namespace, jobs, tmp_path):
    if not serves_pod_groups(api_client):
        unavailable(f"gang scheduling: Kubernetes {cluster.version()} here serves no {gang.API_VERSION} PodGroup")
    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    kube = Kube(api_client, RealClock())
    with node_pool(cluster, {"a": 1, "b": 1, "c": 1}) as pool, \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim, \
            lock_namespaces(api_client, namespace) as locks:
        for logical, sides in {"a": "a", "b": "ab", "c": "b"}.items():
            core.patch_node(pool.node(logical), {"metadata": {"labels": {f"{SIDE}-{side}": "true" for side in sides}}})
        rounds = []
        for round_ in range(ROUNDS):
            rounds.append(race(kube, jobs, pool, claim, locks, round_))
            if rounds[-1][1].raced:
                break
        watchers = [watcher for _, watcher in rounds]
        plans = {job: [line for line in jobs.logs(job).splitlines() if "plan " in line]
                 for codes, _ in rounds for job in codes}
        assert [w.half_started for w in watchers] == [[]] * len(watchers), \
            f"{[w.half_started for w in watchers]}\n{plans}"
        assert watchers[-1].raced, f"in {ROUNDS} rounds the managers never planned together: nothing shown {plans}"
        assert all(len(w.groups) == 2 for w in watchers), [w.groups for w in watchers]  # each job one gang
        poll_until(lambda: not pod_groups(custom, namespace), GONE_TIMEOUT_S,
                   lambda: f"the jobs' PodGroups to go: {pod_groups(custom, namespace)}")
        workers = lambda: [name for name in jobs.pods() if name.startswith("gang-") and "-worker-" in name]  # noqa: E731
        poll_until(lambda: not workers(), GONE_TIMEOUT_S, lambda: f"the workers to go: {workers()}")
        assert jobs.secrets("gang-") == []
