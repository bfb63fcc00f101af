"""The judges that turn the job's pods into typed outcomes."""

from distributetrain import waits


def pod(name, phase="Running", ready=False, ip="10.0.0.2", exit_code=None, deleting=False):
    status = {"phase": phase, "podIP": ip, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if exit_code is not None:
        status["containerStatuses"] = [{"state": {"terminated": {"exitCode": exit_code}}}]
    metadata = {"name": name}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": metadata, "status": status}


def test_workers_ready_only_when_all_ready_with_addresses():
    judge = waits.workers_ready(["w0", "w1"])
    assert judge({"w0": pod("w0", ready=True), "w1": pod("w1")}) is None
    assert judge({"w0": pod("w0", ready=True, ip="10.0.0.2"), "w1": pod("w1", ready=True, ip="10.0.0.3")}) == \
        waits.WorkersReady({"w0": "10.0.0.2", "w1": "10.0.0.3"})


def test_no_workers_is_ready_at_once():
    assert waits.workers_ready([])({}) == waits.WorkersReady({})


def test_a_worker_that_ends_or_vanishes_is_lost():
    judge = waits.workers_ready(["w0", "w1"])
    assert judge({"w0": pod("w0", ready=True)}) == waits.PodLost("w1", "was deleted")
    lost = judge({"w0": pod("w0", phase="Failed", exit_code=137), "w1": pod("w1")})
    assert lost == waits.PodLost("w0", "ended (Failed, exit code 137)")
    assert judge({"w0": pod("w0", deleting=True), "w1": pod("w1")}) == waits.PodLost("w0", "is being deleted")


def test_chief_exit_code_is_the_outcome():
    judge = waits.chief_finished("c", ["w0"])
    assert judge({"c": pod("c"), "w0": pod("w0", ready=True)}) is None
    assert judge({"c": pod("c", phase="Failed", exit_code=3), "w0": pod("w0")}) == waits.ChiefFinished(3)
    assert judge({"c": pod("c", phase="Succeeded", exit_code=0)}) == waits.ChiefFinished(0)


def test_worker_lost_while_chief_runs():
    judge = waits.chief_finished("c", ["w0"])
    assert judge({"c": pod("c")}) == waits.PodLost("w0", "was deleted")


def test_chief_deleted_is_lost():
    assert waits.chief_finished("c", [])({}) == waits.PodLost("c", "was deleted")


def test_chief_started_once_running():
    judge = waits.chief_started("c", ["w0"])
    assert judge({"c": pod("c", phase="Pending"), "w0": pod("w0")}) is None
    assert judge({"c": pod("c"), "w0": pod("w0")}) == waits.ChiefStarted()


def test_pending_reasons_name_the_scheduler_message():
    unschedulable = {"metadata": {"name": "w0"}, "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}]}}
    reasons = waits.pending_reasons({"w0": unschedulable}, ["w0", "w1"])
    assert reasons == {"w0": "not scheduled: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
                       "w1": "does not exist"}


def test_lost_worker_is_reported_over_the_chief_failure_it_caused():
    judge = waits.chief_finished("c", ["w0"])
    assert judge({"c": pod("c", phase="Failed", exit_code=1)}) == waits.PodLost("w0", "was deleted")
    assert judge({"c": pod("c", phase="Succeeded", exit_code=0)}) == waits.ChiefFinished(0)
