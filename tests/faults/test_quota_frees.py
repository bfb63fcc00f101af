"""A ResourceQuota full for now (issue 33, item 5): with --wait-for-gpus the job waits on
the quota, releasing what it created, and trains once another team's pod frees its share;
a quota that stays full ends the job with exit 73 at the deadline, naming the quota."""

import json
import time

import pytest
from kubernetes import client

from jobharness import SCRIPTS, job_args, node_pool, script_volume
from harness.polling import poll_until
from test_quota import QUOTA_EXIT_CODE, quota_held_by_another_team

pytestmark = pytest.mark.cluster

GPU = "nvidia.com/gpu"
GPU_QUOTA_HARD = {f"requests.{GPU}": "2"}  # the whole 2-GPU job, once nobody else uses any


def quota_with_a_gpu_held(api_client, namespace: str) -> None:
    """The job's 2-GPU quota, one GPU of it held by another team's pod that holds no node's."""
    quota_held_by_another_team(api_client, namespace, GPU_QUOTA_HARD, {"requests": {"cpu": "10m"}, "limits": {GPU: "1"}},
                               (f"requests.{GPU}", "1"))


def phase_of(pod: dict) -> str:
    return (pod["metadata"].get("annotations") or {}).get("distributetrain.io/phase", "")


def notes(api_client, namespace: str, manager: str, reason: str) -> list[str]:
    """The notes of the manager pod's Events of ``reason``."""
    core = client.CoreV1Api(api_client)
    uid = core.read_namespaced_pod(manager, namespace).metadata.uid
    raw = core.list_namespaced_event(namespace, field_selector=f"involvedObject.uid={uid}", _preload_content=False)
    return [e.get("note") or e.get("message") or "" for e in json.loads(raw.data)["items"] if e.get("reason") == reason]


@pytest.fixture
def scripts(api_client, namespace, tmp_path):
    with script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
        yield claim


def test_a_job_waits_through_a_full_quota_and_trains_once_it_frees(cluster, api_client, namespace, jobs, scripts):
    quota_with_a_gpu_held(api_client, namespace)  # 1 of 2 used: the job's second pod is refused
    with node_pool(cluster, {"a": 1, "b": 1}) as pool:
        jobs.submit("patient", job_args(pool, scripts, 2, "--wait-for-gpus=3m"))
        jobs.wait_for("patient", lambda pod: phase_of(pod) == "WaitingForQuota", 120)
        # Events are sent in the background, after the phase is recorded.
        said = poll_until(lambda: notes(api_client, namespace, "patient", "WaitingForQuota"), 30,
                          "a WaitingForQuota Event on the manager pod")
        assert all(f"waiting for quota compute in {namespace}: " in note and "the job needs 2" in note
                   for note in said), said
        # What the refused try created is released while it waits: no pod of it, no Secret.
        jobs.wait_gone(["patient-worker-0", "patient-chief"])
        assert jobs.secrets("patient") == []
        freed_at = time.monotonic()
        client.CoreV1Api(api_client).delete_namespaced_pod("other-team", namespace, grace_period_seconds=0)
        jobs.wait_for("patient", lambda pod: phase_of(pod) not in ("WaitingForQuota", ""), 60)
        noticed_s = time.monotonic() - freed_at
        code = jobs.exit_code("patient")
        log = jobs.logs("patient")
        assert code == 0, log
        assert "ResourceQuota compute changed" in log, log
        assert noticed_s < 60, f"the freed quota was noticed after {noticed_s:.0f}s"
        # Nothing left but the last try's finished chief, kept for its logs (--delete-chief false).
        jobs.wait_gone(["patient-worker-0-r1"])
        assert jobs.secrets("patient") == []
        left = sorted(name for name in jobs.pods() if name.startswith("patient-"))
        assert left == ["patient-chief-r1"], left


def test_a_quota_that_stays_full_ends_the_job_with_73_at_the_deadline(cluster, api_client, namespace, jobs, scripts):
    quota_with_a_gpu_held(api_client, namespace)
    with node_pool(cluster, {"a": 1, "b": 1}) as pool:
        started = time.monotonic()
        jobs.submit("stuck", job_args(pool, scripts, 2, "--wait-for-gpus=30s"))
        code = jobs.exit_code("stuck", timeout_s=180)
        log = jobs.logs("stuck")
        assert code == QUOTA_EXIT_CODE, log
        assert time.monotonic() - started >= 30, log
        assert "exceeded quota: compute" in log and "waiting for quota compute" in log, log
        assert [name for name in jobs.pods() if name.startswith("stuck-")] == []
        assert jobs.secrets("stuck") == []
