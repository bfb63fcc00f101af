"""The kinds the project reads and writes, each once: its API group, version and plural.

The API layer (``kube.client``) has the verbs (read, list, watch, create, update, patch,
delete, delete a collection) and this table has the kinds: a new kind is one line here,
not a method per verb. The client makes each kind's URL path from its row, so every kind
goes through the same request code, the typed client's classes or not (PodGroups, Kueue's kinds).
"""

from __future__ import annotations

from dataclasses import dataclass

KUEUE_GROUP = "kueue.x-k8s.io"


@dataclass(frozen=True)
class Resource:
    group: str  # "" for the core API
    version: str  # "" where it is the cluster's to say (Kueue's: ``kube.kueue``)
    plural: str
    namespaced: bool


RESOURCES: dict[str, Resource] = {
    "Pod": Resource("", "v1", "pods", True),
    "Node": Resource("", "v1", "nodes", False),
    "Namespace": Resource("", "v1", "namespaces", False),
    "Event": Resource("", "v1", "events", True),
    "Secret": Resource("", "v1", "secrets", True),
    "ConfigMap": Resource("", "v1", "configmaps", True),
    "ResourceQuota": Resource("", "v1", "resourcequotas", True),
    "PersistentVolumeClaim": Resource("", "v1", "persistentvolumeclaims", True),
    "PersistentVolume": Resource("", "v1", "persistentvolumes", False),
    "Job": Resource("batch", "v1", "jobs", True),
    "Lease": Resource("coordination.k8s.io", "v1", "leases", True),
    "NetworkPolicy": Resource("networking.k8s.io", "v1", "networkpolicies", True),
    "StorageClass": Resource("storage.k8s.io", "v1", "storageclasses", False),
    "RuntimeClass": Resource("node.k8s.io", "v1", "runtimeclasses", False),
    "DeviceClass": Resource("resource.k8s.io", "v1", "deviceclasses", False),
    "ResourceSlice": Resource("resource.k8s.io", "v1", "resourceslices", False),
    "ResourceClaim": Resource("resource.k8s.io", "v1", "resourceclaims", True),
    "ResourceClaimTemplate": Resource("resource.k8s.io", "v1", "resourceclaimtemplates", True),
    "PodGroup": Resource("scheduling.k8s.io", "v1beta1", "podgroups", True),
    "LocalQueue": Resource(KUEUE_GROUP, "", "localqueues", True),
    "ClusterQueue": Resource(KUEUE_GROUP, "", "clusterqueues", False),
    "ResourceFlavor": Resource(KUEUE_GROUP, "", "resourceflavors", False),
}
