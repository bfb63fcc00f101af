"""Inventory: quantities, the Kubernetes request rule, and which nodes are candidates."""

import copy
from collections import Counter
from collections.abc import Iterable, Mapping

import pytest
from hypothesis import given, strategies as st

from distributetrain.core.pods import manifests
from distributetrain.core.placement import topology
from distributetrain.core.placement.inventory import (BLOCKING_TAINT_EFFECTS, GpuLedger, NodeGpus, PodClaim, gpu_count,
                                                      node_gpus, node_refusal, pinned_node, pod_claim, pod_request,
                                                      tolerates)
from distributetrain.core.names import NEW_NODE
from distributetrain.core.pods.newnodepods import NewNodePlace
from distributetrain.core.placement.podfit import JobFit, PodShape
from distributetrain.core.placement.podrequests import pod_requests
from distributetrain.core.settings import JobSettings
from distributetrain.kube import podwire
from unit.core.pods.test_manifests import KEYS


def free_gpus(
    nodes: Iterable[Mapping],
    pods: Iterable[Mapping],
    resource: str,
    tolerations: Iterable[Mapping] = (),
    node_selector: Mapping[str, str] = {},
) -> dict[str, int]:
    """Free GPUs per candidate node, from one listing of nodes and pods."""
    ledger = GpuLedger(resource)
    tolerations = list(tolerations)
    for node in nodes:
        ledger.add_node(node, tolerations, node_selector)
    for pod in pods:
        ledger.add_pod(pod)
    return ledger.free()


GPU = "nvidia.com/gpu"


def free_gpus_fitting(nodes: Iterable[Mapping], pods: Iterable[Mapping], fit: JobFit) -> dict[str, int]:
    ledger = GpuLedger(GPU, fit=fit)
    for one in nodes:
        ledger.add_node(one)
    for one in pods:
        ledger.add_pod(one)
    return ledger.free()
A_JOB = JobSettings(job_name="j", namespace="ns", num_gpus=1, image="i")


def node(name, allocatable="8", capacity="8", ready="True", unschedulable=False, taints=(), labels=None, resource=GPU):
    status = {"conditions": [{"type": "Ready", "status": ready}], "allocatable": {}, "capacity": {}}
    if allocatable is not None:
        status["allocatable"][resource] = allocatable
        status["capacity"][resource] = capacity
    spec = {"unschedulable": unschedulable} if unschedulable else {}
    if taints:
        spec["taints"] = list(taints)
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec, "status": status}


def container(gpus=None, requests=None):
    resources = {}
    if gpus is not None:
        resources["limits"] = {GPU: str(gpus)}
    if requests is not None:
        resources["requests"] = {GPU: str(requests)}
    return {"name": "c", "resources": resources}


def pod(node_name, containers, phase="Running", init=(), uid="u", affinity_node=None):
    spec = {"containers": list(containers), "initContainers": list(init)}
    if node_name:
        spec["nodeName"] = node_name
    if affinity_node:
        spec["affinity"] = manifests.worker_pod(A_JOB, 0, affinity_node, 1)["spec"]["affinity"]
    return {"metadata": {"name": "p", "uid": uid}, "spec": spec, "status": {"phase": phase}}


@pytest.mark.parametrize("text,count", [("4", 4), (4, 4), ("4000m", 4), ("1500m", 2), ("0", 0), ("2k", 2000)])
def test_quantities(text, count):
    assert gpu_count(text) == count


@pytest.mark.parametrize("bad", ["four", "-1", "1x"])
def test_bad_quantities(bad):
    with pytest.raises(ValueError):
        gpu_count(bad)


def test_allocatable_not_capacity():
    assert free_gpus([node("a", allocatable="6", capacity="8")], [], GPU) == {"a": 6}


def test_every_container_counted_and_limits_stand_for_requests():
    spec = {"containers": [container(2), container(requests=1), {"name": "cpu-only"}]}
    assert pod_request(spec, GPU) == 3


