"""GPU node pools tainted with their resource (GKE's default) take the job's pods.

GKE taints GPU node pools ``nvidia.com/gpu=present:NoSchedule``; the inventory must
count such nodes and the job's pods must carry the matching toleration, or the job
is refused ("--num-gpus") or its pods never schedule.
"""

import re

import pytest
from kubernetes import client

from jobharness import SCRIPTS, job_args, manager_pod, node_pool, script_volume

pytestmark = pytest.mark.cluster

GPU_TAINT = "nvidia.com/gpu=present:NoSchedule"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def test_a_gpu_tainted_node_pool_runs_a_job(cluster, api_client, namespace, jobs, tmp_path):
    with node_pool(cluster, {"a": 2, "b": 1}, taints=[GPU_TAINT]) as pool, \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
        core = client.CoreV1Api(api_client)
        for logical in ("a", "b"):
            taints = core.read_node(pool.node(logical)).spec.taints or []
            assert any((t.key, t.value, t.effect) == ("nvidia.com/gpu", "present", "NoSchedule") for t in taints)
        # The manager needs no GPU and would run on a CPU pool on GKE; here it runs on the
        # test's own nodes, so it is given the toleration by hand. The job's pods are not:
        # their toleration must come from the manager.
        manager = manager_pod(namespace, "tainted", job_args(pool, claim, 3))
        manager["spec"]["tolerations"] = [GPU_TOLERATION]
        core.create_namespaced_pod(namespace, manager)
        try:
            worker = jobs.wait_for("tainted-worker-0", lambda p: p["status"].get("phase") == "Running", 120)
        except AssertionError as e:
            raise AssertionError(f"{e}\nthe manager's log:\n{jobs.log_tail('tainted')}") from None
        assert worker["spec"]["nodeName"] == pool.node("a")
        assert GPU_TOLERATION in worker["spec"]["tolerations"]
        assert jobs.exit_code("tainted") == 0, jobs.report("tainted")
        chief = jobs.pod("tainted-chief")
        assert chief["spec"]["nodeName"] == pool.node("b")
        assert GPU_TOLERATION in chief["spec"]["tolerations"]
        log = jobs.logs("tainted-chief")
        assert sorted(int(r) for r in re.findall(r"rank=(\d+) size=3", log)) == [0, 1, 2]
        assert f"{pool.node('a')}=2,{pool.node('b')}=1" in jobs.logs("tainted")
