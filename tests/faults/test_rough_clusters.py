"""Jobs on a cluster as rough as the ones users run (tests/roughness.py, localcluster's
kubelet restarts and slow pulls): a node's kubelet restarting, another tenant after the
chief's GPUs during a long image pull, a restart on a cluster the job fills exactly, and
drains, of a worker's node and of the manager's.

Every node pool's first node is named as on EKS (jobharness.NodePool), so every job here
also runs where a Node's name and its hostname label differ."""

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml
from kubernetes import client

from distributetrain.core.placement.placement import parse_plan
from harness.polling import poll_until
from jobharness import HOLD_UNTIL_RELEASED, REPO, SCRIPTS, job_args, more_nodes, node_pool, release_ranks, \
    script_volume
from roughness import drain, other_tenants, uncordon

pytestmark = pytest.mark.cluster

HOLD = ("0", "hold")  # hello.py exits 0 once the test releases its ranks
BASE_IMAGE = "distributetrain/base:0.1.0"  # the job's image, as job_args names it
RESTARTS = "distributetrain.io/restarts"
RESTART_REASON = "distributetrain.io/last-restart-reason"
PLAN = "distributetrain.io/plan"
TRAINING_TIMEOUT_S = 120.0
RESTART_TIMEOUT_S = 60.0
NODE_TIMEOUT_S = 60.0
POLL_S = 0.2
KUBELET_DOWN_S = 3
# containerd stays down until the node is reported not Ready and tainted (the kubelet
# notices "container runtime is down" within 10 to 30 s), then comes back at once: the node
# is back Ready some 10 s later, inside the job pods' 30 s toleration of the taint
# (settings.NODE_LOST_TOLERATION_S), which a fixed outage could outlast.
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
# How long after the node is Ready again the job must still be untouched: the old node
# watch deleted the job's pods on the first not-Ready report, within a second or two.
AFTER_RESTART_S = 5.0
SLOW_PULL_S = 60
# Created with its workers, the chief is bound at once: well before their 60 s pulls end.
CHIEF_BOUND_TIMEOUT_S = 30.0
# A rank that saves its work when told to stop (SIGTERM), taking most of its pod's 10 s
# grace period: the lost attempt's pods stay terminating, their GPUs still counted.
SAVE_S = 8
SAVES_ON_SIGTERM = HOLD_UNTIL_RELEASED + f"""\
import os, signal, sys, time
def save_and_exit(signum, frame):
    time.sleep({SAVE_S})
    sys.exit(143)
signal.signal(signal.SIGTERM, save_and_exit)
print(f"rank={{os.environ.get('HOROVOD_RANK')}} size={{os.environ.get('HOROVOD_SIZE')}}", flush=True)
hold_until_released()
"""
STILL_TERMINATING_AFTER_S = 3.0  # restarts.RESTART_BACKOFF_S and a second
# Job pods only on the GPU nodes of a pool: the manager, which tolerates nothing, goes to
# the pool's GPU-less node, so a drain of a worker's node never touches it.
JOB_PODS_ONLY = "distributetrain.test/job-pods-only"
REFUSED_DRAIN_S = 5.0  # how long the drain of the manager's node keeps trying the eviction


def wait_training(jobs, job: str, ranks: int) -> None:
    """Until every rank of the job's first chief says it runs (its first line), holding."""
    poll_until(lambda: all(f"rank={r} size={ranks}" in jobs.log_tail(f"{job}-chief") for r in range(ranks)),
               TRAINING_TIMEOUT_S, lambda: f"{ranks} ranks of {job} training; the manager's log:\n{jobs.log_tail(job)}")


def annotations(jobs, job: str) -> dict:
    return jobs.pod(job)["metadata"].get("annotations") or {}


def wait_restarted(jobs, job: str) -> None:
    """Until the manager has recorded its first restart (after the lost attempt's teardown)."""
    jobs.wait_for(job, lambda p: (p["metadata"].get("annotations") or {}).get(RESTARTS) == "1", RESTART_TIMEOUT_S)


