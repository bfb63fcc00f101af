"""Scale-up planning: whole plans for the issue's examples, and rules that hold for all inputs."""

import itertools
import math

import pytest
from hypothesis import given, strategies as st

from distributetrain.core.placement import awaitingpods, scaleup, topology
from distributetrain.core.pods.newnodepods import NewNodePlace
from distributetrain.core.placement.placement import format_plan, parse_plan
from distributetrain.core.settings import JobSettings
from harness.strategies import names

NEW = scaleup.NEW_NODE
free_maps = st.dictionaries(names("node-", min_size=1, max_size=3),
                            st.integers(min_value=0, max_value=8), max_size=5)


def test_nothing_free_twelve_on_new_eight_gpu_nodes():
    assert scaleup.plan({}, 12, 8) == [(NEW, 8), (NEW, 4)]


def test_free_gpus_are_used_and_only_the_rest_is_added():
    # Two nodes either way, but 4 pinned + 8 new strands nothing; [8, 4] new would strand 4.
    assert scaleup.plan({"gpu-a": 4}, 12, 8) == [(NEW, 8), ("gpu-a", 4)]


def test_a_node_too_small_to_save_a_new_node_is_left_alone():
    # 2 free on gpu-a would make three nodes (2 + 8 + 2); two new nodes are fewer.
    assert scaleup.plan({"gpu-a": 2}, 12, 8) == [(NEW, 8), (NEW, 4)]


def test_enough_free_gpus_add_no_node():
    assert scaleup.plan({"gpu-a": 8, "gpu-b": 4}, 12, 8) == [("gpu-a", 8), ("gpu-b", 4)]


def test_the_chief_takes_the_smallest_share_last():
    assert scaleup.plan({"gpu-a": 3, "gpu-b": 1}, 19, 8) == [(NEW, 8), (NEW, 8), ("gpu-a", 3)]
    # Three nodes hold 20 however it is split: new ones alone strand the fewest.
    assert scaleup.plan({"gpu-a": 3, "gpu-b": 1}, 20, 8) == [(NEW, 8), (NEW, 8), (NEW, 4)]


def test_new_node_shares_round_trip_through_the_recorded_plan():
    plan = scaleup.plan({"gpu-a": 4}, 12, 8)
    assert format_plan(plan) == "(new node)=8,gpu-a=4" and parse_plan(format_plan(plan)) == plan
    assert scaleup.new_node_shares(plan) == 1


@pytest.mark.parametrize("gpus, node_gpus", [(0, 8), (4, 0)])
def test_counts_below_one_are_value_errors(gpus, node_gpus):
    with pytest.raises(ValueError):
        scaleup.plan({}, gpus, node_gpus)


def test_allowed_only_when_the_job_may_wait_and_knows_the_node_size():
    job = JobSettings(job_name="j", namespace="ns", num_gpus=12, image="i")
    assert not scaleup.allowed(job)
    assert not scaleup.allowed(job.replace(scale_up_node_gpus=8))
    assert scaleup.allowed(job.replace(scale_up_node_gpus=8, wait_for_gpus_s=300))


def fewest_nodes_by_brute_force(free, gpus, node_gpus):
    """Every set of running nodes, the rest on new nodes."""
    counts = [f for f in free.values() if f > 0]
    return min(k + math.ceil(max(0, gpus - sum(chosen)) / node_gpus)
               for k in range(len(counts) + 1) for chosen in itertools.combinations(counts, k)
               if sum(chosen) >= k or k == 0)


@given(free=free_maps, gpus=st.integers(min_value=1, max_value=40), node_gpus=st.integers(min_value=1, max_value=8))
def test_rules_for_all_inputs(free, gpus, node_gpus):
    plan = scaleup.plan(free, gpus, node_gpus)
    assert sum(share for _, share in plan) == gpus
    assert all(share >= 1 for _, share in plan)
    assert all(share <= node_gpus for node, share in plan if node == NEW)
    running = [node for node, _ in plan if node != NEW]
    assert len(running) == len(set(running))
    assert all(share <= free.get(node, 0) for node, share in plan if node != NEW)
    assert len(plan) == fewest_nodes_by_brute_force(free, gpus, node_gpus)
    shares = [share for _, share in plan]
    assert shares == sorted(shares, reverse=True)


