"""Free GPUs followed while waiting: watch events applied one object at a time give the
ledger a fresh list would, only changes that matter wake the wait, and the informers
list once, then only when the watch cannot resume."""

import threading
import time

import pytest
from hypothesis import given, settings as hypothesis_settings, strategies as st

from distributetrain.core import errors
from distributetrain.core.clock import Clock, FakeClock, RealClock
from distributetrain.core.placement.inventory import ACTIVE_PODS_SELECTOR, GpuLedger, PodClaim
from distributetrain.core.placement.projections import watched_node
from distributetrain.core.settings import JobSettings
from distributetrain.kube.connection import ApiTimeouts
from distributetrain.kube.informer import Informer
from distributetrain.manager.placement import freegpus
from distributetrain.manager.placement.freegpus import FreeGpuWatch, LedgerParts
from harness.apiserver import FakeApiServer, kube_at
from harness.builders import GPU, make_node, make_pod
from harness.kube import FakeKube
from harness.waiting import wait_until

TIMEOUTS = ApiTimeouts(connect_s=1.0, read_s=2.0, retry_deadline_s=1.0, watch_chunk_s=1.0)


def node(name, gpus=2, ready=True, cordoned=False, taint=None, pool="x"):
    built = make_node(name).labels({"pool": pool}).ready(ready).allocatable({GPU: str(gpus)})
    if cordoned:
        built.cordoned()
    if taint:
        built.taint(taint)
    return built.obj()


def pod(uid, node_name=None, gpus=0, phase="Running", pinned=None):
    built = make_pod(uid).uid(uid).gpus(gpus).phase(phase)
    if node_name:
        built.on(node_name)
    if pinned:
        built.pinned(pinned)
    return built.obj()


def parts_of(nodes, pods) -> LedgerParts:
    """The parts after a first list: each object listed comes to them as added."""
    parts = LedgerParts(GPU, node_selector={"pool": "x"})
    for n in nodes:
        parts.apply_node("ADDED", n)
    for p in pods:
        parts.apply_pod("ADDED", p)
    return parts


def fresh_ledger(nodes, pods) -> GpuLedger:
    """What take_inventory folds from a list of the same objects."""
    ledger = GpuLedger(GPU)
    for n in nodes:
        ledger.add_node(n, (), {"pool": "x"})
    for p in pods:
        ledger.add_pod(p)
    return ledger


def summary(ledger: GpuLedger) -> dict:
    """A ledger's whole content; a node used by nothing counts as unused, however it got there."""
    return {"free": ledger.free(), "allocatable": ledger.allocatable, "refused": ledger.refused,
            "advertised": ledger.advertised, "selectable": ledger.selectable,
            "used": {node: count for node, count in ledger.used.items() if count}}


# -- events applied one object at a time ----------------------------------------------

NODE_NAMES = ("a", "b", "c")
POD_UIDS = ("p1", "p2", "p3", "p4")
nodes_st = st.builds(node, st.sampled_from(NODE_NAMES), gpus=st.integers(0, 4), ready=st.booleans(),
                     cordoned=st.booleans(), taint=st.sampled_from([None, "dedicated"]), pool=st.sampled_from("xy"))
pods_st = st.builds(pod, st.sampled_from(POD_UIDS), node_name=st.sampled_from([None, *NODE_NAMES]),
                    gpus=st.integers(0, 3), phase=st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]),
                    pinned=st.sampled_from([None, *NODE_NAMES]))
events_st = st.lists(st.one_of(st.tuples(st.just("node"), st.sampled_from(["ADDED", "MODIFIED", "DELETED"]), nodes_st),
                               st.tuples(st.just("pod"), st.sampled_from(["ADDED", "MODIFIED", "DELETED"]), pods_st)),
                     max_size=30)


