"""Scale-up with the real Karpenter (``--scale-up-node-gpus``): a job short of GPUs makes the
cluster grow, trains on the nodes Karpenter adds, and leaves them empty for consolidation;
a job whose nodes cannot come gives up with 69 naming why, and leaves nothing.

Karpenter runs for this module (a real node per NodeClaim, ``localcluster/localcluster/nodeclaims.py``).
Each test's NodePool of ``gpu-8x`` nodes (8 GPUs, 1900m CPU allocatable) is tainted for the
test's namespace and labels its nodes with the test's node label: the job selects and
tolerates exactly those (and its own static nodes), so no other test's pods get them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from kubernetes import client

from distributetrain.core import exitcodes
from distributetrain.core.placement import parse_plan
from jobharness import SCRIPTS, TEST_NODE_LABEL, job_args, node_pool, script_volume
from karpenterharness import ISOLATION_TAINT, claims_of, karpenter_pool, running_karpenter
from harness.polling import poll_until
from roughness import other_tenants

pytestmark = pytest.mark.cluster

BOOT_DELAY = "5s"  # the NodeClass's nodeRegistrationDelay: a cloud GPU node's minutes, in seconds
# gpu-8x has 1900m CPU and 16Gi allocatable: an 8-GPU pod must fit it.
SIZING = ("--cpu-per-gpu=100m", "--memory-per-gpu=512Mi")
CLAIMS_TIMEOUT_S = 120  # the manager's start and plan, then Karpenter's batching of pending pods (1-10 s)
JOB_FINISH_TIMEOUT_S = 420  # two nodes booted and registered, the job, its teardown
# consolidateAfter, Karpenter's 10 s disruption passes and its 15 s validation, the node's stop
CONSOLIDATED_TIMEOUT_S = 240
PODS_GONE_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def karpenter_running(cluster):
    """Karpenter, for this module: stopped after it, with every node it launched."""
    with running_karpenter(cluster):
        yield cluster


@contextmanager
def karpenter_nodes_of(cluster, api_client, namespace: str, nodes_label: str, gpu_limit: int) -> Iterator[str]:
    """The test's NodePool of gpu-8x nodes (``karpenterharness``), labelled as its own nodes."""
    with karpenter_pool(cluster, api_client, namespace, gpu_limit, BOOT_DELAY,
                        labels={TEST_NODE_LABEL: nodes_label}) as pool:
        yield pool


def scale_up_args(pool, claim: str, namespace: str, wait: str) -> list[str]:
    """A 12-GPU hello.py job on the test's nodes and its Karpenter nodes, growing by 8-GPU nodes."""
    return job_args(pool, claim, 12, *SIZING, "--scale-up-node-gpus=8", f"--wait-for-gpus={wait}",
                    "--worker-ready-timeout=120s", "--delete-chief",
                    f"--toleration={ISOLATION_TAINT}={namespace}:NoSchedule")


def job_pods_of(jobs, name: str) -> dict[str, dict]:
    return {pod: p for pod, p in jobs.pods().items() if p["metadata"]["labels"].get("distributetrain.io/job") == name
            and pod != name}


def recorded_plan(jobs, name: str) -> list[tuple[str, int]]:
    """The plan on the manager pod: with the added nodes' names once its pods were bound."""
    return parse_plan(jobs.pod(name)["metadata"]["annotations"].get("distributetrain.io/plan", ""))


def launched_claims(custom: client.CustomObjectsApi, pool: str, count: int) -> set[str]:
    def launched():
        names = {c["metadata"]["name"] for c in claims_of(custom, pool) if c.get("status", {}).get("providerID")}
        return names if len(names) >= count else None

    return poll_until(launched, CLAIMS_TIMEOUT_S, f"{count} NodeClaims of NodePool {pool} launched")


