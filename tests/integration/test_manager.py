"""The manager as a pod under rbac/, against the real control plane and node agent."""

import re
import threading

import pytest
from kubernetes import client, watch

from jobharness import SCRIPTS, job_args, node_pool, script_volume

pytestmark = pytest.mark.cluster


class EventLog:
    """Every pod event in the namespace, in order, recorded by a background watch."""

    def __init__(self, api_client, namespace):
        self.events: list[tuple[str, str, bool]] = []  # (type, pod, ready)
        self._watch = watch.Watch()
        core = client.CoreV1Api(api_client)
        self._thread = threading.Thread(
            target=self._run, args=(core, namespace), daemon=True)
        self._thread.start()

    def _run(self, core, namespace):
        for event in self._watch.stream(core.list_namespaced_pod, namespace, timeout_seconds=600):
            pod = event["object"]
            ready = any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))
            self.events.append((event["type"], pod.metadata.name, ready))

    def stop(self):
        self._watch.stop()

    def first(self, predicate) -> int:
        return next(i for i, e in enumerate(self.events) if predicate(e))


def test_six_gpus_on_5_3_2_run_as_two_pods_on_the_planned_nodes(cluster, api_client, namespace, jobs, tmp_path):
    with node_pool(cluster, {"a": 5, "b": 3, "c": 2}) as pool, \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
        events = EventLog(api_client, namespace)
        jobs.submit("six", job_args(pool, claim, 6))
        try:
            assert jobs.exit_code("six") == 0, jobs.report("six")
        finally:
            events.stop()
        chief = jobs.pod("six-chief")
        assert chief["spec"]["nodeName"] == pool.node("c")
        # One GPU, and the default memory per GPU as both request and limit (Burstable QoS).
        assert chief["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1", "memory": "2Gi"}  # LOCAL_MACHINE_FLAGS
        log = jobs.logs("six-chief")
        # horovodrun prefixes each line with "[rank]<stdout>:".
        assert sorted(int(r) for r in re.findall(r"rank=(\d+) size=6", log)) == list(range(6))
        # The chief holds its GPUs from the start: created with the worker (5 GPUs on
        # node a), before the worker was Ready; it trained only once it was (all 6 ranks).
        chief_added = events.first(lambda e: e[0] == "ADDED" and e[1] == "six-chief")
        worker_ready = events.first(lambda e: e[1] == "six-worker-0" and e[2])
        assert chief_added < worker_ready
        # Torn down: the worker and the Secret are gone, the chief is kept for its logs.
        jobs.wait_gone(["six-worker-0"])
        assert jobs.secrets("six") == []
        manager_log = jobs.logs("six")
        assert f"{pool.node('a')}=5,{pool.node('c')}=1" in manager_log


def test_chief_exit_code_is_the_managers_and_everything_is_deleted(cluster, api_client, namespace, jobs, tmp_path):
    with node_pool(cluster, {"a": 2, "b": 1}) as pool, \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
        jobs.submit("fails", job_args(pool, claim, 3, "--delete-chief", script_args=("3",)))
        # horovodrun exits 1 when ranks fail, whatever their codes: that is the chief's code.
        assert jobs.exit_code("fails") == 1
        assert "chief exited with code 1" in jobs.logs("fails")
        jobs.wait_gone(["fails-worker-0", "fails-chief"])
        assert jobs.secrets("fails") == []
        manager = jobs.pod("fails")
        assert manager["metadata"]["annotations"]["distributetrain.io/exit-code"] == "1"
        assert manager["metadata"]["annotations"]["distributetrain.io/phase"] == "Failed"


def test_short_of_gpus_fails_fast_and_creates_nothing(cluster, api_client, namespace, jobs, tmp_path):
    with node_pool(cluster, {"a": 2, "b": 1}) as pool, \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
        # Someone holds 2 of the 3 GPUs.
        client.CoreV1Api(api_client).create_namespaced_pod(namespace, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "holder"},
            "spec": {"nodeName": pool.node("a"), "containers": [{"name": "c", "image": "distributetrain/base:0.1.0", "command": ["sleep", "600"],
                     "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}})
        jobs.submit("short", job_args(pool, claim, 3))
        assert jobs.exit_code("short", timeout_s=60) == 69
        assert "requested 3 GPUs but only 1" in jobs.logs("short")
        assert set(jobs.pods()) == {"holder", "short"} and jobs.secrets("short") == []
        # More than the eligible nodes have at all is bad input: exit 2.
        jobs.submit("toolarge", job_args(pool, claim, 4))
        assert jobs.exit_code("toolarge", timeout_s=60) == 2
        assert "--num-gpus" in jobs.logs("toolarge")
