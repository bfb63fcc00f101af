"""The published survey gives a job the ledger an inventory of the objects themselves
would, bookings aside (kept as they are, for the ledger under the Lease), and survives
its encoding."""

import json
import zlib

from hypothesis import given
from hypothesis import strategies as st

from distributetrain.core import names
from distributetrain.core.placement.clusterview import ClusterView, slim_node
from distributetrain.core.placement.inventory import GpuLedger, node_gpus
from distributetrain.core.placement.podfit import JobFit, PodShape
from harness.builders import GPU, make_node
from unit.core.placement.test_inventory import ANY_POD

TAINTED = make_node("t").gpus(8).taint("dedicated").obj()
NODES = [make_node("a").gpus(8).allocatable({"cpu": "8", "memory": "64Gi", "pods": "3"}).labels({"pool": "x"}).obj(),
         make_node("b").gpus(4).labels({"pool": "x"}).obj(),
         make_node("off").gpus(8).ready(False).obj(), TAINTED,
         make_node("cpu-only").allocatable({"cpu": "64"}).obj()]
ROLES = st.sampled_from([None, names.ROLE_WORKER, names.ROLE_CHIEF, names.ROLE_MANAGER])


def with_role(pod: dict, role: str | None) -> dict:
    labels = dict(pod["metadata"]["labels"]) | ({names.LABEL_ROLE: role} if role else {})
    return pod | {"metadata": pod["metadata"] | {"labels": labels}}


def job_ledger() -> GpuLedger:
    return GpuLedger(GPU, fit=JobFit(PodShape({"cpu": 1000}, {"cpu": 500}), own_labels={"job": "j"}))


def view_of(pods) -> ClusterView:
    view = ClusterView(taken_at=1234.5)
    for node in NODES:
        view.add_node(node)
    for pod in pods:
        view.add_pod(pod)
    return view


def ledger_state(ledger: GpuLedger) -> tuple:
    return (ledger.free(), {n: g for n, g in ledger.used.items() if g}, ledger.requested, ledger.refused,
            ledger.selectable, ledger.advertised, ledger.unavailable())


@given(st.lists(st.tuples(ANY_POD, ROLES), max_size=8), st.sampled_from([{}, {"pool": "x"}]))
def test_a_job_s_ledger_from_the_view_is_its_inventory_of_every_pod_but_the_bookings(pods, selector):
    pods = [with_role(pod, role) for pod, role in pods]
    tolerations = [{"key": "dedicated", "operator": "Exists"}]
    direct = job_ledger()
    for node in NODES:
        direct.add_node(node, tolerations, selector)
    for pod in pods:
        if not names.is_booking(pod["metadata"]["labels"]):
            direct.add_pod(pod)
    view = view_of(pods)
    view.position = 7
    published = ClusterView.decode(view.encode())
    from_view = published.ledger(job_ledger(), tolerations, selector)
    assert ledger_state(from_view) == ledger_state(direct)
    assert published.taken_at == 1234.5
    # The unfinished bookings, whatever their node, and where the journal stood: for the ledger under the Lease.
    assert published.bookings == [pod for pod in pods if names.is_booking(pod["metadata"]["labels"])
                                  and pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")]
    assert published.position == 7


def test_a_node_cut_to_what_the_inventory_reads_is_read_the_same():
    node = make_node("n").gpus(8).taint("x", "NoExecute").cordoned().labels({"zone": "z1"}).obj()
    node["status"]["conditions"].append({"type": "MemoryPressure", "status": "False"})
    node["status"]["images"] = [{"names": ["big"], "sizeBytes": 1}]
    slim = slim_node(node)
    assert slim == {"metadata": {"name": "n", "labels": {"zone": "z1"}},
                    "spec": {"taints": [{"key": "x", "effect": "NoExecute"}], "unschedulable": True},
                    "status": {"allocatable": {GPU: "8"}, "conditions": [{"type": "Ready", "status": "True"}]}}
    assert node_gpus(slim, GPU) == node_gpus(node, GPU)


def test_anything_but_an_encoded_view_of_this_schema_reads_as_none():
    assert ClusterView.decode(b"not zlib") is None
    assert ClusterView.decode(zlib.compress(b"[1, 2]")) is None
    other = zlib.compress(json.dumps({"schema": 99, "takenAt": 0, "nodes": [], "usage": {}}).encode())
    assert ClusterView.decode(other) is None
