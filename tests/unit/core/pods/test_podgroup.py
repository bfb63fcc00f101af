"""An attempt as one Kueue pod group: its members' labels and gate, and nodes for its
shares chosen at admission (compared with every possible assignment)."""

import itertools

import pytest
from hypothesis import given, strategies as st

from distributetrain.core import errors, names, validation
from distributetrain.core.placement import inventory
from distributetrain.core.pods import manifests, podgroup
from distributetrain.core.settings import JobSettings
from harness.strategies import names as name_strings

SETTINGS = JobSettings(job_name="j", namespace="ns", num_gpus=6, image="img:1")
free_maps = st.dictionaries(name_strings("n", min_size=1, max_size=3), st.integers(0, 8), max_size=6)


def test_a_member_is_unpinned_gated_and_labelled_for_its_group():
    pod = manifests.worker_pod(SETTINGS, 0, None, 4)
    member = podgroup.queued(pod, "team-a", podgroup.group_name("j", 2, "f00d"), 3)
    assert inventory.pinned_node(member["spec"]) is None and "affinity" not in member["spec"]
    with pytest.raises(ValueError, match="pinned"):
        podgroup.queued(manifests.worker_pod(SETTINGS, 0, "a", 4), "team-a", "j-r2", 3)
    assert member["spec"]["schedulingGates"] == [{"name": "distributetrain.io/placement"}]
    assert member["metadata"]["labels"] == pod["metadata"]["labels"] | {
        "kueue.x-k8s.io/queue-name": "team-a", "kueue.x-k8s.io/pod-group-name": "j-r2-f00d"}
    assert member["metadata"]["annotations"] == pod["metadata"]["annotations"] | {
        "kueue.x-k8s.io/pod-group-total-count": "3", "kueue.x-k8s.io/retriable-in-group": "false"}
    assert {k: v for k, v in member["spec"].items() if k != "schedulingGates"} == pod["spec"]
    assert "schedulingGates" not in pod["spec"]  # the manifest itself is left alone


def test_a_group_name_is_a_label_value_for_the_longest_job_name():
    name = podgroup.group_name("j" * names.MAX_JOB_NAME_LENGTH, 99, "f00d")
    assert len(name) <= 63 and validation.dns_label(name) == name


def test_a_member_of_a_priority_class_says_so_and_one_of_none_does_not():
    pod = manifests.worker_pod(SETTINGS, 0, None, 4)
    assert podgroup.queued(pod, "q", "j-r0-f00d", 2, "high")["metadata"]["labels"][
        "kueue.x-k8s.io/priority-class"] == "high"
    assert "kueue.x-k8s.io/priority-class" not in podgroup.queued(pod, "q", "j-r0-f00d", 2)["metadata"]["labels"]


def test_a_member_is_placed_once_the_job_s_gate_is_gone():
    member = podgroup.queued(manifests.chief_pod(SETTINGS, None, 1), "q", "j-r0-f00d", 2)
    assert not podgroup.is_placed(member)
    member["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    assert podgroup.is_placed(member)


def test_admitted_once_kueue_s_gates_are_gone_and_only_then():
    member = podgroup.queued(manifests.chief_pod(SETTINGS, None, 1), "q", "j-r0", 2)
    member["spec"]["schedulingGates"] += [{"name": "kueue.x-k8s.io/admission"}, {"name": "kueue.x-k8s.io/topology"}]
    assert not podgroup.is_admitted(member)
    member["spec"]["schedulingGates"] = [{"name": "distributetrain.io/placement"}]
    assert podgroup.is_admitted(member)


def test_placing_pins_by_the_node_s_name_and_removes_only_the_job_s_gate():
    member = {"spec": {"schedulingGates": [{"name": "example.com/other"}, {"name": "distributetrain.io/placement"}]}}
    assert podgroup.ungate_patch(member) == [
        {"op": "test", "path": "/spec/schedulingGates/1/name", "value": "distributetrain.io/placement"},
        {"op": "remove", "path": "/spec/schedulingGates/1"}]
    assert inventory.pinned_node(podgroup.pin_patch("ip-10-0-1-7.ec2.internal")["spec"]) == "ip-10-0-1-7.ec2.internal"


def test_a_queued_pod_is_pinned_to_exactly_the_affinity_a_planned_pod_is_created_with():
    assert podgroup.pin_patch("gpu-a") == {"spec": {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-a"]}]}]}}}}}
    assert podgroup.pin_patch("gpu-a")["spec"]["affinity"] == manifests.worker_pod(SETTINGS, 0, "gpu-a", 4)["spec"]["affinity"]


def test_where_kueue_gates_a_pod_naming_no_queue_a_job_without_a_queue_is_refused_and_only_then():
    gated = {"spec": {"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]}}
    with pytest.raises(errors.UsageError) as refused:
        podgroup.refuse_unqueued(SETTINGS, gated)
    assert str(refused.value) == "--queue: Kueue queues every pod in namespace 'ns': name the job's LocalQueue, --queue=NAME"
    podgroup.refuse_unqueued(SETTINGS.replace(queue="team-a"), gated)
    podgroup.refuse_unqueued(SETTINGS, {"spec": {}})


def brute_force(shares, free):
    nodes = sorted(free)
    return any(all(free[node] >= share for node, share in zip(chosen, shares))
               for chosen in itertools.permutations(nodes, len(shares)))


@given(shares=st.lists(st.integers(1, 8), min_size=1, max_size=4), free=free_maps)
def test_assign_finds_nodes_whenever_any_assignment_exists(shares, free):
    chosen = podgroup.assign(shares, free)
    if chosen is None:
        assert not brute_force(shares, free)
        return
    assert len(set(chosen)) == len(shares)  # one pod per node
    assert all(free[node] >= share for node, share in zip(chosen, shares))


def test_assign_takes_the_tightest_fit_first_for_the_largest_share():
    assert podgroup.assign([4, 2], {"big": 8, "four": 4, "two": 2}) == ["four", "two"]
    assert podgroup.assign([4, 4], {"big": 8, "three": 3}) is None


def cluster_queue(*quotas, cohort=""):
    return {"spec": {"cohortName": cohort, "resourceGroups": [
        {"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": f"f{i}", "resources": [q]}]}
        for i, q in enumerate(quotas)]}}


def test_a_cluster_queue_s_gpu_quota_is_its_flavors_and_what_it_may_borrow():
    gpu = "nvidia.com/gpu"
    assert podgroup.gpu_quota(cluster_queue({"name": gpu, "nominalQuota": 4}), gpu) == 4
    assert podgroup.gpu_quota(cluster_queue({"name": gpu, "nominalQuota": 4}, {"name": gpu, "nominalQuota": "2"}),
                              gpu) == 6
    assert podgroup.gpu_quota(cluster_queue({"name": gpu, "nominalQuota": 4, "borrowingLimit": 2}, cohort="all"),
                              gpu) == 6
    assert podgroup.gpu_quota(cluster_queue({"name": gpu, "nominalQuota": 4}, cohort="all"), gpu) is None
    assert podgroup.gpu_quota(cluster_queue({"name": "cpu", "nominalQuota": 4}), gpu) is None
    assert podgroup.gpu_quota({}, gpu) is None
