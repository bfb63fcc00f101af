"""Waiting for GPUs (--wait-for-gpus) on the local cluster: the manager re-plans only
when GPUs can have freed up, waits through nodes that are cordoned or NotReady, and
records its outcome on its pod."""

import json
import time

import pytest
from kubernetes import client

from jobharness import SCRIPTS, job_args, node_pool, script_volume

pytestmark = pytest.mark.cluster

CHURN_PODS = 15
GPU_RECHECK_S = 10.0  # pretraining.GPU_RECHECK_S: the periodic re-plan while waiting


@pytest.fixture
def scripts(api_client, namespace, tmp_path):
    with script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
        yield claim


def waiting_for_gpus(pod: dict) -> bool:
    return (pod["metadata"].get("annotations") or {}).get("distributetrain.io/phase") == "WaitingForGPUs"


def plans_that_found_too_few(api_client, namespace, manager) -> int:
    """How often the manager planned and found too few GPUs: its WaitingForGPUs Event's
    occurrences (one Event, its series count going up)."""
    core = client.CoreV1Api(api_client)
    uid = core.read_namespaced_pod(manager, namespace).metadata.uid
    raw = core.list_namespaced_event(namespace, field_selector=f"involvedObject.uid={uid}", _preload_content=False)
    return sum((e.get("series") or {}).get("count") or e.get("count") or 1
               for e in json.loads(raw.data)["items"] if e.get("reason") == "WaitingForGPUs")


def gpu_holder(node: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "holder"},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": "distributetrain/base:0.1.0", "command": ["sleep", "600"],
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


def test_unrelated_pod_churn_does_not_wake_the_wait_and_a_freed_gpu_does(cluster, api_client, namespace, jobs, scripts):
    core = client.CoreV1Api(api_client)
    with node_pool(cluster, {"a": 1, "b": 1}) as pool:
        core.create_namespaced_pod(namespace, gpu_holder(pool.node("a")))
        jobs.wait_for("holder", lambda p: p["status"].get("phase") == "Running", 60)
        jobs.submit("patient", job_args(pool, scripts, 2, "--wait-for-gpus=3m"))
        jobs.wait_for("patient", waiting_for_gpus, 60)
        churn_started = time.monotonic()
        # Pods that hold no GPU come and go (a busy cluster): none of them can free a GPU.
        for index in range(CHURN_PODS):
            name = f"churn-{index}"
            core.create_namespaced_pod(namespace, {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                "spec": {"nodeSelector": {"distributetrain.test/nowhere": "true"},
                         "containers": [{"name": "c", "image": "distributetrain/base:0.1.0"}]}})
            core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
            time.sleep(0.2)
        churn_s = time.monotonic() - churn_started
        freed_at = time.monotonic()
        core.delete_namespaced_pod("holder", namespace, grace_period_seconds=0)
        jobs.wait_for("patient", lambda p: not waiting_for_gpus(p), 30)
        woke_after_s = time.monotonic() - freed_at
        assert jobs.exit_code("patient") == 0
        # The first plan, the periodic re-plans during the churn, nothing for the churn itself.
        allowed = 2 + int(churn_s / GPU_RECHECK_S)
        assert plans_that_found_too_few(api_client, namespace, "patient") <= allowed
        assert woke_after_s < GPU_RECHECK_S, f"the freed GPU was noticed after {woke_after_s:.1f}s"
        jobs.wait_gone(["patient-worker-0"])


def test_wait_for_gpus_waits_through_a_cordoned_node(cluster, api_client, namespace, jobs, scripts):
    core = client.CoreV1Api(api_client)
    with node_pool(cluster, {"a": 1, "b": 1}) as pool:
        core.patch_node(pool.node("b"), {"spec": {"unschedulable": True}})
        jobs.submit("cordoned", job_args(pool, scripts, 2, "--wait-for-gpus=2m"))
        # Waiting and still running, not refused as bad input. Both at once: a real kubelet
        # may post the pod's Running a moment after the manager's own annotation.
        jobs.wait_for("cordoned", lambda p: waiting_for_gpus(p) and p["status"].get("phase") == "Running", 60)
        core.patch_node(pool.node("b"), {"spec": {"unschedulable": False}})
        assert jobs.exit_code("cordoned") == 0
        assert "is cordoned" in jobs.logs("cordoned")
        jobs.wait_gone(["cordoned-worker-0"])


def test_without_waiting_a_cordoned_node_is_a_shortage_not_bad_input(cluster, api_client, namespace, jobs, scripts):
    core = client.CoreV1Api(api_client)
    with node_pool(cluster, {"a": 1, "b": 1}) as pool:
        core.patch_node(pool.node("b"), {"spec": {"unschedulable": True}})
        jobs.submit("short", job_args(pool, scripts, 2))
        assert jobs.exit_code("short", timeout_s=60) == 69
        annotations = jobs.pod("short")["metadata"]["annotations"]
        assert annotations["distributetrain.io/phase"] == "Failed"
        assert annotations["distributetrain.io/exit-code"] == "69"
        assert "is cordoned" in annotations["distributetrain.io/reason"]
        # Beyond every GPU the selected nodes advertise: bad input, recorded on the pod too.
        jobs.submit("toolarge", job_args(pool, scripts, 3))
        assert jobs.exit_code("toolarge", timeout_s=60) == 2
        annotations = jobs.pod("toolarge")["metadata"]["annotations"]
        assert (annotations["distributetrain.io/phase"], annotations["distributetrain.io/exit-code"]) == ("Failed", "2")
        assert "--num-gpus" in annotations["distributetrain.io/reason"]
        assert set(jobs.pods()) == {"short", "toolarge"} and jobs.secrets("short") == []