def wait_nothing_held(jobs, job: str, timeout_s: float = 60.0) -> None:
    """No pod of the job left that is not finished (a finished chief stays for its logs), no Secret."""
    def held() -> list[str]:
        pods = [name for name, pod in jobs.pods().items() if name.startswith(f"{job}-")
                and pod["status"].get("phase") not in ("Succeeded", "Failed")]
        return pods + [f"secret/{s}" for s in jobs.secrets(f"{job}-")]

    poll_until(lambda: not held(), timeout_s, lambda: f"nothing of job {job} held; left behind: {held()}")


def node_readiness(core: client.CoreV1Api, node: str) -> tuple[str, str, set[str]]:
    """The Node's Ready status, its reason, and the keys of its NoExecute taints."""
    raw = json.loads(core.read_node(node, _preload_content=False).data)
    ready = next(c for c in raw["status"]["conditions"] if c["type"] == "Ready")
    taints = {t["key"] for t in raw["spec"].get("taints") or () if t["effect"] == "NoExecute"}
    return ready["status"], ready.get("reason", ""), taints


def tenant_unschedulable(tenants, name: str) -> str:
    """The scheduler's message if it left the tenant's pod unscheduled, else ""."""
    raw = json.loads(tenants.core.read_namespaced_pod(name, tenants.namespace, _preload_content=False).data)
    scheduled = next((c for c in raw["status"].get("conditions") or () if c["type"] == "PodScheduled"), {})
    return scheduled.get("message", "") if scheduled.get("status") == "False" and not raw["spec"].get(
        "nodeName") else ""


def test_a_job_survives_kubelet_and_containerd_restarts_of_a_workers_node(cluster, api_client, namespace, jobs,
                                                                          tmp_path):
    """Mid-training, the worker's node has its kubelet killed and started again, then its
    containerd down until the node reports Ready=False ("container runtime is down") and
    the node lifecycle controller taints it, while the pods run on. The job, without any
    restart to spend, trains on and exits 0."""
    core = client.CoreV1Api(api_client)
    with node_pool(cluster, {"a": 1, "b": 1}) as pool, \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
        jobs.submit("flap", job_args(pool, claim, 2, "--max-restarts=0", script_args=HOLD))
        wait_training(jobs, "flap", 2)
        worker = jobs.pod("flap-worker-0")
        worker_node = worker["spec"]["nodeName"]
        cluster.restart_kubelet(worker_node, down_s=KUBELET_DOWN_S)
        seen: list[tuple[str, str, set[str]]] = []

        def tainted_not_ready() -> bool:
            return any(status == "False" and NOT_READY_TAINT in taints for status, _, taints in seen)

        give_up_at = time.monotonic() + 2 * NODE_TIMEOUT_S
        with ThreadPoolExecutor(max_workers=1) as background:  # watched while it happens
            restarted = background.submit(cluster.restart_containerd, worker_node, until=tainted_not_ready)
            while not (seen and seen[-1][0] == "True" and any(s[0] == "False" for s in seen)):
                assert time.monotonic() < give_up_at, f"node {worker_node} did not go not Ready and back: {seen}"
                now = node_readiness(core, worker_node)
                if not seen or seen[-1] != now:  # the changes alone
                    seen.append(now)
                time.sleep(POLL_S)
            restarted.result()
        assert ("False", "KubeletNotReady") in {(status, reason) for status, reason, _ in seen}, seen
        # The node lifecycle controller noticed: it tainted the node, as for any not-Ready kubelet.
        assert any(NOT_READY_TAINT in taints for _, _, taints in seen), seen
        time.sleep(AFTER_RESTART_S)
        after = jobs.pod("flap-worker-0")
        assert after is not None and after["metadata"]["uid"] == worker["metadata"]["uid"] and not after[
            "metadata"].get("deletionTimestamp"), f"the worker was lost; node readiness {seen}\n{jobs.logs('flap')}"
        release_ranks(tmp_path)
        assert jobs.exit_code("flap") == 0, jobs.report("flap")
        assert annotations(jobs, "flap").get(RESTARTS, "0") == "0", jobs.logs("flap")
        assert "NodeLost" not in jobs.logs("flap")
        wait_nothing_held(jobs, "flap")