def test_init_containers_by_the_kubernetes_rule():
    # max(sum of app containers, largest init container)
    assert pod_request({"containers": [container(1)], "initContainers": [container(4)]}, GPU) == 4
    assert pod_request({"containers": [container(3)], "initContainers": [container(2)]}, GPU) == 3


def test_sidecar_init_containers_add_to_the_app():
    sidecar = container(1) | {"restartPolicy": "Always"}
    assert pod_request({"containers": [container(2)], "initContainers": [sidecar, container(2)]}, GPU) == 3


def test_terminal_pods_free_their_gpus():
    pods = [pod("a", [container(2)], phase="Succeeded"), pod("a", [container(3)], phase="Failed"),
            pod("a", [container(1)], phase="Running"), pod("a", [container(1)], phase="Pending")]
    assert free_gpus([node("a")], pods, GPU) == {"a": 6}


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 3), st.booleans()), max_size=8))
def test_free_read_between_changes_is_what_a_fresh_ledger_says(pods):
    """``free`` is kept between changes (a plan and its log line read it on 5,000 nodes):
    each pod and node added, and a copy, answer anew; a copy's pods are its own (it shares
    what they request per node with its original, never changed in place)."""
    nodes = [node("a", labels={"kubernetes.io/hostname": "a"}), node("b", allocatable="4")]
    fit = JobFit.of_job(A_JOB)
    ledger, added = GpuLedger(GPU, fit=fit), []
    for one in nodes[:1]:
        ledger.add_node(one)
    assert ledger.free() == {"a": 8}
    ledger.add_node(nodes[1])
    for index, (where, gpus, in_copy) in enumerate(pods):
        added.append(pod(where, [container(gpus) | {"resources": {"requests": {GPU: str(gpus), "cpu": "1"}}}],
                         uid=str(index)))
        original, before = ledger, (ledger.free(), copy.deepcopy(ledger.requested))
        ledger = ledger.copy() if in_copy else ledger
        ledger.add_pod(added[-1])
        assert ledger.free() == free_gpus_fitting(nodes, added, fit)
        if in_copy:
            assert (original.free(), original.requested) == before


def test_unbound_pods_pinned_by_affinity_count_against_their_node():
    assert free_gpus([node("a"), node("b")], [pod(None, [container(5)], phase="Pending", affinity_node="b")], GPU) == {
        "a": 8, "b": 3}


def affinity(*terms):
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": list(terms)}}}}


def by_name(*values, operator="In"):
    return {"matchFields": [{"key": "metadata.name", "operator": operator, "values": list(values)}]}


