"""Requests no cluster state could ever satisfy are bad input, naming the flag to change."""

import pytest

from distributetrain.core import errors, names
from distributetrain.core.placement import placement, topology
from distributetrain.core.clock import FakeClock
from distributetrain.core.settings import RuntimeClassTerms
from distributetrain.manager.placement import booking, journal
from distributetrain.manager.placement.freegpus import LedgerParts
from harness.builders import GKE_TIME_SHARED, JOB, MIG_SLICED, TIME_SLICED, ledger_of, make_pod, sized_node
from harness.kube import FakeKube

RACK = "example.com/rack"
RACKED = JOB.replace(topology=topology.parse(f"{RACK}!"))


@pytest.mark.parametrize("nodes,settings,flag,says", [
    ([sized_node("a", 4)], JOB.replace(num_gpus=5), "--num-gpus", "the cluster's nodes advertise 4 in all"),
    ([sized_node("a", 2, cpu="2"), sized_node("b", 2, cpu="2")], JOB, "--cpu-per-gpu",
     "fit 2 of the 4 GPUs the cluster's nodes advertise: their allocatable CPU holds too few pods of 2 CPU per GPU"),
    ([sized_node("a", 4, memory="16Gi")], JOB, "--memory-per-gpu", "too few pods of 8Gi per GPU"),
    ([sized_node("s", 8, labels=TIME_SLICED)], JOB, "--allow-shared-gpus", "one rank of the job per node"),
    ([sized_node("m", 7, labels=MIG_SLICED), sized_node("n", 7, labels=MIG_SLICED)], JOB, "--allow-shared-gpus",
     "fit 2 of the 14 GPUs the cluster's nodes advertise: they are MIG slices "
     "(nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3-MIG-1g.10gb): one rank of the job per node"),
    ([sized_node("g", 6, labels=GKE_TIME_SHARED)], JOB.replace(allow_shared_gpus=True), "--num-gpus",
     "they are GPUs time-shared by GKE (cloud.google.com/gke-gpu-sharing-strategy=time-sharing, "
     "cloud.google.com/gke-max-shared-clients-per-gpu=3): one rank of the job per node (their platform gives "
     "a container one unit at most)"),
    ([sized_node("s", 8, labels=TIME_SLICED), sized_node("g", 6, labels=GKE_TIME_SHARED)],
     JOB.replace(num_gpus=10, allow_shared_gpus=True), "--num-gpus",
     "fit 9 of the 14 GPUs the cluster's nodes advertise: they are GPUs time-shared by GKE ("),  # allowed: GKE's alone
    ([sized_node("a", 4, pods="0")], JOB, "--num-gpus", "their allocatable pods holds too few of the job's pods"),
    ([sized_node("a", 2, labels={RACK: "r1"}), sized_node("b", 2, labels={RACK: "r2"})], RACKED, "--topology",
     f"requested 4 GPUs but one rack of the cluster's nodes holds 2 of the job's GPUs at most ({RACK}! is required)"),
    ([sized_node("a", 2, labels={RACK: "r1"}), sized_node("b", 4)], RACKED, "--topology", "holds 2 of the job's GPUs at most"),
])
def test_a_job_the_nodes_could_never_hold_is_bad_input(nodes, settings, flag, says):
    with pytest.raises(errors.UsageError, match=flag) as refused:
        booking.check_request(ledger_of(nodes, settings=settings), settings)
    assert says in str(refused.value)


def test_a_job_that_fits_once_other_pods_leave_is_not_bad_input():
    busy = make_pod("t").uid("t").on("a").resources({"requests": {"cpu": "64"}}).obj()
    booking.check_request(ledger_of([sized_node("a", 4)], [busy]), JOB)
    booking.check_request(ledger_of([sized_node("s", 8, labels=TIME_SLICED)], settings=JOB.replace(allow_shared_gpus=True)),
                          JOB)


def test_a_job_one_rack_could_hold_once_other_pods_leave_is_not_bad_input():
    busy = make_pod("t").uid("t").on("a").gpus(4).obj()
    booking.check_request(ledger_of([sized_node("a", 4, labels={RACK: "r1"})], [busy], RACKED), RACKED)


GROWS = JOB.replace(num_gpus=12, scale_up_node_gpus=8, wait_for_gpus_s=300.0)


def test_a_job_that_makes_the_cluster_grow_is_bounded_by_no_running_node():
    booking.check_request(ledger_of([], settings=GROWS), GROWS)  # scaled to zero: no GPU node at all
    booking.check_request(ledger_of([sized_node("a", 4)], settings=GROWS), GROWS)


def test_short_of_gpus_the_rest_goes_on_new_nodes_while_the_job_may_wait():
    assert booking.plan_or_grow(placement.plan, {"a": 4}, GROWS) == [("(new node)", 8), ("a", 4)]
    assert booking.plan_or_grow(placement.plan, {"a": 8, "b": 4}, GROWS) == [("a", 8), ("b", 4)]
    for settings, may_wait in ((GROWS, False), (GROWS.replace(scale_up_node_gpus=0), True)):
        with pytest.raises(placement.InsufficientGPUs):
            booking.plan_or_grow(placement.plan, {"a": 4}, settings, may_wait)


