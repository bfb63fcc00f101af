"""Whether the cluster serves PodGroups (``kube.gang``), against an API server on 127.0.0.1
(harness/apiserver.PathServer): decided once per manager, from the discovery documents the
API server serves: a release without them (1.34) answers one request, and nothing fails."""

import pytest

from distributetrain.kube.connection import ApiTimeouts
from harness.apiserver import PathServer, kube_at

TIMEOUTS = ApiTimeouts(connect_s=1.0, read_s=2.0, retry_deadline_s=2.0)
GROUP = "/apis/scheduling.k8s.io"


def group(*versions: str) -> dict:
    return {"kind": "APIGroup", "apiVersion": "v1", "name": "scheduling.k8s.io",
            "versions": [{"groupVersion": f"scheduling.k8s.io/{v}", "version": v} for v in versions],
            "preferredVersion": {"groupVersion": "scheduling.k8s.io/v1", "version": "v1"}}


def v1beta1(*resources: str) -> dict:
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "scheduling.k8s.io/v1beta1",
            "resources": [{"name": name, "namespaced": True, "kind": name} for name in resources]}


@pytest.mark.parametrize("answers, served, asked", [
    # 1.34 to 1.36, or 1.37 without scheduling.k8s.io/v1beta1 asked for: PriorityClasses only
    ({GROUP: group("v1")}, False, [GROUP]),
    # 1.37 with the version asked for and the GenericWorkload gate (as the local cluster runs it)
    ({GROUP: group("v1", "v1beta1"), f"{GROUP}/v1beta1": v1beta1("workloads", "podgroups", "podgroups/status")},
     True, [GROUP, f"{GROUP}/v1beta1"]),
    # the version served without PodGroups (--runtime-config=scheduling.k8s.io/v1beta1/podgroups=false)
    ({GROUP: group("v1", "v1beta1"), f"{GROUP}/v1beta1": v1beta1("workloads")}, False, [GROUP, f"{GROUP}/v1beta1"]),
], ids=["not-served", "served", "version-without-podgroups"])
def test_pod_groups_are_used_where_the_api_server_lists_them_and_asked_for_once(answers, served, asked):
    with PathServer(answers) as server:
        kube = kube_at(server.url, TIMEOUTS)
        assert [kube.serves_pod_groups() for _ in range(3)] == [served] * 3
    assert server.paths == asked


def test_a_manager_refused_them_asks_no_more_and_goes_without():
    answers = {GROUP: group("v1", "v1beta1"), f"{GROUP}/v1beta1": v1beta1("podgroups")}
    with PathServer(answers) as server:
        kube = kube_at(server.url, TIMEOUTS)
        assert kube.serves_pod_groups()
        kube.refuse_pod_groups('podgroups.scheduling.k8s.io is forbidden: cannot create resource "podgroups"')
        assert not kube.serves_pod_groups()
    assert server.paths == [GROUP, f"{GROUP}/v1beta1"]
