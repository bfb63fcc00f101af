"""What the informers keep of a Node and of a GPU pod: every reading the manager makes of
the kept form is the reading of the whole object (the free GPUs' ledger, the node watch's
health), and nothing else of the object is kept; each GPU pod costs a small constant."""

import gc
import json
import tracemalloc

from hypothesis import given, settings as hypothesis_settings, strategies as st

from distributetrain.core.placement.inventory import node_gpus, pod_claim
from distributetrain.core.placement.projections import GpuPodClaims, watched_node
from distributetrain.kube.informer import Informer
from distributetrain.manager.placement.freegpus import LedgerParts
from distributetrain.manager.watching.nodewatch import UNREACHABLE_TAINT, node_health
from harness.builders import GPU, TIME_SLICED, make_pod, node
from harness.kube import FakeKube

ZONE, REGION = "topology.kubernetes.io/zone", "topology.kubernetes.io/region"
LABEL_KEYS = (ZONE, REGION, "node.kubernetes.io/exclude-disruption", "pool", "network.topology.kubernetes.io/rack",
              *TIME_SLICED)
TIMES = ("2026-01-02T12:00:00Z", "2026-01-02T12:00:04Z")

labels = st.dictionaries(st.sampled_from(LABEL_KEYS), st.sampled_from(["a", "b", "4", "2", "time-slicing"]), max_size=6)
taints = st.lists(st.fixed_dictionaries(
    {"key": st.sampled_from([UNREACHABLE_TAINT, "node.kubernetes.io/not-ready", GPU, "dedicated"]),
     "effect": st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule"])},
    optional={"value": st.sampled_from(["", "present", "ml"]), "timeAdded": st.sampled_from(TIMES)}), max_size=3)
ready = st.fixed_dictionaries({"type": st.just("Ready"), "status": st.sampled_from(["True", "False", "Unknown"])},
                              optional={"reason": st.sampled_from(["KubeletReady", "NodeStatusUnknown"]),
                                        "message": st.sampled_from(["kubelet is posting ready status", "PLEG  is\nnot healthy"]),
                                        "lastTransitionTime": st.sampled_from(TIMES)})
allocatable = st.dictionaries(st.sampled_from([GPU, "cpu", "memory", "pods", "ephemeral-storage", "amd.com/gpu"]),
                              st.sampled_from(["0", "4", "8", "4000m", "512Gi", "110"]))


@st.composite
def nodes(draw, name="n"):
    """A Node as the API lists it: what the readers read, drawn, and what none reads."""
    spec = {"podCIDR": "10.0.0.0/24", "providerID": f"gce://p/z/{name}"}
    if drawn_taints := draw(taints):
        spec["taints"] = drawn_taints
    if draw(st.booleans()):
        spec["unschedulable"] = True
    pressure = {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": TIMES[1]}
    conditions = [pressure, *draw(st.lists(ready, max_size=1))]
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": f"uid-{name}", "labels": draw(labels),
                         "annotations": {"node.alpha.kubernetes.io/ttl": "0"}, "managedFields": [{"manager": "kubelet"}]},
            "spec": spec,
            "status": {"allocatable": draw(allocatable), "capacity": {"cpu": "96"}, "conditions": conditions,
                       "addresses": [{"type": "InternalIP", "address": "10.128.0.2"}],
                       "images": [{"names": ["registry/image:1"], "sizeBytes": 1}], "nodeInfo": {"kubeletVersion": "v1.33.2"}}}


def as_listed(obj):
    """As the client decodes it: every string a new one."""
    return json.loads(json.dumps(obj))


@hypothesis_settings(max_examples=300, deadline=None)
@given(nodes(), st.sampled_from([{}, {"pool": "a"}]),
       st.sampled_from([(), ({"key": "dedicated", "operator": "Exists"},), ({"operator": "Exists"},)]))
def test_the_kept_node_reads_as_the_whole_node(whole, node_selector, tolerations):
    kept = watched_node(as_listed(whole))
    assert vars(node_gpus(kept, GPU, tolerations, node_selector)) == vars(node_gpus(whole, GPU, tolerations, node_selector))
    assert node_health(kept) == node_health(whole)


@hypothesis_settings(max_examples=100, deadline=None)
@given(st.lists(nodes(), min_size=1, max_size=5),
       st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4), st.sampled_from(["Running", "Pending", "Succeeded"]),
                          st.booleans()), max_size=12))
