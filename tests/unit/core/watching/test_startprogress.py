"""Slow starts read from a pod and its Events: pulls, waits for a new node, and how they read."""

import pytest

from distributetrain.core import names
from distributetrain.core.watching import startprogress
from distributetrain.core.watching.startprogress import AwaitingNode, PodEvent, Pulling, Refusal, StageClocks

IMAGE = "distributetrain/base:0.1.0"


def event(reason, message="", pod="w0", at="2026-11-26T20:00:00Z", host="node-a", uid="u0"):
    return {"reason": reason, "message": message, "lastTimestamp": at, "source": {"host": host},
            "involvedObject": {"kind": "Pod", "name": pod, "uid": uid}}


def pulling(image=IMAGE, at="2026-11-26T20:00:00Z"):
    return event("Pulling", f'Pulling image "{image}"', at=at)


def pulled(image=IMAGE, at="2026-11-26T20:06:00Z", present=False):
    message = (f'Container image "{image}" already present on machine' if present
               else f'Successfully pulled image "{image}" in 6m0s (6m0s including waiting)')
    return event("Pulled", message, at=at)


def pod(waiting="ContainerCreating", node="node-a", labels=None, ready=False, name="w0", uid="u0"):
    status = {"phase": "Pending", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if waiting:
        status["containerStatuses"] = [{"name": "worker", "state": {"waiting": {"reason": waiting}}}]
    return {"metadata": {"name": name, "uid": uid, "labels": labels or {}},
            "spec": {"nodeName": node} if node else {}, "status": status}


def stage(pod_, *events):
    return startprogress.stage(pod_, [e for e in map(startprogress.pod_event, events) if e])


def test_an_image_being_pulled_is_a_slow_start_on_its_node():
    assert stage(pod(), pulling()) == Pulling(IMAGE, "node-a")


def test_a_pulled_or_already_present_image_is_not():
    assert stage(pod(), pulling(), pulled()) is None
    assert stage(pod(), pulled(present=True)) is None


def test_a_pull_ended_within_the_second_it_began_reads_as_ended():
    assert stage(pod(), pulled(at="2026-11-26T20:00:00Z"), pulling(at="2026-11-26T20:00:00Z")) is None


def test_a_failed_pull_is_an_error_not_a_slow_start():
    failed = event("Failed", f'Failed to pull image "{IMAGE}": not found', at="2026-11-26T20:00:05Z")
    assert stage(pod(), pulling(), failed) is None
    assert stage(pod(waiting="ErrImagePull"), pulling()) is None
    assert stage(pod(waiting="ImagePullBackOff"), pulling()) is None


def test_a_failure_naming_no_image_ends_every_pull():
    assert stage(pod(), pulling(), event("Failed", "Error: ErrImagePull", at="2026-11-26T20:00:05Z")) is None


def test_of_several_images_the_one_still_pulling_counts():
    sidecar = "proxy:1"
    assert stage(pod(), pulling(sidecar), pulled(sidecar, at="2026-11-26T20:00:03Z"), pulling()) == \
        Pulling(IMAGE, "node-a")


def test_a_pull_again_after_a_restart_is_a_slow_start_again():
    again = pulling(at="2026-11-26T20:09:00Z")
    assert stage(pod(), pulling(), pulled(), again) == Pulling(IMAGE, "node-a")


def test_events_of_other_pods_or_an_earlier_pod_of_the_same_name_are_skipped():
    assert stage(pod(), event("Pulling", f'Pulling image "{IMAGE}"', pod="w1")) is None
    assert stage(pod(), event("Pulling", f'Pulling image "{IMAGE}"', uid="old")) is None


def test_a_ready_or_deleted_pod_starts_no_more():
    assert stage(pod(ready=True), pulling()) is None
    terminating = pod()
    terminating["metadata"]["deletionTimestamp"] = "2026-11-26T20:01:00Z"
    assert stage(terminating, pulling()) is None


def test_an_unscheduled_pod_awaits_a_new_node_when_an_autoscaler_acts_for_it():
    unscheduled = pod(waiting=None, node="")
    assert stage(unscheduled) is None
    assert stage(unscheduled, event("Nominated", "Pod should schedule on: nodeclaim/gpu-x7")) == AwaitingNode()
    assert stage(unscheduled, event("TriggeredScaleUp", "pod triggered scale-up: [{gpu 0->1 (max: 4)}]")) == \
        AwaitingNode()
    refused = event("NotTriggerScaleUp", "pod didn't trigger scale-up", at="2026-11-26T20:01:00Z")
    assert stage(unscheduled, event("TriggeredScaleUp", "x"), refused) is None


def test_a_pod_made_to_grow_the_cluster_awaits_its_node_until_scheduled():
    grows = {names.LABEL_AWAITS_NEW_NODE: "true"}
    assert stage(pod(waiting=None, node="", labels=grows)) == AwaitingNode()
    assert stage(pod(labels=grows)) is None


def said(reason, message, by, at="2026-11-26T20:00:00Z", uid="u0"):
    """An Event an autoscaler (or the scheduler: ``by``) records about the pod, as core/v1 shows it."""
    return {**event(reason, message, at=at, uid=uid), "source": {"component": by}, "reportingComponent": by}


LIMITS = ('Failed to schedule pod, incompatible with nodepool "gpu-1a", daemonset overhead={"pods":"0"}, '
          'all available instance types exceed limits for nodepool')
NO_OFFERING = ('Failed to schedule pod, incompatible with nodepool "gpu-1a", daemonset overhead={"pods":"0"}, '
               'no instance type which met the scheduling requirements and had enough resources, had a required '
               'offering, requirements=karpenter.sh/capacity-type In [on-demand], topology.kubernetes.io/zone In '
               '[zone-c]')
MAX_SIZE = "pod didn't trigger scale-up: 1 max node group size reached"
NO_MATCH = "pod didn't trigger scale-up: 2 node(s) didn't match Pod's node affinity/selector"


@pytest.mark.parametrize("answers, refused", [
    ([said("FailedScheduling", NO_OFFERING, "karpenter")], Refusal(NO_OFFERING, final=True)),
    ([said("FailedScheduling", LIMITS, "karpenter")], Refusal(LIMITS, final=False)),
    ([said("NotTriggerScaleUp", MAX_SIZE, "cluster-autoscaler")], Refusal(MAX_SIZE, final=False)),
    ([said("NotTriggerScaleUp", NO_MATCH, "cluster-autoscaler")], Refusal(NO_MATCH, final=True)),
    ([said("FailedScaleUp", "Node scale up in zones z associated with this pod failed: GCE quota exceeded.",
           "cluster-autoscaler")],
     Refusal("Node scale up in zones z associated with this pod failed: GCE quota exceeded.", final=False)),
    # The latest word counts: room freed, a node launched for it.
    ([said("FailedScheduling", LIMITS, "karpenter"),
      said("Nominated", "Pod should schedule on: nodeclaim/gpu-1a-x7", "karpenter", at="2026-11-26T20:01:00Z")], None),
    # The scheduler's FailedScheduling is no autoscaler's word; nor is an earlier pod's.
    ([said("FailedScheduling", "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.", "default-scheduler")], None),
    ([said("FailedScheduling", NO_OFFERING, "karpenter", uid="earlier")], None),
    ([], None),
])
def test_an_autoscalers_refusal_is_final_unless_its_words_say_for_now(answers, refused):
    unscheduled = pod(waiting=None, node="")
    events = [e for e in map(startprogress.pod_event, answers) if e]
    assert startprogress.refusal(unscheduled, events) == refused
    assert startprogress.refusal(pod(), events) is None  # bound: the autoscaler's words are past


def test_what_the_autoscaler_last_said_of_a_pod_is_passed_through_as_said():
    nominated = said("Nominated", "Pod should schedule on:\n nodeclaim/gpu-1a-x7", "karpenter")
    events = [startprogress.pod_event(nominated)]
    assert startprogress.autoscaler_said(pod(waiting=None, node=""), events) == \
        "Pod should schedule on: nodeclaim/gpu-1a-x7"
    assert startprogress.autoscaler_said(pod(name="w1"), events) is None


def test_a_refusal_after_a_nomination_ends_the_wait_for_a_node():
    refused = said("FailedScheduling", LIMITS, "karpenter", at="2026-11-26T20:01:00Z")
    assert stage(pod(waiting=None, node=""), said("Nominated", "x", "karpenter"), refused) is None


def test_events_that_say_nothing_of_a_slow_start_are_not_kept():
    assert startprogress.pod_event(event("Scheduled", "assigned")) is None
    assert startprogress.pod_event({**event("Pulling"), "involvedObject": {"kind": "Node", "name": "n"}}) is None


def test_event_times_come_from_the_series_or_event_time_too():
    newer = {**pulling(), "lastTimestamp": None, "eventTime": "2026-11-26T20:10:00.500000Z"}
    assert startprogress.pod_event(newer).at == pytest.approx(startprogress.pod_event(
        pulling(at="2026-11-26T20:10:00Z")).at + 0.5)


@pytest.mark.parametrize("seconds, text", [(0, "0s"), (9.9, "0s"), (10, "10s"), (130, "2m10s"), (359, "5m50s"),
                                           (3600, "1h0m0s"), (-3, "0s")])
def test_time_so_far_reads_in_steps_of_ten_seconds(seconds, text):
    assert startprogress.format_elapsed(seconds) == text


def test_the_reason_says_what_where_and_for_how_long():
    assert startprogress.reason(Pulling(IMAGE, "node-a"), 100.0, 230.0) == \
        f'pulling image "{IMAGE}" on node-a for 2m10s'
    assert startprogress.reason(AwaitingNode(), 0.0, 45.0) == "awaiting a new node for 40s"
    assert startprogress.without_elapsed(f'pulling image "{IMAGE}" on node-a for 2m10s') == \
        f'pulling image "{IMAGE}" on node-a'
    assert startprogress.without_elapsed("container worker: ContainerCreating") == \
        "container worker: ContainerCreating"


def test_a_stage_keeps_its_clock_until_it_changes():
    clocks = StageClocks()
    pull = Pulling(IMAGE, "node-a")
    assert clocks.update({"w0": pull, "w1": None}, 10.0) == {"w0": (pull, 10.0)}
    assert clocks.update({"w0": pull}, 20.0) == {"w0": (pull, 10.0)}
    assert clocks.update({"w0": None}, 30.0) == {}
    assert clocks.update({"w0": pull}, 40.0) == {"w0": (pull, 40.0)}  # pulling again: a new clock


def test_pod_event_keeps_what_orders_and_names_the_pull():
    assert startprogress.pod_event(pulling()) == PodEvent(
        pod="w0", reason="Pulling", at=startprogress.pod_event(pulling()).at, image=IMAGE, node="node-a", uid="u0")


def test_by_the_minute_keeps_whole_minutes_of_the_time_so_far():
    assert startprogress.by_the_minute('pulling image "x" on a for 1h2m50s') == 'pulling image "x" on a for 62m'
    assert startprogress.by_the_minute("awaiting a new node for 50s") == "awaiting a new node for 0m"
    assert startprogress.by_the_minute("running, not Ready") == "running, not Ready"
