"""The wait on selected pods: a judge on every change, and a watch that lists again rather than end."""


from distributetrain.core import errors
from distributetrain.core.clock import FakeClock
from distributetrain.kube import waits
from harness.builders import make_pod
from harness.kube import FakeKube


def pod(name):
    return make_pod(name).labels({"job": "j"}).obj()


def worker_deleted(pods):
    return "w0 deleted" if "w0" not in pods else None


def test_a_watch_error_other_than_gone_lists_again_and_never_aborts():
    worker = pod("w0")
    kube = FakeKube(pods=[pod("c"), worker], clock=FakeClock())  # the delay before listing again passes at once
    kube.pod_watches = [
        [("MODIFIED", pod("c")), errors.TransientApiError("the watch ended with an error (500): etcd leader changed")],
        [("DELETED", worker)],
    ]
    result = waits.watch_until(kube, "ns", "job=j", worker_deleted, kube.clock.monotonic() + 10, kube.clock)
    assert result.outcome == "w0 deleted"
    assert kube.pod_lists == 2


def test_gone_lists_again():
    worker = pod("w0")
    kube = FakeKube(pods=[pod("c"), worker])
    kube.pod_watches = [[errors.Gone("too old resource version")], [("DELETED", worker)]]
    result = waits.watch_until(kube, "ns", "job=j", worker_deleted, kube.clock.monotonic() + 10, kube.clock)
    assert result.outcome == "w0 deleted" and kube.pod_lists == 2


def test_a_deadline_before_any_answer_is_its_own_outcome_with_the_pods_last_seen():
    kube = FakeKube(pods=[pod("c"), pod("w0")])
    result = waits.watch_until(kube, "ns", "job=j", worker_deleted, kube.clock.monotonic(), kube.clock)
    assert result == waits.DeadlinePassed({"c": pod("c"), "w0": pod("w0")})
