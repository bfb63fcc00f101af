"""No GPU is ever booked twice, whatever the interleaving of concurrent managers.

Each example runs the real ``booking.book`` of three managers, each on a thread of its
own, against a store of revisions (``harness.interleaving``): hypothesis draws which
manager makes the next API call, and at which revision each list is served (the bookings
at the fence's or later). After all of them, no node may hold more booked GPUs than it
has. Among the managers, some may keep no journal: one of an older release (it lists the
bookings and writes no entry), one that dies in its turn after creating its pods. The
same managers reading their bookings at a stale revision (a fence that proves nothing)
do double-book: the rule rests on the fence; trusting a journal whatever the Lease says of
its holders since, they double-book with an older release among them: the journal's rests
on its closing.
"""

from __future__ import annotations

import base64
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distributetrain.core import names
from distributetrain.core.placement import placement
from distributetrain.core.clock import FakeClock
from distributetrain.core.placement.bookingjournal import BookingJournal, Closing
from distributetrain.core.placement.inventory import pod_claim
from distributetrain.kube.lock import LOCK_TIMEOUT_S, PlacementLock
from distributetrain.manager.placement import booking, journal
from harness.builders import GPU, JOB, make_node, make_pod
from harness.interleaving import RevisionedKube, Stepper, Tape
from unit.core.placement.test_inventory import awaiting

NODES = [make_node(name).gpus(gpus).allocatable({"cpu": "64", "memory": "512Gi", "pods": "110"}).obj()
         for name, gpus in (("a", 4), ("b", 4), ("c", 2))]
THREAD_END_S = 10.0  # an interleaving takes well under a second


def manager_pod(job: str) -> dict:
    return make_pod(job).uid(f"uid-{job}").labels({names.LABEL_ROLE: names.ROLE_MANAGER}).obj()


def booked_pod(job: str, index: int, node: str, gpus: int) -> dict:
    return (make_pod(f"{job}-{index}").uid(f"uid-{job}-{index}").on(node).gpus(gpus).phase("Pending")
            .labels({names.LABEL_JOB: job, names.LABEL_ROLE: names.ROLE_WORKER}).obj())


def settings_of(job: str, gpus: int):
    return JOB.replace(job_name=job, num_gpus=gpus, owner_uid=f"uid-{job}", cpu_per_gpu_m=0, memory_per_gpu_bytes=0)


def created(kube: RevisionedKube, job: str, plan) -> list[dict]:
    return kube.create_all_owned([booked_pod(job, i, node, share) for i, (node, share) in enumerate(plan)])


def book(kube: RevisionedKube, job: str, gpus: int):
    return booking.book(kube, settings_of(job, gpus), lambda ledger: placement.plan(ledger.free(), gpus),
                        lambda plan: created(kube, job, plan), clock=FakeClock())


class Died(Exception):
    """A manager killed in its turn, its pods created, its entry never written."""


def book_and_die(kube: RevisionedKube, job: str, gpus: int):
    def create_then_die(plan):
        created(kube, job, plan)
        raise Died(job)

    try:
        booking.book(kube, settings_of(job, gpus), lambda ledger: placement.plan(ledger.free(), gpus),
                     create_then_die, clock=FakeClock())
    except Died:
        pass  # its Lease let go as a dead manager's expires, its pods left


def book_as_an_older_release(kube: RevisionedKube, job: str, gpus: int):
    """Before the journal: the bookings listed under the Lease, no entry written, and the
    Lease released to no one with no acquire time (as that release's lock wrote it)."""
    settings, clock = settings_of(job, gpus), FakeClock()
    surveyed = booking.survey(kube, settings, clock)
    with PlacementLock(kube, settings.lease_namespace, job, LOCK_TIMEOUT_S, names.LOCK_LEASE_NAME, clock) as lock:
        ledger = booking.with_bookings(kube, surveyed.ledger, booking.fence(kube, settings, clock))
        try:
            plan = placement.plan(ledger.free(), gpus)
        except placement.InsufficientGPUs:
            plan = []
        created(kube, job, plan)
        lock._release_spec = {"holderIdentity": None, "leaseDurationSeconds": round(lock.duration_s)}


def left_by_an_earlier_booking(kube: RevisionedKube) -> None:
    """The Lease released and the journal written as a booking before these leaves them,
    so a survey taken at once starts from the journal (as in a cluster that has run jobs)."""
    release = {"holderIdentity": None, "acquireTime": "2026-11-30T00:00:00.000000Z", "leaseDurationSeconds": 30,
               "leaseTransitions": 7}
    kube.objects["Lease"] = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "spec": release,
                             "metadata": {"name": names.LOCK_LEASE_NAME, "namespace": "default", "resourceVersion": "1"}}
    earlier = BookingJournal(first=5, closing=Closing.of(release)).appended([], Closing.of(release), unbroken=True)
    kube.objects["ConfigMap"] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": journal.JOURNAL_NAME, "namespace": "default", "resourceVersion": "1"},
        "binaryData": {journal.DATA_KEY: base64.b64encode(earlier.encode()).decode()}}