def test_the_nodes_of_the_runtime_class_are_the_candidates_as_they_are_while_waiting():
    """Admission merges the RuntimeClass's scheduling into each pod: only nodes with its
    labels can take them, and its tolerations let them on its nodes' taints."""
    kata = sized_node("a", 4, labels={"pool": "kata"})
    kata["spec"]["taints"] = [{"key": "kata", "effect": "NoSchedule"}]
    terms = RuntimeClassTerms(node_selector=(("pool", "kata"),),
                              tolerations=({"key": "kata", "operator": "Exists", "effect": "NoSchedule"},))
    settings = JOB.replace(runtime_class="kata", runtime_class_terms=terms)
    kube = FakeKube([kata, sized_node("b", 4)])
    assert booking.take_inventory(kube, settings, FakeClock()).free() == {"a": 4}
    assert booking.take_inventory(kube, JOB, FakeClock()).free() == {"b": 4}
    parts = LedgerParts.for_job(settings)  # what a job waiting for GPUs follows
    assert {name for name in ("a", "b") if not parts.node_part(kube.nodes[name]).refusal} == {"a"}


def booking_in_turn(kube: FakeKube, job: str, gpus: int):
    """A job's booking, its pods created as planned (workers, so they are bookings)."""
    def create(plan):
        return kube.create_all_owned([make_pod(f"{job}-{index}").uid(f"uid-{job}-{index}").on(node).gpus(share)
                                      .labels({names.LABEL_JOB: job, names.LABEL_ROLE: names.ROLE_WORKER}).obj()
                                      for index, (node, share) in enumerate(plan)])

    return booking.book(kube, JOB.replace(job_name=job, num_gpus=gpus), lambda ledger: placement.plan(ledger.free(), gpus),
                        create, FakeClock())


def counting_bookings_lists(kube: FakeKube) -> list[int]:
    """A one-item list counting the lists of the bookings (the scan of every pod on the server)."""
    counted, each_pod_request = [0], kube.each_pod_request

    def counting(visit, restart, **selectors):
        counted[0] += selectors.get("label_selector") == names.BOOKINGS_SELECTOR
        return each_pod_request(visit, restart, **selectors)

    kube.each_pod_request = counting
    return counted


def test_under_the_lease_the_bookings_since_the_survey_come_from_the_journal_not_a_list():
    """The first survey finds no journal, and no manager in its turn (no Lease yet): it begins
    the journal, and every booking after reads the bookings made since its survey there."""
    kube = FakeKube(nodes=[sized_node("a", 4), sized_node("b", 4)])
    lists = counting_bookings_lists(kube)
    assert booking_in_turn(kube, "first", 4) == [("a", 4)]
    assert booking_in_turn(kube, "second", 4) == [("b", 4)]
    assert isinstance(booking_in_turn(kube, "third", 4), booking.Short)
    assert lists == [0]


def test_no_journal_is_begun_while_a_manager_is_in_its_turn():
    """A holder that may be booking now would write no entry in a journal it never read:
    the survey begins none. Once that holder's turn is over, a survey begins it, after its pods."""
    kube = FakeKube(nodes=[sized_node("a", 4), sized_node("b", 4)])
    kube.lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                  "metadata": {"name": names.LOCK_LEASE_NAME, "namespace": "default", "resourceVersion": "1"},
                  "spec": {"holderIdentity": "ns/other", "leaseDurationSeconds": 1, "leaseTransitions": 4,
                           "acquireTime": "2026-11-30T10:00:00.000000Z"}}
    lists = counting_bookings_lists(kube)
    surveyed = booking.survey(kube, JOB, FakeClock())
    assert surveyed.position is None and kube.writes(kind="ConfigMap") == []
    kube.create_all_owned([make_pod("other-0").uid("o0").on("a").gpus(4)
                           .labels({names.LABEL_JOB: "other", names.LABEL_ROLE: names.ROLE_WORKER}).obj()])
    kube.lease["spec"]["holderIdentity"] = None  # its turn over
    assert booking_in_turn(kube, "first", 4) == [("b", 4)]
    assert lists == [0] and kube.writes(kind="ConfigMap") == [journal.JOURNAL_NAME] * 2  # begun, then its entry


def test_a_journal_some_holder_since_left_out_is_not_trusted():
    """The Lease taken since the journal's last entry by a manager that wrote none (another
    acquisition counted): the next booking lists the bookings, and sees that holder's."""
    kube = FakeKube(nodes=[sized_node("a", 4), sized_node("b", 4)])
    booking_in_turn(kube, "first", 4)
    kube.create_all_owned([make_pod("unjournaled-0").uid("u0").on("b").gpus(4)
                           .labels({names.LABEL_JOB: "unjournaled", names.LABEL_ROLE: names.ROLE_WORKER}).obj()])
    kube.lease["spec"]["leaseTransitions"] += 1
    lists = counting_bookings_lists(kube)
    assert isinstance(booking_in_turn(kube, "second", 4), booking.Short)
    assert lists == [1]


def test_a_journal_that_may_not_be_read_leaves_the_bookings_listed():
    """An older rbac/ without the journal's ConfigMap: every booking lists, none fails."""
    kube = FakeKube(nodes=[sized_node("a", 4), sized_node("b", 4)])
    kube.forbidden_reads.add("ConfigMap")
    lists = counting_bookings_lists(kube)
    assert booking_in_turn(kube, "first", 4) == [("a", 4)]
    assert booking_in_turn(kube, "second", 4) == [("b", 4)]
    assert lists == [2]
    assert kube.writes(kind="ConfigMap") == []
