"""The pod of a share on a node the cluster adds, compared whole; and how long the chief
asks for its hosts when the job waits for such nodes."""

from distributetrain.core.pods import manifests
from distributetrain.core.pods.newnodepods import NewNodePlace
from test_manifests import GPU_TOLERATION, KEYS, NO_DISRUPTION, NO_MESH, NODE_LOST, SETTINGS, labels

GROWS = SETTINGS.replace(num_gpus=12, node_selector=(("pool", "gpu-8x"),))
ANTI_AFFINITY = {"requiredDuringSchedulingIgnoredDuringExecution": [{
    "labelSelector": {"matchLabels": {"distributetrain.io/job": "demo", "distributetrain.io/owner-uid": "uid-1"}},
    "topologyKey": "kubernetes.io/hostname"}]}


def unpinned(pod, affinity):
    """``pod`` as built for no node, labelled as awaiting a new node, with ``affinity``."""
    return {**pod, "metadata": {**pod["metadata"], "labels": {**pod["metadata"]["labels"],
                                                              "distributetrain.io/awaits-new-node": "true"}},
            "spec": {**pod["spec"], "affinity": affinity}}


def test_a_share_on_a_new_node_is_an_unpinned_pod_one_per_node():
    _, worker, chief = manifests.job_objects(GROWS, [("(new node)", 8), ("gpu-a", 4)], KEYS)
    assert worker == unpinned(manifests.worker_pod(GROWS, 0, None, 8), {
        # One share per node: the autoscaler adds a node for each.
        "podAntiAffinity": ANTI_AFFINITY,
        # A node the job's selector allows: the autoscaler adds one of those.
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu-8x"]}]}]}}})
    assert worker["metadata"]["labels"] == labels("worker", **{"distributetrain.io/worker-index": "0",
                                                               "distributetrain.io/awaits-new-node": "true"})
    assert worker["metadata"]["annotations"] == {"distributetrain.io/gpus": "8", **NO_DISRUPTION, **NO_MESH}
    assert worker["spec"]["tolerations"] == [GPU_TOLERATION, *NODE_LOST]
    assert chief == manifests.chief_pod(GROWS, "gpu-a", 4)


def test_a_new_nodes_share_goes_where_the_running_shares_are():
    """The running shares' zone, required rack and GPU model as the autoscaler knows it are
    required; their block and GPU Feature Discovery's model, preferred, GFD's first to go."""
    place = NewNodePlace(
        required=(("topology.kubernetes.io/zone", ("eu-west-1b",)), ("example.com/rack", ("r2",)),
                  ("karpenter.k8s.aws/instance-gpu-name", ("a100",))),
        preferred=((("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB"),), (("example.com/row", "w1"),)))
    _, worker, _ = manifests.job_objects(GROWS, [("(new node)", 8), ("gpu-a", 4)], KEYS, new_node_place=place)
    assert worker == unpinned(manifests.worker_pod(GROWS, 0, None, 8), {
        "podAntiAffinity": ANTI_AFFINITY,
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "pool", "operator": "In", "values": ["gpu-8x"]},
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["eu-west-1b"]},
                {"key": "example.com/rack", "operator": "In", "values": ["r2"]},
                {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["a100"]}]}]},
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "preference": {"matchExpressions": [
                    {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A100-SXM4-80GB"]}]}},
                {"weight": 100, "preference": {"matchExpressions": [
                    {"key": "example.com/row", "operator": "In", "values": ["w1"]}]}}]}})


def test_without_a_node_selector_or_running_shares_a_new_node_pod_keeps_only_its_anti_affinity():
    _, chief = manifests.job_objects(SETTINGS.replace(num_gpus=4), [("(new node)", 4)], KEYS)
    assert chief == unpinned(manifests.chief_pod(SETTINGS.replace(num_gpus=4), None, 4),
                             {"podAntiAffinity": ANTI_AFFINITY})


def env(pod, name):
    return next(e["value"] for e in pod["spec"]["containers"][0]["env"] if e["name"] == name)


def test_the_chief_asks_for_its_hosts_as_long_as_the_job_may_wait_for_new_nodes_and_start():
    """A chief on a running node starts while the cluster adds the others' nodes: it asks
    for as long as the manager may wait for them (--wait-for-gpus), then for the start."""
    quick = SETTINGS.replace(worker_ready_timeout_s=15, image_pull_timeout_s=5, scale_up_timeout_s=20)
    assert env(manifests.chief_pod(quick, "gpu-a", 4), "DT_HOSTS_WAIT_S") == str(15 + 20 + 5 + 60)
    grows = quick.replace(scale_up_node_gpus=8, wait_for_gpus_s=600)
    assert env(manifests.chief_pod(grows, "gpu-a", 4), "DT_HOSTS_WAIT_S") == str(600 + 15 + 20 + 5 + 60)
