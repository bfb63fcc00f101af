"""Managers that ask together share one survey of the cluster: one takes it and publishes
it while the others wait for it, as long as it lives; a survey begun before a manager
asked is never its (it would miss what changed just before); refused, too large or past
its deadline, each surveys for itself."""

import base64
import threading

import pytest

from distributetrain.core import errors
from distributetrain.core.clock import FakeClock
from distributetrain.core.placement.clusterview import ClusterView
from distributetrain.manager.placement import clusterview
from harness.builders import JOB, make_node
from harness.kube import FakeKube
from harness.waiting import wait_until

NODES = [make_node("a").gpus(8).obj(), make_node("b").gpus(4).obj()]
VIEW = clusterview.VIEW_NAME
WAIT_S = 120.0  # what a booking gives the shared survey (booking.lease_deadline, no --wait-for-gpus)


def later(kube: FakeKube, seconds: float = WAIT_S) -> float:
    return kube.clock.monotonic() + seconds


def published(kube: FakeKube) -> ClusterView | None:
    config_map = kube.config_maps.get(VIEW)
    return config_map and ClusterView.decode(base64.b64decode(config_map["binaryData"][clusterview.DATA_KEY]))


def test_the_first_manager_surveys_and_publishes_and_lets_the_surveyor_lease_go():
    kube = FakeKube(NODES)
    first = clusterview.current(kube, JOB, kube.clock, later(kube))
    assert (kube.node_lists, kube.pod_lists) == (1, 1)
    assert published(kube) == first and [n["metadata"]["name"] for n in first.nodes] == ["a", "b"]
    assert kube.other_leases[VIEW]["spec"]["holderIdentity"] is None


def test_a_survey_begun_before_a_manager_asked_is_not_its_own():
    """The node labelled, the pod deleted just before the job was submitted: a manager
    sees them, as a survey of its own would."""
    kube = FakeKube(NODES)
    clusterview.current(kube, JOB, kube.clock, later(kube))
    kube.put(make_node("c").gpus(2).obj())
    again = clusterview.current(kube, JOB.replace(job_name="k"), kube.clock, later(kube))
    assert [n["metadata"]["name"] for n in again.nodes] == ["a", "b", "c"] and published(kube) == again
    assert (kube.node_lists, kube.pod_lists) == (2, 2)


def surveyor_lease(version: int = 1) -> dict:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": VIEW, "namespace": "default", "resourceVersion": str(version)},
            "spec": {"holderIdentity": "ns/surveyor", "leaseDurationSeconds": clusterview.SURVEYOR_LEASE_S}}


def publish(kube: FakeKube, view: ClusterView) -> None:
    kube.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": VIEW, "namespace": "default"},
                 "binaryData": {clusterview.DATA_KEY: base64.b64encode(view.encode()).decode()}})


class SlowSurveyor(FakeKube):
    """Another manager surveying, on the story's clock: its Lease renewed at each of the
    waiting manager's looks at the ConfigMap (``renewing``), its survey published once
    ``publish_after`` seconds have passed (never: None)."""

    MOST_READS = 50  # of the ConfigMap: a waiter that spins is stopped here, not left to hang

    def __init__(self, publish_after: float | None, renewing: bool = True):
        super().__init__(NODES, clock=FakeClock())
        self.other_leases[VIEW] = surveyor_lease()
        self.started = self.clock.monotonic()
        self.publish_after, self.renewing, self.renewals = publish_after, renewing, 0
        self.view_reads = 0

    def read(self, kind, namespace, name):
        if kind == "ConfigMap":
            self.view_reads += 1
            assert self.view_reads <= self.MOST_READS, "the waiting manager spins on the ConfigMap"
        return super().read(kind, namespace, name)

    def watch(self, kind, namespace, resource_version, timeout_s, **selectors):
        if kind == "ConfigMap":
            elapsed = self.clock.monotonic() - self.started
            if self.renewing and self.other_leases[VIEW]["spec"]["holderIdentity"] == "ns/surveyor":
                self.renewals += 1
                self.other_leases[VIEW] = surveyor_lease(1 + self.renewals)
            if self.publish_after is not None and elapsed >= self.publish_after and VIEW not in self.config_maps:
                publish(self, ClusterView(taken_at=self.clock.now(), nodes=[{"metadata": {"name": "theirs",
                                                                                           "labels": {}}}]))
        if kind == "ConfigMap":  # as the API server starts a watch from "": at once, a bookmark
            yield "BOOKMARK", {"kind": "ConfigMap", "metadata": {"resourceVersion": "99",
                                                                  "annotations": {"k8s.io/initial-events-end": "true"}}}
        yield from super().watch(kind, namespace, resource_version, timeout_s, **selectors)


def test_a_surveyor_that_lives_is_waited_for_however_long_its_survey_takes():
    """A fixed bound shorter than a loaded server's survey sent a burst of 100 managers
    each to list every pod at once, which the server could not serve: one survey at a time."""
    kube = SlowSurveyor(publish_after=3 * clusterview.SURVEYOR_LEASE_S)
    view = clusterview.current(kube, JOB, kube.clock, later(kube, 10 * clusterview.SURVEYOR_LEASE_S))
    assert [n["metadata"]["name"] for n in view.nodes] == ["theirs"] and (kube.node_lists, kube.pod_lists) == (0, 0)
    assert kube.clock.monotonic() - kube.started >= 3 * clusterview.SURVEYOR_LEASE_S
    # Read at each look (every SURVEYOR_CHECK_S) and once published, never at a bookmark.
    assert kube.view_reads <= 1 + 3 * clusterview.SURVEYOR_LEASE_S / clusterview.SURVEYOR_CHECK_S + 1