def test_a_pods_node_in_the_plan_read_back():
    """What an adopted attempt's plan says of each pod: pinned or bound, or a new node still awaited."""
    from distributetrain.core.pods import manifests
    from test_manifests import KEYS, SETTINGS

    _, waiting, pinned = manifests.job_objects(SETTINGS.replace(num_gpus=12), [(NEW, 8), ("gpu-a", 4)], KEYS)
    bound = {**waiting, "spec": {**waiting["spec"], "nodeName": "new-1"}}
    queued = manifests.chief_pod(SETTINGS, None, 4)
    assert [scaleup.planned_node(pod) for pod in (waiting, pinned, bound, queued)] == [NEW, "gpu-a", "new-1", ""]
    assert [awaitingpods.awaits_new_node(pod) for pod in (waiting, pinned, bound, queued)] == [True, False, True,
                                                                                                False]


RACK, ROW = "example.com/rack", "example.com/row"
ZONE, PRODUCT, AWS_GPU = "topology.kubernetes.io/zone", "nvidia.com/gpu.product", "karpenter.k8s.aws/instance-gpu-name"
JOB = JobSettings(job_name="j", namespace="ns", num_gpus=12, image="i", scale_up_node_gpus=8, wait_for_gpus_s=300)


def test_with_a_required_level_the_running_shares_stay_in_one_domain():
    levels = topology.parse(f"{RACK}!")
    paths = {"a": ("r1",), "b": ("r2",), "d": (None,)}
    # 6 + 6 free across two racks beside one new node strand nothing, but a rack is never
    # crossed: two new nodes beside 4 of a (r1 before r2, as good); d, in no known rack, is
    # no candidate. A level not required is crossed.
    assert scaleup.plan({"a": 6, "b": 6, "d": 8}, 20, 8, paths, levels) == [(NEW, 8), (NEW, 8), ("a", 4)]
    assert scaleup.plan({"a": 6, "b": 6}, 20, 8, paths, topology.parse(RACK)) == [(NEW, 8), ("a", 6), ("b", 6)]
    assert scaleup.plan({"d": 8}, 12, 8, paths, levels) == [(NEW, 8), (NEW, 4)]


def test_a_new_node_is_placed_like_the_running_shares_nodes():
    settings = JOB.replace(topology=topology.parse(f"{RACK}!,{ROW}"))
    labels = {"a": {ZONE: "z1", RACK: "r1", ROW: "w2", PRODUCT: "A100", AWS_GPU: "a100"},
              "b": {ZONE: "z1", RACK: "r1", ROW: "w1", PRODUCT: "A100", AWS_GPU: "a100"},
              "c": {ZONE: "z1", RACK: "r1", PRODUCT: "H100"}}
    plan = [(NEW, 8), ("b", 4), ("a", 2), ("c", 1)]
    # Every running node has its zone and rack: required; c has no AWS label: not required.
    # Preferred: GFD's model of most running GPUs, then the largest share's row.
    assert scaleup.new_node_place(plan, labels, settings) == NewNodePlace(
        required=((ZONE, ("z1",)), (RACK, ("r1",))),
        preferred=(((PRODUCT, "A100"),), ((ROW, "w1"),)))
    assert scaleup.new_node_place(plan[:3], labels, JOB) == NewNodePlace(
        required=((ZONE, ("z1",)), (AWS_GPU, ("a100",))), preferred=(((PRODUCT, "A100"),),))


def test_with_no_running_share_or_labels_the_node_selector_alone_places_a_new_node():
    assert scaleup.new_node_place([(NEW, 8), (NEW, 4)], {}, JOB) == NewNodePlace()
    assert scaleup.new_node_place([(NEW, 8), ("a", 4)], {"a": {}}, JOB) == NewNodePlace()


def test_running_shares_across_zones_allow_either_zone():
    labels = {"a": {ZONE: "z2"}, "b": {ZONE: "z1"}}
    assert scaleup.new_node_place([(NEW, 8), ("a", 2), ("b", 2)], labels, JOB).required == ((ZONE, ("z1", "z2")),)


@given(free=free_maps, racks=st.lists(st.sampled_from(["r1", "r2", "r3", None]), min_size=5, max_size=5),
       gpus=st.integers(min_value=1, max_value=40), node_gpus=st.integers(min_value=1, max_value=8))
def test_with_a_required_level_for_all_inputs_the_running_shares_share_one_known_domain(free, racks, gpus, node_gpus):
    paths = {node: (rack,) for node, rack in zip(sorted(free), racks)}
    plan = scaleup.plan(free, gpus, node_gpus, paths, topology.parse(f"{RACK}!"))
    assert sum(share for _, share in plan) == gpus
    running = [node for node, _ in plan if node != NEW]
    assert len({paths[node] for node in running}) <= 1 and all(paths[node] != (None,) for node in running)
    assert all(share <= free[node] for node, share in plan if node != NEW)
    assert all(share <= node_gpus for node, share in plan if node == NEW)
