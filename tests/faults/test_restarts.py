"""--max-restarts on the local cluster: a pod lost mid-training starts the job again,
re-planned under fresh pod names; the restart is recorded on the manager pod. The first
test runs in a namespace that enforces PodSecurity `restricted`."""

import os
import signal

import pytest
from kubernetes import client

from jobharness import SCRIPTS, job_args, more_nodes, node_pool, script_volume
from harness.polling import poll_until

pytestmark = pytest.mark.cluster

# Every start appends to /work/starts (rank 0); ranks of the first start then train
# "for ever" (until the fault), those of a later start finish at once, as a script
# resuming from its last checkpoint would.
RESUMABLE = """\
import os, sys, time
rank = os.environ.get("HOROVOD_RANK")
if rank == "0":
    with open("/work/starts", "a") as f:
        f.write("x")
time.sleep(3)
starts = len(open("/work/starts").read())
print(f"rank={rank} start={starts} host={os.uname().nodename}", flush=True)
if starts == 1:
    time.sleep(300)
"""
# Only job pods go on the node the test loses: the manager must not be on it.
LOSABLE = "distributetrain.test/losable"
NODE_LOST_TIMEOUT_S = 240  # the node controller's verdict (50 s grace) plus a restart


def wait_for_first_start(jobs, job: str) -> None:
    poll_until(lambda: all(f"rank={r} start=1" in jobs.log_tail(f"{job}-chief") for r in (0, 1)), 180,
               lambda: f"both ranks started; the manager's log:\n{jobs.log_tail(job)}")


def test_a_worker_deleted_mid_training_restarts_the_job_which_finishes(cluster, api_client, restricted, jobs,
                                                                        tmp_path):
    """In a namespace enforcing PodSecurity `restricted`: the restart's pods pass it too."""
    namespace = restricted
    with node_pool(cluster, {"a": 1, "b": 1, "c": 1}) as pool, \
            script_volume(api_client, namespace, {"resumable.py": RESUMABLE}, tmp_path) as claim:
        args = job_args(pool, claim, 2, "--max-restarts=1")
        args[args.index("--filename=/work/hello.py")] = "--filename=/work/resumable.py"
        jobs.submit("again", args)
        wait_for_first_start(jobs, "again")
        jobs.core.delete_namespaced_pod("again-worker-0", namespace)
        assert jobs.exit_code("again") == 0, jobs.log_tail("again")
        annotations = jobs.pod("again")["metadata"]["annotations"]
        assert annotations["distributetrain.io/restarts"] == "1"
        assert annotations["distributetrain.io/attempt"] == "1"
        assert annotations["distributetrain.io/last-restart-reason"].startswith("pod again-worker-0 ")
        assert "restart 1 of 1 (attempt 1)" in jobs.logs("again")
        # The second attempt ran under fresh names and found the first one's start.
        chief_log = jobs.log_tail("again-chief-r1")
        assert "rank=0 start=2" in chief_log and "rank=1 start=2" in chief_log
        jobs.wait_gone(["again-worker-0", "again-chief", "again-worker-0-r1"])
        assert jobs.secrets("again") == []