def test_the_free_gpus_followed_on_kept_objects_are_those_of_whole_objects(drawn, drawn_pods):
    whole_nodes = [dict(n, metadata=dict(n["metadata"], name=f"n{i}")) for i, n in enumerate(drawn)]
    pods = []
    for i, (where, gpus, phase, pinned) in enumerate(drawn_pods):
        builder = make_pod(f"p{i}").uid(f"uid-{i}").gpus(gpus).phase(phase)
        pods.append((builder.pinned if pinned else builder.on)(f"n{where}").obj())
    whole, kept = LedgerParts(GPU), LedgerParts(GPU)
    for n in whole_nodes:
        whole.apply_node("ADDED", n)
        kept.apply_kept_node(n["metadata"]["name"], watched_node(as_listed(n)))
    for p in pods:
        whole.apply_pod("ADDED", p)
        kept.apply_claim(None, GpuPodClaims(GPU)(as_listed(p)))
    assert kept.free() == whole.free()
    assert kept.ledger() == whole.ledger()


def test_a_kept_node_is_what_the_readers_read_and_nothing_else():
    whole = node("a", 8, labels={ZONE: "z1"})
    whole["spec"] = {"taints": [{"key": UNREACHABLE_TAINT, "effect": "NoExecute", "timeAdded": TIMES[0]}],
                     "podCIDR": "10.0.0.0/24"}
    whole["status"]["conditions"] = [
        {"type": "MemoryPressure", "status": "False"},
        {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown", "message": "Kubelet stopped posting node status.",
         "lastHeartbeatTime": TIMES[0], "lastTransitionTime": TIMES[1]}]
    whole["status"]["images"] = [{"names": ["registry/image:1"], "sizeBytes": 1}]
    assert watched_node(whole) == {
        "metadata": {"name": "a", "labels": {"kubernetes.io/hostname": "a", ZONE: "z1"}},
        "spec": {"taints": [{"key": UNREACHABLE_TAINT, "effect": "NoExecute", "timeAdded": TIMES[0]}]},
        "status": {"allocatable": {GPU: "8"},
                   "conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                                   "message": "Kubelet stopped posting node status.", "lastTransitionTime": TIMES[1]}]}}


def test_nodes_share_their_label_strings():
    first, second = (watched_node(as_listed(node(name, labels={ZONE: "us-central1-a"}))) for name in ("a", "b"))
    assert [id(key) for key in first["metadata"]["labels"]] == [id(key) for key in second["metadata"]["labels"]]
    assert first["metadata"]["labels"][ZONE] is second["metadata"]["labels"][ZONE]


@given(st.integers(0, 3), st.sampled_from(["Running", "Pending", "Succeeded", "Failed"]),
       st.sampled_from(["on", "pinned", "nowhere"]))
def test_a_kept_pod_is_its_claim_on_gpus(gpus, phase, where):
    builder = make_pod("p").uid("uid-p").gpus(gpus).phase(phase)
    pod = builder.obj() if where == "nowhere" else getattr(builder, where)("a").obj()
    assert GpuPodClaims(GPU)(as_listed(pod)) == pod_claim(pod, GPU)


def test_kept_pods_cost_a_small_constant_each_whatever_else_the_nodes_run():
    def held_bytes(gpu_pods, other_pods):
        kube = FakeKube([node(f"n{i}") for i in range(10)],
                        [*(make_pod(f"gpu-{i}").uid(f"uid-{i:08d}").on(f"n{i % 10}").gpus(1).obj() for i in range(gpu_pods)),
                         *(make_pod(f"other-{i}").uid(f"other-{i:08d}").on("n0").obj() for i in range(other_pods))])
        informer = Informer(kube, "Pod", keep=GpuPodClaims(GPU), clock=kube.clock)
        bodies = [json.dumps(page) for page, _ in kube.list_pages("Pod")]
        gc.collect()
        tracemalloc.start()
        try:  # the pages decoded as the client decodes them, then dropped: what stays is the store's
            kube.list_pages = lambda *_, **__: ((json.loads(body), "1") for body in bodies)
            informer.drive(0, lambda _: None)
            gc.collect()
            return tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()

    few, many = held_bytes(1_000, 0), held_bytes(5_000, 0)
    assert (many - few) / 4_000 < 400  # bytes per GPU pod: its key, uid, node and count
    assert held_bytes(1_000, 3_000) - few < 20_000  # other pods: nothing kept
