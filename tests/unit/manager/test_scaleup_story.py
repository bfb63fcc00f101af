"""A job that makes the cluster grow (``--scale-up-node-gpus``), on an in-memory API: its
pods for new nodes wait for them, bound there the attempt starts as any other; a job
whose nodes never come exits 69 with what the autoscaler said, and leaves nothing."""

import functools
import json

import pytest

from distributetrain.core import names
from distributetrain.manager.placement import scaleup
from test_lifecycle_story import PULLING, SETTINGS, UNSCHEDULABLE, UNSCHEDULED, ended, running, story  # noqa: F401


def on_node(name, node_name, status):
    """A watch step: the pod bound to ``node_name`` (a node the cluster added) with ``status``."""
    def step(kube):
        pod = json.loads(json.dumps(kube.pods[name]))
        pod["spec"]["nodeName"], pod["status"] = node_name, status
        return "MODIFIED", pod

    return step


SCALE_UP = SETTINGS.replace(num_gpus=12, scale_up_node_gpus=8, wait_for_gpus_s=30.0)


def test_a_job_short_of_gpus_makes_the_cluster_grow_and_trains_on_the_new_node(story):
    """Node a has 4 GPUs free: they are used, and one pod of 8 waits, unpinned, for the
    node the cluster adds; once it is bound there the attempt starts as any other."""
    bound = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}
    code, recorded, kube = story([
        [on_node("demo-worker-0", "new-1", bound)],
        [on_node("demo-worker-0", "new-1", running()), ("demo-chief", PULLING)],
        [("demo-chief", running(ip="10.0.0.3"))],
        [("demo-chief", ended(0))],
    ], settings=SCALE_UP, nodes=(("a", 4),))
    assert code == 0
    assert recorded[:4] == [
        ("Planned", "Normal", "12 GPUs on 2 nodes: (new node)=8,a=4 (the chief's share last)"),
        ("WorkersCreated", "Normal", "demo-worker-0 on (new node) (8 GPUs)"),
        ("ChiefCreated", "Normal", "demo-chief on a (4 GPUs): horovodrun -np 12 over 2 pods once the workers are Ready"),
        ("NodesAdded", "Normal", "the job's pods have their nodes: new-1=8,a=4"),
    ]
    assert [r[0] for r in recorded[4:]] == ["WorkersReady", "ChiefStarted", "Succeeded"]
    assert kube.annotation_history(names.ANNOTATION_PLAN) == ["(new node)=8,a=4", "new-1=8,a=4"]
    assert "WaitingForNodes" in kube.annotation_history(names.ANNOTATION_PHASE)


def test_with_no_gpu_node_at_all_every_share_waits_for_a_new_node(story):
    code, recorded, _ = story([
        [on_node("demo-worker-0", "new-1", running()), on_node("demo-chief", "new-2", PULLING)],
        [],
        [("demo-chief", running(ip="10.0.0.3"))],
        [("demo-chief", ended(0))],
    ], settings=SCALE_UP, nodes=())
    assert code == 0
    assert recorded[0] == ("Planned", "Normal", "12 GPUs on 2 nodes: (new node)=8,(new node)=4 (the chief's share last)")
    assert ("NodesAdded", "Normal", "the job's pods have their nodes: new-1=8,new-2=4") in recorded


def said_by(autoscaler, reason, message, pod="demo-worker-0", at="2026-01-02T12:00:01Z"):
    """A core/v1 Event an autoscaler (or the scheduler) records about one of the job's pods."""
    return {"metadata": {"name": f"{pod}.{reason}.{at}"}, "reason": reason, "message": message,
            "lastTimestamp": at, "source": {"component": autoscaler}, "reportingComponent": autoscaler,
            "involvedObject": {"kind": "Pod", "name": pod}}


KARPENTER_LIMITS = ("Failed to schedule pod, incompatible with nodepool \"gpu\", all available instance types "
                    "exceed limits for nodepool")
NO_OFFERING = ("Failed to schedule pod, incompatible with nodepool \"gpu\", no instance type which met the "
               "scheduling requirements and had enough resources, had a required offering, "
               "requirements=topology.kubernetes.io/zone In [zone-c]")
SCHEDULER_SAYS = said_by("default-scheduler", "FailedScheduling", "0/1 nodes are available")
def seconds_in(kube, *action):
    """When the job took ``action``, in seconds from its first."""
    return kube.when(*action) - kube.action_times[0]


TEARDOWN = "distributetrain.io/job=demo,distributetrain.io/owner-uid=uid-1,distributetrain.io/role in (chief,worker)"


def test_an_autoscaler_that_refuses_for_good_ends_the_wait_at_once_in_its_words(story):
    """No node Karpenter can add holds the pod (no offering in the running share's zone):
    the job exits 69 long before --wait-for-gpus, every pod deleted at once."""
    code, recorded, kube = story([[("demo-worker-0", UNSCHEDULED)]], settings=SCALE_UP.replace(wait_for_gpus_s=3600),
                                 nodes=(("a", 4),), events=[SCHEDULER_SAYS, said_by("karpenter", "FailedScheduling",
                                                                                    NO_OFFERING)])
    assert code == 69
    assert recorded[-1] == ("Failed", "Warning", "the cluster's autoscaler adds no node that could hold the job's "
                                                 f"pods: demo-worker-0: {NO_OFFERING} (exit code 69)")
    assert seconds_in(kube, "deletecollection", "Pod", TEARDOWN) < 60  # not --wait-for-gpus
    assert kube.pods == {} and kube.secrets == {}
    assert kube.writes("delete", "Pod") == [] and kube.writes("deletecollection", "Pod") == [TEARDOWN]


