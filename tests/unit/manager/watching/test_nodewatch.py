"""A lost node's pods: when a node is lost (the node controller's rules), which pods go,
the cause their loss names, and the watch thread acting on it with no node event."""


import pytest
from hypothesis import given
from hypothesis import strategies as st

from distributetrain.core import errors, names
from distributetrain.core.placement import podstate
from distributetrain.core.clock import FakeClock
from distributetrain.core.placement.inventory import node_not_ready
from distributetrain.core.settings import JobSettings
from distributetrain.kube.events import EventRecorder
from distributetrain.manager.reporting import jobevents
from distributetrain.manager.watching import nodewatch
from distributetrain.manager.watching.nodewatch import (NodeClocks, NodeWatch, node_health, pods_to_delete,
                                                        zone_disrupted)
from distributetrain.manager.reporting.reporting import Reporter
from harness.events import FakeEventsApi
from harness.kube import FakeKube
from harness.waiting import wait_until

UNKNOWN = {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
           "message": "Kubelet stopped posting node status."}
UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-01-02T12:00:50Z"}
NOT_READY_TAINT = {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute", "timeAdded": "2026-01-02T12:00:01Z"}
WINDOW_S = 30.0
SETTINGS = JobSettings(job_name="demo", namespace="ml", num_gpus=2, image="reg/base:1", owner_uid="uid-1")


def node(name, *conditions, taints=(), zone=None, labels=None):
    labels = dict(labels or {})
    if zone is not None:
        labels["topology.kubernetes.io/zone"] = zone
    return {"kind": "Node", "metadata": {"name": name, "labels": labels}, "spec": {"taints": list(taints)},
            "status": {"conditions": list(conditions)}}


def ready(status="True", reason="KubeletReady", since="2026-01-02T12:00:00Z"):
    return {"type": "Ready", "status": status, "reason": reason, "lastTransitionTime": since}


def restarting(since="2026-01-02T12:00:01Z"):
    return ready("False", "KubeletNotReady", since) | {"message": "PLEG is not healthy: pleg was last seen active 3m0s ago"}


def silent(since="2026-01-02T12:00:50Z"):
    return UNKNOWN | {"lastTransitionTime": since}


def fine(name, zone=None):
    return node(name, ready(), zone=zone)


class Clocks(NodeClocks):
    """The rule fed whole Nodes, as tests build them: NodeWatch's informer keeps their health."""

    def seen(self, nodes, now):
        super().seen({name: node and node_health(node) for name, node in nodes.items()}, now)


def clocks_with(*nodes, now=0.0):
    clocks = Clocks(WINDOW_S)
    clocks.seen({n["metadata"]["name"]: n for n in nodes}, now)
    return clocks


def job_pod(name, role, phase="Running", deleting=False, annotations=None, conditions=(), on=""):
    metadata = {"name": name, "labels": names.job_labels("demo", role, "uid-1"), "annotations": annotations or {}}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-02T12:00:00Z"
    return {"metadata": metadata, "spec": {"nodeName": on}, "status": {"phase": phase, "conditions": list(conditions)}}


# -- the rule --------------------------------------------------------------------------


def test_a_deleted_node_is_lost_at_once_a_not_ready_one_only_past_the_window():
    clocks = clocks_with(fine("a"), fine("b"), fine("c"), fine("d"), node("e", restarting()), node("f"))
    clocks.seen({"a": None}, now=1.0)
    assert clocks.lost(1.0).lost == {"a": "was deleted"}
    assert clocks.lost(1.0).recheck_at == WINDOW_S  # e and f, first seen not Ready at 0
    assert clocks.lost(WINDOW_S).lost == {
        "a": "was deleted",
        "e": "is not Ready (KubeletNotReady: PLEG is not healthy: pleg was last seen active 3m0s ago)",
        "f": "is not Ready (no Ready condition)",
    }
    clocks.forget("a")
    assert "a" not in clocks.lost(WINDOW_S).lost


@given(st.lists(st.floats(0.0, WINDOW_S - 0.01), min_size=1, max_size=8), st.floats(0.0, 600.0),
       st.booleans(), st.integers(1, 6))
def test_a_kubelet_restart_shorter_than_the_window_is_never_acted_on(outages, gap, with_taint, others):
    """Ready=False (and the not-ready taint the controller adds at once) for less than the
    window, any number of times, is never a lost node, whenever it is looked at."""
    clocks = clocks_with(fine("n"), *(fine(f"o{i}") for i in range(others)))
    now = 0.0
    for i, outage in enumerate(outages):
        now += gap + 1.0
        since = f"2026-01-02T12:{i:02d}:01Z"
        taints = [NOT_READY_TAINT] if with_taint else []
        clocks.seen({"n": node("n", restarting(since), taints=taints)}, now)
        assert clocks.lost(now).lost == {}
        assert clocks.lost(now + outage).lost == {}
        now += outage
        clocks.seen({"n": node("n", ready(since=f"2026-01-02T12:{i:02d}:02Z"))}, now)
        assert clocks.lost(now).lost == {} and clocks.lost(now + 3600).lost == {}


def test_a_ready_blip_missed_between_two_reports_starts_the_window_again():
    """Two not-Ready reports with different lastTransitionTimes: it was Ready in between."""
    clocks = clocks_with(fine("a"), fine("b"), fine("c"), node("n", restarting("2026-01-02T12:00:01Z")))
    clocks.seen({"n": node("n", restarting("2026-01-02T12:00:25Z"))}, now=25.0)
    assert clocks.lost(WINDOW_S + 1).lost == {}
    assert clocks.lost(25.0 + WINDOW_S).lost == {"n": "is not Ready (KubeletNotReady: PLEG is not healthy: "
                                                      "pleg was last seen active 3m0s ago)"}


def test_a_report_of_the_same_spell_keeps_its_start():
    clocks = clocks_with(fine("a"), fine("b"), node("n", restarting()))
    clocks.seen({"n": node("n", restarting(), taints=[NOT_READY_TAINT])}, now=20.0)  # the controller's taint
    assert list(clocks.lost(WINDOW_S).lost) == ["n"]


def test_an_unreachable_taint_is_acted_on_once_it_stands_long_before_the_window():
    clocks = clocks_with(fine("a"), fine("b"), fine("c"), fine("n"))
    clocks.seen({"n": node("n", silent())}, now=100.0)  # the controller: Unknown after its grace period
    assert clocks.lost(100.0).recheck_at == 100.0 + WINDOW_S
    clocks.seen({"n": node("n", silent(), taints=[UNREACHABLE])}, now=100.1)  # and its verdict
    verdicts = clocks.lost(100.1)
    assert verdicts.lost == {} and verdicts.recheck_at == pytest.approx(100.1 + nodewatch.UNREACHABLE_STANDS_S)
    assert clocks.lost(100.1 + nodewatch.UNREACHABLE_STANDS_S).lost == {
        "n": "is not Ready (NodeStatusUnknown: Kubelet stopped posting node status.)"}
    assert nodewatch.UNREACHABLE_STANDS_S < WINDOW_S  # the manager acts before the taint evicts


def test_an_unreachable_taint_taken_back_is_not_acted_on():
    """The first node of a brownout: tainted, then the controller finds every node down
    and removes the taints it added."""
    clocks = clocks_with(fine("a"), fine("b"), fine("n"))
    clocks.seen({"n": node("n", silent(), taints=[UNREACHABLE])}, now=0.0)
    clocks.seen({name: node(name, silent()) for name in ("a", "b", "n")}, now=3.0)
    assert clocks.lost(3.0 + nodewatch.UNREACHABLE_STANDS_S).lost == {}


@given(st.integers(1, 12), st.booleans(), st.floats(0.0, 3600.0))
def test_a_brownout_every_node_not_ready_at_once_is_never_acted_on(count, tainted, after):
    clocks = clocks_with(*(fine(f"n{i}") for i in range(count)))
    clocks.seen({f"n{i}": node(f"n{i}", silent(), taints=[UNREACHABLE] if tainted else []) for i in range(count)}, 1.0)
    verdicts = clocks.lost(1.0 + after)
    assert verdicts.lost == {} and verdicts.recheck_at is None


@given(st.integers(0, 40), st.integers(0, 40))
def test_a_zone_is_disrupted_by_the_controllers_rule(ready_nodes, not_ready_nodes):
    total = ready_nodes + not_ready_nodes
    expected = (ready_nodes == 0 and not_ready_nodes > 0) or \
        (not_ready_nodes > 2 and not_ready_nodes / max(total, 1) >= 0.55)
    assert zone_disrupted(total, not_ready_nodes) == expected


def test_most_nodes_of_a_zone_down_holds_that_zone_only():
    zone_a = [fine(f"a{i}", zone="a") for i in range(5)]
    clocks = clocks_with(*zone_a, fine("b0", zone="b"), fine("b1", zone="b"), fine("b2", zone="b"))
    clocks.seen({f"a{i}": node(f"a{i}", silent(), zone="a") for i in range(3)}, now=0.0)  # 3 of 5: 60 %
    clocks.seen({"b0": node("b0", silent(), zone="b")}, now=0.0)
    assert clocks.lost(WINDOW_S).lost == {"b0": "is not Ready (NodeStatusUnknown: Kubelet stopped posting node status.)"}


def test_nodes_excluded_from_disruption_checks_do_not_count():
    excluded = {"node.kubernetes.io/exclude-disruption": ""}
    clocks = clocks_with(fine("a", zone="z"), node("x", ready(), zone="z", labels=excluded))
    clocks.seen({"a": node("a", silent(), zone="z")}, now=0.0)  # the zone's only counted node: disrupted
    assert clocks.lost(WINDOW_S).lost == {}
    assert node_health(node("x", ready(), labels=excluded)).counted is False


def test_a_zone_leaving_disruption_gives_its_nodes_a_fresh_window():
    clocks = clocks_with(*(fine(f"n{i}") for i in range(4)))
    clocks.seen({f"n{i}": node(f"n{i}", silent()) for i in range(4)}, now=0.0)  # a brownout
    clocks.seen({"n0": fine("n0"), "n1": fine("n1")}, now=100.0)  # half back: 2 of 4 down is no disruption
    verdicts = clocks.lost(100.0)
    assert verdicts.lost == {} and verdicts.recheck_at == 100.0 + WINDOW_S
    assert set(clocks.lost(100.0 + WINDOW_S).lost) == {"n2", "n3"}


def test_a_deleted_node_is_lost_even_in_disruption():
    clocks = clocks_with(fine("a"), fine("b"))
    clocks.seen({"a": node("a", silent()), "b": None}, now=0.0)
    assert clocks.lost(0.0).lost == {"b": "was deleted"}


@given(st.sampled_from(["True", "False", "Unknown"]), st.text(max_size=20), st.text(max_size=40))
def test_only_ready_true_is_ready(status, reason, message):
    why = node_not_ready(node("n", {"type": "Ready", "status": status, "reason": reason, "message": message}))
    assert (why is None) == (status == "True")
    assert why is None or "\n" not in why


def test_the_workers_and_chief_still_running_or_waiting_go_never_the_manager_nor_a_finished_pod():
    pods = [
        job_pod("demo-worker-1", names.ROLE_WORKER),
        job_pod("demo-worker-0", names.ROLE_WORKER, phase="Pending"),
        job_pod("demo-chief", names.ROLE_CHIEF),
        job_pod("demo", names.ROLE_MANAGER),
        job_pod("demo-chief-r1", names.ROLE_CHIEF, phase="Succeeded"),
        job_pod("demo-worker-2", names.ROLE_WORKER, deleting=True),
    ]
    assert pods_to_delete(pods) == ["demo-chief", "demo-worker-0", "demo-worker-1"]


def test_a_pod_deleted_for_its_node_says_so_and_an_evicted_one_says_why():
    assert podstate.gone(None) == "was deleted"
    assert podstate.gone(job_pod("w", names.ROLE_WORKER)) is None
    assert podstate.gone(job_pod("w", names.ROLE_WORKER, deleting=True)) == "is being deleted"
    lost = job_pod("w", names.ROLE_WORKER, deleting=True,
                   annotations={names.ANNOTATION_DELETED_BECAUSE: "its node b is not Ready (NodeStatusUnknown)"})
    assert podstate.gone(lost) == "is being deleted (its node b is not Ready (NodeStatusUnknown))"
    evicted = job_pod("w", names.ROLE_WORKER, deleting=True, conditions=[
        {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
         "message": "Taint manager: deleting due to NoExecute taint"}])
    assert podstate.gone(evicted) == "is being deleted (Taint manager: deleting due to NoExecute taint)"


# -- the watch, driven inline on a fake clock ------------------------------------------


def nodes_kube(nodes, pods):
    """Nodes and the job's pods; a deleted pod stays, terminating, with its cause. Time is
    a fake clock's: a watch with no event sent waits out its time at once."""
    kube = FakeKube(nodes, pods, clock=FakeClock())
    kube.pods_stay_terminating = True
    return kube


def deleted(kube):
    """(when, pod, cause) of every pod deleted, in order."""
    return [(kube.when("delete", "Pod", name), name,
             kube.pods[name]["metadata"]["annotations"][names.ANNOTATION_DELETED_BECAUSE])
            for name in kube.writes("delete", "Pod")]


def watching(kube, toleration_s):
    api = FakeEventsApi()
    reporter = Reporter(kube, SETTINGS, EventRecorder(SETTINGS, api, kube.clock, jobevents.KINDS))
    return NodeWatch(kube, SETTINGS, reporter, kube.clock, toleration_s=toleration_s), reporter, api


def run_for(watch, seconds):
    """The watch's thread for ``seconds`` of its clock: watching, waking for verdicts, acting."""
    watch.run_until(watch.clock.monotonic() + seconds)


def worker_on(node_name):
    return job_pod("demo-worker-0", names.ROLE_WORKER, on=node_name)


def test_the_watch_leaves_a_kubelet_restart_alone():
    kube = nodes_kube([fine("a"), fine("b"), fine("c")], [worker_on("a")])
    watch, _, _ = watching(kube, toleration_s=2.0)
    run_for(watch, 0.2)
    kube.put(node("a", restarting()))
    run_for(watch, 0.3)  # the kubelet is back in well under the window
    kube.put(node("a", ready(since="2026-01-02T12:00:04Z")))
    run_for(watch, 2.5)
    assert deleted(kube) == []


def test_the_watch_leaves_a_brownout_alone():
    kube = nodes_kube([fine("a"), fine("b"), fine("c")], [worker_on("a")])
    watch, _, _ = watching(kube, toleration_s=0.3)
    run_for(watch, 0.2)
    for name in "abc":
        kube.put(node(name, silent()))
    run_for(watch, 1.5)
    assert deleted(kube) == []


def test_the_watch_acts_when_the_window_runs_out_with_no_node_event():
    kube = nodes_kube([fine("a"), fine("b"), fine("c")], [worker_on("a")])
    watch, reporter, api = watching(kube, toleration_s=1.0)
    run_for(watch, 0.2)
    sent_at = kube.clock.monotonic()
    kube.put(node("a", restarting()))  # and nothing after: containerd stays down
    run_for(watch, 0.6)
    assert deleted(kube) == [], "acted before the window ran out"
    run_for(watch, 5)
    reporter.events.close()
    cause = "its node a is not Ready (KubeletNotReady: PLEG is not healthy: pleg was last seen active 3m0s ago)"
    assert [(pod, why) for _, pod, why in deleted(kube)] == [("demo-worker-0", cause)]
    # When the window ran out, not at the end of the watch call that saw the report (5 s).
    assert 1.0 <= deleted(kube)[0][0] - sent_at < 3.0
    assert api.notes() == [(jobevents.NODE_LOST, f"node a {cause.removeprefix('its node a ')}: deleted demo-worker-0")]


@pytest.mark.parametrize("toleration_s, acts_after_s", [
    (30.0, 10.0),  # the default: once the taint has stood UNREACHABLE_STANDS_S, 20 s before it evicts
    (5.0, 5.0),  # a toleration shorter than UNREACHABLE_STANDS_S: its own window, as the taint evicts
    (300.0, 280.0),  # the user's longer --node-lost-toleration: ridden out until 20 s before the eviction
])
def test_the_watch_acts_on_the_unreachable_taint_20s_before_it_evicts(toleration_s, acts_after_s):
    kube = nodes_kube([fine("a"), fine("b"), fine("c")], [worker_on("a")])
    watch, _, _ = watching(kube, toleration_s=toleration_s)
    run_for(watch, 0.2)
    tainted_at = kube.clock.monotonic()
    kube.put(node("a", silent()))
    kube.put(node("a", silent(), taints=[UNREACHABLE]))
    run_for(watch, acts_after_s - 0.5)
    assert deleted(kube) == [], "acted before its time"
    run_for(watch, 5)
    assert [(pod, why) for _, pod, why in deleted(kube)] == [
        ("demo-worker-0", "its node a is not Ready (NodeStatusUnknown: Kubelet stopped posting node status.)")]
    assert acts_after_s <= deleted(kube)[0][0] - tainted_at < acts_after_s + 2


def test_the_watch_s_window_is_the_jobs_toleration():
    """Without a test's own window, the node watch waits the job pods' --node-lost-toleration."""
    kube = nodes_kube([fine("a")], [])
    reporter = Reporter(kube, SETTINGS, EventRecorder(SETTINGS, FakeEventsApi(), kube.clock, jobevents.KINDS))
    assert NodeWatch(kube, SETTINGS, reporter, kube.clock).clocks.toleration_s == 30.0
    longer = SETTINGS.replace(node_lost_toleration_s=120.0)
    assert NodeWatch(kube, longer, reporter, kube.clock).clocks.toleration_s == 120.0


def test_a_node_missing_from_a_relist_was_deleted():
    kube = nodes_kube([fine("a"), fine("b"), fine("c")], [worker_on("a")])
    watch, _, _ = watching(kube, toleration_s=60.0)
    run_for(watch, 0.2)
    del kube.nodes["a"]  # while the watch could not resume: seen only by the list that follows
    kube.break_node_watch(errors.Gone("too old resource version"))
    run_for(watch, 0.2)
    assert [(pod, why) for _, pod, why in deleted(kube)] == [("demo-worker-0", "its node a was deleted")]
    assert kube.node_lists == 2


def test_on_its_thread_the_watch_acts():
    kube = FakeKube([fine("a"), fine("b")], [worker_on("a")])  # on the real clock: a deletion acts at once
    kube.pods_stay_terminating = True
    api = FakeEventsApi()
    recorder = EventRecorder(SETTINGS, api, kube.clock, jobevents.KINDS)
    watch = NodeWatch(kube, SETTINGS, Reporter(kube, SETTINGS, recorder), kube.clock)
    with watch:
        del kube.nodes["a"]
        kube.break_node_watch(errors.Gone("too old resource version"))
        wait_until(lambda: deleted(kube), kube.changes, 5, "the pod on the deleted node to be deleted")
    assert [(pod, why) for _, pod, why in deleted(kube)] == [("demo-worker-0", "its node a was deleted")]
