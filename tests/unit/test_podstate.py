"""Why a pod is not Ready: whole outputs for what the scheduler and the kubelet report."""

import pytest

from distributetrain.core import podstate

UNSCHEDULABLE = ("0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: "
                 "0/3 nodes are available: 3 Preemption is not helpful for scheduling.")


def pod(phase="Pending", node="", conditions=(), containers=(), init_containers=(), deleting=False):
    status = {"phase": phase, "conditions": list(conditions), "containerStatuses": list(containers)}
    if init_containers:
        status["initContainerStatuses"] = list(init_containers)
    metadata = {"name": "demo-worker-0"}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-02T12:00:00Z"
    return {"metadata": metadata, "spec": {"nodeName": node} if node else {}, "status": status}


def condition(kind, status, reason="", message=""):
    return {"type": kind, "status": status, "reason": reason, "message": message}


def container(name="worker", waiting=None, terminated=None, running=False, last_terminated=None):
    state = {}
    if waiting is not None:
        state["waiting"] = waiting
    if terminated is not None:
        state["terminated"] = terminated
    if running:
        state["running"] = {"startedAt": "2026-01-02T12:00:00Z"}
    status = {"name": name, "state": state}
    if last_terminated is not None:
        status["lastState"] = {"terminated": last_terminated}
    return status


READY = condition("Ready", "True")
NOT_READY = condition("Ready", "False", "ContainersNotReady", "containers with unready status: [worker]")


@pytest.mark.parametrize("given,reason,attention", [
    (pod(phase="Running", node="n1", conditions=[READY], containers=[container(running=True)]), None, False),
    (pod(), "waiting for the scheduler", False),
    (pod(conditions=[condition("PodScheduled", "False", "Unschedulable", UNSCHEDULABLE)]),
     f"not scheduled: {UNSCHEDULABLE}", True),
    (pod(conditions=[condition("PodScheduled", "False", "Unschedulable")]), "not scheduled: Unschedulable", True),
    (pod(conditions=[condition("PodScheduled", "False", "Unschedulable", "0/2 nodes are available:\n  2 Too many pods.")]),
     "not scheduled: 0/2 nodes are available: 2 Too many pods.", True),
    (pod(node="n1"), "scheduled to n1, starting", False),
    (pod(node="n1", containers=[container(waiting={"reason": "ContainerCreating"})]),
     "container worker: ContainerCreating", False),
    (pod(node="n1", containers=[container(waiting={
        "reason": "ErrImageNeverPull",
        "message": 'Container image "reg/base:1" is not present with pull policy of Never'})]),
     'container worker: ErrImageNeverPull: Container image "reg/base:1" is not present with pull policy of Never',
     True),
    (pod(node="n1", containers=[container(waiting={"reason": "ImagePullBackOff",
                                                   "message": 'Back-off pulling image "reg/base:1"'})]),
     'container worker: ImagePullBackOff: Back-off pulling image "reg/base:1"', True),
    (pod(node="n1", containers=[container(waiting={"reason": "ErrImagePull"})]),
     "container worker: ErrImagePull", True),
    (pod(node="n1", containers=[container(waiting={"reason": "CreateContainerConfigError",
                                                   "message": 'secret "demo-ssh" not found'})]),
     'container worker: CreateContainerConfigError: secret "demo-ssh" not found', True),
    (pod(node="n1", init_containers=[container("fetch", waiting={"reason": "ErrImagePull"})],
         containers=[container(waiting={"reason": "PodInitializing"})]),
     "container fetch: ErrImagePull", True),
    (pod(node="n1", containers=[container(
        waiting={"reason": "CrashLoopBackOff", "message": "back-off 10s restarting failed container=worker"},
        last_terminated={"exitCode": 128, "reason": "StartError",
                         "message": 'exec: "sshd": executable file not found in $PATH'})]),
     'container worker: CrashLoopBackOff after StartError: exec: "sshd": executable file not found in $PATH', True),
    (pod(phase="Running", node="n1", conditions=[NOT_READY], containers=[container(running=True)]),
     "running, not Ready: containers with unready status: [worker]", False),
    (pod(phase="Running", node="n1", containers=[container(running=True)]), "running, not Ready", False),
    (pod(phase="Failed", node="n1", containers=[container(terminated={
        "exitCode": 128, "reason": "StartError",
        "message": 'failed to start container: exec: "sshd": executable file not found in $PATH'})]),
     'ended (Failed): container worker: StartError: failed to start container: exec: "sshd": executable file '
     'not found in $PATH', True),
    (pod(phase="Failed", node="n1", containers=[container(terminated={"exitCode": 137})]),
     "ended (Failed): container worker: exit code 137", True),
    (pod(phase="Succeeded", node="n1", containers=[container(terminated={"exitCode": 0, "reason": "Completed"})]),
     "ended (Succeeded)", False),
    (pod(phase="Running", node="n1", conditions=[READY], deleting=True), None, False),
    (pod(phase="Running", node="n1", conditions=[NOT_READY], deleting=True), "being deleted", False),
    (pod(phase="Unknown", node="n1"), "phase Unknown", False),
    ({"metadata": {"name": "bare"}}, "waiting for the scheduler", False),
], ids=lambda v: v if isinstance(v, str) else None)
def test_why_a_pod_is_not_ready(given, reason, attention):
    assert (podstate.why_not_ready(given), podstate.needs_attention(given)) == (reason, attention)


def test_a_ready_pod_has_no_reason_to_wait():
    assert podstate.why_not_ready(pod()) == "waiting for the scheduler"
    assert podstate.why_not_ready(pod(phase="Running", node="n1", conditions=[READY])) is None