@pytest.fixture
def quick_waits(monkeypatch):
    """Real time, short: the wait for free GPUs after a release follows watches on threads of
    their own (``freegpus``), which move no fake clock. Its watches read the fake API."""
    monkeypatch.setattr("distributetrain.manager.placement.freegpus.waiting_client", lambda same: same)
    monkeypatch.setattr(scaleup, "wait_for_new_nodes", functools.partial(
        scaleup.wait_for_new_nodes, recheck_s=0.1, no_autoscaler_window_s=0.5))


def test_a_node_pool_at_its_limits_releases_the_pods_and_the_job_waits_for_free_gpus(story, quick_waits):
    """A refusal for now (other nodes may go): nothing is held meanwhile; once --wait-for-gpus
    is over the job exits 69 saying what the autoscaler said."""
    code, recorded, kube = story([[("demo-worker-0", UNSCHEDULED)]], settings=SCALE_UP.replace(wait_for_gpus_s=3.0),
                                 nodes=(("a", 4),), events=[said_by("karpenter", "FailedScheduling", KARPENTER_LIMITS)],
                                 real_time=True)
    assert code == 69
    reasons = [r[0] for r in recorded]
    assert reasons[:3] == ["Planned", "WorkersCreated", "ChiefCreated"]
    released = next(note for reason, _, note in recorded if reason == "Released")
    assert released.startswith("the cluster's autoscaler adds no node for the job's pods for now: demo-worker-0: "
                               f"{KARPENTER_LIMITS}; released the job's pods and waiting up to ")
    assert "WaitingForGPUs" in reasons[reasons.index("Released"):]
    assert recorded[-1][2].endswith(f"; before: the cluster's autoscaler adds no node for the job's pods for now: "
                                    f"demo-worker-0: {KARPENTER_LIMITS} (exit code 69)")
    # Released at once, not at the end of the wait; one plan only: the job stops growing.
    assert seconds_in(kube, "deletecollection", "Pod", TEARDOWN) < 2.0
    assert kube.annotation_history(names.ANNOTATION_PLAN) == ["(new node)=8,a=4"]
    assert kube.pods == {} and kube.secrets == {}


def test_with_no_autoscaler_answering_the_job_says_so_and_holds_no_gpu_while_it_waits(story, quick_waits):
    code, recorded, kube = story([[("demo-worker-0", UNSCHEDULED)]], settings=SCALE_UP.replace(wait_for_gpus_s=3.0),
                                 nodes=(("a", 4),), events=[SCHEDULER_SAYS], real_time=True)
    assert code == 69
    said = "no autoscaler has answered for the job's pods within 0s of the scheduler's finding no node for them"
    assert ("WaitingForNodes", "Warning", said) in recorded
    assert 0.5 <= seconds_in(kube, "deletecollection", "Pod", TEARDOWN) < 2.5
    assert recorded[-1][2].endswith(f"; before: {said} (exit code 69)")
    assert kube.pods == {} and kube.secrets == {}


def test_nodes_that_do_not_come_in_time_give_69_with_what_the_autoscaler_last_said(story):
    nominated = said_by("karpenter", "Nominated", "Pod should schedule on: nodeclaim/gpu-x7")
    code, recorded, kube = story([[("demo-worker-0", UNSCHEDULED)]], settings=SCALE_UP.replace(wait_for_gpus_s=30.0),
                                 nodes=(), events=[SCHEDULER_SAYS, nominated])
    assert code == 69
    assert recorded[-1][:2] == ("Failed", "Warning")
    assert ("the cluster did not add the 2 nodes the job's pods wait for within --wait-for-gpus (30s): "
            f"demo-worker-0: not scheduled: {UNSCHEDULABLE} (autoscaler: Pod should schedule on: nodeclaim/gpu-x7); "
            "demo-chief: waiting for the scheduler") in recorded[-1][2]
    assert kube.pods == {} and kube.secrets == {}
    assert kube.writes("delete", "Pod") == [] and kube.writes("deletecollection", "Pod") == [TEARDOWN]


def test_post_training_adopts_the_attempt_on_the_added_node(story):
    """manager.sh's second process finds the pods bound to the node added and follows them."""
    code, recorded, kube = story([
        [on_node("demo-worker-0", "new-1", running()), ("demo-chief", PULLING)],
        [],
        [("demo-chief", running(ip="10.0.0.3"))],
        [("demo-chief", ended(0))],
    ], settings=SCALE_UP, nodes=(("a", 4),), phases=("pre-training", "post-training"))
    assert code == 0
    assert [r[0] for r in recorded] == ["Planned", "WorkersCreated", "ChiefCreated", "NodesAdded", "WorkersReady",
                                        "ChiefStarted", "Succeeded"]
    assert kube.annotation_history(names.ANNOTATION_PLAN) == ["(new node)=8,a=4", "new-1=8,a=4"]
