"""Where Kueue lets a queued job's pods run: a flavor's node labels and tolerations, an
admitted pod's nodeSelector (its topology domain with TAS) and tolerations, read against
nodes as the inventory reads them; and nodes for shares each pod may have only some of."""

import itertools

from hypothesis import given, strategies as st

from distributetrain.core.placement import kueuenodes
from distributetrain.core.pods import podgroup
from distributetrain.core.placement.inventory import node_gpus
from distributetrain.core.placement.kueuenodes import NodeRule
from harness.builders import GPU, JOB, make_node

POOL = "example.com/pool"
DEDICATED = {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
# A ResourceFlavor as a platform team writes one (Kueue's site: examples/tas/sample-gpu-queues.yaml).
FLAVOR = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "ml"},
          "spec": {"nodeLabels": {POOL: "ml"}, "tolerations": [DEDICATED], "topologyName": "default"}}


def part(name, labels=None, taints=()):
    """A node as the inventory reads it; ``taints``: (key, effect), or (key, value, effect)."""
    node = make_node(name).hostname().labels(labels).gpus(8).obj()
    node["spec"]["taints"] = [dict(zip(("key", "value", "effect") if len(t) == 3 else ("key", "effect"), t))
                              for t in taints]
    return node_gpus(node, GPU, (), {})


def test_a_flavor_allows_its_labelled_nodes_and_their_taint_it_tolerates():
    rule = kueuenodes.flavor_rule(FLAVOR, JOB.pod_tolerations)
    assert rule == NodeRule(((POOL, "ml"),), (*JOB.pod_tolerations, DEDICATED))
    assert rule.allows(part("a", {POOL: "ml"}, [("dedicated", "ml", "NoSchedule")]))
    assert not rule.allows(part("a", {POOL: "ml"}, [("dedicated", "web", "NoSchedule")]))
    assert rule.allows(part("b", {POOL: "ml"}, [(GPU, "NoSchedule"), ("soft", "PreferNoSchedule")]))
    assert not rule.allows(part("c", {POOL: "other"}))
    assert not rule.allows(part("d"))
    assert not rule.allows(part("e", {POOL: "ml"}, [("maintenance", "NoExecute")]))
    # The job's own tolerations alone do not reach the flavor's nodes.
    assert not NodeRule((), JOB.pod_tolerations).allows(part("a", {POOL: "ml"}, [("dedicated", "ml", "NoSchedule")]))


def test_an_admitted_pod_runs_where_its_selector_and_tolerations_say():
    """As Kueue leaves a pod admitted under TAS: the flavor's label and its domain's, down to the node."""
    pod = {"metadata": {"annotations": {"kueue.x-k8s.io/podset-unconstrained-topology": "true"}},
           "spec": {"nodeSelector": {POOL: "ml", "kubernetes.io/hostname": "b"},
                    "tolerations": [*JOB.pod_tolerations, DEDICATED]}}
    rule = kueuenodes.pod_rule(pod)
    assert str(rule) == "example.com/pool=ml,kubernetes.io/hostname=b" and rule.topology
    assert not kueuenodes.pod_rule({"spec": pod["spec"]}).topology  # a flavor's selector alone
    allowed = {n: 8 for n in "abc"}
    nodes = {"a": part("a", {POOL: "ml"}), "b": part("b", {POOL: "ml"}, [("dedicated", "ml", "NoSchedule")]),
             "c": part("c")}
    assert kueuenodes.allowed(allowed, nodes, rule) == {"b": 8}
    assert kueuenodes.allowed(allowed, nodes, kueuenodes.pod_rule({"spec": {}})) == {"a": 8, "c": 8}
    assert str(kueuenodes.pod_rule({"spec": {}})) == "any node"