def test_a_worker_node_lost_mid_training_restarts_the_job_on_a_ready_node(cluster, api_client, namespace, jobs,
                                                                          tmp_path):
    """The worker's node stops reporting: its kubelet is frozen (SIGSTOP), as a hung kubelet or a node cut
    off from the control plane would be (its pods go on running). As soon as the node
    controller marks the node not Ready, the manager deletes the job's pods there itself (not
    30 s later, when the taint would evict them) and the next attempt trains on Ready nodes."""
    core = client.CoreV1Api(api_client)
    with node_pool(cluster, {"b": 1, "c": 1}) as pool, \
            more_nodes(cluster, pool, {"a": 1}, taints=[f"{LOSABLE}:NoSchedule"]) as losable, \
            script_volume(api_client, namespace, {"resumable.py": RESUMABLE}, tmp_path) as claim:
        core.patch_node(pool.node("c"), {"spec": {"unschedulable": True}})  # the spare, for the second attempt
        args = job_args(pool, claim, 2, "--max-restarts=1", "--wait-for-gpus=2m", f"--toleration={LOSABLE}")
        args[args.index("--filename=/work/hello.py")] = "--filename=/work/resumable.py"
        jobs.submit("nodelost", args)
        wait_for_first_start(jobs, "nodelost")
        assert jobs.pod("nodelost-worker-0")["spec"]["nodeName"] == pool.node("a")
        core.patch_node(pool.node("c"), {"spec": {"unschedulable": False}})
        os.kill(losable.kubelet_pid(pool.node("a")), signal.SIGSTOP)
        try:
            assert jobs.exit_code("nodelost", timeout_s=NODE_LOST_TIMEOUT_S) == 0, jobs.log_tail("nodelost")
            annotations = jobs.pod("nodelost")["metadata"]["annotations"]
            assert annotations["distributetrain.io/restarts"] == "1"
            # Deleted by the manager for its node, not evicted by the taint 30 s later: an
            # eviction first would have been the cause ("Taint manager: deleting due to
            # NoExecute taint"), and the node watch leaves a terminating pod alone. (The taint
            # still marks the pod later, as it stays terminating on the frozen node.)
            assert annotations["distributetrain.io/last-restart-reason"] == (
                f"pod nodelost-worker-0 is being deleted (its node {pool.node('a')} is not Ready "
                "(NodeStatusUnknown: Kubelet stopped posting node status.))"), jobs.logs("nodelost")
            chief_log = jobs.log_tail("nodelost-chief-r1")
            assert "rank=0 start=2" in chief_log and "rank=1 start=2" in chief_log
        finally:
            os.kill(losable.kubelet_pid(pool.node("a")), signal.SIGCONT)
        jobs.wait_gone(["nodelost-worker-0", "nodelost-chief", "nodelost-worker-0-r1"])
        assert jobs.secrets("nodelost") == []


def test_a_worker_node_lost_while_the_worker_starts_restarts_the_job_on_a_ready_node(cluster, api_client, namespace,
                                                                                     jobs, tmp_path):
    """The node's kubelet is frozen before the job is planned, so its worker never starts: the
    manager deletes it at the node controller's verdict, long before --worker-ready-timeout,
    and the restart trains on Ready nodes."""
    with node_pool(cluster, {"b": 1, "c": 1}) as pool, \
            more_nodes(cluster, pool, {"a": 1}, taints=[f"{LOSABLE}:NoSchedule"]) as losable, \
            script_volume(api_client, namespace, SCRIPTS, tmp_path) as claim:
        os.kill(losable.kubelet_pid(pool.node("a")), signal.SIGSTOP)
        try:
            jobs.submit("startlost", job_args(pool, claim, 2, "--max-restarts=1", "--worker-ready-timeout=5m",
                                              f"--toleration={LOSABLE}"))
            assert jobs.exit_code("startlost", timeout_s=NODE_LOST_TIMEOUT_S) == 0, jobs.log_tail("startlost")
            annotations = jobs.pod("startlost")["metadata"]["annotations"]
            assert annotations["distributetrain.io/restarts"] == "1"
            assert annotations["distributetrain.io/last-restart-reason"] == (
                f"pod startlost-worker-0 is being deleted (its node {pool.node('a')} is not Ready "
                "(NodeStatusUnknown: Kubelet stopped posting node status.)) before training started"), \
                jobs.logs("startlost")
            manager_log = jobs.logs("startlost")
            assert f"plan {pool.node('b')}=1,{pool.node('c')}=1" in manager_log, manager_log  # not on the lost node
        finally:
            os.kill(losable.kubelet_pid(pool.node("a")), signal.SIGCONT)
        jobs.wait_gone(["startlost-worker-0", "startlost-chief", "startlost-worker-0-r1"])
        assert jobs.secrets("startlost") == []
