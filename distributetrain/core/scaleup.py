"""Scale-up: the part of a job that free GPUs cannot hold, on nodes the cluster adds.

An autoscaler (Karpenter, the cluster autoscaler, GKE's) adds nodes only for Pending
pods, so a job that waits for GPUs which running nodes do not have must create pods
for them: unpinned, each the size of a node the cluster can add (``--scale-up-node-gpus``),
one per new node (``manifests.awaiting_new_node``). The split stays on the fewest nodes
in all, running and new, and among those leaves the fewest GPUs stranded:

For ``m`` new nodes of ``N`` GPUs, the running nodes must hold at least ``gpus - m*N``;
``placement.plan`` puts exactly that on the fewest of them with the least stranded, so
trying each ``m`` from 0 to ``ceil(gpus / N)`` finds the best split exactly (no split with
``m`` new nodes needs fewer running nodes, or strands fewer GPUs). New nodes get whole
shares of ``N`` but the last; the chief takes the last, smallest share, as always.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from distributetrain.core import inventory, names, placement, podstate
from distributetrain.core.placement import Plan
from distributetrain.core.settings import JobSettings

NEW_NODE = names.NEW_NODE  # the node of a share no running node holds


def allowed(settings: JobSettings) -> bool:
    """Whether a shortage makes the cluster grow: the job may wait, and says how large a node the cluster adds."""
    return settings.scale_up_node_gpus > 0 and settings.wait_for_gpus_s > 0


def plan(free: Mapping[str, int], gpus: int, node_gpus: int) -> Plan:
    """``gpus`` split over running nodes' ``free`` GPUs and new nodes of ``node_gpus``
    (shares on ``NEW_NODE``): the fewest nodes in all, then the fewest GPUs stranded,
    then the fewest new nodes; the chief's share last."""
    if node_gpus < 1:
        raise ValueError(f"a new node's GPUs must be at least 1, got {node_gpus}")
    if gpus < 1:
        raise ValueError(f"GPU count must be at least 1, got {gpus}")
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
    return sorted(best[1], key=lambda share: (-share[1], share[0]))


def _new_node_shares(gpus: int, node_gpus: int) -> Plan:
    whole, rest = divmod(gpus, node_gpus)
    return [(NEW_NODE, node_gpus)] * whole + ([(NEW_NODE, rest)] if rest else [])


def new_node_shares(plan: Plan) -> int:
    """How many of a plan's shares wait for a node the cluster adds."""
    return sum(1 for node, _ in plan if node == NEW_NODE)


def awaits_new_node(pod: Mapping) -> bool:
    """Whether a job pod was made for a node the cluster adds (``manifests.awaiting_new_node``)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return annotations.get(names.ANNOTATION_AWAITS_NEW_NODE) == "true"


def planned_node(pod: Mapping) -> str:
    """A job pod's node in its attempt's plan: pinned or bound, else ``NEW_NODE`` for one
    that waits for a node the cluster adds ("" for a queued pod, placed at admission)."""
    node = inventory.pinned_node(pod.get("spec") or {}) or podstate.node(pod)
    return node or (NEW_NODE if awaits_new_node(pod) else "")