@hypothesis_settings(max_examples=300, deadline=None)
@given(st.lists(nodes_st, max_size=3), st.lists(pods_st, max_size=4), events_st)
def test_events_applied_one_by_one_give_the_ledger_a_fresh_list_would(listed_nodes, listed_pods, events):
    nodes = {n["metadata"]["name"]: n for n in listed_nodes}
    pods = {p["metadata"]["uid"]: p for p in listed_pods}
    parts = parts_of(nodes.values(), pods.values())
    for kind, event_type, obj in events:
        if kind == "node":
            name = obj["metadata"]["name"]
            nodes.pop(name, None) if event_type == "DELETED" else nodes.__setitem__(name, obj)
            parts.apply_node(event_type, obj)
        else:
            uid = obj["metadata"]["uid"]
            pods.pop(uid, None) if event_type == "DELETED" else pods.__setitem__(uid, obj)
            parts.apply_pod(event_type, obj)
    fresh = fresh_ledger(nodes.values(), pods.values())
    assert summary(parts.ledger()) == summary(fresh)
    assert parts.free() == fresh.free()


# -- which changes matter to a waiting request -----------------------------------------

def waiting_cluster() -> tuple[list, list]:
    """2 GPUs asked for; none free: pods hold a's and b's, c is cordoned, d tainted; e is in
    another pool."""
    nodes = [node("a"), node("b"), node("c", cordoned=True), node("d", taint="dedicated"), node("e", pool="y")]
    pods = [pod("holder", "a", gpus=2), pod("other-job", "b", gpus=2), pod("worker", pinned="c", gpus=2)]
    return nodes, pods


@pytest.mark.parametrize("kind,event_type,obj,changed,fits", [
    ("pod", "DELETED", pod("holder", "a", gpus=2), True, True),
    ("pod", "MODIFIED", pod("holder", "a", gpus=2, phase="Succeeded"), True, True),
    ("pod", "MODIFIED", pod("holder", "a", gpus=2, phase="Failed"), True, True),
    ("pod", "MODIFIED", pod("holder", "a", gpus=2), False, False),  # still running
    ("pod", "ADDED", pod("cpu-only", "a"), False, False),  # the cluster's other pods come and go
    ("pod", "DELETED", pod("cpu-only", "a"), False, False),
    ("pod", "DELETED", pod("worker", pinned="c", gpus=2), True, False),  # c is still cordoned
    ("node", "MODIFIED", node("c"), True, False),  # uncordoned, but the pinned worker holds it
    ("node", "MODIFIED", node("d"), True, True),  # untainted
    ("node", "MODIFIED", node("d", taint="dedicated"), False, False),  # a heartbeat
    ("node", "ADDED", node("f"), True, True),
    ("node", "ADDED", node("f", ready=False), True, False),
    ("node", "ADDED", node("f", pool="y"), True, False),
    ("node", "MODIFIED", node("a", gpus=4), True, True),
    ("node", "DELETED", node("a"), True, False),
])
def test_only_changes_to_what_is_used_or_where_wake_the_wait(kind, event_type, obj, changed, fits):
    parts = parts_of(*waiting_cluster())
    assert not freegpus.plannable(parts.free(), 2)
    apply = parts.apply_node if kind == "node" else parts.apply_pod
    assert (apply(event_type, obj), freegpus.plannable(parts.free(), 2)) == (changed, fits)


def test_a_node_back_after_its_pods_left_fits():
    parts = parts_of(*waiting_cluster())
    parts.apply_pod("DELETED", pod("worker", pinned="c", gpus=2))
    parts.apply_node("MODIFIED", node("c"))
    assert parts.free() == {"a": 0, "b": 0, "c": 2}


# -- the follower against an API server -------------------------------------------------

@pytest.fixture
def server():
    with FakeApiServer([pod("p1", "a", gpus=1)]) as fake:
        yield fake


class Followed:
    """What the informer handed on, in order: each batch of (change, key)."""

    def __init__(self):
        self.calls: list[list[tuple]] = []
        self.changed = threading.Condition()

    def handle(self, changes):
        with self.changed:
            self.calls.append([(change.type, change.key) for change in changes])
            self.changed.notify_all()

    def wait_for(self, count: int, timeout_s: float = 10.0) -> list[list[tuple]]:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.calls) >= count, timeout_s), self.calls
            return list(self.calls)


