"""The one wait of every placement (``placing``): a plan and its objects, pure; a booking
that, short of GPUs, books again only once a change makes the request fit, or returns the
shortage at its deadline."""

import threading

from distributetrain.core import names
from distributetrain.core.clock import FakeClock
from distributetrain.core.placement.clusterview import ClusterView
from distributetrain.core.placement import placement
from distributetrain.core.pods.newnodepods import NewNodePlace
from distributetrain.core.settings import JobSettings
from distributetrain.manager.placement import booking, placing
from distributetrain.manager.placement.kinds import ElasticJob, StaticJob
from harness.builders import ledger_of, make_pod, node
from harness.kube import FakeKube
from harness.waiting import WatchedClock, wait_until
from unit.manager.placement.test_clusterview_sharing import publish

JOB = JobSettings(job_name="demo", namespace="ml", num_gpus=4, image="reg/base:1")


def test_an_attempt_is_planned_as_its_kind_plans_it():
    ledger = ledger_of([node("a", 4), node("b", 2)])
    assert placing.plan_attempt(StaticJob(), ledger, JOB, may_grow=True) == placing.Planned([("a", 4)])
    assert placing.plan_attempt(ElasticJob(), ledger, JOB, may_grow=True) == placing.Planned([("a", 3), ("a", 1)])


def test_the_rest_goes_on_new_nodes_only_while_the_job_may_grow():
    grows = JOB.replace(num_gpus=10, scale_up_node_gpus=8, wait_for_gpus_s=300)
    ledger = ledger_of([node("a", 2)])
    assert placing.plan_attempt(StaticJob(), ledger, grows, may_grow=True) == placing.Planned(
        [(names.NEW_NODE, 8), ("a", 2)], new_node_place=NewNodePlace())
    try:
        placing.plan_attempt(StaticJob(), ledger, grows, may_grow=False)
    except placement.InsufficientGPUs:
        return
    raise AssertionError("planned beyond the free GPUs without growing")


def holder(gpus):
    """Another team's pod holding ``gpus`` of node a."""
    return make_pod("holder", "team-b").uid("holder").on("a").gpus(gpus).obj()


def booking_story(kube, until):
    """Books 2 GPUs on a thread of its own; returns the thread and where its outcome lands."""
    outcome = []
    free_gpus = placing.FreeGpuBooking(kube, JOB.replace(num_gpus=2), kube.clock, client=lambda same: same)

    def book():
        with free_gpus:
            outcome.append(free_gpus.book(lambda ledger: placement.plan(ledger.free(), 2), lambda plan: [], until))

    thread = threading.Thread(target=book, daemon=True)
    thread.start()
    wait_until(lambda: free_gpus.watch is not None and kube.clock.waiters() > 0, kube.clock.changes, 20,
               "the booking waiting")
    return thread, outcome


def lease_writes(kube):
    return kube.writes(kind="Lease").count(names.LOCK_LEASE_NAME)


def test_short_of_gpus_a_booking_waits_for_a_change_and_books_once_they_are_freed():
    kube = FakeKube([node("a", 2)], [holder(2)], clock=WatchedClock())
    thread, outcome = booking_story(kube, until=kube.clock.monotonic() + 600)
    assert lease_writes(kube) == 2 and kube.node_lists == 2  # one booking, then the free GPUs' list
    kube.remove(holder(2))
    thread.join(20)
    assert outcome == [[("a", 2)]]
    assert lease_writes(kube) == 4 and kube.node_lists == 3  # one booking more, on the change alone


def test_at_its_deadline_a_booking_returns_the_shortage():
    kube = FakeKube([node("a", 2)], [holder(1)], clock=WatchedClock())
    thread, outcome = booking_story(kube, until=kube.clock.monotonic() + 600)
    kube.clock.advance(600)
    thread.join(20)
    [short] = outcome
    assert isinstance(short, booking.Short) and str(short.shortage) == "requested 2 GPUs but only 1 are free in the cluster"
    assert lease_writes(kube) == 4  # once when short, once more at the deadline


def test_the_first_booking_shares_a_survey_begun_since_it_began_though_before_it_looked_for_one():
    """100 managers starting together each wrote their phase first (a request, slow under
    that load): a survey one of them began meanwhile was too early for the others, and a
    second one was taken (12 s at 150,000 pods) while the Lease went unused."""
    kube = FakeKube([node("a", 4)], clock=FakeClock())
    theirs = ClusterView(nodes=[{"metadata": {"name": "theirs", "labels": {}},
                                 "status": {"allocatable": {"nvidia.com/gpu": "8"},
                                            "conditions": [{"type": "Ready", "status": "True"}]}}])

    def phase_written():  # the survey of another manager begins, and is published, meanwhile
        kube.clock.sleep(1)
        theirs.taken_at = kube.clock.now()
        publish(kube, theirs)
        kube.clock.sleep(1)  # the phase written

    with placing.FreeGpuBooking(kube, JOB.replace(num_gpus=2), kube.clock) as free_gpus:
        booked = free_gpus.book(lambda ledger: placement.plan(ledger.free(), 2), lambda plan: [],
                                kube.clock.monotonic() + 60, shared_survey=True, before_each=phase_written)
    assert booked == [("theirs", 2)] and (kube.node_lists, kube.pod_lists) == (0, 2)  # the bookings and the queue: no survey
