"""A queued job's place in its Kueue queue: read from the visibility API while the job
waits, recorded on the manager pod when it changes, and never a reason to fail. The
poller's pauses are a WatchedClock's: a test moves it a poll at a time, once the poller waits."""

import threading

from distributetrain.core import errors
from distributetrain.core.job import record
from distributetrain.core.job.record import JobRecord
from distributetrain.core.settings import JobSettings
from distributetrain.manager.reporting.queuepositions import QueuePositions, position_of
from distributetrain.manager.reporting.reporting import Reporter
from harness.events import recording
from harness.kube import FakeKube
from harness.waiting import WatchedClock, threads_end, wait_until

SETTINGS = JobSettings(job_name="demo", namespace="ml", num_gpus=2, image="img", owner_uid="uid-1", queue="team-a")
POLL_S = 10.0
WAIT_S = 5.0  # real seconds, for what the poller's thread does at once


class RecordingClock(WatchedClock):
    """A WatchedClock that keeps how long each timed wait asked for."""

    def __init__(self):
        super().__init__()
        self.asked: list[float] = []

    def wait(self, condition, seconds):
        self.asked.append(seconds)
        return super().wait(condition, seconds)


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


def counted_reads(kube, clock) -> list[float]:
    """The clock's time at each read of the queue, as they happen."""
    reads = []
    real = kube.pending_workloads
    kube.pending_workloads = lambda *args: reads.append(clock.monotonic()) or real(*args)
    return reads


def polling(kube, clock, **kwargs) -> QueuePositions:
    reporter = Reporter(kube, SETTINGS, recording(SETTINGS, clock)[0])
    return QueuePositions(kube, reporter, "demo-r1-ab12", clock=clock, **kwargs)


def next_looks(clock, reads, count: int, step_s: float) -> None:
    """Moves the clock ``step_s`` at a time, each once the poller waits, for ``count`` more
    reads; returns once the poller waits again (what it read is recorded by then)."""
    for _ in range(count):
        clock.wait_for_waiters(1, WAIT_S)
        before = len(reads)
        clock.advance(step_s)
        wait_until(lambda: len(reads) > before and clock.waiters() == 1, clock.changes, WAIT_S,
                   lambda: f"a read {step_s} s later, seen {len(reads) - before}")


def poller_gone() -> bool:
    return not [t for t in threading.enumerate() if t.name == "queue-positions"]


def test_each_change_of_position_is_recorded_once_and_none_after_the_wait():
    kube, clock = FakeKube(), WatchedClock()
    reads = counted_reads(kube, clock)
    kube.pending = {("ml", "team-a"): pending("a", "b", "demo-r1-ab12")}
    with polling(kube, clock, poll_s=POLL_S):
        wait_until(lambda: positions(kube) == ["3"] and clock.waiters() == 1, clock.changes, WAIT_S,
                   lambda: f"positions ['3'] recorded, seen {positions(kube)}")
        next_looks(clock, reads, 3, POLL_S)
        assert positions(kube) == ["3"]  # unchanged: not written again
        kube.pending = {("ml", "team-a"): pending("b", "demo-r1-ab12")}
        next_looks(clock, reads, 1, POLL_S)
        assert positions(kube) == ["3", "2"]
        kube.pending = {("ml", "team-a"): pending("b")}  # admitted
        next_looks(clock, reads, 1, POLL_S)
        assert positions(kube) == ["3", "2", None]
        written = len(kube.annotated)
    assert poller_gone()  # so nothing after the wait
    assert len(kube.annotated) == written
    assert JobRecord.of(kube.manager).queue_position is None


def test_until_the_workload_is_pending_it_is_looked_for_sooner():
    kube, clock = FakeKube(), RecordingClock()
    kube.pending = {("ml", "team-a"): []}  # Kueue has not made the group's Workload yet
    reads = counted_reads(kube, clock)
    with polling(kube, clock, poll_s=60, first_poll_s=2):
        next_looks(clock, reads, 2, 2)  # every 2 s
        kube.pending = {("ml", "team-a"): pending("demo-r1-ab12")}
        next_looks(clock, reads, 1, 2)
        assert positions(kube) == ["1"]
        assert clock.asked[-1] == 60  # known now: the next look is a minute away
        next_looks(clock, reads, 1, 60)
        assert [later - earlier for earlier, later in zip(reads, reads[1:])] == [2, 2, 2, 60]


def test_a_cluster_without_the_visibility_api_is_asked_once():
    kube, clock = FakeKube(), WatchedClock()  # kube.pending None: the API is not served (404)
    reads = counted_reads(kube, clock)
    with polling(kube, clock, poll_s=POLL_S):
        threads_end("queue-positions", WAIT_S)  # the poller gives up
    assert len(reads) == 1
    assert kube.annotated == []


def test_a_forbidden_read_ends_the_polling_and_failed_reads_are_skipped():
    kube, clock = FakeKube(), WatchedClock()
    reads = counted_reads(kube, clock)
    kube.pending = {("ml", "team-a"): pending("demo-r1-ab12")}
    kube.failures["pending_workloads"] = [errors.TransientApiError("503"), errors.TransientApiError("timed out"),
                                          errors.Forbidden("cannot get localqueues/pendingworkloads")]
    with polling(kube, clock, poll_s=POLL_S):
        next_looks(clock, reads, 1, POLL_S)  # the 503, then the read that timed out, both skipped
        clock.advance(POLL_S)  # the poller waits again: the next read is denied
        threads_end("queue-positions", WAIT_S)
    assert len(reads) == 3
    assert kube.annotated == []  # the two failed reads wrote nothing, and nothing was read after the denial


def test_a_position_not_recorded_is_recorded_at_the_next_poll():
    kube, clock = FakeKube(), WatchedClock()
    kube.pending = {("ml", "team-a"): pending("demo-r1-ab12")}
    kube.failures["annotate Pod"] = [errors.TransientApiError("apiserver restarting")]
    reads = counted_reads(kube, clock)
    with polling(kube, clock, poll_s=POLL_S):
        next_looks(clock, reads, 1, POLL_S)
        assert positions(kube) == ["1"]  # at the very next poll
    assert JobRecord.of(kube.manager).queue_position == 1


def test_a_position_is_news_only_while_queued():
    assert record.phase("Queued") == {"distributetrain.io/phase": "Queued"}
    assert record.phase("StartingWorkers") == {"distributetrain.io/phase": "StartingWorkers",
                                               "distributetrain.io/queue-position": None}
    assert record.queue_position(4) == {"distributetrain.io/queue-position": "4"}
    for text, read in (("4", 4), ("0", None), ("-1", None), ("x", None)):
        assert JobRecord.of({"metadata": {"annotations": {"distributetrain.io/queue-position": text}}}) \
            .queue_position == read
