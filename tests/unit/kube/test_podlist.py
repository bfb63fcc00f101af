"""The inventory's pod list against API servers of several versions and states, black-box
on 127.0.0.1 (harness/apiserver.PodListServer): one request where the server serves it
from its watch cache, pages where it reads etcd (1.29, 1.30, its watch cache off), a page
that fails asked again from its own continue token, and every request bounded."""

import pytest

from distributetrain.core import errors
from distributetrain.kube import podlist, podwire
from distributetrain.kube.connection import ApiTimeouts
from harness.apiserver import PodListServer, kube_at

TIMEOUTS = ApiTimeouts(connect_s=1.0, read_s=0.5, retry_deadline_s=5.0)
PODS = [{"metadata": {"name": f"p{i}", "uid": f"u{i}", "labels": {}},
         "spec": {"nodeName": "n", "containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
         "status": {"phase": "Running"}} for i in range(45)]
SLIM = [podwire.slim(p) for p in PODS]


class Visits:
    """What a ledger sees of a list: the pods visited, and how many each restart forgot."""

    def __init__(self):
        self.pods: list[dict] = []
        self.forgotten: list[int] = []

    def restart(self) -> None:
        self.forgotten.append(len(self.pods))
        self.pods.clear()


def each_pod(kube, visits: Visits) -> str:
    return kube.each_pod_request(visits.pods.append, visits.restart, field_selector="status.phase!=Failed")


@pytest.mark.parametrize("git_version, listed_from_cache", [
    ("v1.29.15", False), ("v1.30.4-eks-a737599", False), ("v1.31.1-gke.1678000", True), ("v1.34.10", True),
    ("v2.0.0", True), ("", False), ("unknown", False)])
def test_servers_from_1_31_serve_a_consistent_list_from_their_watch_cache(git_version, listed_from_cache):
    assert podlist.lists_from_cache({"gitVersion": git_version}) is listed_from_cache


def test_a_server_that_lists_from_its_watch_cache_gets_one_request(monkeypatch):
    monkeypatch.setattr(podlist, "PAGE_SIZE", 20)
    visits = Visits()
    with PodListServer(PODS, "v1.34.10") as server:
        assert each_pod(kube_at(server.url, TIMEOUTS), visits) == "77"
    assert server.requests == [{"fieldSelector": "status.phase!=Failed"}]
    assert (visits.pods, visits.forgotten) == (SLIM, [0])


def test_a_1_30_server_which_reads_lists_from_etcd_is_asked_in_pages_never_for_every_pod_at_once(monkeypatch):
    monkeypatch.setattr(podlist, "PAGE_SIZE", 20)
    visits = Visits()
    with PodListServer(PODS, "v1.30.4-eks-a737599", silent_whole=True) as server:
        assert each_pod(kube_at(server.url, TIMEOUTS), visits) == "77"
    assert server.requests == [{"fieldSelector": "status.phase!=Failed", "limit": "20"},
                               {"fieldSelector": "status.phase!=Failed", "limit": "20", "continue": "20"},
                               {"fieldSelector": "status.phase!=Failed", "limit": "20", "continue": "40"}]
    assert (visits.pods, visits.forgotten) == (SLIM, [0])


def test_a_server_with_its_watch_cache_off_is_asked_whole_once_then_always_in_pages(monkeypatch):
    """1.34 by its version, but its list comes from etcd (``--watch-cache=false``): the
    request for every pod stays silent past the read timeout, once; then pages."""
    monkeypatch.setattr(podlist, "PAGE_SIZE", 20)
    kube_visits, later = Visits(), Visits()
    with PodListServer(PODS, "v1.34.10", silent_whole=True) as server:
        kube = kube_at(server.url, TIMEOUTS)
        assert each_pod(kube, kube_visits) == "77"
        assert each_pod(kube, later) == "77"
    assert [request.get("limit") for request in server.requests] == [None, "20", "20", "20", "20", "20", "20"]
    assert (kube_visits.pods, later.pods) == (SLIM, SLIM)


def test_a_page_cut_part_way_is_asked_again_from_its_own_continue_token(monkeypatch):
    monkeypatch.setattr(podlist, "PAGE_SIZE", 20)
    visits = Visits()
    with PodListServer(PODS, "v1.30.0", cuts=(2, 3)) as server:
        assert each_pod(kube_at(server.url, TIMEOUTS), visits) == "77"
    assert [request.get("continue") for request in server.requests] == [None, "20", "20", "20", "40"]
    assert (visits.pods, visits.forgotten) == (SLIM, [0])  # each pod visited once, nothing forgotten


def test_a_list_whose_continue_token_expired_starts_over_and_counts_each_pod_once(monkeypatch):
    monkeypatch.setattr(podlist, "PAGE_SIZE", 20)
    visits = Visits()
    with PodListServer(PODS, "v1.29.0", expired=("40",)) as server:
        assert each_pod(kube_at(server.url, TIMEOUTS), visits) == "77"
    assert [request.get("continue") for request in server.requests] == [None, "20", "40", None, "20", "40"]
    assert (visits.pods, visits.forgotten) == (SLIM, [0, 40])


def test_a_continue_token_that_keeps_expiring_ends_the_list_with_the_server_s_reason(monkeypatch):
    monkeypatch.setattr(podlist, "PAGE_SIZE", 20)
    with PodListServer(PODS, "v1.29.0", expired=("20",) * podlist.MAX_LIST_STARTS) as server:
        with pytest.raises(errors.Gone, match="The provided continue parameter is too old"):
            each_pod(kube_at(server.url, TIMEOUTS), Visits())
    assert len(server.requests) == 2 * podlist.MAX_LIST_STARTS


def test_a_whole_list_cut_part_way_is_read_again_whole_and_its_pods_counted_once(monkeypatch):
    monkeypatch.setattr(podlist, "CHUNK_BYTES", 1024)  # pods are visited before the cut
    visits = Visits()
    with PodListServer(PODS, "v1.33.1", cuts=(1, 2)) as server:
        assert each_pod(kube_at(server.url, ApiTimeouts(read_s=2.0, retry_deadline_s=10.0)), visits) == "77"
    assert len(server.requests) == 3 and all("limit" not in request for request in server.requests)
    assert visits.forgotten[0] == 0 and all(visits.forgotten[1:])  # each cut try had visited pods, then forgot them
    assert visits.pods == SLIM
