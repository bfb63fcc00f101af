"""End to end on DRA GPUs (--device-class): a job trains across a DRA node group (the
example driver's GPUs, gpu.example.com, as ResourceSlices; no nvidia.com/gpu) and a
device-plugin node, under exactly rbac/ in a namespace enforcing PodSecurity `restricted`;
the pods on DRA nodes get their GPUs through the job's ResourceClaimTemplates. Its workers
die mid-training (their sshd and ranks killed, as when a node fails): the restart's pods
get fresh claims, the job ends 0, and no claim or template is left afterwards."""

import re
import subprocess

import pytest
from kubernetes import client

from harness.polling import poll_until
from jobharness import NodePool, more_nodes

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]

GROUP, VERSION = "resource.k8s.io", "v1"
DEVICE_CLASS = "gpu.example.com"  # the example driver's (localcluster/localcluster/dra.py)
GONE_TIMEOUT_S = 60
EPOCH_LINE = re.compile(r"epoch=(\d+) .*size=(\d+)")
RESTART_PORT = 23458  # the workers' sshd, so the test kills exactly this job's
# Enough epochs that the first attempt still trains when its workers are killed, a second
# or two after its first epoch shows (~0.5 s an epoch at size 4 on 2 loaded cores); the
# restart trains them all again.
TRAIN_ARGS = ("--epochs=15", "--samples=1024", "--batch-size=32")


def test_a_job_on_dra_and_device_plugin_nodes_restarts_and_leaves_no_claim(cluster, api_client, restricted, jobs):
    custom = client.CustomObjectsApi(api_client)
    pool = NodePool("d" + restricted[-6:])
    with more_nodes(cluster, pool, {"a": 2, "c": 1}, dra=True), more_nodes(cluster, pool, {"b": 1}):
        jobs.submit("dra", ["--num-gpus=4", "--image=distributetrain/base:0.1.0", f"--node-selector={pool.selector}",
                            f"--device-class={DEVICE_CLASS}", "--worker-ready-timeout=90s", "--max-restarts=1",
                            f"--port={RESTART_PORT}", "--", *TRAIN_ARGS])
        poll_until(lambda: EPOCH_LINE.search(jobs.log_tail("dra-chief", lines=1000)), 300,
                   lambda: f"a first epoch:\n{jobs.report('dra')}")
        subprocess.run(["pkill", "-KILL", "-f", f"sshd -D -e -f /dev/null -p {RESTART_PORT}"], check=True)
        assert jobs.exit_code("dra", timeout_s=400) == 0, jobs.report("dra")
        assert jobs.pod("dra")["metadata"]["annotations"]["distributetrain.io/restarts"] == "1"
        plan = jobs.pod("dra")["metadata"]["annotations"]["distributetrain.io/plan"]
        assert sorted(plan.split(",")) == sorted([f"{pool.node('a')}=2", f"{pool.node('b')}=1",
                                                  f"{pool.node('c')}=1"])
        chief = jobs.pod("dra-chief-r1")  # kept, finished: what the restart's chief was given
        on_dra = chief["spec"]["nodeName"] in (pool.node("a"), pool.node("c"))
        limits = chief["spec"]["containers"][0]["resources"].get("limits") or {}
        assert ("nvidia.com/gpu" in limits) != on_dra
        assert bool(chief["spec"].get("resourceClaims")) == on_dra
        assert {int(m.group(2)) for m in EPOCH_LINE.finditer(jobs.logs("dra-chief-r1"))} == {4}

        def left(plural: str) -> list[str]:
            return [o["metadata"]["name"] for o in
                    custom.list_namespaced_custom_object(GROUP, VERSION, restricted, plural)["items"]]

        # A generated claim is deleted once its pod has ended (the kept chiefs' too).
        jobs.wait_gone(["dra-worker-0", "dra-worker-1", "dra-worker-0-r1", "dra-worker-1-r1"])
        poll_until(lambda: not left("resourceclaimtemplates") and not left("resourceclaims"), GONE_TIMEOUT_S,
                   lambda: f"the job's templates and claims to go: {left('resourceclaimtemplates')} "
                           f"{left('resourceclaims')}")
