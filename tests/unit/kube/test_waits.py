"""The wait on selected pods: a judge on every change, and a watch that lists again rather than end."""

import time

from distributetrain.core import errors
from distributetrain.kube import informer, waits
from harness.kube import FakeKube


def pod(name):
    return {"metadata": {"name": name, "labels": {"job": "j"}}, "spec": {}, "status": {"phase": "Running"}}


def worker_deleted(pods):
    return "w0 deleted" if "w0" not in pods else None


def test_a_watch_error_other_than_gone_lists_again_and_never_aborts(monkeypatch):
    monkeypatch.setattr(informer, "RELIST_DELAY_S", 0)
    worker = pod("w0")
    kube = FakeKube(pods=[pod("c"), worker])
    kube.pod_watches = [
        [("MODIFIED", pod("c")), errors.TransientApiError("the watch ended with an error (500): etcd leader changed")],
        [("DELETED", worker)],
    ]
    result = waits.watch_until(kube, "ns", "job=j", worker_deleted, time.monotonic() + 10)
    assert result.outcome == "w0 deleted"
    assert kube.pod_lists == 2


def test_gone_lists_again():
    worker = pod("w0")
    kube = FakeKube(pods=[pod("c"), worker])
    kube.pod_watches = [[errors.Gone("too old resource version")], [("DELETED", worker)]]
    result = waits.watch_until(kube, "ns", "job=j", worker_deleted, time.monotonic() + 10)
    assert result.outcome == "w0 deleted" and kube.pod_lists == 2


def test_a_deadline_before_any_answer_is_its_own_outcome_with_the_pods_last_seen():
    kube = FakeKube(pods=[pod("c"), pod("w0")])
    result = waits.watch_until(kube, "ns", "job=j", worker_deleted, time.monotonic())
    assert result == waits.DeadlinePassed({"c": pod("c"), "w0": pod("w0")})
