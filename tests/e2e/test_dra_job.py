"""End to end on DRA GPUs (--device-class): a job trains across a DRA node group (the
example driver's GPUs, gpu.example.com, as ResourceSlices; no nvidia.com/gpu) and a
device-plugin node, under exactly rbac/; the pods on DRA nodes get their GPUs through the
job's ResourceClaimTemplates, and no claim or template is left afterwards."""

import pytest
from kubernetes import client

from harness.polling import poll_until
from jobharness import NodePool, more_nodes

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]

GROUP, VERSION = "resource.k8s.io", "v1"
DEVICE_CLASS = "gpu.example.com"  # the example driver's (localcluster/localcluster/dra.py)
GONE_TIMEOUT_S = 60


def test_a_job_trains_on_dra_and_device_plugin_nodes_and_leaves_no_claim(cluster, api_client, namespace, jobs):
    custom = client.CustomObjectsApi(api_client)
    pool = NodePool("d" + namespace[-6:])
    with more_nodes(cluster, pool, {"a": 2, "c": 1}, dra=True), more_nodes(cluster, pool, {"b": 1}):
        jobs.submit("dra", ["--num-gpus=4", "--image=distributetrain/base:0.1.0", f"--node-selector={pool.selector}",
                            f"--device-class={DEVICE_CLASS}", "--worker-ready-timeout=90s",
                            "--", "--epochs=1", "--samples=512"])
        assert jobs.exit_code("dra", timeout_s=300) == 0, jobs.report("dra")
        plan = jobs.pod("dra")["metadata"]["annotations"]["distributetrain.io/plan"]
        assert sorted(plan.split(",")) == sorted([f"{pool.node('a')}=2", f"{pool.node('b')}=1",
                                                  f"{pool.node('c')}=1"])
        chief = jobs.pod("dra-chief")  # kept, finished: what it was given
        on_dra = chief["spec"]["nodeName"] in (pool.node("a"), pool.node("c"))
        limits = chief["spec"]["containers"][0]["resources"].get("limits") or {}
        assert ("nvidia.com/gpu" in limits) != on_dra
        assert bool(chief["spec"].get("resourceClaims")) == on_dra

        def left(plural: str) -> list[str]:
            return [o["metadata"]["name"] for o in
                    custom.list_namespaced_custom_object(GROUP, VERSION, namespace, plural)["items"]]

        # A generated claim is deleted once its pod has ended (the kept chief's too).
        jobs.wait_gone(["dra-worker-0", "dra-worker-1"])
        poll_until(lambda: not left("resourceclaimtemplates") and not left("resourceclaims"), GONE_TIMEOUT_S,
                   lambda: f"the job's templates and claims to go: {left('resourceclaimtemplates')} "
                           f"{left('resourceclaims')}")
