"""A namespace with a ResourceQuota or LimitRange: job pods declare cpu and memory, so
they are admitted, and a refusal is reported as a quota problem (exit 73), not as RBAC (77)."""

import pytest
from kubernetes import client

from harness.polling import poll_until
from jobharness import SCRIPTS, job_args, node_pool, script_volume

pytestmark = pytest.mark.cluster

# What the manager pod itself asks (manager.yaml) fits in every quota below; no pod sets a
# CPU limit, so none is required.
QUOTA_HARD = {"requests.cpu": "2", "requests.memory": "2Gi", "limits.memory": "2Gi"}
QUOTA_EXIT_CODE = 73


def create_quota(api_client, namespace: str, hard: dict) -> None:
    core = client.CoreV1Api(api_client)
    core.create_namespaced_resource_quota(namespace, {
        "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "compute"}, "spec": {"hard": hard}})
    # Until the quota controller has computed its usage, admission refuses every pod
    # ("status unknown for quota"): wait for it, as any namespace set up ahead of time would.
    poll_until(lambda: core.read_namespaced_resource_quota("compute", namespace).status.hard, 30,
               "the ResourceQuota's status computed (status.hard set)", interval_s=0.2)


def test_a_job_runs_in_a_namespace_whose_quota_requires_requests(cluster, api_client, namespace, jobs, tmp_path):
    create_quota(api_client, namespace, QUOTA_HARD)
    with node_pool(cluster, {"a": 1, "b": 1}) as pool, \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
        jobs.submit("fits", job_args(pool, claim, 2, "--cpu-per-gpu=250m", "--memory-per-gpu=256Mi"))
        assert jobs.exit_code("fits") == 0, jobs.report("fits")
        chief = jobs.pod("fits-chief")["spec"]["containers"][0]["resources"]
        # The apiserver defaults an extended resource's request to its limit.
        assert chief["requests"] == {"cpu": "250m", "memory": "256Mi", "nvidia.com/gpu": "1"}
        assert chief["limits"] == {"nvidia.com/gpu": "1", "memory": "256Mi"}


# A quota the job fits in only while nobody else uses it: 2 GPUs x 8Gi = 16Gi of 20Gi.
ROOMY_QUOTA_HARD = {"requests.cpu": "2", "requests.memory": "20Gi", "limits.memory": "20Gi"}


def quota_held_by_another_team(api_client, namespace: str, hard: dict, resources: dict,
                               counted: tuple[str, str]) -> None:
    """``hard`` as the namespace's quota, part of it held by another team's pod: Pending for
    ever (no node matches), as a pod waiting for its node still counts against the quota.
    The pod comes first, and the wait is for the quota controller's own count of it
    (``counted``: a resource and the amount used): the controller recounts from its cache of
    pods, and a recount from a cache that had not seen the pod yet wrote "0 used" over
    admission's count (on a loaded run a job then fitted where it should not have)."""
    core = client.CoreV1Api(api_client)
    core.create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "other-team"},
        "spec": {"nodeSelector": {"distributetrain.test/no-such-node": "true"}, "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": resources}]}})
    create_quota(api_client, namespace, hard)
    resource, amount = counted
    poll_until(lambda: (core.read_namespaced_resource_quota("compute", namespace).status.used or {}).get(resource)
               == amount, 60, f"the quota controller to count {amount} {resource} used", interval_s=0.2)


@pytest.mark.parametrize("policy", ["resource-quota", "limit-range"])
def test_a_refusal_by_quota_or_limit_range_is_its_own_exit_code(cluster, api_client, namespace, jobs, policy):
    if policy == "resource-quota":
        held = {"requests": {"cpu": "10m", "memory": "6Gi"}, "limits": {"memory": "6Gi"}}
        # 16Gi of the 14Gi left: refused at creation
        quota_held_by_another_team(api_client, namespace, ROOMY_QUOTA_HARD, held, ("requests.memory", "6Gi"))
        refusal = "exceeded quota: compute"
    else:
        client.CoreV1Api(api_client).create_namespaced_limit_range(namespace, {
            "apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "per-container"},
            "spec": {"limits": [{"type": "Container", "max": {"memory": "4Gi"}}]}})
        refusal = "maximum memory usage per Container is 4Gi, but limit is 8Gi"
    with node_pool(cluster, {"a": 1, "b": 1}) as pool:
        # The manager's default memory per GPU (8Gi), over the harness's smaller one for local nodes.
        jobs.submit("refused", ["--num-gpus=2", "--image=distributetrain/base:0.1.0", "--memory-per-gpu=8Gi",
                                "--cpu-per-gpu=250m", f"--node-selector={pool.selector}"])
        code = jobs.exit_code("refused", timeout_s=90)
        log = jobs.logs("refused")
        assert code == QUOTA_EXIT_CODE, log
        assert refusal in log and "ResourceQuota or LimitRange" in log and "--memory-per-gpu" in log, log
        manager = jobs.pod("refused")
        assert manager["metadata"]["annotations"]["distributetrain.io/exit-code"] == str(QUOTA_EXIT_CODE)
        # Refused by the server-side dry run before anything existed, or torn down: nothing is left.
        jobs.wait_gone(["refused-worker-0", "refused-chief"])
        assert jobs.secrets("refused") == []


def test_a_quota_that_can_never_hold_the_job_is_bad_input(cluster, api_client, namespace, jobs):
    create_quota(api_client, namespace, QUOTA_HARD)  # 2 GPUs x 8Gi can never fit in 2Gi
    with node_pool(cluster, {"a": 1, "b": 1}) as pool:
        jobs.submit("never", ["--num-gpus=2", "--image=distributetrain/base:0.1.0", "--memory-per-gpu=8Gi",
                              "--cpu-per-gpu=250m", f"--node-selector={pool.selector}"])
        code = jobs.exit_code("never", timeout_s=90)
        log = jobs.logs("never")
        assert code == 2, log
        assert "--memory-per-gpu" in log and "ResourceQuota 'compute'" in log and "can never admit" in log, log
        assert [name for name in jobs.pods() if name.startswith("never-")] == []
        assert jobs.secrets("never") == []
