"""Where Kueue lets a queued job's pods run: the nodes of its queue's flavors, and at
admission each pod's own.

Kueue admits a pod group into a ResourceFlavor of its ClusterQueue and, as it removes its
gate, writes the flavor's ``nodeLabels`` into each pod's ``nodeSelector`` and adds the
flavor's ``tolerations`` (Kueue v0.19.2: ``pkg/podset.FromAssignment`` and ``Merge``, called
by the pod integration's ``prepare``). Under Topology Aware Scheduling (a flavor with a
``topologyName``) it also gates each pod with ``kueue.x-k8s.io/topology`` until its
topology ungater has added the pod's domain to its ``nodeSelector``: one label per level
of the Topology, down to one node where the lowest level is ``kubernetes.io/hostname``
(``pkg/controller/tas/topology_ungater.go``). The manager then pins each pod by its node's
name, which the scheduler ANDs with that ``nodeSelector``: so it chooses each pod's node
among those the pod's selector and tolerations allow (``NodeRule``), and plans the pods'
GPU shares, before admission, on the nodes of the queue's flavors.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from distributetrain.core.placement.inventory import BLOCKING_TAINT_EFFECTS, NodeGpus, tolerates

# What a pod under TAS carries (Kueue's apis/kueue/v1beta2/topology_types.go): Kueue adds
# the unconstrained one to a pod it gives a domain without being asked for a level (the
# job's pods ask for none); the others a user would set.
TOPOLOGY_ANNOTATIONS = ("kueue.x-k8s.io/podset-unconstrained-topology", "kueue.x-k8s.io/podset-required-topology",
                        "kueue.x-k8s.io/podset-preferred-topology")


@dataclass(frozen=True)
class NodeRule:
    """The nodes a pod may run on, as Kueue sets it: the labels its ``nodeSelector`` asks
    for, and the taints its tolerations tolerate."""

    labels: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Mapping, ...] = field(default=(), hash=False)
    topology: bool = False  # Kueue's topology assignment chose the pod's domain (it may pack pods on a node)

    def allows(self, node: NodeGpus) -> bool:
        if any(node.labels.get(key) != value for key, value in self.labels):
            return False
        return all(taint.get("effect") not in BLOCKING_TAINT_EFFECTS or tolerates(self.tolerations, taint)
                   for taint in node.taints)

    def __str__(self) -> str:
        return ",".join(f"{key}={value}" for key, value in self.labels) or "any node"


def pod_rule(pod: Mapping) -> NodeRule:
    """Where an admitted pod may run: its ``nodeSelector`` and tolerations as Kueue left them."""
    spec, annotations = pod.get("spec") or {}, (pod.get("metadata") or {}).get("annotations") or {}
    return NodeRule(tuple(sorted((spec.get("nodeSelector") or {}).items())), tuple(spec.get("tolerations") or ()),
                    any(key in annotations for key in TOPOLOGY_ANNOTATIONS))


def flavor_rule(flavor: Mapping, pod_tolerations: Iterable[Mapping]) -> NodeRule:
    """Where a pod with ``pod_tolerations`` may run once admitted into ``flavor`` (a
    ResourceFlavor): the flavor's ``nodeLabels``, its tolerations added to the pod's."""
    spec = flavor.get("spec") or {}
    return NodeRule(tuple(sorted((spec.get("nodeLabels") or {}).items())),
                    (*pod_tolerations, *(spec.get("tolerations") or ())))


def gpu_flavors(cluster_queue: Mapping, resource: str) -> list[str]:
    """The flavors a ClusterQueue admits ``resource`` into, in the order Kueue tries them."""
    groups = ((cluster_queue.get("spec") or {}).get("resourceGroups")) or ()
    return [flavor["name"] for group in groups if resource in (group.get("coveredResources") or ())
            for flavor in group.get("flavors") or () if flavor.get("name")]


def tolerations_beyond(rules: Iterable[NodeRule], own: Sequence[Mapping]) -> tuple[Mapping, ...]:
    """The tolerations ``rules`` add to the job's ``own``, each once: what an inventory of
    every node a rule may allow must tolerate."""
    extra: list[Mapping] = []
    for rule in rules:
        extra.extend(t for t in rule.tolerations if t not in own and t not in extra)
    return tuple(extra)


def allowed(free: Mapping[str, int], nodes: Mapping[str, NodeGpus], rule: NodeRule) -> dict[str, int]:
    """``free`` (GPUs by candidate node) on the nodes ``rule`` allows."""
    return {name: gpus for name, gpus in free.items() if rule.allows(nodes[name])}