def test_a_dead_surveyors_lease_is_taken_over_once_it_expires_and_the_survey_published():
    kube = SlowSurveyor(publish_after=None, renewing=False)
    view = clusterview.current(kube, JOB, kube.clock, later(kube, 10 * clusterview.SURVEYOR_LEASE_S))
    assert [n["metadata"]["name"] for n in view.nodes] == ["a", "b"] and published(kube) == view
    assert (kube.node_lists, kube.pod_lists) == (1, 1)
    waited = kube.clock.monotonic() - kube.started
    assert clusterview.SURVEYOR_LEASE_S <= waited < clusterview.SURVEYOR_LEASE_S + 2 * clusterview.SURVEYOR_CHECK_S


def test_past_its_deadline_a_manager_surveys_for_itself_though_a_surveyor_lives():
    kube = SlowSurveyor(publish_after=None)
    view = clusterview.current(kube, JOB, kube.clock, later(kube, 30))
    assert [n["metadata"]["name"] for n in view.nodes] == ["a", "b"] and (kube.node_lists, kube.pod_lists) == (1, 1)
    assert VIEW not in kube.config_maps  # the surveyor's to publish


class CountingReads(FakeKube):
    def __init__(self):
        super().__init__(NODES, clock=FakeClock())
        self.view_reads = 0

    def read(self, kind, namespace, name):
        self.view_reads += kind == "ConfigMap"
        return super().read(kind, namespace, name)


def test_while_another_manager_surveys_the_others_wait_for_its_survey():
    """And take it from the watch's event: 100 managers waiting on one survey read it
    again at once (each a GET of the whole ConfigMap) before any could book."""
    kube = CountingReads()
    kube.other_leases[VIEW] = surveyor_lease()
    got: list[ClusterView] = []
    waiting = threading.Thread(target=lambda: got.append(clusterview.current(kube, JOB, kube.clock, later(kube))), daemon=True)
    waiting.start()
    wait_until(lambda: ("watch", "ConfigMap", VIEW) in kube.actions, kube.changes, 5,
               "the manager waiting on the ConfigMap")
    theirs = ClusterView(taken_at=kube.clock.now(), nodes=[{"metadata": {"name": "theirs", "labels": {}}}])
    publish(kube, theirs)
    waiting.join(10)
    assert got == [theirs] and (kube.node_lists, kube.pod_lists) == (0, 0)
    assert kube.view_reads == 1  # the first look, when none was published


def test_a_survey_another_manager_began_before_one_asked_is_waited_out_then_taken_anew():
    kube = FakeKube(NODES, clock=FakeClock())
    kube.other_leases[VIEW] = surveyor_lease()
    begun_before = ClusterView(taken_at=kube.clock.now() - 1, nodes=[{"metadata": {"name": "theirs", "labels": {}}}])
    got: list[ClusterView] = []
    waiting = threading.Thread(target=lambda: got.append(clusterview.current(kube, JOB, kube.clock, later(kube))), daemon=True)
    waiting.start()
    wait_until(lambda: ("watch", "ConfigMap", VIEW) in kube.actions, kube.changes, 5,
               "the manager waiting on the ConfigMap")
    kube.other_leases[VIEW]["spec"]["holderIdentity"] = None  # the surveyor publishes and lets go
    publish(kube, begun_before)
    waiting.join(10)
    assert [n["metadata"]["name"] for n in got[0].nodes] == ["a", "b"] and published(kube) == got[0]


def test_refused_the_shared_survey_a_manager_surveys_for_itself():
    kube = FakeKube(NODES)
    kube.failures["read"] = [errors.forbidden('configmaps "distributetrain-cluster-view" is forbidden: User "x" '
                                              'cannot get resource "configmaps"')]
    view = clusterview.current(kube, JOB, kube.clock, later(kube))
    assert [n["metadata"]["name"] for n in view.nodes] == ["a", "b"] and VIEW not in kube.config_maps


def test_a_survey_too_large_for_a_config_map_is_not_published(monkeypatch):
    monkeypatch.setattr(clusterview, "MAX_PUBLISHED_BYTES", 10)
    kube = FakeKube(NODES)
    clusterview.current(kube, JOB, kube.clock, later(kube))
    assert VIEW not in kube.config_maps


@pytest.mark.parametrize("damage", [b"not a survey", ClusterView().encode()[:-3]])
def test_a_published_survey_that_cannot_be_read_is_taken_again(damage):
    kube = FakeKube(NODES)
    kube.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": VIEW, "namespace": "default"},
                 "binaryData": {clusterview.DATA_KEY: base64.b64encode(damage).decode()}})
    view = clusterview.current(kube, JOB, kube.clock, later(kube))
    assert published(kube) == view and kube.node_lists == 1
