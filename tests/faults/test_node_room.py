"""A plan that fits the whole pod: a node whose CPU other pods hold is left out, and a node
of time-sliced GPUs takes one rank of a job unless the user allows more.

Before the plan counted a node's room besides its GPUs, the first test's worker was
pinned to the node whose CPU a tenant held and stayed Pending ("Insufficient cpu") until
``--worker-ready-timeout``.
"""

import uuid
from contextlib import contextmanager

import pytest
from kubernetes import client

from distributetrain.core.placement.placement import parse_plan
from jobharness import SCRIPTS, TEST_NODE_LABEL, job_args, node_pool, script_volume
from roughness import create_pod, other_tenants, pinned_to_node

pytestmark = pytest.mark.cluster

PLAN = "distributetrain.io/plan"
TENANT_IMAGE = "registry.k8s.io/pause:3.10"
# Each local node is a kubelet on this 2-core machine: 2 CPUs allocatable. A tenant
# holding 1900m leaves no room for a job pod of --cpu-per-gpu=250m.
TENANT_CPU = "1900m"
# GPU Feature Discovery's labels on a node whose one GPU the device plugin time-slices 4 ways.
TIME_SLICED = {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4",
               "nvidia.com/gpu.count": "1", "nvidia.com/gpu.product": "Tesla-T4-SHARED"}
JOB_SIZING = ("--cpu-per-gpu=250m", "--memory-per-gpu=256Mi")


def cpu_pod(name: str, node: str, cpu: str) -> dict:
    """Another team's pod without GPUs that holds `cpu` of `node`."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"affinity": pinned_to_node(node), "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "main", "image": TENANT_IMAGE,
                                     "resources": {"requests": {"cpu": cpu}}}]}}


@contextmanager
def labelled_nodes(cluster, pool, spec: dict[str, int], labels: dict[str, str]):
    """Nodes added to ``pool`` with extra labels (as GPU Feature Discovery sets them)."""
    for logical in spec:
        pool.names[logical] = pool.hostnames[logical] = f"{pool.prefix}-{logical}"
    group = cluster.add_nodes({pool.names[k]: v for k, v in spec.items()},
                              labels={TEST_NODE_LABEL: pool.prefix, **labels})
    try:
        yield group
    finally:
        group.stop()


def planned(jobs, job: str) -> dict[str, int]:
    return dict(parse_plan(jobs.pod(job)["metadata"]["annotations"].get(PLAN, "")))


def test_a_node_whose_cpu_other_pods_hold_is_left_out_of_the_plan(cluster, api_client, namespace, jobs, tmp_path):
    # a, b and c hold 3 GPUs on two nodes either as {a, c} or {b, c}; by GPUs alone the
    # planner picks a (ties go by name), whose CPU the tenant holds.
    with node_pool(cluster, {"a": 2, "b": 2, "c": 1}) as pool, other_tenants(api_client) as tenants, \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
        tenant = f"cpu-{uuid.uuid4().hex[:6]}"
        create_pod(tenants.core, tenants.namespace, cpu_pod(tenant, pool.node("a"), TENANT_CPU))
        tenants.pods.append(tenant)
        tenants.wait_running(tenant)
        jobs.submit("room", job_args(pool, claim, 3, *JOB_SIZING))
        assert jobs.exit_code("room") == 0, jobs.report("room")
        assert planned(jobs, "room") == {pool.node("b"): 2, pool.node("c"): 1}, jobs.logs("room")


@pytest.mark.parametrize("allowed", [False, True], ids=["one-rank", "allowed"])
def test_a_time_sliced_node_gets_one_rank_unless_allowed(cluster, api_client, namespace, jobs, tmp_path, allowed):
    with node_pool(cluster, {"a": 1, "b": 1}) as pool, labelled_nodes(cluster, pool, {"s": 4}, TIME_SLICED), \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
        extra = (*JOB_SIZING, "--allow-shared-gpus") if allowed else JOB_SIZING
        jobs.submit("shared", job_args(pool, claim, 3, *extra))
        assert jobs.exit_code("shared") == 0, jobs.report("shared")
        plan = planned(jobs, "shared")
        if allowed:
            assert plan == {pool.node("s"): 3}, jobs.logs("shared")
        else:
            assert plan == {pool.node("a"): 1, pool.node("b"): 1, pool.node("s"): 1}, jobs.logs("shared")


def test_job_pods_ask_autoscalers_to_leave_their_nodes_alone(cluster, api_client, namespace, jobs, tmp_path):
    with node_pool(cluster, {"a": 1, "b": 1}) as pool, script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
        jobs.submit("stay", job_args(pool, claim, 2, *JOB_SIZING, script_args=("0", "5")))
        chief = jobs.wait_for("stay-chief", lambda pod: pod["status"].get("phase") == "Running", 120)
        worker = jobs.pod("stay-worker-0")
        for pod in (chief, worker):
            annotations = pod["metadata"]["annotations"]
            assert annotations["karpenter.sh/do-not-disrupt"] == "true"
            assert annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false"
        assert jobs.exit_code("stay") == 0, jobs.report("stay")
        assert client.CoreV1Api(api_client).list_namespaced_pod(
            namespace, label_selector="distributetrain.io/role=worker").items == []
