"""A lost node's pods: which nodes are lost, which pods go, and the cause their loss names."""

from hypothesis import given
from hypothesis import strategies as st

from distributetrain import names, podstate
from distributetrain.inventory import node_not_ready
from distributetrain.nodewatch import lost_nodes, pods_to_delete

UNKNOWN = {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
           "message": "Kubelet stopped posting node status."}


def node(name, *conditions):
    return {"metadata": {"name": name}, "status": {"conditions": list(conditions)}}


def ready(status="True", reason="KubeletReady"):
    return {"type": "Ready", "status": status, "reason": reason}


def job_pod(name, role, phase="Running", deleting=False, annotations=None, conditions=()):
    metadata = {"name": name, "labels": {names.LABEL_ROLE: role}, "annotations": annotations or {}}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-02T12:00:00Z"
    return {"metadata": metadata, "status": {"phase": phase, "conditions": list(conditions)}}


def test_a_node_is_lost_when_not_ready_unknown_without_a_ready_condition_or_deleted():
    nodes = {
        "fine": node("fine", ready()),
        "silent": node("silent", UNKNOWN),
        "down": node("down", ready("False", "KubeletNotReady")),
        "new": node("new"),
        "gone": None,
    }
    assert lost_nodes(nodes) == {
        "silent": "is not Ready (NodeStatusUnknown: Kubelet stopped posting node status.)",
        "down": "is not Ready (KubeletNotReady)",
        "new": "is not Ready (no Ready condition)",
        "gone": "was deleted",
    }


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
