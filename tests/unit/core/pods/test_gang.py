"""An attempt as one gang (``core.gang``): its PodGroup and its pods joining it, whole; none
for an attempt with shares on nodes the cluster adds."""

from distributetrain.core.pods import gang, manifests
from distributetrain.core import names
from distributetrain.core.pods.sshkeys import JobKeys
from distributetrain.manager.placement import placing
from harness.builders import JOB

KEYS = JobKeys.generate("j")
OWNER = [{"apiVersion": "v1", "kind": "Pod", "name": "j", "uid": "uid-1"}]


def test_an_attempt_s_pod_group_is_a_gang_of_all_its_pods_owned_and_labelled_as_the_job_s():
    assert gang.pod_group(JOB, 2, 3) == {
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "j-gang-r2-uid-1", "namespace": "ns", "ownerReferences": OWNER, "labels": {
            "app.kubernetes.io/name": "distributetrain", "app.kubernetes.io/managed-by": "distributetrain",
            "distributetrain.io/job": "j", "distributetrain.io/role": "gang", "distributetrain.io/owner-uid": "uid-1"}},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}}}


def test_the_group_comes_after_the_secret_and_before_the_pods_that_join_it():
    plan = [("a", 2), ("b", 1), ("c", 1)]
    secret, *pods = manifests.job_objects(JOB, plan, KEYS, 1)
    objects = placing.attempt_objects(JOB, placing.Planned(plan), KEYS, 1, as_gang=True)
    joined = []
    for pod in pods:
        pod["spec"]["schedulingGroup"] = {"podGroupName": "j-gang-r1-uid-1"}
        joined.append(pod)
    assert objects == [secret, gang.pod_group(JOB, 1, 3), *joined]


def test_without_gang_scheduling_the_attempt_is_what_it_was():
    plan = [("a", 2), ("b", 2)]
    assert placing.attempt_objects(JOB, placing.Planned(plan), KEYS, 0) == manifests.job_objects(JOB, plan, KEYS, 0)


def test_an_attempt_with_shares_on_nodes_the_cluster_adds_is_no_gang():
    plan = [(names.NEW_NODE, 8), ("a", 2)]
    grows = JOB.replace(num_gpus=10, scale_up_node_gpus=8, wait_for_gpus_s=300)
    objects = placing.attempt_objects(grows, placing.Planned(plan), KEYS, 0, as_gang=True)
    assert objects == placing.attempt_objects(grows, placing.Planned(plan), KEYS, 0)
    assert [obj["kind"] for obj in objects] == ["Secret", "Pod", "Pod"]


def test_each_attempt_and_each_run_has_a_group_of_its_own():
    assert [names.gang_name("j", attempt, uid) for attempt, uid in ((0, ""), (0, "uid-1"), (1, "uid-1"),
                                                                    (1, "uid-2"))] == [
        "j-gang", "j-gang-uid-1", "j-gang-r1-uid-1", "j-gang-r1-uid-2"]
