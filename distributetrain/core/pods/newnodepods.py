"""The pod of a share on a node the cluster adds (``core.placement.scaleup``): a job pod pinned to no
node, which an autoscaler adds a node for, placed like the job's other shares.

Pure, as ``manifests`` (which builds the job pod this makes unpinned).
"""

from __future__ import annotations

from dataclasses import dataclass

from distributetrain.core import names
from distributetrain.core.settings import JobSettings

# A preferred node affinity term's weight (1-100): each preference of a new node's share counts alike.
PREFERRED_WEIGHT = 100


@dataclass(frozen=True)
class NewNodePlace:
    """Where a share on a new node may go besides ``--node-selector`` (``scaleup.new_node_place``):
    ``required``, each label key with the values allowed; ``preferred``, terms of label
    values a node should have, in the order an autoscaler may drop them."""

    required: tuple[tuple[str, tuple[str, ...]], ...] = ()
    preferred: tuple[tuple[tuple[str, str], ...], ...] = ()


def awaiting_new_node(settings: JobSettings, pod: dict, place: NewNodePlace = NewNodePlace()) -> dict:
    """A job pod built with no node, for a node the cluster adds (``core.placement.scaleup``).

    Pinned to no node (none exists yet): an autoscaler adds one where the pod fits, as
    the job's node selector and ``place`` allow (a required affinity, which Karpenter and
    the cluster autoscaler both simulate; Karpenter tries the preferred terms too, and
    drops them in order where no node of its can have them). One share per node, as
    planned: a required anti-affinity against the job's other pods on
    ``kubernetes.io/hostname``, so the autoscaler adds a node per share and the scheduler
    never stacks two shares on one. Labelled as such (``names.LABEL_AWAITS_NEW_NODE``).
    """
    pod = {**pod, "metadata": {**pod["metadata"]}, "spec": {**pod["spec"]}}
    pod["metadata"]["labels"] = {**pod["metadata"]["labels"], names.LABEL_AWAITS_NEW_NODE: "true"}
    affinity: dict = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "labelSelector": {"matchLabels": {names.LABEL_JOB: settings.job_name,
                                          **({names.LABEL_OWNER_UID: settings.owner_uid} if settings.owner_uid
                                             else {})}},
        "topologyKey": names.HOSTNAME_LABEL}]}}
    required = [*((key, (value,)) for key, value in settings.node_selector), *place.required]
    node_affinity = {}
    if required:
        node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": [
            {"matchExpressions": [_label_in(key, values) for key, values in required]}]}
    if place.preferred:
        node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": PREFERRED_WEIGHT, "preference": {"matchExpressions": [_label_in(key, (value,))
                                                                             for key, value in term]}}
            for term in place.preferred]
    if node_affinity:
        affinity["nodeAffinity"] = node_affinity
    pod["spec"]["affinity"] = affinity
    return pod


def _label_in(key: str, values: tuple[str, ...]) -> dict:
    return {"key": key, "operator": "In", "values": list(values)}