def by_hostname(*values):
    return {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": list(values)}]}


@pytest.mark.parametrize("spec,node", [
    (affinity(by_name("ip-10-0-1-7.ec2.internal")), "ip-10-0-1-7.ec2.internal"),  # how this manager pins
    # An older manager's pods (by hostname label) may still wait to be bound while this
    # one plans: their GPUs are claimed all the same.
    (affinity(by_hostname("gpu-a")), "gpu-a"),
    (affinity(by_name("a", "b")), None),  # allows two nodes
    (affinity(by_name("a"), by_name("b")), None),  # two terms are ORed
    (affinity(by_name("a", operator="NotIn")), None),
    (affinity({"matchFields": [{"key": "metadata.namespace", "operator": "In", "values": ["a"]}]}), None),
    ({}, None),
])
def test_pinned_node_is_the_one_node_required_affinity_allows(spec, node):
    assert pinned_node(spec) == node


@given(st.from_regex(r"[a-z0-9]([a-z0-9.-]{0,200}[a-z0-9])?", fullmatch=True))
def test_the_node_a_pod_is_pinned_to_reads_back_whatever_its_name(node_name):
    # Node names are DNS subdomains (up to 253 characters): not always valid label values.
    worker = manifests.worker_pod(A_JOB, 0, node_name, 1)
    assert pinned_node(worker["spec"]) == node_name


def test_overcommitted_node_reports_zero_not_negative():
    assert free_gpus([node("a", allocatable="2")], [pod("a", [container(3)])], GPU) == {"a": 0}


def test_not_ready_cordoned_tainted_and_resource_less_nodes_are_not_candidates():
    nodes = [
        node("ready"),
        node("not-ready", ready="False"),
        node("unknown", ready="Unknown"),
        node("cordoned", unschedulable=True),
        node("tainted", taints=[{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]),
        node("prefer", taints=[{"key": "soft", "effect": "PreferNoSchedule"}]),
        node("cpu-only", allocatable=None),
    ]
    ledger = GpuLedger(GPU)
    for n in nodes:
        ledger.add_node(n)
    assert ledger.free() == {"ready": 8, "prefer": 8}
    assert set(ledger.refused) == {"not-ready", "unknown", "cordoned", "tainted", "cpu-only"}
    assert ledger.advertised


def test_tolerated_taints_and_node_selector():
    taint = {"key": "dedicated", "value": "train", "effect": "NoSchedule"}
    nodes = [node("pool", taints=[taint], labels={"pool": "train"}), node("other", labels={"pool": "infer"})]
    toleration = [{"key": "dedicated", "operator": "Equal", "value": "train", "effect": "NoSchedule"}]
    assert free_gpus(nodes, [], GPU, toleration, {"pool": "train"}) == {"pool": 8}


@pytest.mark.parametrize(
    "toleration,expected",
    [
        ({"key": "k", "operator": "Exists"}, True),
        ({"operator": "Exists"}, True),
        ({"key": "k", "operator": "Equal", "value": "v"}, True),
        ({"key": "k", "operator": "Equal", "value": "w"}, False),
        ({"key": "k", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "other", "operator": "Exists"}, False),
    ],
)
def test_toleration_rule(toleration, expected):
    assert tolerates([toleration], {"key": "k", "value": "v", "effect": "NoSchedule"}) is expected


def test_other_gpu_vendors():
    amd = "amd.com/gpu"
    assert free_gpus([node("a", resource=amd), node("b")], [], amd) == {"a": 8}


GKE_GPU_TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}  # GKE's default on GPU node pools


def test_nodes_tainted_with_the_gpu_resource_are_candidates():
    nodes = [node("gke", taints=[GKE_GPU_TAINT]), node("bare", taints=[{"key": GPU, "effect": "NoSchedule"}])]
    assert free_gpus(nodes, [], GPU) == {"gke": 8, "bare": 8}


def test_the_gpu_taint_is_tolerated_only_for_the_job_s_own_resource_and_only_noschedule():
    amd = "amd.com/gpu"
    assert node_refusal(node("a", taints=[GKE_GPU_TAINT], resource=amd), amd) == (
        "has taint nvidia.com/gpu:NoSchedule the job does not tolerate")
    assert node_refusal(node("a", taints=[{"key": amd, "effect": "NoSchedule"}], resource=amd), amd) is None
    evicting = node("a", taints=[{"key": GPU, "effect": "NoExecute"}])
    assert node_refusal(evicting, GPU) == "has taint nvidia.com/gpu:NoExecute the job does not tolerate"
    assert node_refusal(evicting, GPU, [{"key": GPU, "operator": "Exists", "effect": "NoExecute"}]) is None


def test_other_taints_still_exclude_a_gpu_tainted_node_unless_tolerated():
    taints = [GKE_GPU_TAINT, {"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]
    assert free_gpus([node("a", taints=taints)], [], GPU) == {}
    toleration = {"key": "dedicated", "operator": "Equal", "value": "infer", "effect": "NoSchedule"}
    assert free_gpus([node("a", taints=taints)], [], GPU, [toleration]) == {"a": 8}


def scheduler_tolerates(toleration: dict, taint: dict) -> bool:
    """Kubernetes' ToleratesTaint (k8s.io/api/core/v1/toleration.go), written out independently."""
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    if toleration.get("key") and toleration["key"] != taint["key"]:
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return True
    return toleration.get("value", "") == taint.get("value", "")


TAINT_KEYS = st.sampled_from([GPU, "amd.com/gpu", "dedicated", "example.com/pool"])
TAINT_VALUES = st.sampled_from(["", "present", "infer"])
EFFECTS = st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"])
taints = st.lists(st.fixed_dictionaries({"key": TAINT_KEYS, "value": TAINT_VALUES, "effect": EFFECTS}), max_size=4)
# As --toleration KEY[=VALUE][:EFFECT] parses them (validation.toleration).
user_tolerations = st.lists(
    st.builds(
        lambda key, value, effect: {"key": key, "operator": "Exists" if value is None else "Equal",
                                    **({} if value is None else {"value": value}),
                                    **({} if effect is None else {"effect": effect})},
        TAINT_KEYS, st.none() | TAINT_VALUES, st.none() | EFFECTS,
    ),
    max_size=3,
)


@given(taints, user_tolerations, st.sampled_from([GPU, "amd.com/gpu"]))
def test_a_node_is_a_candidate_exactly_when_the_scheduler_would_admit_the_job_s_pods(node_taints, tolerations, resource):
    """Inventory and manifests agree: a Ready node is planned on iff every NoSchedule or
    NoExecute taint is tolerated by the tolerations the job's worker pods really carry."""
    settings = JobSettings(job_name="j", namespace="ns", num_gpus=1, image="i", gpu_resource=resource,
                           tolerations=tuple(tolerations))
    carried = manifests.worker_pod(settings, 0, "a", 1)["spec"]["tolerations"]
    admitted = all(any(scheduler_tolerates(t, taint) for t in carried)
                   for taint in node_taints if taint["effect"] in BLOCKING_TAINT_EFFECTS)
    candidate = node_refusal(node("a", taints=node_taints, resource=resource), resource, tolerations) is None
    assert candidate == admitted


@given(taints, user_tolerations)
def test_the_gpu_resource_s_noschedule_taint_never_refuses_a_node(node_taints, tolerations):
    gpu_taints = [{"key": GPU, "value": value, "effect": "NoSchedule"} for value in ("", "present")]
    others = [t for t in node_taints if not (t["key"] == GPU and t["effect"] == "NoSchedule")]
    assert (node_refusal(node("a", taints=others + gpu_taints), GPU, tolerations)
            == node_refusal(node("a", taints=others), GPU, tolerations))


def test_selectable_counts_every_selected_node_whatever_its_state():
    ledger = GpuLedger(GPU)
    for n in (node("a", "4", unschedulable=True, labels={"pool": "x"}), node("b", "2", ready="False", labels={"pool": "x"}),
              node("c", "8", labels={"pool": "y"}), node("d", None, labels={"pool": "x"})):
        ledger.add_node(n, node_selector={"pool": "x"})
    assert (ledger.selectable, ledger.allocatable) == (6, {})
    assert ledger.refused == {"a": "is cordoned", "b": "is not Ready", "c": "does not match the node selector",
                              "d": "has no nvidia.com/gpu"}


def test_a_node_s_part_of_the_ledger():
    assert node_gpus(node("a", "4", labels={"pool": "x"}), GPU, node_selector={"pool": "x"}) == \
        NodeGpus("a", 4, True, None)
    assert node_gpus(node("b", "2", unschedulable=True), GPU, node_selector={"pool": "x"}) == \
        NodeGpus("b", 2, False, "does not match the node selector")
    assert node_gpus(node("c", None), GPU) == NodeGpus("c", None, True, "has no nvidia.com/gpu")


@pytest.mark.parametrize("p,claim", [
    (pod("a", [container(2), container(1)], uid="w"), PodClaim("w", "a", 3)),
    (pod(None, [container(1)], uid="w", affinity_node="b"), PodClaim("w", "b", 1)),  # pinned, unbound
    (pod("a", [container(2)], phase="Succeeded"), None),
    (pod("a", [container()]), None),  # holds no GPU
    (pod(None, [container(2)], phase="Pending"), None),  # not bound nor pinned: on no node yet
])
def test_what_a_pod_claims(p, claim):
    assert pod_claim(p, GPU) == claim


QUANTITIES = st.sampled_from(["0", "1", "250m", "2", "1Gi", "3500m"])
RESOURCES = st.sampled_from([GPU, "cpu", "memory", "ephemeral-storage"])
AMOUNTS = st.dictionaries(RESOURCES, QUANTITIES, max_size=3)
ANY_CONTAINER = st.builds(lambda requests, limits: {"name": "c", "resources": {"requests": requests, "limits": limits}},
                          AMOUNTS, AMOUNTS)
ANY_POD = st.builds(
    lambda node_name, containers, init, sidecar, overhead, own: {
        "metadata": {"uid": "u", "labels": {"job": "j"} if own else {}},
        "spec": {"nodeName": node_name, "containers": containers, "overhead": overhead,
                 "initContainers": [c | ({"restartPolicy": "Always"} if sidecar else {}) for c in init]},
        "status": {"phase": "Running"}},
    st.sampled_from(["a", "b", "off", ""]), st.lists(ANY_CONTAINER, max_size=3), st.lists(ANY_CONTAINER, max_size=2),
    st.booleans(), AMOUNTS, st.booleans())


@given(st.lists(ANY_POD, max_size=6))
def test_the_ledger_folds_each_pod_as_its_claim_and_its_requests_say(pods):
    """The fold reads each pod once; it counts what ``pod_claim`` and ``pod_requests`` say."""
    ledger = GpuLedger(GPU, fit=JobFit(PodShape({}, {}), own_labels={"job": "j"}))
    for n in (node("a"), node("b"), node("off", ready="False")):
        ledger.add_node(n)
    for p in pods:
        ledger.add_pod(p)
    claims = [claim for p in pods if (claim := pod_claim(p, GPU))]
    on_candidates = [p for p in pods if p["spec"]["nodeName"] in ("a", "b")]
    assert {n: used for n, used in ledger.used.items() if used} == {
        n: total for n in ("a", "b", "off") if (total := sum(c.gpus for c in claims if c.node == n))}
    assert ledger.requested == {n: sum((Counter(pod_requests(p["spec"])) for p in on_candidates
                                        if p["spec"]["nodeName"] == n), Counter())
                                for n in {p["spec"]["nodeName"] for p in on_candidates}}
    assert ledger.own_nodes == {p["spec"]["nodeName"] for p in on_candidates if p["metadata"]["labels"]}


@given(st.lists(ANY_POD, max_size=4), st.lists(ANY_POD, max_size=4))
def test_a_list_read_again_after_forget_pods_counts_its_pods_once(pods_before_the_cut, pods):
    """A pod list that failed part way is read again whole: what the first try folded goes."""
    def ledger_of(*attempts):
        ledger = GpuLedger(GPU, fit=JobFit(PodShape({}, {}), own_labels={"job": "j"}))
        for n in (node("a"), node("b"), node("off", ready="False")):
            ledger.add_node(n)
        for attempt in attempts:
            ledger.forget_pods()
            for p in attempt:
                ledger.add_pod(p)
        return ledger
    assert ledger_of(pods_before_the_cut, pods) == ledger_of(pods)


def test_unavailable_names_nodes_that_may_come_back_and_counts_the_rest():
    ledger = GpuLedger(GPU)
    for n in [node(f"cordoned-{i:02}", unschedulable=True) for i in range(12)] + [
            node("down", ready="False"), node("cpu", None), node("other", labels={"pool": "y"})]:
        ledger.add_node(n, node_selector={})
    ledger.add_node(node("elsewhere", labels={"pool": "y"}), node_selector={"pool": "x"})
    text = ledger.unavailable()
    assert text.startswith("cordoned-00 is cordoned; cordoned-01 is cordoned;")
    assert "; 3 more (2 other nodes are not selected or have no nvidia.com/gpu)" in text
    assert GpuLedger(GPU).unavailable() == "no node unavailable"


def test_with_topology_levels_the_ledger_knows_each_nodes_place():
    ledger = GpuLedger(GPU, levels=topology.parse("example.com/block,example.com/rack"))
    ledger.add_node(node("a", labels={"example.com/block": "b1", "example.com/rack": "r1"}))
    ledger.add_node(node("b", labels={"example.com/block": "b1"}))
    assert ledger.paths == {"a": ("b1", "r1"), "b": ("b1", None)}
    assert GpuLedger(GPU).paths == {}


def awaiting(gpus=8, selector=(), zone="z1", uid="p"):
    """Another manager's pod for a node the cluster adds, as the inventory reads it off the wire."""
    settings = A_JOB.replace(num_gpus=gpus + 1, node_selector=selector, owner_uid="uid-a")
    place = NewNodePlace(required=(("topology.kubernetes.io/zone", (zone,)),))
    _, waiting, _ = manifests.job_objects(settings, [(NEW_NODE, gpus), ("old", 1)], KEYS, new_node_place=place)
    waiting["metadata"]["uid"] = uid
    return {**podwire.slim(waiting), "status": {"phase": "Pending"}}


def zoned(name, gpus="8", zone="z1", **labels):
    return node(name, gpus, gpus, labels={"topology.kubernetes.io/zone": zone, **labels})


def a_ledger(nodes, pods):
    ledger = GpuLedger(GPU, fit=JobFit.of_job(A_JOB))
    for n in nodes:
        ledger.add_node(n)
    for p in pods:
        ledger.add_pod(p)
    return ledger


def test_a_node_that_joined_for_another_managers_pod_is_not_free_until_that_pod_is_bound():
    """Manager A's pod waits for the node its autoscaler adds; the node has joined, and the
    scheduler has not bound the pod yet: B's inventory counts the pod there, not twice."""
    tenant = pod("old", [container(4)], uid="t")
    nodes = [zoned("old"), zoned("new-1"), zoned("new-2", zone="z2")]
    ledger = a_ledger(nodes, [tenant, awaiting()])
    assert ledger.free() == {"old": 4, "new-1": 0, "new-2": 8}
    bound = {**awaiting(), "spec": {**awaiting()["spec"], "nodeName": "new-1"}}
    assert a_ledger(nodes, [tenant, bound]).free() == {"old": 4, "new-1": 0, "new-2": 8}


def test_a_pod_awaiting_a_node_that_has_not_joined_takes_no_running_gpus():
    nodes = [zoned("old", gpus="4"), zoned("other", zone="z2"), zoned("small", gpus="4")]
    assert a_ledger(nodes, [awaiting()]).free() == {"old": 4, "other": 8, "small": 4}


def test_each_awaiting_pod_takes_one_node_and_no_node_beyond_its_gpus():
    nodes = [zoned("new-1"), zoned("new-2", gpus="4")]
    pods = [awaiting(uid="p1"), awaiting(uid="p2"), awaiting(4, uid="p3")]
    assert a_ledger(nodes, pods).free() == {"new-1": 0, "new-2": 0}


def test_of_the_nodes_a_pod_fits_the_empty_one_is_the_one_that_joined_for_it():
    busy = zoned("busy", gpus="16")
    ledger = a_ledger([busy, zoned("new-1")], [pod("busy", [container(4)], uid="t"), awaiting()])
    assert ledger.free() == {"busy": 12, "new-1": 0}
    # A finished pod awaits nothing.
    done = {**awaiting(), "status": {"phase": "Failed"}}
    assert a_ledger([busy, zoned("new-1")], [done]).free() == {"busy": 16, "new-1": 8}


def test_a_node_its_selector_does_not_allow_is_not_taken():
    nodes = [zoned("new-1", pool="cpu"), zoned("new-2", pool="gpu")]
    assert a_ledger(nodes, [awaiting(selector=(("pool", "gpu"),))]).free() == {"new-1": 8, "new-2": 0}


def test_a_copy_of_the_survey_counts_its_awaiting_pods_alone():
    """Each listing of the bookings starts from a copy of the survey: what one copy
    counted is in no other (a listing started over, the next booking)."""
    survey = a_ledger([zoned("new-1")], [])
    assert survey.free() == {"new-1": 8}
    booked = survey.copy()
    booked.add_pod(awaiting())
    assert (booked.free(), survey.free(), survey.copy().free()) == ({"new-1": 0}, {"new-1": 8}, {"new-1": 8})
