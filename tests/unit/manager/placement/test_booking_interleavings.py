"""No GPU is ever booked twice, whatever the interleaving of concurrent managers.

Each example runs the real ``booking.book`` of three managers, each on a thread of its
own, against a store of revisions (``harness.interleaving``): hypothesis draws which
manager makes the next API call, and at which revision each list is served (a survey at
any revision at all, the bookings at the fence's or later). After all of them, no node
may hold more booked GPUs than it has. The same managers reading their bookings at a
stale revision (a fence that proves nothing) do double-book: the rule rests on the fence.
"""

from __future__ import annotations

import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distributetrain.core import names
from distributetrain.core.placement import placement
from distributetrain.core.clock import FakeClock
from distributetrain.core.placement.inventory import pod_claim
from distributetrain.manager.placement import booking, clusterview
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


def book(kube: RevisionedKube, job: str, gpus: int):
    settings = JOB.replace(job_name=job, num_gpus=gpus, owner_uid=f"uid-{job}", cpu_per_gpu_m=0,
                           memory_per_gpu_bytes=0)
    return booking.book(kube, settings, lambda ledger: placement.plan(ledger.free(), gpus),
                        lambda plan: kube.create_all_owned([booked_pod(job, i, node, share)
                                                            for i, (node, share) in enumerate(plan)]),
                        clock=FakeClock())


@pytest.fixture(autouse=True)
def own_surveys(monkeypatch):
    """Each manager surveys the store itself, at a revision drawn like every list's: how
    old the survey is, published or not, is what the rule must not depend on."""
    monkeypatch.setattr(clusterview, "current", lambda kube, settings, clock: clusterview.take(kube, clock))


def run_managers(choices, jobs: dict[str, int]) -> dict[str, int]:
    """Book every job concurrently; return the GPUs booked on each node."""
    stepper = Stepper(choices, list(jobs))
    kube = RevisionedKube(stepper, NODES, [manager_pod(job) for job in jobs])
    failures: list[BaseException] = []

    def book_one(job: str) -> None:
        try:
            book(kube, job, jobs[job])
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


def test_the_rule_rests_on_the_fence(monkeypatch):
    """Managers taking turns, each list as old as allowed: with the fence, each sees the
    bookings made before it; read at any revision at all, the second plans on the first's GPUs."""
    jobs = {"j0": 4, "j1": 4}
    assert overbooked(run_managers(Tape([]), jobs)) == {}
    monkeypatch.setattr(booking, "fence", lambda kube, settings, clock, labels: "1")
    assert overbooked(run_managers(Tape([]), jobs)) == {"a": 8}


def test_a_node_that_joined_for_another_managers_scale_up_pod_is_booked_by_no_one_else():
    """Manager x's pod awaits the node its autoscaler adds (a booking, listed under the
    Lease); node n has joined for it and the scheduler has not bound the pod yet. j0's
    plan, which n alone would hold, goes on the running nodes."""
    joined = make_node("n").labels({"topology.kubernetes.io/zone": "z1"}).gpus(8).allocatable(
        {"cpu": "64", "memory": "512Gi", "pods": "110"}).obj()
    waiting = awaiting(8, uid="uid-x")
    stepper = Stepper(Tape([]), ["j0"])
    kube = RevisionedKube(stepper, [*NODES, joined], [manager_pod("j0"), waiting])
    plan = stepper.run_as("j0", lambda: book(kube, "j0", 8))()
    assert sorted(plan) == [("a", 4), ("b", 4)]
