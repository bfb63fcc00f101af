"""Topology-aware placement: the fewest domains at each level, then today's rules; checked
against a brute force over every node set on small clusters (hypothesis)."""

import itertools
import random
import time

import pytest
from hypothesis import given, settings, strategies as st

from distributetrain.core.placement import placement, topology
from distributetrain.core.pods import podgroup
from distributetrain.core.placement.topology import Level, NoDomainHolds

BLOCK, RACK = "network.topology.kubernetes.io/block", "network.topology.kubernetes.io/rack"
LEVELS = (Level(BLOCK), Level(RACK))
PATHS = {"a": ("b1", "r1"), "b": ("b1", "r1"), "c": ("b1", "r2"), "d": ("b2", "r3"), "e": ("b2", "r3")}
FREE = {"a": 4, "b": 4, "c": 8, "d": 8, "e": 2}


def test_levels_parse_outermost_first_with_required_marks():
    assert topology.parse(f"{BLOCK},{RACK}!") == (Level(BLOCK), Level(RACK, required=True))
    assert topology.format_levels(topology.parse(f"{BLOCK}!,{RACK}")) == f"{BLOCK}!,{RACK}"
    assert Level(RACK).name == "rack"


@pytest.mark.parametrize("bad", ["", "rack,,block", "-rack", "a b", "rack,rack!", "!"])
def test_bad_levels_show_the_valid_form(bad):
    with pytest.raises(ValueError, match="label keys, outermost first"):
        topology.parse(bad)


def test_one_rack_wins_over_fewer_nodes_across_racks():
    # 8 GPUs: c alone (rack r2). 10: rack r3 holds them (d + e), not c + one of rack r1.
    assert topology.plan(FREE, 8, PATHS, LEVELS) == [("c", 8)]
    assert topology.plan(FREE, 10, PATHS, LEVELS) == [("d", 8), ("e", 2)]
    paths = {"x1": ("b1", "r1"), "x2": ("b1", "r1"), "x3": ("b1", "r1"), "y": ("b1", "r2"), "z": ("b1", "r3")}
    assert topology.plan({"x1": 2, "x2": 2, "x3": 2, "y": 4, "z": 4}, 6, paths, LEVELS) == [
        ("x1", 2), ("x2", 2), ("x3", 2)]


def test_without_levels_it_is_todays_plan():
    assert topology.plan(FREE, 10, PATHS, ()) == placement.plan(FREE, 10)


def test_the_ring_keeps_the_chiefs_domains_together():
    # 16 GPUs in block b1: the chief (b, the smallest share) shares rack r1 with a, its first neighbour.
    assert topology.plan(FREE, 16, PATHS, LEVELS) == [("a", 4), ("c", 8), ("b", 4)]
    assert topology.describe([("a", 4), ("c", 8), ("b", 4)], PATHS, LEVELS) == "block b1; rack r1, r2"


def test_a_required_level_is_never_crossed():
    required = (Level(BLOCK), Level(RACK, required=True))
    with pytest.raises(NoDomainHolds) as refused:
        topology.plan(FREE, 12, PATHS, required)
    assert isinstance(refused.value, placement.InsufficientGPUs)
    assert str(refused.value) == (f"requested 12 GPUs but no one rack has them free (--topology {RACK}!): "
                                  "at most 10 of the 26 free GPUs are in one rack")


def test_a_node_without_a_label_is_its_own_domain_or_excluded_where_required():
    paths = {"lone": (None, None), "p": ("b1", "r1"), "q": ("b1", "r1")}
    free = {"lone": 8, "p": 4, "q": 4}
    assert topology.plan(free, 8, paths, LEVELS) == [("lone", 8)]
    assert topology.plan(free, 8, paths, (Level(BLOCK, required=True), Level(RACK))) == [("p", 4), ("q", 4)]
    assert topology.describe([("lone", 8)], paths, LEVELS) == "block none; rack none"


def test_kueue_shares_go_to_the_tightest_domain_that_holds_them():
    assert topology.assign([4, 4], FREE, PATHS, LEVELS) == ["a", "b"]
    assert topology.assign([8, 2], FREE, PATHS, LEVELS) == ["d", "e"]
    assert topology.assign([8, 8], FREE, PATHS, LEVELS) == ["c", "d"]  # across blocks: nothing required
    assert topology.assign([8, 8], FREE, PATHS, (Level(BLOCK, required=True), Level(RACK))) is None
    assert topology.assign([4, 4], FREE, PATHS, ()) == ["a", "b"]


def test_queued_workers_of_equal_shares_trade_nodes_into_ring_order():
    paths = {"x": ("b1", "r1"), "y": ("b1", "r2"), "z": ("b1", "r2")}
    # Tightest fit gives x, y, z; y shares the chief's rack, so it comes first.
    assert topology.assign([4, 4, 1], {"x": 4, "y": 4, "z": 1}, paths, LEVELS) == ["y", "x", "z"]
    assert topology.assign([4, 2, 1], {"x": 4, "y": 2, "z": 1}, paths, LEVELS) == ["x", "y", "z"]  # shares fixed


