"""Turns at the placement Lease: who waits longest goes next; a place is taken once the
Lease is found busy and given up once served, or at the end of the wait."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from distributetrain.core import errors, names
from distributetrain.core.clock import FakeClock
from distributetrain.manager.placement import turns
from harness.builders import JOB, MANAGER_POD
from harness.kube import FakeKube

ON_OWN_POD = JOB.replace(job_name=MANAGER_POD, manager_namespace="ml")


def waiting(holder: str, since: str) -> dict:
    return {"metadata": {"labels": {names.LABEL_PLACEMENT_WAITING: since},
                         "annotations": {names.ANNOTATION_PLACEMENT_HOLDER: holder}}}


def test_the_manager_that_waited_longest_is_next_but_never_the_holder_itself():
    pods = [waiting("ns/b", "20261130T070000000002Z"), waiting("ns/a", "20261130T070000000001Z"),
            waiting("ns/c", "20261130T070000000003Z"), {"metadata": {"labels": {}}}]
    assert turns.first_in_line(pods, "ns/x") == "ns/a"
    assert turns.first_in_line(pods, "ns/a") == "ns/b"
    assert turns.first_in_line(pods[:2], "ns/b") == "ns/a"
    assert turns.first_in_line([waiting("ns/a", "20261130T070000000001Z")], "ns/a") is None


@given(st.lists(st.tuples(st.sampled_from(["ns/a", "ns/b", "ns/c"]), st.integers(0, 10**9)), max_size=8,
                unique_by=lambda entry: entry[1]))
def test_the_first_in_line_is_the_other_that_joined_earliest(entries):
    """Places are when each joined (microseconds apart or years): the earliest joiner, never
    the asker, is next, whatever the order the pods are listed in."""
    pods = [waiting(holder, turns._place(FakeClock(wall_start=1_767_225_600.0 + micros / 1e3)))
            for holder, micros in entries]
    others = [(micros, holder) for holder, micros in entries if holder != "ns/a"]
    assert turns.first_in_line(pods, "ns/a") == (min(others)[1] if others else None)


def test_a_manager_joins_once_the_lease_is_busy_and_leaves_in_its_fence_or_at_the_end():
    kube = FakeKube(clock=FakeClock())
    queue = turns.Turns(kube, ON_OWN_POD, kube.clock)
    assert queue.leaving() == {}  # not waiting: the fence writes no label
    queue.join()
    labels = kube.manager["metadata"]["labels"]
    assert names.LABEL_PLACEMENT_WAITING in labels
    assert kube.manager["metadata"]["annotations"][names.ANNOTATION_PLACEMENT_HOLDER] == "ns/" + MANAGER_POD
    assert queue.leaving() == {names.LABEL_PLACEMENT_WAITING: None}
    queue.leave()  # the wait ended without the Lease
    assert names.LABEL_PLACEMENT_WAITING not in kube.manager["metadata"]["labels"]
    writes = len(kube.actions)
    queue.leave()
    assert len(kube.actions) == writes  # out already: nothing written


def test_outside_a_pod_a_manager_takes_no_place():
    kube = FakeKube(clock=FakeClock(), in_manager_pod=False)
    queue = turns.Turns(kube, JOB.replace(owner_uid=""), kube.clock)
    queue.join()
    queue.leave()
    assert kube.actions == [] and queue.leaving() == {}


def waiting_pod(holder: str, since: str) -> dict:
    name = holder.replace("/", "-")
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "ns", **waiting(holder, since)["metadata"]},
            "spec": {}, "status": {"phase": "Running"}}


def test_the_queue_is_listed_as_the_turn_begins_and_the_release_waits_on_no_list():
    """Finding the labelled pods scans every pod of the cluster (0.1 s at 150,000): listed
    beside the turn's own requests, the hand-off waits for none."""
    kube = FakeKube(clock=FakeClock())
    kube.put(waiting_pod("ns/b", "20261130T070000000002Z"), waiting_pod("ns/a", "20261130T070000000001Z"))
    queue = turns.Turns(kube, ON_OWN_POD, kube.clock)
    queue.look_ahead()
    queue.ahead.result(timeout=5)
    listed = kube.pod_lists
    assert queue.successor() == "ns/a" and kube.pod_lists == listed == 1
    assert queue.successor() == "ns/a" and kube.pod_lists == 2  # a turn with no look-ahead lists at its end


def test_a_queue_that_could_not_be_listed_ahead_fails_the_successor_so_the_lease_goes_free():
    kube = FakeKube(clock=FakeClock())
    kube.failures["list_all"] = [errors.TransientApiError("the list timed out")]
    queue = turns.Turns(kube, ON_OWN_POD, kube.clock)
    queue.look_ahead()
    with pytest.raises(errors.TransientApiError):
        queue.successor()  # the lock's release frees the Lease on it (test_lock.py)
