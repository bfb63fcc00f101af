"""A queued job's place in its Kueue queue: read from the visibility API while the job
waits, recorded on the manager pod when it changes, and never a reason to fail."""

import time

from distributetrain.core import errors, record
from distributetrain.core.record import JobRecord
from distributetrain.core.settings import JobSettings
from distributetrain.manager.queuepositions import QueuePositions, position_of
from distributetrain.manager.reporting import Reporter
from harness.kube import FakeKube
from harness.polling import poll_until
from test_reporting import FakeRecorder

SETTINGS = JobSettings(job_name="demo", namespace="ml", num_gpus=2, image="img", owner_uid="uid-1", queue="team-a")
POLL_S = 0.05
WAIT_S = 5.0
LOOK_S = POLL_S / 5  # several looks per poll: each change is seen soon after it is made


def pending(*names):
    """The visibility API's items, in queue order (Kueue counts positions from 0)."""
    return [{"metadata": {"name": name, "namespace": "ml"}, "localQueueName": "team-a",
             "positionInLocalQueue": index, "positionInClusterQueue": index + 3} for index, name in enumerate(names)]


def test_a_workload_is_numbered_from_one_and_unknown_while_not_pending():
    assert position_of(pending("other", "demo-r1-ab12"), "demo-r1-ab12") == 2
    assert position_of(pending("demo-r1-ab12"), "demo-r1-ab12") == 1
    assert position_of(pending("other"), "demo-r1-ab12") is None  # not created yet, or admitted
    assert position_of([{"metadata": {"name": "demo-r1-ab12"}}], "demo-r1-ab12") is None


def positions(kube):
    return [patch[record.names.ANNOTATION_QUEUE_POSITION] for _, patch in kube.annotated]


def test_each_change_of_position_is_recorded_once_and_none_after_the_wait():
    kube = FakeKube()
    kube.pending = {("ml", "team-a"): pending("a", "b", "demo-r1-ab12")}
    with QueuePositions(kube, Reporter(kube, SETTINGS, FakeRecorder()), "demo-r1-ab12", poll_s=POLL_S):
        poll_until(lambda: positions(kube) == ["3"], WAIT_S,
                   lambda: f"positions ['3'] recorded, seen {positions(kube)}", LOOK_S)
        time.sleep(3 * POLL_S)
        assert positions(kube) == ["3"]  # unchanged: not written again
        kube.pending = {("ml", "team-a"): pending("b", "demo-r1-ab12")}
        poll_until(lambda: positions(kube) == ["3", "2"], WAIT_S,
                   lambda: f"positions ['3', '2'] recorded, seen {positions(kube)}", LOOK_S)
        kube.pending = {("ml", "team-a"): pending("b")}  # admitted
        poll_until(lambda: positions(kube) == ["3", "2", None], WAIT_S,
                   lambda: f"positions ['3', '2', None] recorded, seen {positions(kube)}", LOOK_S)
    written = len(kube.annotated)
    time.sleep(3 * POLL_S)
    assert len(kube.annotated) == written  # nothing after the wait
    assert JobRecord.of(kube.manager).queue_position is None


def test_until_the_workload_is_pending_it_is_looked_for_sooner():
    kube = FakeKube()
    kube.pending = {("ml", "team-a"): []}  # Kueue has not made the group's Workload yet
    reads = []
    real = kube.pending_workloads
    kube.pending_workloads = lambda *args: reads.append(time.monotonic()) or real(*args)
    with QueuePositions(kube, Reporter(kube, SETTINGS, FakeRecorder()), "demo-r1-ab12", poll_s=60, first_poll_s=POLL_S):
        poll_until(lambda: len(reads) >= 3, WAIT_S, lambda: f"3 reads of the queue, seen {len(reads)}", LOOK_S)
        kube.pending = {("ml", "team-a"): pending("demo-r1-ab12")}
        poll_until(lambda: positions(kube) == ["1"], WAIT_S,
                   lambda: f"positions ['1'] recorded, seen {positions(kube)}", LOOK_S)
        known = len(reads)
        time.sleep(5 * POLL_S)
        assert len(reads) == known  # known now: the next look is a minute away


def test_a_cluster_without_the_visibility_api_is_asked_once():
    kube = FakeKube()  # kube.pending None: the API is not served (404)
    with QueuePositions(kube, Reporter(kube, SETTINGS, FakeRecorder()), "demo-r1-ab12", poll_s=POLL_S):
        time.sleep(5 * POLL_S)
    assert kube.annotated == []


def test_a_forbidden_read_ends_the_polling_and_failed_reads_are_skipped():
    kube = FakeKube()
    kube.pending = {("ml", "team-a"): pending("demo-r1-ab12")}
    kube.failures["pending_workloads"] = [errors.TransientApiError("503"), errors.TransientApiError("timed out"),
                                          errors.Forbidden("cannot get localqueues/pendingworkloads")]
    with QueuePositions(kube, Reporter(kube, SETTINGS, FakeRecorder()), "demo-r1-ab12", poll_s=POLL_S):
        poll_until(lambda: not kube.failures["pending_workloads"], WAIT_S,
                   lambda: f"every failing read made, left {kube.failures['pending_workloads']}", LOOK_S)
        time.sleep(5 * POLL_S)
    assert kube.annotated == []  # the two failed reads wrote nothing, and nothing was read after the denial


def test_a_position_not_recorded_is_recorded_at_the_next_poll():
    kube = FakeKube()
    kube.pending = {("ml", "team-a"): pending("demo-r1-ab12")}
    kube.failures["annotate_pod"] = [errors.TransientApiError("apiserver restarting")]
    with QueuePositions(kube, Reporter(kube, SETTINGS, FakeRecorder()), "demo-r1-ab12", poll_s=POLL_S):
        poll_until(lambda: positions(kube) == ["1"], WAIT_S,
                   lambda: f"positions ['1'] recorded, seen {positions(kube)}", LOOK_S)
    assert JobRecord.of(kube.manager).queue_position == 1


def test_a_position_is_news_only_while_queued():
    assert record.phase("Queued") == {"distributetrain.io/phase": "Queued"}
    assert record.phase("StartingWorkers") == {"distributetrain.io/phase": "StartingWorkers",
                                               "distributetrain.io/queue-position": None}
    assert record.queue_position(4) == {"distributetrain.io/queue-position": "4"}
    for text, read in (("4", 4), ("0", None), ("-1", None), ("x", None)):
        assert JobRecord.of({"metadata": {"annotations": {"distributetrain.io/queue-position": text}}}) \
            .queue_position == read
