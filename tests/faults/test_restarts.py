"""--max-restarts on the local cluster: a pod lost mid-training starts the job again,
re-planned under fresh pod names; the restart is recorded on the manager pod. The first
test runs in a namespace that enforces PodSecurity `restricted`."""

import os
import signal
import time

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


# Each rank waits for /work/go (written by the test), so the job ends when the test says.
UNTIL_GO = """\
import os, sys, time
print(f"rank={os.environ.get('HOROVOD_RANK')} waiting", flush=True)
give_up_at = time.monotonic() + 600
while not os.path.exists("/work/go") and time.monotonic() < give_up_at:
    time.sleep(0.5)
sys.exit(0 if os.path.exists("/work/go") else 1)
"""
# Past the taint's eviction at the default toleration (30 s), and the manager's own
# deletion of the pods 10 s after the taint.
SPELL_AFTER_TAINT_S = 45


def unreachable_taint(core, node: str) -> bool:
    taints = core.read_node(node).spec.taints or []
    return any(t.key == "node.kubernetes.io/unreachable" and t.effect == "NoExecute" for t in taints)


def test_a_longer_node_lost_toleration_rides_out_a_spell_past_30s(cluster, api_client, namespace, jobs, tmp_path):
    """--node-lost-toleration 3m: the node of one of the job's pods stops reporting (its
    kubelet frozen) until the node controller's unreachable taint has stood 45 s. Neither
    the taint (tolerated for 3 minutes) nor the manager (which waits the same window)
    takes the pod; the kubelet comes back and the job trains to its end, no restart. With
    the default 30 s, the manager would have deleted the pod 10 s after the taint."""
    core = client.CoreV1Api(api_client)
    with node_pool(cluster, {"b": 1}) as pool, \
            more_nodes(cluster, pool, {"a": 1}, taints=[f"{LOSABLE}:NoSchedule"]) as losable, \
            script_volume(api_client, namespace, {"until_go.py": UNTIL_GO}, tmp_path) as claim:
        args = job_args(pool, claim, 2, "--node-lost-toleration=3m", f"--toleration={LOSABLE}")
        args[args.index("--filename=/work/hello.py")] = "--filename=/work/until_go.py"
        jobs.submit("spell", args)
        poll_until(lambda: all(f"rank={r} waiting" in jobs.log_tail("spell-chief") for r in (0, 1)), 180,
                   lambda: f"both ranks started; the manager's log:\n{jobs.log_tail('spell')}")
        on_a = [name for name, pod in jobs.pods().items() if pod["spec"].get("nodeName") == pool.node("a")]
        assert len(on_a) == 1 and on_a[0].startswith("spell-"), on_a
        tolerations = {t["key"]: t.get("tolerationSeconds") for t in jobs.pod(on_a[0])["spec"]["tolerations"]}
        assert tolerations["node.kubernetes.io/unreachable"] == tolerations["node.kubernetes.io/not-ready"] == 180
        os.kill(losable.kubelet_pid(pool.node("a")), signal.SIGSTOP)
        try:
            poll_until(lambda: unreachable_taint(core, pool.node("a")), NODE_LOST_TIMEOUT_S,
                       "the node controller's unreachable taint on the frozen node", interval_s=1)
            tainted_at = time.monotonic()
            while time.monotonic() < tainted_at + SPELL_AFTER_TAINT_S:
                pod = jobs.pod(on_a[0])
                assert pod and not pod["metadata"].get("deletionTimestamp"), (pod, jobs.log_tail("spell"))
                time.sleep(1)
        finally:
            os.kill(losable.kubelet_pid(pool.node("a")), signal.SIGCONT)
        poll_until(lambda: not unreachable_taint(core, pool.node("a")), 60, "the node Ready again", interval_s=1)
        (tmp_path / "volume" / "go").write_text("")
        assert jobs.exit_code("spell") == 0, jobs.report("spell")
        annotations = jobs.pod("spell")["metadata"]["annotations"]
        assert annotations.get("distributetrain.io/restarts", "0") == "0", annotations
        jobs.wait_gone(["spell-worker-0"])
        assert jobs.secrets("spell") == []