def test_a_cluster_queue_s_gpu_flavors_in_the_order_kueue_tries_them():
    cluster_queue = {"spec": {"resourceGroups": [
        {"coveredResources": ["cpu", "memory"], "flavors": [{"name": "cpu-only"}]},
        {"coveredResources": ["cpu", "memory", GPU], "flavors": [{"name": "h100"}, {"name": "a100"}]}]}}
    assert kueuenodes.gpu_flavors(cluster_queue, GPU) == ["h100", "a100"]
    assert kueuenodes.gpu_flavors({}, GPU) == []


def test_an_inventory_for_the_rules_tolerates_what_they_add_each_once():
    rules = [kueuenodes.flavor_rule(FLAVOR, JOB.pod_tolerations)] * 2 + [NodeRule((), JOB.pod_tolerations)]
    assert kueuenodes.tolerations_beyond(rules, JOB.pod_tolerations) == (DEDICATED,)
    assert kueuenodes.tolerations_beyond([], JOB.pod_tolerations) == ()


NODES = ["n1", "n2", "n3", "n4", "n5"]


def brute_force(shares, free, allowed):
    return any(all(free[node] >= share and node in allowed[i] for i, (node, share) in enumerate(zip(chosen, shares)))
               for chosen in itertools.permutations(free, len(shares)))


@st.composite
def constrained(draw):
    """Shares, free GPUs, and for each share the nodes allowed it, as Kueue sets them: the
    same for all (one flavor), or a domain each, domains of one level being disjoint (a
    topology assignment: a rack each, a node each)."""
    free = draw(st.dictionaries(st.sampled_from(NODES), st.integers(0, 8), min_size=1))
    shares = draw(st.lists(st.integers(1, 8), min_size=1, max_size=4))
    cuts = sorted(draw(st.sets(st.integers(1, len(NODES) - 1))))
    domains = [frozenset(NODES[a:b]) for a, b in zip([0, *cuts], [*cuts, len(NODES)])]
    if draw(st.booleans()):
        return shares, free, [draw(st.sampled_from(domains))] * len(shares)
    return shares, free, [draw(st.sampled_from(domains)) for _ in shares]


@given(constrained())
def test_each_share_goes_to_a_node_its_pod_is_allowed_whenever_any_assignment_exists(case):
    shares, free, allowed = case
    chosen = podgroup.assign(shares, free, allowed)
    if chosen is None:
        assert not brute_force(shares, free, allowed)
        return
    assert len(set(chosen)) == len(shares)
    assert all(free[node] >= share and node in allowed[i] for i, (node, share) in enumerate(zip(chosen, shares)))


@given(shares=st.lists(st.integers(1, 8), min_size=1, max_size=4),
       free=st.dictionaries(st.sampled_from(NODES), st.integers(0, 8)))
def test_one_rule_for_all_is_the_tightest_fit_on_its_nodes(shares, free):
    allowed = {node for node in free if node != "n1"}
    assert podgroup.assign(shares, free, [allowed] * len(shares)) == podgroup.assign(
        shares, {node: gpus for node, gpus in free.items() if node in allowed})


def test_a_pod_given_one_node_by_its_topology_assignment_gets_it():
    # Kueue gave the 2-GPU chief node b, though a fits it tighter; the worker either.
    assert podgroup.assign([2, 2], {"a": 2, "b": 2, "c": 4}, [{"a", "b", "c"}, {"b"}]) == ["a", "b"]
    assert podgroup.assign([2], {"a": 2, "b": 2}, [{"b"}]) == ["b"]
    assert podgroup.assign([2], {"a": 2, "b": 1}, [{"b"}]) is None


def test_pods_a_topology_assignment_packed_on_one_node_share_it_where_asked_to_and_it_holds_them():
    assert podgroup.assign([2, 1], {"a": 4, "b": 1}, [{"a"}, {"a"}]) is None
    assert podgroup.assign([2, 1], {"a": 4, "b": 1}, [{"a"}, {"a"}], stack=True) == ["a", "a"]
    assert podgroup.assign([2, 2], {"a": 3}, [{"a"}, {"a"}], stack=True) is None
