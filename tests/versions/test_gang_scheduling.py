"""Gang scheduling on a release that serves PodGroups (1.37): two jobs race for the same GPUs
and neither half-starts. Run by `make test-versions` on 1.37 only (scripts/test-versions.sh);
`make test` never collects tests/versions.

Two managers whose placement Leases differ (--lock-namespace) so nothing serialises them:
job A may use nodes a and b, job B nodes b and c, one GPU each, two GPUs a job: room for one
at a time, b being both's. A tenant's pod holds b while both managers wait for GPUs; it goes,
and both wake on the same change, plan on the same free GPUs and create their pods together.
a and c are each one job's alone, so without gangs the job whose pod loses b has its other
pod bound and running while that one waits, unschedulable (half started: its GPU held idle
until the other job ends). As gangs, the scheduler binds a job's pods all or none: the loser
waits whole, then trains once b is free. Both exit 0, and nothing is left.
"""

from __future__ import annotations

import threading
import time

import pytest
from kubernetes import client

from distributetrain.core import gang, inventory, names
from jobharness import SCRIPTS, Jobs, job_args, node_pool, script_volume
from harness.polling import poll_until
from prerequisites import unavailable
from projectrbac import rbac_documents

pytestmark = pytest.mark.cluster

GROUP, VERSION = gang.API_VERSION.split("/")
SIDE = "distributetrain.test/gang-side"  # label key prefix: which job's nodes a node is
HOLDER_IMAGE = "distributetrain/base:0.1.0"
WAITING_TIMEOUT_S = 120.0  # both managers up and waiting for GPUs
GONE_TIMEOUT_S = 60.0  # a PodGroup waits for its pods to be gone (the PodGroupProtection finalizer)


def serves_pod_groups(api_client) -> bool:
    groups = client.ApisApi(api_client).get_api_versions().groups
    return any(version.group_version == gang.API_VERSION for group in groups for version in group.versions)


def lease_grant_here(api_client, namespace: str) -> None:
    """rbac/'s grant of the placement Lease, in the test's namespace (gone with it): job A's
    --lock-namespace, a Lease no other manager takes."""
    documents = rbac_documents(namespace, lease_namespace=namespace)
    rbac = client.RbacAuthorizationV1Api(api_client)
    for doc in documents:
        if doc["kind"] == "Role" and doc["metadata"]["namespace"] == namespace and \
                doc["metadata"]["name"] == names.LOCK_LEASE_NAME:
            rbac.create_namespaced_role(namespace, doc)
        elif doc["kind"] == "RoleBinding" and doc["roleRef"]["name"] == names.LOCK_LEASE_NAME:
            rbac.create_namespaced_role_binding(namespace, doc)


def holder(namespace: str, node: str) -> dict:
    """A tenant's pod holding the node's one GPU."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gang-holder", "namespace": namespace},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0, "containers": [{
                "name": "hold", "image": HOLDER_IMAGE, "command": ["sleep", "3600"],
                "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "50m", "memory": "32Mi"}}}]}}


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
            if bound and unschedulable:
                self.half_started.append(f"{job}: {bound} bound while {unschedulable} unschedulable")
            if any(inventory.pinned_node(p["spec"]) == self.shared_node for p in mine):
                on_shared.add(job)
            self.groups |= {p["spec"]["schedulingGroup"]["podGroupName"] for p in mine if p["spec"].get("schedulingGroup")}
        self.raced |= on_shared == set(self.job_names)

    def __enter__(self) -> Watcher:
        self.thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop.set()
        self.thread.join()


def phase(jobs: Jobs, job: str) -> str:
    pod = jobs.pod(job) or {"metadata": {}}
    return (pod["metadata"].get("annotations") or {}).get(names.ANNOTATION_PHASE, "")


def test_two_jobs_racing_for_the_same_gpus_never_both_half_start(cluster, api_client, namespace, jobs, tmp_path):
    if not serves_pod_groups(api_client):
        unavailable(f"gang scheduling: Kubernetes {cluster.version()} here serves no {gang.API_VERSION} PodGroup")
    lease_grant_here(api_client, namespace)
    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    with node_pool(cluster, {"a": 1, "b": 1, "c": 1}) as pool, \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
        sides = {"a": ("a",), "b": ("a", "b"), "c": ("b",)}  # node -> the jobs that may use it
        for logical, jobs_there in sides.items():
            core.patch_node(pool.node(logical), {"metadata": {"labels": {f"{SIDE}-{j}": "true" for j in jobs_there}}})
        core.create_namespaced_pod(namespace, holder(namespace, pool.node("b")))
        lock = {"a": f"--lock-namespace={namespace}", "b": "--lock-namespace=default"}
        for side in ("a", "b"):
            jobs.submit(f"gang-{side}", job_args(pool, claim, 2, lock[side], "--wait-for-gpus=5m",
                                                 f"--node-selector={SIDE}-{side}=true",  # besides the pool's
                                                 script_args=("0", "3")))
        poll_until(lambda: all(phase(jobs, f"gang-{side}") == "WaitingForGPUs" for side in ("a", "b")),
                   WAITING_TIMEOUT_S, lambda: f"both managers waiting for GPUs: {[phase(jobs, f'gang-{s}') for s in 'ab']}")
        with Watcher(jobs, ("gang-a", "gang-b"), pool.node("b")) as watcher:
            core.delete_namespaced_pod("gang-holder", namespace, grace_period_seconds=0)
            codes = {job: jobs.exit_code(job, timeout_s=300) for job in ("gang-a", "gang-b")}
        assert codes == {"gang-a": 0, "gang-b": 0}, {job: jobs.report(job) for job in codes}
        assert watcher.raced, "the managers did not race (one planned after the other's pods existed): nothing shown"
        assert watcher.half_started == [], watcher.half_started
        assert len(watcher.groups) >= 2, watcher.groups  # each job's pods were a gang
        poll_until(lambda: not pod_groups(custom, namespace), GONE_TIMEOUT_S,
                   lambda: f"the jobs' PodGroups to go: {pod_groups(custom, namespace)}")
        workers = lambda: [name for name in jobs.pods() if name.startswith("gang-") and "-worker-" in name]  # noqa: E731
        poll_until(lambda: not workers(), GONE_TIMEOUT_S, lambda: f"the workers to go: {workers()}")
        assert jobs.secrets("gang-") == []


def pod_groups(custom: client.CustomObjectsApi, namespace: str) -> list[str]:
    return sorted(g["metadata"]["name"] for g in custom.list_namespaced_custom_object(
        GROUP, VERSION, namespace, "podgroups")["items"])