def test_a_tenant_after_the_chiefs_gpus_during_a_slow_pull_stays_pending(cluster, api_client, namespace, jobs,
                                                                           tmp_path):
    """The chief holds its GPUs from its creation, through 60 s image pulls (its own and its
    worker's, as on fresh nodes pulling a multi-GB image): another tenant's pod asking for
    them stays Pending, and the job trains and exits 0. (A chief created only once its
    workers were Ready, pulls included, would lose its GPU to the tenant: exit 75.)"""
    with node_pool(cluster, {"a": 2, "b": 1}) as pool, \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim, \
            other_tenants(api_client) as tenants:
        # The plan: a=2 (the worker), b=1 (the chief: the last, smallest share).
        worker_node, chief_node = pool.node("a"), pool.node("b")
        cluster.set_pull_delays({BASE_IMAGE: SLOW_PULL_S}, nodes=[worker_node, chief_node])
        try:
            for node in (worker_node, chief_node):
                cluster.forget_images(node)
            # The workers' start, their pull included, is waited for within --worker-ready-timeout.
            jobs.submit("pull", job_args(pool, claim, 3, "--worker-ready-timeout=3m"))
            chief = jobs.wait_for("pull-chief", lambda p: bool(p["spec"].get("nodeName")), CHIEF_BOUND_TIMEOUT_S)
            assert chief["spec"]["nodeName"] == chief_node
            tenant = tenants.take(chief_node, 1)
            pending = poll_until(lambda: tenant_unschedulable(tenants, tenant), NODE_TIMEOUT_S,
                                 f"tenant {tenant} refused by the scheduler", POLL_S)
            assert "Insufficient nvidia.com/gpu" in pending, pending
            # Refused while both pulls go on (bound, no container started yet), not after them.
            for pod in ("pull-worker-0", "pull-chief"):
                assert jobs.pod(pod)["status"]["phase"] == "Pending", jobs.pod(pod)["status"]
            assert jobs.exit_code("pull") == 0, jobs.report("pull")
            pulled = [e.message for e in jobs.core.list_namespaced_event(
                namespace, field_selector="involvedObject.name=pull-chief,reason=Pulled").items]
            assert any(f'Successfully pulled image "{BASE_IMAGE}" in 1m' in m for m in pulled), pulled
            assert "rank=2 size=3" in jobs.logs("pull-chief")
        finally:
            cluster.set_pull_delays({}, nodes=[worker_node, chief_node])
        wait_nothing_held(jobs, "pull")


def test_a_restart_on_a_cluster_the_job_fills_exactly_waits_for_its_own_pods(cluster, api_client, namespace, jobs,
                                                                             tmp_path):
    """Every GPU of the pool is the job's: the next attempt can plan only once the lost
    attempt's pods are gone, which takes their ranks' SIGTERM handlers 8 s, and it does
    (a manager planning 2 s after the loss would find no GPU free and exit 69)."""
    with node_pool(cluster, {"a": 1, "b": 1}) as pool, \
            script_volume(api_client, namespace, {"saves.py": SAVES_ON_SIGTERM}, tmp_path) as claim:
        args = job_args(pool, claim, 2, "--max-restarts=1")
        args[args.index("--filename=/work/hello.py")] = "--filename=/work/saves.py"
        jobs.submit("full", args)
        wait_training(jobs, "full", 2)
        jobs.core.delete_namespaced_pod("full-worker-0", namespace)
        # Still there, its GPU still counted, when a restart after its 2 s back-off plans.
        time.sleep(STILL_TERMINATING_AFTER_S)
        assert jobs.pod("full-worker-0"), "the lost worker went before the restart's back-off ended"
        wait_restarted(jobs, "full")
        release_ranks(tmp_path)  # the second attempt's ranks end at once
        assert jobs.exit_code("full") == 0, jobs.report("full")
        assert annotations(jobs, "full")[RESTARTS] == "1"
        assert annotations(jobs, "full")[RESTART_REASON].startswith("pod full-worker-0 "), annotations(jobs, "full")
        assert "rank=1 size=2" in jobs.logs("full-chief-r1")
        wait_nothing_held(jobs, "full")


def gpu_nodes_for_jobs_only(cluster, pool, spec: dict[str, int]):
    """GPU nodes in ``pool`` that only job pods (tolerating JOB_PODS_ONLY) go to."""
    return more_nodes(cluster, pool, spec, taints=[f"{JOB_PODS_ONLY}:NoSchedule"])


