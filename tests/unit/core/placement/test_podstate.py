"""Why a pod is not Ready: whole outputs for what the scheduler and the kubelet report."""

import pytest

from distributetrain.core.placement import podstate

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


# A chief as a service mesh leaves it: Istio's proxy injected as a classic sidecar (a
# second container, before or after the chief's), or as a native one (an init container
# with restartPolicy Always, Istio with native sidecars on 1.29+). Status as the kubelet
# writes it.
def chief(code=None, sidecar="classic", proxy_running=True, restart_policy="Never", phase="Running", proxy_first=False):
    main = container("chief", terminated={"exitCode": code, "reason": "Completed" if code == 0 else "Error"}
                     if code is not None else None, running=code is None)
    proxy = container("istio-proxy", running=proxy_running,
                      terminated=None if proxy_running else {"exitCode": 0, "reason": "Completed"})
    spec_containers = [{"name": "chief", "image": "distributetrain/base:0.1.0"}]
    spec = {"restartPolicy": restart_policy, "nodeName": "n1", "containers": spec_containers}
    status = {"phase": phase, "containerStatuses": [main]}
    if sidecar == "classic":
        proxy_spec = {"name": "istio-proxy", "image": "istio/proxyv2:1.24.0"}
        spec_containers.insert(0 if proxy_first else 1, proxy_spec)
        status["containerStatuses"].insert(0 if proxy_first else 1, proxy)
    elif sidecar == "native":
        spec["initContainers"] = [{"name": "istio-proxy", "image": "istio/proxyv2:1.24.0", "restartPolicy": "Always"}]
        status["initContainerStatuses"] = [proxy]
    metadata = {"name": "demo-chief", "labels": {"distributetrain.io/role": "chief"}}
    return {"metadata": metadata, "spec": spec, "status": status}


@pytest.mark.parametrize("sidecar", ["classic", "native", None])
@pytest.mark.parametrize("code", [0, 3])
def test_a_chief_ends_with_its_training_container_whatever_its_sidecars(sidecar, code):
    ended = chief(code, sidecar)
    assert podstate.phase(ended) == "Running"  # the proxy runs on
    assert podstate.is_finished(ended) and not podstate.has_ended(ended)
    assert podstate.exit_code(ended) == code


@pytest.mark.parametrize("proxy_first", [False, True])
def test_a_sidecars_state_is_never_the_chiefs(proxy_first):
    training = chief(None, "classic", proxy_running=False, proxy_first=proxy_first)  # the proxy ended first
    assert not podstate.is_finished(training) and podstate.exit_code(training) is None
    ended = chief(5, "classic", proxy_running=False, phase="Failed", proxy_first=proxy_first)
    assert podstate.exit_code(ended) == 5


def test_a_chief_still_training_beside_its_sidecar_is_not_finished():
    for sidecar in ("classic", "native"):
        assert not podstate.is_finished(chief(None, sidecar)) and podstate.exit_code(chief(None, sidecar)) is None


def test_a_container_the_kubelet_restarts_has_not_finished():
    manager = chief(1, None, restart_policy="OnFailure")
    assert not podstate.is_finished(manager) and podstate.exit_code(manager) is None
    assert podstate.is_finished(chief(0, None, restart_policy="OnFailure"))
    assert not podstate.is_finished(chief(0, None, restart_policy="Always"))


def test_only_a_classic_sidecar_keeps_a_finished_chief_from_ending():
    assert not podstate.ends_on_its_own(chief(0, "classic"))  # its GPUs would be held for ever
    assert podstate.ends_on_its_own(chief(0, "native"))  # the kubelet stops it next
    assert podstate.ends_on_its_own(chief(0, None))
    assert podstate.ends_on_its_own(chief(0, "classic", proxy_running=False, phase="Succeeded"))
    assert not podstate.ends_on_its_own(chief(None, "native"))


def test_a_pod_without_a_role_reads_its_first_container():
    plain = pod(phase="Failed", node="n1", containers=[container("c", terminated={"exitCode": 9})])
    assert podstate.is_finished(plain) and podstate.exit_code(plain) == 9
