"""Scale-up: the part of a job that free GPUs cannot hold, on nodes the cluster adds.

An autoscaler (Karpenter, the cluster autoscaler, GKE's) adds nodes only for Pending
pods, so a job that waits for GPUs which running nodes do not have must create pods
for them: unpinned, each the size of a node the cluster can add (``--scale-up-node-gpus``),
one per new node (``newnodepods.awaiting_new_node``). The split stays on the fewest nodes
in all, running and new, and among those leaves the fewest GPUs stranded:

For ``m`` new nodes of ``N`` GPUs, the running nodes must hold at least ``gpus - m*N``;
``placement.plan`` puts exactly that on the fewest of them with the least stranded, so
trying each ``m`` from 0 to ``ceil(gpus / N)`` finds the best split exactly (no split with
``m`` new nodes needs fewer running nodes, or strands fewer GPUs). New nodes get whole
shares of ``N`` but the last; the chief takes the last, smallest share, as always. With a
required ``--topology`` level the running shares stay inside one domain of it (each
domain tried, the best split kept).

A new node must be like the running shares' nodes where it matters to the job
(``new_node_place``): in their zone and required topology domain, and of their GPU model,
so Horovod's ring neither crosses zones nor runs at the pace of a slower GPU.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence

from distributetrain.core.placement import awaitingpods, inventory, placement, podstate, topology
from distributetrain.core import names
from distributetrain.core.pods.newnodepods import NewNodePlace
from distributetrain.core.placement.placement import Plan
from distributetrain.core.settings import JobSettings, Level

NEW_NODE = names.NEW_NODE  # the node of a share no running node holds
ZONE_LABEL = "topology.kubernetes.io/zone"
# A node's GPU model as an autoscaler knows it before it launches the node (an instance
# type's or node pool's label), so a pod may require it: Karpenter on AWS labels
# karpenter.k8s.aws/instance-gpu-name (its well-known labels), GKE's node pools and
# node auto-provisioning cloud.google.com/gke-accelerator.
AUTOSCALER_GPU_MODEL_LABELS = ("karpenter.k8s.aws/instance-gpu-name", "cloud.google.com/gke-accelerator")
# GPU Feature Discovery's model label, written by a DaemonSet once the node runs: no
# autoscaler can promise it (Karpenter refuses a pod that requires a label no NodePool
# defines), so it is only preferred (the scheduler's choice among nodes that fit).
GFD_GPU_MODEL_LABEL = "nvidia.com/gpu.product"


def allowed(settings: JobSettings) -> bool:
    """Whether a shortage makes the cluster grow: the job may wait, and says how large a node the cluster adds."""
    return settings.scale_up_node_gpus > 0 and settings.wait_for_gpus_s > 0


def plan(free: Mapping[str, int], gpus: int, node_gpus: int, paths: Mapping[str, topology.Path] = {},
         levels: Sequence[Level] = ()) -> Plan:
    """``gpus`` split over running nodes' ``free`` GPUs and new nodes of ``node_gpus``
    (shares on ``NEW_NODE``): the fewest nodes in all, then the fewest GPUs stranded,
    then the fewest new nodes; the chief's share last. With a required level among
    ``levels``, the running shares inside one domain of it (``paths``: each node's)."""
    if node_gpus < 1:
        raise ValueError(f"a new node's GPUs must be at least 1, got {node_gpus}")
    if gpus < 1:
        raise ValueError(f"GPU count must be at least 1, got {gpus}")
    return min((_plan_within(group, gpus, node_gpus) for group in _required_domains(free, paths, levels)),
               key=lambda keyed: keyed[0])[1]


def _required_domains(free: Mapping[str, int], paths: Mapping[str, topology.Path],
                      levels: Sequence[Level]) -> list[dict[str, int]]:
    """``free`` by domain of the innermost required level (sorted, for ties), nodes whose
    place there is unknown left out; ``[free]`` when no level is required."""
    required = [index for index, level in enumerate(levels) if level.required]
    if not required:
        return [dict(free)]
    groups: dict[tuple, dict[str, int]] = {}
    for node, gpus in free.items():
        path = tuple(paths.get(node, ()))[: required[-1] + 1]
        if len(path) == required[-1] + 1 and None not in path:
            groups.setdefault(path, {})[node] = gpus
    return [groups[domain] for domain in sorted(groups)] or [{}]


def _plan_within(free: Mapping[str, int], gpus: int, node_gpus: int) -> tuple[tuple[int, int, int], Plan]:
    available = sum(f for f in free.values() if f > 0)
    best: tuple[tuple[int, int, int], Plan] | None = None
    for new_nodes in range(math.ceil(gpus / node_gpus) + 1):
        on_running = max(0, gpus - new_nodes * node_gpus)
        if on_running > available:
            continue
        running = placement.plan(free, on_running) if on_running else []
        stranded = sum(free[node] for node, _ in running) + new_nodes * node_gpus - gpus
        key = (len(running) + new_nodes, stranded, new_nodes)
        if best is None or key < best[0]:
            best = key, running + _new_node_shares(gpus - on_running, node_gpus)
    assert best is not None, "unreachable: new nodes alone always hold the request"
    return best[0], sorted(best[1], key=lambda share: (-share[1], share[0]))


def _new_node_shares(gpus: int, node_gpus: int) -> Plan:
    whole, rest = divmod(gpus, node_gpus)
    return [(NEW_NODE, node_gpus)] * whole + ([(NEW_NODE, rest)] if rest else [])


def new_node_shares(plan: Plan) -> int:
    """How many of a plan's shares wait for a node the cluster adds."""
    return sum(1 for node, _ in plan if node == NEW_NODE)


def new_node_place(plan: Plan, labels: Mapping[str, Mapping[str, str]], settings: JobSettings) -> NewNodePlace:
    """Like the nodes of the plan's running shares (``labels``: each node's): their zone,
    their domain at every required ``--topology`` level, their GPU model as autoscalers
    know it; preferred, the largest running share's domain at the other levels and GPU
    Feature Discovery's GPU model of most of their GPUs.
    Nothing when no share runs yet: the node selector alone says where nodes go."""
    running = [(labels.get(node) or {}, share) for node, share in plan if node != NEW_NODE]
    if not running:
        return NewNodePlace()
    levels = settings.topology
    required_down_to = max((index for index, level in enumerate(levels) if level.required), default=-1)
    must = [ZONE_LABEL, *(level.key for level in levels[: required_down_to + 1]), *AUTOSCALER_GPU_MODEL_LABELS]
    required = tuple((key, values) for key in dict.fromkeys(must) if (values := _values_of_all(running, key)))
    largest = running[0][0]  # the plan's shares are largest first: the domain of the largest running one
    domain = tuple((level.key, largest[level.key]) for level in levels[required_down_to + 1:] if level.key in largest)
    model = _most_gpus(running, GFD_GPU_MODEL_LABEL)
    # Karpenter relaxes preferences in order: GPU Feature Discovery's label, which no
    # NodePool defines, goes first; the network domain is kept longest.
    preferred = tuple(term for term in (((GFD_GPU_MODEL_LABEL, model),) if model else (), domain) if term)
    return NewNodePlace(required, preferred)


def _values_of_all(running: list[tuple[Mapping[str, str], int]], key: str) -> tuple[str, ...]:
    """The values of ``key`` on the running shares' nodes, sorted; none unless every one has it."""
    values = [node_labels.get(key) for node_labels, _ in running]
    return tuple(sorted(set(values))) if None not in values else ()


def _most_gpus(running: list[tuple[Mapping[str, str], int]], key: str) -> str | None:
    """The value of ``key`` on the nodes holding the most of the running GPUs (ties by value)."""
    held: Counter = Counter()
    for node_labels, share in running:
        if key in node_labels:
            held[node_labels[key]] += share
    return min(held, key=lambda value: (-held[value], value)) if held else None


def planned_node(pod: Mapping) -> str:
    """A job pod's node in its attempt's plan: pinned or bound, else ``NEW_NODE`` for one
    that waits for a node the cluster adds ("" for a queued pod, placed at admission)."""
    node = inventory.pinned_node(pod.get("spec") or {}) or podstate.node(pod)
    return node or (NEW_NODE if awaitingpods.awaits_new_node(pod) else "")
