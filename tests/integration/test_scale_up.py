"""Scale-up with the real Karpenter (``--scale-up-node-gpus``): a job short of GPUs makes the
cluster grow, trains on the nodes Karpenter adds (in its running shares' zone, however long
they take to boot), and leaves them empty for consolidation; a job whose nodes cannot come
gives up with 69 naming why (at once when no node Karpenter can add would hold its pods),
and leaves nothing.

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
from distributetrain.core.placement.placement import parse_plan
from jobharness import SCRIPTS, TEST_NODE_LABEL, job_args, node_pool, script_volume
from karpenterharness import ISOLATION_TAINT, claims_of, karpenter_pool, running_karpenter
from harness.polling import poll_until
from roughness import other_tenants

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("karpenter")]

BOOT_DELAY = "5s"  # the NodeClass's nodeRegistrationDelay: a cloud GPU node's minutes, in seconds
# A job whose chief would give up on its hosts after 30 + 5 + 60 s, had it only the bound of
# its start (--worker-ready-timeout, --image-pull-timeout and a minute): its new node boots longer.
SHORT_START = ("--worker-ready-timeout=30s", "--image-pull-timeout=5s")
SLOW_BOOT = "120s"
ZONE = "topology.kubernetes.io/zone"
REFUSED_TIMEOUT_S = 90  # the manager's start and plan, Karpenter's batching, its refusal: well within --wait-for-gpus
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
def karpenter_nodes_of(cluster, api_client, namespace: str, nodes_label: str, gpu_limit: int,
                       boot_delay: str = BOOT_DELAY) -> Iterator[str]:
    """The test's NodePool of gpu-8x nodes (``karpenterharness``), labelled as its own nodes."""
    with karpenter_pool(cluster, api_client, namespace, gpu_limit, boot_delay,
                        labels={TEST_NODE_LABEL: nodes_label}) as pool:
        yield pool


def scale_up_args(pool, claim: str, namespace: str, wait: str, *extra: str) -> list[str]:
    """A 12-GPU hello.py job on the test's nodes and its Karpenter nodes, growing by 8-GPU nodes."""
    return job_args(pool, claim, 12, *SIZING, "--scale-up-node-gpus=8", f"--wait-for-gpus={wait}",
                    "--worker-ready-timeout=120s", "--delete-chief",
                    f"--toleration={ISOLATION_TAINT}={namespace}:NoSchedule", *extra)


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
        assert worker["metadata"]["labels"]["distributetrain.io/awaits-new-node"] == "true"
        claimed = launched_claims(custom, karpenter_nodes, 2)
        assert jobs.exit_code("grows", JOB_FINISH_TIMEOUT_S) == exitcodes.OK, jobs.report("grows")
        assert "(new node)=8,(new node)=4" in jobs.logs("grows")
        plan = recorded_plan(jobs, "grows")
        assert sorted(share for _, share in plan) == [4, 8] and {node for node, _ in plan} == claimed, (plan, claimed)
        jobs.wait_gone(list(job_pods_of(jobs, "grows")), PODS_GONE_TIMEOUT_S)  # deleted at the end, their grace period
        poll_until(lambda: not claims_of(custom, karpenter_nodes), CONSOLIDATED_TIMEOUT_S,
                   f"Karpenter to consolidate the job's empty nodes {sorted(claimed)}")


