"""Pod phase, conditions and container statuses as the kubelet reports them."""

import datetime

import pytest

from localcluster.agent.podstatus import (
    RUNNING_STATE, TERMINATED, WAITING, ContainerView, PodView, Termination, build_status, pod_phase,
)

T0 = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
T1 = T0 + datetime.timedelta(seconds=7)


def ended(code: int) -> Termination:
    return Termination(exit_code=code, reason="Completed" if code == 0 else "Error", started_at=T0, finished_at=T1,
                       container_id="localcluster://c1")


def running(name="main", ready=True) -> ContainerView:
    return ContainerView(name=name, image="img", state=RUNNING_STATE, started_at=T0, ready=ready, started=True,
                         container_id="localcluster://c1")


def terminated(code: int, name="main") -> ContainerView:
    return ContainerView(name=name, image="img", state=TERMINATED, termination=ended(code),
                         container_id="localcluster://c1")


def backing_off(code: int, name="main") -> ContainerView:
    return ContainerView(name=name, image="img", state=WAITING, waiting_reason="CrashLoopBackOff",
                         last_termination=ended(code), restart_count=1)


def view(containers, init=(), policy="Never", **fields) -> PodView:
    return PodView(init_containers=list(init), containers=list(containers), restart_policy=policy, **fields)


@pytest.mark.parametrize(
    ("pod", "phase"),
    [
        (view([ContainerView(name="main", image="img")]), "Pending"),
        (view([running()]), "Running"),
        (view([running(), terminated(0, "side")]), "Running"),
        (view([terminated(0)]), "Succeeded"),
        (view([terminated(0), terminated(3, "b")]), "Failed"),
        (view([terminated(3)], policy="OnFailure"), "Running"),
        (view([backing_off(3)], policy="OnFailure"), "Running"),
        (view([terminated(0)], policy="OnFailure"), "Succeeded"),
        (view([terminated(0)], policy="Always"), "Running"),
        (view([ContainerView(name="main", image="img", waiting_reason="PodInitializing")], init=[running("init")]),
         "Pending"),
        (view([ContainerView(name="main", image="img", waiting_reason="PodInitializing")], init=[terminated(1, "init")]),
         "Failed"),
        (view([ContainerView(name="main", image="img")], init=[backing_off(1, "init")], policy="OnFailure"), "Pending"),
        (view([terminated(143)], policy="Always", terminating=True), "Failed"),
        (view([terminated(0)], policy="Always", terminating=True), "Succeeded"),
        (view([running()], policy="Always", terminating=True), "Running"),
        (view([running()], reason="DeadlineExceeded"), "Running"),  # until its containers are stopped
        (view([terminated(137)], reason="DeadlineExceeded"), "Failed"),
    ],
)
def test_phase(pod, phase):
    assert pod_phase(pod) == phase


def test_running_pod_status_whole():
    pod = view([running("a"), running("b", ready=False)], policy="Always", pod_ip="10.233.1.2",
               host_ip="10.233.0.11", start_time=T0, sandbox_ready=True)
    status = build_status(pod, T1)
    conditions = {c["type"]: c for c in status["conditions"]}
    assert status["phase"] == "Running"
    assert status["podIP"] == "10.233.1.2" and status["podIPs"] == [{"$patch": "replace"}, {"ip": "10.233.1.2"}]
    assert status["hostIP"] == "10.233.0.11" and status["startTime"] == "2030-01-02T03:04:05Z"
    assert conditions["Ready"] == {
        "type": "Ready", "status": "False", "lastProbeTime": None, "lastTransitionTime": "2030-01-02T03:04:12Z",
        "reason": "ContainersNotReady", "message": "containers with unready status: [b]",
    }
    assert conditions["Initialized"]["status"] == "True"
    assert conditions["PodReadyToStartContainers"]["status"] == "True"
    assert status["containerStatuses"][0] == {
        "name": "a", "image": "img", "imageID": "", "ready": True, "restartCount": 0, "started": True,
        "state": {"running": {"startedAt": "2030-01-02T03:04:05Z"}}, "lastState": {},
        "containerID": "localcluster://c1",
    }
    assert status["initContainerStatuses"] is None and status["reason"] is None


def test_condition_transition_time_changes_only_on_transition():
    pod = view([running(ready=False)], policy="Always")
    first = {c["type"]: c for c in build_status(pod, T0)["conditions"]}
    later = {c["type"]: c for c in build_status(pod, T1)["conditions"]}
    assert later["Ready"]["lastTransitionTime"] == first["Ready"]["lastTransitionTime"] == "2030-01-02T03:04:05Z"
    pod.containers[0].ready = True
    flipped = {c["type"]: c for c in build_status(pod, T1)["conditions"]}
    assert flipped["Ready"]["status"] == "True"
    assert flipped["Ready"]["lastTransitionTime"] == "2030-01-02T03:04:12Z"


def test_failed_container_status_and_completed_conditions():
    status = build_status(view([terminated(3)]), T1)
    assert status["phase"] == "Failed"
    assert status["containerStatuses"][0]["state"] == {"terminated": {
        "exitCode": 3, "reason": "Error", "startedAt": "2030-01-02T03:04:05Z", "finishedAt": "2030-01-02T03:04:12Z",
        "containerID": "localcluster://c1",
    }}
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "PodCompleted")


def test_crash_loop_shows_last_state_and_restart_count():
    entry = build_status(view([backing_off(1)], policy="OnFailure"), T1)["containerStatuses"][0]
    assert entry["state"] == {"waiting": {"reason": "CrashLoopBackOff"}}
    assert entry["lastState"]["terminated"]["exitCode"] == 1
    assert entry["restartCount"] == 1


def test_uninitialized_pod_names_the_init_container():
    pod = view([ContainerView(name="main", image="img", waiting_reason="PodInitializing")], init=[running("fetch")])
    initialized = next(c for c in build_status(pod, T0)["conditions"] if c["type"] == "Initialized")
    assert initialized["message"] == "containers with incomplete status: [fetch]"
