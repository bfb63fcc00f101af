"""The judges that turn the job's pods into typed outcomes, and the wait that feeds them."""

from distributetrain.kube import waits
from distributetrain.manager.watching import podwaits
from harness.kube import FakeKube


def pod(name, phase="Running", ready=False, ip="10.0.0.2", exit_code=None, deleting=False, node="n1", gpus=1):
    status = {"phase": phase, "podIP": ip, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if exit_code is not None:
        status["containerStatuses"] = [{"state": {"terminated": {"exitCode": exit_code}}}]
    metadata = {"name": name, "labels": {"job": "j"}, "annotations": {"distributetrain.io/gpus": str(gpus)}}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": metadata, "spec": {"nodeName": node} if node else {}, "status": status}


def test_an_attempt_starts_when_every_worker_is_ready_and_the_chief_is_bound():
    judge = podwaits.attempt_started("c", ["w0", "w1"])
    chief_pulling = pod("c", phase="Pending")
    assert judge({"c": chief_pulling, "w0": pod("w0", ready=True), "w1": pod("w1")}) is None
    both_ready = {"w0": pod("w0", ready=True, ip="10.0.0.2", gpus=3), "w1": pod("w1", ready=True, ip="10.0.0.3")}
    assert judge({"c": chief_pulling, **both_ready}) == podwaits.AttemptStarted((("10.0.0.2", 3), ("10.0.0.3", 1)))
    assert judge({"c": pod("c", phase="Pending", node=""), **both_ready}) is None  # the chief not scheduled yet


def test_an_attempt_on_the_chief_alone_starts_once_it_is_bound():
    assert podwaits.attempt_started("c", [])({"c": pod("c", phase="Pending")}) == podwaits.AttemptStarted(())


def test_a_pod_that_ends_or_vanishes_before_the_start_is_lost():
    judge = podwaits.attempt_started("c", ["w0", "w1"])
    assert judge({"c": pod("c"), "w0": pod("w0", ready=True)}) == podwaits.PodLost("w1", "was deleted")
    lost = judge({"c": pod("c"), "w0": pod("w0", phase="Failed", exit_code=137), "w1": pod("w1")})
    assert lost == podwaits.PodLost("w0", "ended (Failed, exit code 137)")
    assert judge({"c": pod("c"), "w0": pod("w0", deleting=True), "w1": pod("w1")}) == podwaits.PodLost("w0", "is being deleted")
    assert judge({"w0": pod("w0", ready=True), "w1": pod("w1", ready=True)}) == podwaits.PodLost("c", "was deleted")
    assert judge({"c": pod("c", deleting=True), "w0": pod("w0"), "w1": pod("w1")}) == \
        podwaits.PodLost("c", "is being deleted")


def test_a_chief_that_ends_on_its_own_before_the_start_ends_the_job_with_its_code():
    """An image the job's user cannot run in, say: the chief's exit code is the job's (79),
    not a loss to restart; a worker that ended first is still the cause."""
    judge = podwaits.attempt_started("c", ["w0", "w1"])
    failed_chief = pod("c", phase="Failed", exit_code=79)
    assert judge({"c": failed_chief, "w0": pod("w0"), "w1": pod("w1")}) == podwaits.ChiefFinished(79)
    assert judge({"c": failed_chief, "w0": pod("w0", phase="Failed", exit_code=79), "w1": pod("w1")}) == \
        podwaits.PodLost("w0", "ended (Failed, exit code 79)")


def test_chief_exit_code_is_the_outcome():
    judge = podwaits.chief_finished("c", ["w0"])
    assert judge({"c": pod("c"), "w0": pod("w0", ready=True)}) is None
    assert judge({"c": pod("c", phase="Failed", exit_code=3), "w0": pod("w0")}) == podwaits.ChiefFinished(3)
    assert judge({"c": pod("c", phase="Succeeded", exit_code=0)}) == podwaits.ChiefFinished(0)


def test_worker_lost_while_chief_runs():
    judge = podwaits.chief_finished("c", ["w0"])
    assert judge({"c": pod("c")}) == podwaits.PodLost("w0", "was deleted")


def test_chief_deleted_is_lost():
    assert podwaits.chief_finished("c", [])({}) == podwaits.PodLost("c", "was deleted")


def test_chief_started_once_running():
    judge = podwaits.chief_started("c", ["w0"])
    assert judge({"c": pod("c", phase="Pending"), "w0": pod("w0")}) is None
    assert judge({"c": pod("c"), "w0": pod("w0")}) == podwaits.ChiefStarted()


def test_pending_reasons_name_the_scheduler_message():
    unschedulable = {"metadata": {"name": "w0"}, "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}]}}
    reasons = podwaits.pending_reasons({"w0": unschedulable}, ["w0", "w1"])
    assert reasons == {"w0": "not scheduled: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
                       "w1": "does not exist"}


def test_lost_worker_is_reported_over_the_chief_failure_it_caused():
    judge = podwaits.chief_finished("c", ["w0"])
    assert judge({"c": pod("c", phase="Failed", exit_code=1)}) == podwaits.PodLost("w0", "was deleted")
    assert judge({"c": pod("c", phase="Succeeded", exit_code=0)}) == podwaits.ChiefFinished(0)


def test_waits_of_one_phase_share_one_list_of_the_job_pods():
    worker = pod("w0", ready=True)
    kube = FakeKube(pods=[pod("c"), worker])
    kube.pod_watches = [[("c", {"phase": "Failed", "containerStatuses": [{"state": {"terminated": {"exitCode": 1}}}]})],
                        [("DELETED", worker)]]
    pods = waits.selected_pods(kube, "ns", "job=j", kube.clock)
    assert podwaits.watch_job(pods, podwaits.chief_started("c", ["w0"]), kube.clock.monotonic() + 10, ["c", "w0"]) == \
        podwaits.ChiefStarted()
    assert podwaits.watch_job(pods, podwaits.chief_finished("c", ["w0"]), kube.clock.monotonic() + 10, ["c", "w0"]) == \
        podwaits.ChiefFinished(1)
    assert podwaits.watch_job(pods, podwaits.worker_lost(["w0"]), kube.clock.monotonic() + 10, ["w0"]) == \
        podwaits.PodLost("w0", "was deleted")
    assert kube.pod_lists == 1  # the later waits read the live store, resumed from its version