def test_a_half_taken_node_gives_its_free_gpus_and_only_the_rest_is_added_in_its_zone(
        karpenter_running, api_client, namespace, jobs, tmp_path):
    """Node a, in zone-b, has 4 GPUs free: the chief takes them and starts at once; the other
    8 go on a node Karpenter adds in zone-b too (zone-a is cheaper), which boots for longer
    than the chief's wait for its hosts would be without the job's wait for nodes."""
    custom = client.CustomObjectsApi(api_client)
    with node_pool(karpenter_running, {"a": 8}, labels={ZONE: "zone-b"}) as pool, other_tenants(api_client) as tenants, \
            karpenter_nodes_of(karpenter_running, api_client, namespace, pool.prefix, gpu_limit=16,
                               boot_delay=SLOW_BOOT) as karpenter_nodes, \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
        tenants.wait_running(tenants.take(pool.node("a"), 4))
        jobs.submit("fills", scale_up_args(pool, claim, namespace, "5m", *SHORT_START))
        (added,) = launched_claims(custom, karpenter_nodes, 1)
        assert {c["metadata"]["name"]: c["metadata"]["labels"].get(ZONE) for c in claims_of(custom, karpenter_nodes)} \
            == {added: "zone-b"}
        assert jobs.exit_code("fills", JOB_FINISH_TIMEOUT_S) == exitcodes.OK, jobs.report("fills")
        log = jobs.logs("fills")
        assert f"(new node)=8,{pool.node('a')}=4" in log, log
        assert recorded_plan(jobs, "fills") == [(added, 8), (pool.node("a"), 4)]
        assert {c["metadata"]["name"] for c in claims_of(custom, karpenter_nodes)} <= {added}  # only the rest added
        poll_until(lambda: not claims_of(custom, karpenter_nodes), CONSOLIDATED_TIMEOUT_S,
                   f"Karpenter to consolidate the job's empty node {added}")


def test_a_job_whose_nodes_karpenter_can_never_add_exits_69_at_once_in_its_words(karpenter_running, api_client,
                                                                                 namespace, jobs, tmp_path):
    """Node a, in zone-c, has 4 GPUs: the other 8 must come in zone-c too, where Karpenter has
    no offering. Its refusal is final: the job exits 69 well before --wait-for-gpus, with
    Karpenter's words, and no node is launched."""
    custom = client.CustomObjectsApi(api_client)
    with node_pool(karpenter_running, {"a": 4}, labels={ZONE: "zone-c"}) as pool, \
            karpenter_nodes_of(karpenter_running, api_client, namespace, pool.prefix, gpu_limit=16) as karpenter_nodes, \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
        jobs.submit("nowhere", scale_up_args(pool, claim, namespace, "10m"))
        assert jobs.exit_code("nowhere", REFUSED_TIMEOUT_S) == exitcodes.INSUFFICIENT_GPUS, jobs.report("nowhere")
        log = jobs.logs("nowhere")
        assert "the cluster's autoscaler adds no node that could hold the job's pods: nowhere-worker-0: " \
               "Failed to schedule pod" in log, log
        assert claims_of(custom, karpenter_nodes) == []
        jobs.wait_gone(list(job_pods_of(jobs, "nowhere")), PODS_GONE_TIMEOUT_S)


def test_a_job_whose_node_pool_is_too_small_gives_up_with_69_and_leaves_nothing(karpenter_running, api_client,
                                                                                namespace, jobs, tmp_path):
    """Limits of 8 GPUs: Karpenter adds one node for one share and refuses the other ("exceed
    limits"). A NodePool's limits may free up as other nodes go: the job releases its pods at
    once, so they hold nothing, and waits for free GPUs; after --wait-for-gpus it exits 69
    naming the limits, and every pod and node goes."""
    custom = client.CustomObjectsApi(api_client)
    with node_pool(karpenter_running, {"m": 0}) as pool, \
            karpenter_nodes_of(karpenter_running, api_client, namespace, pool.prefix, gpu_limit=8) as karpenter_nodes, \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
        jobs.submit("gives-up", scale_up_args(pool, claim, namespace, "2m"))
        pods = list(job_pods_of(jobs, "gives-up")) or list(poll_until(
            lambda: job_pods_of(jobs, "gives-up"), CLAIMS_TIMEOUT_S, "the job's pods"))
        jobs.wait_gone(pods, REFUSED_TIMEOUT_S)  # released at once, long before --wait-for-gpus (2m)
        assert jobs.exit_code("gives-up", JOB_FINISH_TIMEOUT_S) == exitcodes.INSUFFICIENT_GPUS, jobs.report("gives-up")
        log = jobs.logs("gives-up")
        assert "the cluster's autoscaler adds no node for the job's pods for now" in log, log
        assert "exceed limits" in log, log
        poll_until(lambda: not claims_of(custom, karpenter_nodes), CONSOLIDATED_TIMEOUT_S,
                   "no NodeClaim of the job left (the one added, emptied, consolidated)")
