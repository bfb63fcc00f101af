"""Teardown at the API server's pace (issue 36, item 3): the job's pods go in one
deletecollection by the job's and this manager's labels, not one request each, with every
guarantee of before: a finished chief kept when asked, another run's pods untouched, the
Secret deleted, safe to run twice, one delete per pod where the Role lacks deletecollection."""

import logging

import pytest

from distributetrain.core import errors, names
from distributetrain.core.clock import FakeClock
from distributetrain.core.settings import JobSettings
from distributetrain.kube.client import Kube
from distributetrain.kube.connection import ApiTimeouts
from distributetrain.manager.watching.teardown import tear_down
from harness.apiserver import HttpFake, Reply, Request, kube_at
from harness.kube import FakeKube

JOB = JobSettings(job_name="demo", namespace="ml", num_gpus=3, image="reg/base:1", owner_uid="uid-1")
SELECTOR = "distributetrain.io/job=demo,distributetrain.io/owner-uid=uid-1,distributetrain.io/role in (chief,worker)"
RUNNING = {"phase": "Running"}
SUCCEEDED = {"phase": "Succeeded"}


def job_pod(name: str, role: str, status: dict = RUNNING, owner_uid: str = "uid-1") -> dict:
    return {"metadata": {"name": name, "namespace": "ml", "labels": names.job_labels("demo", role, owner_uid)},
            "spec": {"containers": [{"name": role}]}, "status": status}


def secret(owner_uid: str = "uid-1") -> dict:
    return {"metadata": {"name": "demo-ssh", "labels": names.job_labels("demo", "ssh", owner_uid)}}


def a_finished_job(chief_status: dict = SUCCEEDED) -> FakeKube:
    kube = FakeKube(pods=[job_pod("demo-worker-0", "worker"), job_pod("demo-worker-1", "worker"),
                          job_pod("demo-chief", "chief", chief_status),
                          # An earlier run of the same job name, another manager's: never touched.
                          job_pod("demo-worker-0-r9", "worker", owner_uid="uid-0")])
    kube.secrets["demo-ssh"] = secret()
    return kube


def test_the_pods_go_in_one_request_and_a_finished_chief_is_kept_when_asked():
    kube = a_finished_job()
    assert tear_down(kube, JOB, keep_chief=True) == ["pod/demo-worker-0", "pod/demo-worker-1", "secret/demo-ssh"]
    assert kube.actions == [("deletecollection", "Pod", f"{SELECTOR} metadata.name!=demo-chief"),
                            ("delete", "Secret", "demo-ssh")]
    assert sorted(kube.pods) == ["demo-chief", "demo-worker-0-r9"]


def test_a_chief_still_running_is_deleted_with_the_workers_even_when_kept():
    kube = a_finished_job(chief_status=RUNNING)
    assert tear_down(kube, JOB, keep_chief=True) == [
        "pod/demo-chief", "pod/demo-worker-0", "pod/demo-worker-1", "secret/demo-ssh"]
    assert kube.actions == [("deletecollection", "Pod", SELECTOR), ("delete", "Secret", "demo-ssh")]
    assert sorted(kube.pods) == ["demo-worker-0-r9"]


def test_twice_is_safe_and_the_second_time_writes_nothing():
    kube = a_finished_job()
    kube.pods_stay_terminating = True  # the first teardown's pods are still going
    tear_down(kube, JOB, keep_chief=False)
    first = list(kube.actions)
    assert tear_down(kube, JOB, keep_chief=False) == []
    assert kube.actions == first == [("deletecollection", "Pod", SELECTOR), ("delete", "Secret", "demo-ssh")]


def test_another_runs_secret_is_left_alone():
    kube = a_finished_job()
    kube.secrets["demo-ssh"] = secret(owner_uid="uid-0")
    assert tear_down(kube, JOB, keep_chief=False) == ["pod/demo-chief", "pod/demo-worker-0", "pod/demo-worker-1"]
    assert kube.actions == [("deletecollection", "Pod", SELECTOR)]


def test_a_role_without_deletecollection_gets_one_delete_per_pod_as_before(caplog):
    kube = a_finished_job()
    kube.failures["delete_collection Pod"] = [errors.Forbidden(
        'pods is forbidden: User "system:serviceaccount:ml:distributetrain" cannot deletecollection resource "pods"')]
    with caplog.at_level(logging.WARNING):
        deleted = tear_down(kube, JOB, keep_chief=True)
    assert deleted == ["pod/demo-worker-0", "pod/demo-worker-1", "secret/demo-ssh"]
    assert kube.actions == [("delete", "Pod", "demo-worker-0"), ("delete", "Pod", "demo-worker-1"),
                            ("delete", "Secret", "demo-ssh")]
    assert [r.getMessage() for r in caplog.records] == [
        'job demo: deleting pods one by one (pods is forbidden: User "system:serviceaccount:ml:distributetrain" '
        'cannot deletecollection resource "pods"; rbac/role.yaml grants pods deletecollection)']


def test_other_errors_are_raised_not_hidden_by_the_fallback():
    kube = a_finished_job()
    kube.failures["delete_collection Pod"] = [errors.ApiError("etcdserver: request timed out")]
    with pytest.raises(errors.ApiError):
        tear_down(kube, JOB, keep_chief=False)
    assert kube.actions == []


# -- the request itself, as the API server receives it ------------------------------------------

def recording_server(*first: int) -> HttpFake:
    """Answers DELETE on a pod collection as the API server does (the deleted pods, as a
    list), after the statuses in ``first`` (a 503 while it restarts, a 403 from RBAC)."""
    codes = list(first)

    def answer(request: Request) -> Reply:
        code = codes.pop(0) if codes else 200
        if code != 200:
            return Reply(code, {"kind": "Status", "code": code, "message": f"HTTP {code}"})
        return Reply(200, {"kind": "PodList", "items": [{"metadata": {"name": name}}
                                                        for name in ("demo-worker-1", "demo-worker-0")]})

    return HttpFake(answer)


def requests(server: HttpFake) -> list[tuple[str, str, dict, dict]]:
    return [(r.method, r.path, r.query, r.json()) for r in server.received]


def kube_for(url: str) -> Kube:
    return kube_at(url, ApiTimeouts(connect_s=1.0, read_s=1.0, retry_deadline_s=2.0, watch_chunk_s=1.0,
                                    watch_read_slack_s=0.5), FakeClock())


def test_one_deletecollection_by_label_and_field_selector_in_the_background_retried_while_the_server_restarts():
    with recording_server(503) as server:
        deleted = kube_for(server.url).delete_collection("Pod", "ml", SELECTOR, "metadata.name!=demo-chief")
    assert deleted == ["demo-worker-0", "demo-worker-1"]
    request = ("DELETE", "/api/v1/namespaces/ml/pods", {"labelSelector": SELECTOR,
                                                         "fieldSelector": "metadata.name!=demo-chief"},
               {"propagationPolicy": "Background"})
    assert requests(server) == [request, request]  # the 503, then the answer


def test_rbacs_refusal_of_deletecollection_is_forbidden_at_once():
    with recording_server(403) as server, pytest.raises(errors.Forbidden):
        kube_for(server.url).delete_collection("Pod", "ml", SELECTOR)
    assert [query for _, _, query, _ in requests(server)] == [{"labelSelector": SELECTOR}]
