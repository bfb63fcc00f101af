"""A job that makes the cluster grow (``--scale-up-node-gpus``), on an in-memory API: its
pods for new nodes wait for them, bound there the attempt starts as any other; a job
whose nodes never come exits 69 with what the autoscaler said, and leaves nothing."""

import json

from distributetrain.core import names
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


KARPENTER_LIMITS = ("Failed to schedule pod, incompatible with nodepool \"gpu\", all available instance types "
                    "exceed limits for nodepool")


def test_a_job_whose_nodes_never_come_gives_up_with_69_naming_why_and_leaves_nothing(story):
    """Karpenter says why in an Event regarding the pod (its NodePool's limits): the job's
    reason passes it through; the scheduler's own Event adds nothing to the pod's condition."""
    story.events_api.others["demo-worker-0"] = [
        {"reason": "FailedScheduling", "reportingController": "default-scheduler", "note": "0/0 nodes",
         "eventTime": "2026-01-02T12:00:05.000000Z"},
        {"reason": "FailedScheduling", "deprecatedSource": {"component": "karpenter"}, "note": KARPENTER_LIMITS,
         "deprecatedLastTimestamp": "2026-01-02T12:00:01Z"}]
    code, recorded, kube = story([[("demo-worker-0", UNSCHEDULED)]],
                                 settings=SCALE_UP.replace(wait_for_gpus_s=0.5), nodes=())
    assert code == 69
    assert recorded[-1][:2] == ("Failed", "Warning")
    assert ("the cluster did not add the 2 nodes the job's pods wait for within --wait-for-gpus (0s): "
            f"demo-worker-0: not scheduled: {UNSCHEDULABLE} (autoscaler: {KARPENTER_LIMITS}); "
            "demo-chief: waiting for the scheduler") in recorded[-1][2]
    assert kube.pods == {} and kube.secrets == {}
    # Every pod of the attempt at once, in one request (teardown's deletecollection).
    assert kube.writes("delete", "Pod") == [] and kube.writes("deletecollection", "Pod") == [
        "distributetrain.io/job=demo,distributetrain.io/owner-uid=uid-1,distributetrain.io/role in (chief,worker)"]


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