def gpu_pods_informer(server, clock: Clock, relist_delay_s: float) -> Informer:
    """What a waiting manager follows of the pods (``FreeGpuWatch``), one watch call a second."""
    return Informer(kube_at(server.url, TIMEOUTS), "Pod", None, selectors={"field_selector": ACTIVE_PODS_SELECTOR},
                    clock=clock, relist_delay_s=relist_delay_s, thread_span_s=1.0)


@pytest.fixture
def following(server):
    followed = Followed()
    # After a failed watch it would wait a minute: no test here waits that out.
    informer = gpu_pods_informer(server, RealClock(), relist_delay_s=60.0)
    informer.add_handler(followed.handle)
    with informer:
        yield followed
    informer._thread.join(5)
    assert not informer._thread.is_alive()


def test_one_list_then_only_the_watch_whatever_the_wait(server, following):
    following.wait_for(1)
    server.put(pod("p2", "b", gpus=1))
    server.delete("p1")
    assert following.wait_for(3) == [[("ADDED", "ns/p1")], [("ADDED", "ns/p2")], [("DELETED", "ns/p1")]]
    # Watch requests end (a chunk each) and resume meanwhile.
    wait_until(lambda: len(server.watch_requests) >= 3, server.changes, 10 * TIMEOUTS.watch_chunk_s,
               "three watch requests")
    assert server.list_requests == 1
    versions = [int(q["resourceVersion"]) for q in server.watch_requests]
    assert len(versions) >= 3 and versions == sorted(versions)
    assert all(q.get("fieldSelector") == ACTIVE_PODS_SELECTOR for q in server.watch_requests)


def test_a_version_too_old_lists_again_at_once(server, following):
    following.wait_for(1)
    server.put(pod("p2", "b", gpus=1))
    following.wait_for(2)
    server.error_watches = [410]
    # The list that follows finds nothing new: an empty batch.
    assert following.wait_for(3) == [[("ADDED", "ns/p1")], [("ADDED", "ns/p2")], []]
    assert server.list_requests == 2


def test_a_watch_that_fails_lists_again_after_a_delay(server):
    server.error_watches = [500]
    followed, clock = Followed(), FakeClock()
    informer = gpu_pods_informer(server, clock, relist_delay_s=0.5)
    informer.add_handler(followed.handle)
    started = clock.monotonic()
    with informer:
        assert followed.wait_for(2) == [[("ADDED", "ns/p1")], []]
    assert clock.monotonic() - started == 0.5
    assert server.list_requests == 2


def test_what_cannot_be_followed_fails_the_wait_in_the_managers_thread(server):
    settings = JobSettings(job_name="j", namespace="ns", num_gpus=1, image="i")
    # The fake serves pods only: listing the nodes is refused (404), as a missing permission would be.
    with FreeGpuWatch(kube_at(server.url, TIMEOUTS), settings, RealClock(), client=lambda kube: kube) as watch:
        with pytest.raises(errors.NotFound):
            watch.wait_until_fits(0, time.monotonic() + 10)
        with pytest.raises(errors.NotFound):
            watch.fits()


def test_the_followed_stores_keep_the_ledger_s_parts_not_the_objects(monkeypatch):
    """A waiting manager's memory is the ledger's: each node's part and each GPU pod's
    claim, however many other pods the nodes run (they are not kept at all)."""
    monkeypatch.setattr(freegpus, "waiting_client", lambda same: same)  # followed on the fake itself
    others = [pod(f"busy-{i}", "a") for i in range(300)]
    kube = FakeKube([node("a", 8), node("b", 8)], [*others, pod("training", "b", gpus=2)])
    with FreeGpuWatch(kube, JobSettings(job_name="j", namespace="ns", num_gpus=1, image="i"), kube.clock) as watch:
        wait_until(lambda: watch.free() is not None, kube.changes, 10, "both lists in")
    assert watch.free() == {"a": 8, "b": 6}
    assert watch.nodes.store == {"a": watched_node(node("a", 8)), "b": watched_node(node("b", 8))}
    assert list(watch.pods.store.values()) == [PodClaim("training", "b", 2)]