def test_a_drain_of_a_workers_node_restarts_the_job_on_the_other_nodes(cluster, api_client, namespace, jobs,
                                                                        tmp_path):
    """kubectl drain of a worker's node evicts the worker (the Eviction API): with a restart
    left and a spare node, the job trains again on the nodes left and exits 0, the
    eviction named as the restart's cause."""
    with node_pool(cluster, {"m": 0}) as pool, gpu_nodes_for_jobs_only(cluster, pool, {"a": 1, "b": 1, "c": 1}), \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
        jobs.submit("drained", job_args(pool, claim, 2, "--max-restarts=1", f"--toleration={JOB_PODS_ONLY}",
                                        script_args=HOLD))
        wait_training(jobs, "drained", 2)
        assert jobs.pod("drained")["spec"]["nodeName"] == pool.node("m")
        worker_node = jobs.pod("drained-worker-0")["spec"]["nodeName"]
        try:
            outcome = drain(api_client, worker_node)
            assert outcome.evicted == (f"{namespace}/drained-worker-0",) and outcome.complete, outcome
            wait_restarted(jobs, "drained")
            release_ranks(tmp_path)  # the second attempt's ranks end at once
            assert jobs.exit_code("drained") == 0, jobs.report("drained")
            reason = annotations(jobs, "drained")[RESTART_REASON]
            # The Eviction API's own words, from the pod's DisruptionTarget condition.
            assert reason == "pod drained-worker-0 is being deleted (Eviction API: evicting)", reason
            # The second attempt's plan: the two GPU nodes left.
            second_plan = parse_plan(annotations(jobs, "drained")[PLAN])
            assert sorted(node for node, _ in second_plan) == sorted(
                {pool.node(n) for n in "abc"} - {worker_node}), jobs.logs("drained")
        finally:
            uncordon(api_client, worker_node)
        wait_nothing_held(jobs, "drained")


def manager_pdb(namespace: str) -> dict:
    """docs/manager-pdb.yaml, in the test's namespace."""
    pdb = yaml.safe_load((REPO / "docs" / "manager-pdb.yaml").read_text())
    pdb["metadata"]["namespace"] = namespace
    return pdb


def counts_one_manager(policy: client.PolicyV1Api, namespace: str, name: str) -> bool:
    """The disruption controller has counted one healthy manager and allows no eviction."""
    status = policy.read_namespaced_pod_disruption_budget(name, namespace).status
    return bool(status) and status.current_healthy == 1 and status.disruptions_allowed == 0


def test_a_drain_of_the_managers_node_is_refused_by_the_managers_pdb(cluster, api_client, namespace, jobs, tmp_path):
    """docs/manager-pdb.yaml in the job's namespace: kubectl drain of the manager's node
    cannot evict the running manager (429, the disruption budget), and the job, which
    would have failed with its manager, finishes with exit 0."""
    policy = client.PolicyV1Api(api_client)
    pdb = manager_pdb(namespace)
    policy.create_namespaced_pod_disruption_budget(namespace, pdb)
    with node_pool(cluster, {"m": 0}) as pool, gpu_nodes_for_jobs_only(cluster, pool, {"a": 1, "b": 1}), \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
        jobs.submit("kept", job_args(pool, claim, 2, f"--toleration={JOB_PODS_ONLY}", script_args=HOLD))
        wait_training(jobs, "kept", 2)
        manager_node = jobs.pod("kept")["spec"]["nodeName"]
        assert manager_node == pool.node("m")
        # The disruption controller has counted the running manager: no eviction allowed.
        poll_until(lambda: counts_one_manager(policy, namespace, pdb["metadata"]["name"]), NODE_TIMEOUT_S,
                   "the PDB counting the manager (1 healthy, no disruption allowed)", POLL_S)
        try:
            outcome = drain(api_client, manager_node, timeout_s=REFUSED_DRAIN_S)
            assert outcome.evicted == () and list(outcome.refused) == [f"{namespace}/kept"], outcome
            assert "disruption budget" in outcome.refused[f"{namespace}/kept"], outcome
            assert not jobs.pod("kept")["metadata"].get("deletionTimestamp")
            release_ranks(tmp_path)
            assert jobs.exit_code("kept") == 0, jobs.report("kept")
        finally:
            uncordon(api_client, manager_node)
        wait_nothing_held(jobs, "kept")
