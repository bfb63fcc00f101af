"""What the manager's informers keep of each object: the fields their readers read, no more.

A manager that waits or runs an elastic job follows every Node of the cluster and every
pod that holds GPUs (``manager.placement.freegpus``, ``manager.watching.nodewatch``). Whole objects there
would grow the manager with the cluster (a real Node is 10-20 KB of JSON: images,
addresses, conditions, managed fields), so each informer keeps a projection:

- ``watched_node``, for the one Node informer the free GPUs and the node watch share: the
  inventory's cut (``clusterview.slim_node``: labels, taints, unschedulable, the Ready
  condition, allocatable) and the Ready condition's ``lastTransitionTime``, which the node
  watch reads to tell one not-Ready spell from the next. Labels are kept whole: job flags
  (``--node-selector``, ``--topology``), a Kueue flavor's node labels and a volume's node
  affinity name any key. Their strings are interned: every node repeats the same keys
  and most values, so a label costs a pointer, not a string, per node.
- ``GpuPodClaims``, for the pods: ``inventory.pod_claim``, a pod's uid, node and GPUs;
  None (not kept) for the many pods that hold none.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass

from distributetrain.core.placement.clusterview import slim_node
from distributetrain.core.placement.inventory import PodClaim, pod_claim

READY_KEPT = ("type", "status", "reason", "message", "lastTransitionTime")


def _interned(strings: Mapping[str, str]) -> dict[str, str]:
    return {sys.intern(key): sys.intern(value) if isinstance(value, str) else value for key, value in strings.items()}


def watched_node(node: Mapping) -> dict:
    """A Node cut to what the inventory and the node watch read of it (``slim_node``'s form)."""
    kept = slim_node(node)
    conditions = (node.get("status") or {}).get("conditions") or ()
    kept["status"]["conditions"] = [{key: condition[key] for key in READY_KEPT if condition.get(key)}
                                    for condition in conditions if condition.get("type") == "Ready"]
    kept["metadata"]["labels"] = _interned(kept["metadata"]["labels"])
    kept["status"]["allocatable"] = _interned(kept["status"]["allocatable"])
    if "taints" in kept["spec"]:
        kept["spec"]["taints"] = [_interned(taint) for taint in kept["spec"]["taints"]]
    return kept


@dataclass(frozen=True)
class GpuPodClaims:
    """What the GPU pods' informer keeps of a pod: its claim on ``resource`` (None: not kept).
    Equal for equal resources, so managers' informers of the same pods are one (``kube.sharedinformers``)."""

    resource: str

    def __call__(self, pod: Mapping) -> PodClaim | None:
        claim = pod_claim(pod, self.resource)
        return None if claim is None else PodClaim(claim.uid, sys.intern(claim.node), claim.gpus)