labels = st.sampled_from(["b1", "b2", None]), st.sampled_from(["r1", "r2", None])
clusters = st.dictionaries(st.sampled_from("abcdefg"), st.tuples(st.integers(0, 8), *labels), max_size=7)


def brute_force(free, gpus, paths, levels):
    """The least (domains per level, nodes, stranded GPUs) over every node set that may hold the job."""
    required = max((i for i, level in enumerate(levels) if level.required), default=-1)
    nodes = [n for n, f in free.items() if f > 0 and all(paths[n][i] is not None for i in range(required + 1))]
    best = None
    for size in range(1, len(nodes) + 1):
        for chosen in itertools.combinations(nodes, size):
            held = sum(free[n] for n in chosen)
            used = topology.domains_used(chosen, paths, levels)
            if held < gpus or any(used[i] > 1 for i in range(required + 1)):
                continue
            cost = (*used, size, held - gpus)
            best = cost if best is None or cost < best else best
    return best


@settings(max_examples=400, deadline=None)
@given(clusters, st.integers(1, 30), st.booleans(), st.booleans())
def test_never_more_domains_than_needed_then_fewest_nodes(cluster, gpus, block_required, rack_required):
    free = {node: f for node, (f, _, _) in cluster.items()}
    paths = {node: (block, rack) for node, (_, block, rack) in cluster.items()}
    levels = (Level(BLOCK, block_required), Level(RACK, rack_required))
    best = brute_force(free, gpus, paths, levels)
    if best is None:
        with pytest.raises(placement.InsufficientGPUs) as refused:
            topology.plan(free, gpus, paths, levels)
        if sum(free.values()) >= gpus:  # enough GPUs, but no one domain of a required level holds them
            innermost_required = (RACK if rack_required else BLOCK) + "!"
            assert isinstance(refused.value, NoDomainHolds) and innermost_required in str(refused.value)
        return
    chosen = topology.plan(free, gpus, paths, levels)
    nodes = [node for node, _ in chosen]
    assert sum(share for _, share in chosen) == gpus
    assert all(0 < share <= free[node] for node, share in chosen) and len(set(nodes)) == len(nodes)
    assert chosen[-1][1] == min(share for _, share in chosen)  # the chief's share is the smallest
    assert (*topology.domains_used(nodes, paths, levels), len(nodes),
            sum(free[n] for n in nodes) - gpus) == best
    ring = [nodes[-1], *nodes[:-1]]  # the hostfile's order: the chief first
    for level, used in enumerate(topology.domains_used(nodes, paths, levels)):
        domains = [topology.domain(node, paths, level) for node in ring]
        crossings = sum(domains[i] != domains[i - 1] for i in range(len(ring)))
        assert crossings == (used if used > 1 else 0)  # each domain's hosts side by side in the ring


def test_scattered_free_gpus_on_a_large_cluster_are_planned_quickly():
    rng = random.Random(1)
    levels = topology.parse("zone,block,rack")
    paths = {f"n{i:05d}": (f"z{i % 4}", f"b{i % 40}", f"r{i % 1000}") for i in range(10_000)}
    free = {node: rng.choice([0, 0, 0, 1, 2]) for node in paths}
    started = time.monotonic()
    chosen = topology.plan(free, 256, paths, levels)
    assert time.monotonic() - started < 2.0
    assert sum(share for _, share in chosen) == 256
    assert topology.domains_used([node for node, _ in chosen], paths, levels)[0] == 1  # one zone holds it


@settings(max_examples=300, deadline=None)
@given(clusters, st.lists(st.integers(1, 8), min_size=1, max_size=4), st.booleans())
def test_queued_shares_land_in_the_tightest_domain_that_holds_them(cluster, shares, rack_required):
    free = {node: f for node, (f, _, _) in cluster.items()}
    paths = {node: (block, rack) for node, (_, block, rack) in cluster.items()}
    levels = (Level(BLOCK), Level(RACK, rack_required))
    nodes = topology.assign(shares, free, paths, levels)
    labelled = {node: f for node, f in free.items() if None not in paths[node]}
    one_rack_holds = any(podgroup.assign(shares, {n: f for n, f in labelled.items() if paths[n] == path})
                         for path in {paths[n] for n in labelled})
    if nodes is None:
        assert not one_rack_holds
        return
    assert len(set(nodes)) == len(nodes) and all(free[node] >= share for node, share in zip(nodes, shares))
    used = topology.domains_used(nodes, paths, levels)
    if one_rack_holds or rack_required:
        assert used == [1, 1]
