"""Managers that ask together share one survey of the cluster: one takes it and publishes
it while the others wait for it; a survey begun before a manager asked is never its
(it would miss what changed just before); refused or too large, each surveys for itself."""

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


def published(kube: FakeKube) -> ClusterView | None:
    config_map = kube.config_maps.get(VIEW)
    return config_map and ClusterView.decode(base64.b64decode(config_map["binaryData"][clusterview.DATA_KEY]))


def test_the_first_manager_surveys_and_publishes_and_lets_the_surveyor_lease_go():
    kube = FakeKube(NODES)
    first = clusterview.current(kube, JOB, kube.clock)
    assert (kube.node_lists, kube.pod_lists) == (1, 1)
    assert published(kube) == first and [n["metadata"]["name"] for n in first.nodes] == ["a", "b"]
    assert kube.other_leases[VIEW]["spec"]["holderIdentity"] is None


def test_a_survey_begun_before_a_manager_asked_is_not_its_own():
    """The node labelled, the pod deleted just before the job was submitted: a manager
    sees them, as a survey of its own would."""
    kube = FakeKube(NODES)
    clusterview.current(kube, JOB, kube.clock)
    kube.put(make_node("c").gpus(2).obj())
    again = clusterview.current(kube, JOB.replace(job_name="k"), kube.clock)
    assert [n["metadata"]["name"] for n in again.nodes] == ["a", "b", "c"] and published(kube) == again
    assert (kube.node_lists, kube.pod_lists) == (2, 2)


def test_while_another_manager_surveys_the_others_wait_for_its_survey():
    kube = FakeKube(NODES, clock=FakeClock())
    kube.other_leases[VIEW] = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                               "metadata": {"name": VIEW, "namespace": "default", "resourceVersion": "1"},
                               "spec": {"holderIdentity": "ns/surveyor", "leaseDurationSeconds": 60}}
    got: list[ClusterView] = []
    waiting = threading.Thread(target=lambda: got.append(clusterview.current(kube, JOB, kube.clock)), daemon=True)
    waiting.start()
    wait_until(lambda: ("watch", "ConfigMap", VIEW) in kube.actions, kube.changes, 5,
               "the manager waiting on the ConfigMap")
    theirs = ClusterView(taken_at=kube.clock.now(), nodes=[{"metadata": {"name": "theirs", "labels": {}}}])
    kube.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": VIEW, "namespace": "default"},
                 "binaryData": {clusterview.DATA_KEY: base64.b64encode(theirs.encode()).decode()}})
    waiting.join(10)
    assert got == [theirs] and (kube.node_lists, kube.pod_lists) == (0, 0)


def test_a_survey_another_manager_began_before_one_asked_is_waited_out_then_taken_anew():
    kube = FakeKube(NODES, clock=FakeClock())
    kube.other_leases[VIEW] = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                               "metadata": {"name": VIEW, "namespace": "default", "resourceVersion": "1"},
                               "spec": {"holderIdentity": "ns/surveyor", "leaseDurationSeconds": 60}}
    begun_before = ClusterView(taken_at=kube.clock.now() - 1, nodes=[{"metadata": {"name": "theirs", "labels": {}}}])
    got: list[ClusterView] = []
    waiting = threading.Thread(target=lambda: got.append(clusterview.current(kube, JOB, kube.clock)), daemon=True)
    waiting.start()
    wait_until(lambda: ("watch", "ConfigMap", VIEW) in kube.actions, kube.changes, 5,
               "the manager waiting on the ConfigMap")
    kube.other_leases[VIEW]["spec"]["holderIdentity"] = None  # the surveyor publishes and lets go
    kube.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": VIEW, "namespace": "default"},
                 "binaryData": {clusterview.DATA_KEY: base64.b64encode(begun_before.encode()).decode()}})
    waiting.join(10)
    assert [n["metadata"]["name"] for n in got[0].nodes] == ["a", "b"] and published(kube) == got[0]


def test_refused_the_shared_survey_a_manager_surveys_for_itself():
    kube = FakeKube(NODES)
    kube.failures["read"] = [errors.forbidden('configmaps "distributetrain-cluster-view" is forbidden: User "x" '
                                              'cannot get resource "configmaps"')]
    view = clusterview.current(kube, JOB, kube.clock)
    assert [n["metadata"]["name"] for n in view.nodes] == ["a", "b"] and kube.config_maps == {}


def test_a_survey_too_large_for_a_config_map_is_not_published(monkeypatch):
    monkeypatch.setattr(clusterview, "MAX_PUBLISHED_BYTES", 10)
    kube = FakeKube(NODES)
    clusterview.current(kube, JOB, kube.clock)
    assert kube.config_maps == {}


@pytest.mark.parametrize("damage", [b"not a survey", ClusterView().encode()[:-3]])
def test_a_published_survey_that_cannot_be_read_is_taken_again(damage):
    kube = FakeKube(NODES)
    kube.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": VIEW, "namespace": "default"},
                 "binaryData": {clusterview.DATA_KEY: base64.b64encode(damage).decode()}})
    view = clusterview.current(kube, JOB, kube.clock)
    assert published(kube) == view and kube.node_lists == 1