KINDS = {"journal": book, "dies": book_and_die, "older": book_as_an_older_release}


JOURNALS = ("kept", "none yet", "refused")


def run_managers(choices, jobs: dict[str, int], kinds: dict[str, str] = {}, journal: str = "kept") -> dict[str, int]:
    """Book every job concurrently (each as its kind books: ``KINDS``, the journal's by
    default), after an earlier booking that kept the journal, with none yet, or with its
    reads refused (``JOURNALS``); return the GPUs booked on each node."""
    stepper = Stepper(choices, list(jobs))
    kube = RevisionedKube(stepper, NODES, [manager_pod(job) for job in jobs])
    if journal == "kept":
        left_by_an_earlier_booking(kube)
    elif journal == "refused":
        kube.refused.add("ConfigMap")
    failures: list[BaseException] = []

    def book_one(job: str) -> None:
        try:
            KINDS[kinds.get(job, "journal")](kube, job, jobs[job])
        except BaseException as e:  # noqa: BLE001 - reported in the test's thread
            failures.append(e)

    threads = [threading.Thread(target=stepper.run_as(job, lambda job=job: book_one(job)), daemon=True)
               for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(THREAD_END_S)
    assert not any(thread.is_alive() for thread in threads), "a manager never finished"
    assert not failures, failures
    booked: dict[str, int] = {}
    for pod, _, _ in kube.pods.values():
        if names.is_booking(pod["metadata"]["labels"]) and (claim := pod_claim(pod, GPU)):
            booked[claim.node] = booked.get(claim.node, 0) + claim.gpus
    return booked


def overbooked(booked: dict[str, int]) -> dict[str, int]:
    capacity = {node["metadata"]["name"]: int(node["status"]["allocatable"][GPU]) for node in NODES}
    return {node: gpus for node, gpus in booked.items() if gpus > capacity[node]}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 2**16), max_size=400), st.lists(st.integers(1, 6), min_size=3, max_size=3))
def test_concurrent_managers_never_book_a_gpu_twice(tape, sizes):
    jobs = {f"j{index}": gpus for index, gpus in enumerate(sizes)}
    assert overbooked(run_managers(Tape(tape), jobs)) == {}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 2**16), max_size=400), st.lists(st.integers(1, 6), min_size=4, max_size=4),
       st.lists(st.sampled_from(sorted(KINDS)), min_size=4, max_size=4), st.sampled_from(JOURNALS))
def test_managers_that_keep_no_journal_among_them_never_make_a_gpu_booked_twice(tape, sizes, kinds, journal):
    """Four managers, each of a kind drawn (keeping the journal, of an older release, dying
    in its turn), after a booking that kept the journal, or on a cluster with none yet."""
    jobs = {f"j{index}": gpus for index, gpus in enumerate(sizes)}
    assert overbooked(run_managers(Tape(tape), jobs, dict(zip(jobs, kinds)), journal)) == {}


def test_the_rule_rests_on_the_fence(monkeypatch):
    """Managers taking turns with no journal (refused), each list as old as allowed: with
    the fence, each sees the bookings made before it; read at any revision at all, the
    second plans on the first's GPUs."""
    jobs = {"j0": 4, "j1": 4}
    assert overbooked(run_managers(Tape([]), jobs, journal="refused")) == {}
    monkeypatch.setattr(booking, "fence", lambda kube, settings, clock, labels: "1")
    assert overbooked(run_managers(Tape([]), jobs, journal="refused")) == {"a": 8}


def test_a_node_that_joined_for_another_managers_scale_up_pod_is_booked_by_no_one_else():
    """Manager x's pod awaits the node its autoscaler adds (a booking, listed under the
    Lease); node n has joined for it and the scheduler has not bound the pod yet. j0's
    plan, which n alone would hold, goes on the running nodes."""
    joined = make_node("n").labels({"topology.kubernetes.io/zone": "z1"}).gpus(8).allocatable(
        {"cpu": "64", "memory": "512Gi", "pods": "110"}).obj()
    waiting = awaiting(8, uid="uid-x")
    stepper = Stepper(Tape([]), ["j0"])
    kube = RevisionedKube(stepper, [*NODES, joined], [manager_pod("j0"), waiting])
    left_by_an_earlier_booking(kube)
    plan = stepper.run_as("j0", lambda: book(kube, "j0", 8))()
    assert sorted(plan) == [("a", 4), ("b", 4)]


def test_the_journal_rests_on_its_closing(monkeypatch):
    """Managers taking turns, the second of an older release: a manager that trusted the
    journal whatever the Lease says of the holders since would miss its bookings."""
    jobs = {"j0": 4, "j1": 4, "j2": 4}
    kinds = {"j1": "older"}
    assert overbooked(run_managers(Tape([]), jobs, kinds)) == {}
    monkeypatch.setattr(BookingJournal, "unbroken", lambda journal, found: journal.closing is not None)
    assert overbooked(run_managers(Tape([]), jobs, kinds)) == {"a": 8}