def test_a_job_on_no_gpu_node_makes_karpenter_add_two_and_they_go_after(karpenter_running, api_client, namespace,
                                                                        jobs, tmp_path):
    custom = client.CustomObjectsApi(api_client)
    with node_pool(karpenter_running, {"m": 0}) as pool, \
            karpenter_nodes_of(karpenter_running, api_client, namespace, pool.prefix, gpu_limit=16) as karpenter_nodes, \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
        jobs.submit("grows", scale_up_args(pool, claim, namespace, "5m"))
        worker = jobs.wait_for("grows-worker-0", lambda p: True, 120)
        assert worker["metadata"]["annotations"]["distributetrain.io/awaits-new-node"] == "true"
        claimed = launched_claims(custom, karpenter_nodes, 2)
        assert jobs.exit_code("grows", JOB_FINISH_TIMEOUT_S) == exitcodes.OK, jobs.report("grows")
        assert "(new node)=8,(new node)=4" in jobs.logs("grows")
        plan = recorded_plan(jobs, "grows")
        assert sorted(share for _, share in plan) == [4, 8] and {node for node, _ in plan} == claimed, (plan, claimed)
        jobs.wait_gone(list(job_pods_of(jobs, "grows")), PODS_GONE_TIMEOUT_S)  # deleted at the end, their grace period
        poll_until(lambda: not claims_of(custom, karpenter_nodes), CONSOLIDATED_TIMEOUT_S,
                   f"Karpenter to consolidate the job's empty nodes {sorted(claimed)}")


def test_a_half_taken_node_gives_its_free_gpus_and_only_the_rest_is_added(karpenter_running, api_client, namespace,
                                                                          jobs, tmp_path):
    custom = client.CustomObjectsApi(api_client)
    with node_pool(karpenter_running, {"a": 8}) as pool, other_tenants(api_client) as tenants, \
            karpenter_nodes_of(karpenter_running, api_client, namespace, pool.prefix, gpu_limit=16) as karpenter_nodes, \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
        tenants.wait_running(tenants.take(pool.node("a"), 4))
        jobs.submit("fills", scale_up_args(pool, claim, namespace, "5m"))
        (added,) = launched_claims(custom, karpenter_nodes, 1)
        assert jobs.exit_code("fills", JOB_FINISH_TIMEOUT_S) == exitcodes.OK, jobs.report("fills")
        log = jobs.logs("fills")
        assert f"(new node)=8,{pool.node('a')}=4" in log, log
        assert recorded_plan(jobs, "fills") == [(added, 8), (pool.node("a"), 4)]
        assert {c["metadata"]["name"] for c in claims_of(custom, karpenter_nodes)} <= {added}  # only the rest added
        poll_until(lambda: not claims_of(custom, karpenter_nodes), CONSOLIDATED_TIMEOUT_S,
                   f"Karpenter to consolidate the job's empty node {added}")


def test_a_job_whose_node_pool_is_too_small_gives_up_with_69_and_leaves_nothing(karpenter_running, api_client,
                                                                                namespace, jobs, tmp_path):
    """Limits of 8 GPUs: Karpenter adds one node for one share and refuses the other ("exceed
    limits"); after --wait-for-gpus the job exits 69 naming it, and every pod and node goes."""
    custom = client.CustomObjectsApi(api_client)
    with node_pool(karpenter_running, {"m": 0}) as pool, \
            karpenter_nodes_of(karpenter_running, api_client, namespace, pool.prefix, gpu_limit=8) as karpenter_nodes, \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
        jobs.submit("gives-up", scale_up_args(pool, claim, namespace, "2m"))
        assert jobs.exit_code("gives-up", JOB_FINISH_TIMEOUT_S) == exitcodes.INSUFFICIENT_GPUS, jobs.report("gives-up")
        log = jobs.logs("gives-up")
        assert "did not add the 2 nodes the job's pods wait for within --wait-for-gpus (120s)" in log, log
        assert "exceed limits" in log, log
        jobs.wait_gone(list(job_pods_of(jobs, "gives-up")), PODS_GONE_TIMEOUT_S)  # deleted at once, their grace period
        poll_until(lambda: not claims_of(custom, karpenter_nodes), CONSOLIDATED_TIMEOUT_S,
                   "no NodeClaim of the job left (the one added, emptied, consolidated)")
