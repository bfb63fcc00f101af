"""Where a job's PersistentVolumeClaims can be mounted, and by how many pods: read as the
scheduler and the attach-detach controller read them (Kubernetes 1.34).

A pod pinned to a node where its claim cannot be mounted never starts. So the plan takes
only nodes every claim of the job allows (``JobClaims.refusal``, as ``--node-selector``),
and only as many of them as the claims' access modes let mount it (``candidates``):

- **Nodes.** A claim bound to a PersistentVolume (``spec.volumeName``) is mounted where
  the PV's ``spec.nodeAffinity.required`` node selector terms allow (VolumeBinding:
  a zonal disk's zone, a local volume's node; matched on the node's labels alone, as
  ``CheckNodeAffinity`` does, so ``matchFields`` never refuse a node), and where its
  zone and region labels (``topology.kubernetes.io/zone``, ``failure-domain.beta...``,
  several values joined by ``__``) match a node that has such labels at all (VolumeZone).
  An unbound claim of a ``WaitForFirstConsumer`` class is provisioned where its first pod
  goes: on nodes the class's ``allowedTopologies`` allow, or, once the scheduler chose
  one (annotation ``volume.kubernetes.io/selected-node``), there only. A class without a
  provisioner (``kubernetes.io/no-provisioner``: local volumes made by hand) binds
  whichever matching PV the scheduler finds on the node; knowing which nodes have one
  would take a list of every PV, so such a claim restricts nothing until it is bound.
- **Binding.** An unbound claim of an ``Immediate`` class (or of none, or of a class
  that does not exist) holds every pod of it back until it is bound ("pod has unbound
  immediate PersistentVolumeClaims"): the job waits for that (``pending``).
- **How many.** ``ReadWriteOncePod`` on the claim: one pod of the cluster at a time
  (VolumeRestrictions). A volume whose PV allows neither ``ReadWriteMany`` nor
  ``ReadOnlyMany`` is attached to one node at a time (the attach-detach controller's
  ``IsMultiAttachAllowed``; a pod on a second node waits in "Multi-Attach error" and
  the scheduler does not see it): every pod of the job on one node, and, while another
  pod mounts it, on that pod's node (``ClaimUse``).
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

READ_WRITE_ONCE = "ReadWriteOnce"
READ_WRITE_ONCE_POD = "ReadWriteOncePod"
MANY_NODES = ("ReadWriteMany", "ReadOnlyMany")  # modes that let several nodes attach the volume
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
NO_PROVISIONER = ("", "kubernetes.io/no-provisioner")
CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"  # read before spec.storageClassName
SELECTED_NODE_ANNOTATION = "volume.kubernetes.io/selected-node"
HOSTNAME_LABEL = "kubernetes.io/hostname"
# VolumeZone's labels of a PV, and the label a node may carry instead of a beta one.
ZONE_LABELS = {"failure-domain.beta.kubernetes.io/zone": "topology.kubernetes.io/zone",
               "failure-domain.beta.kubernetes.io/region": "topology.kubernetes.io/region",
               "topology.kubernetes.io/zone": "topology.kubernetes.io/zone",
               "topology.kubernetes.io/region": "topology.kubernetes.io/region"}
ZONE_DELIMITER = "__"
CANNOT_MOUNT = "cannot mount claim"  # how a node's refusal by a claim begins
# An object the manager may not read (no RBAC rule for it): nothing is known of it.
UNREAD: Mapping = types.MappingProxyType({})


class Unusable(ValueError):
    """A claim no pod can ever mount as it is (bad input)."""


@dataclass(frozen=True)
class Requirement:
    """One node selector requirement on a node's labels."""

    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist, Gt, Lt
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """The label selector's rule (an operator it does not know matches nothing)."""
        value = labels.get(self.key)
        if self.operator == "In":
            return value is not None and value in self.values
        if self.operator == "NotIn":
            return value is None or value not in self.values
        if self.operator in ("Exists", "DoesNotExist"):
            return (value is not None) == (self.operator == "Exists")
        if self.operator in ("Gt", "Lt") and len(self.values) == 1:
            try:
                have, bound = int(value or ""), int(self.values[0])
            except ValueError:
                return False
            return have > bound if self.operator == "Gt" else have < bound
        return False

    def __str__(self) -> str:
        return f"{self.key} {self.operator}" + (f" {','.join(self.values)}" if self.values else "")


Term = tuple[Requirement, ...]  # all of them (a term with none matches no node)


@dataclass(frozen=True)
class Claim:
    """What one claim allows, read from it, its PersistentVolume and its StorageClass."""

    name: str
    terms: tuple[Term, ...] | None = None  # ORed; None: any node
    zones: tuple[tuple[str, frozenset[str]], ...] = ()  # VolumeZone: a PV label and the values it allows
    node_name: str = ""  # the one node it can be provisioned on (the scheduler's choice)
    where: str = ""  # what restricts its nodes, for messages
    modes: tuple[str, ...] = ()  # its volume's access modes (the claim's own until it is bound)
    one_pod: bool = False  # ReadWriteOncePod
    pending: str = ""  # why no pod of it can be scheduled yet ("": none)

    @property
    def one_node(self) -> bool:
        """Attached to one node at a time (``IsMultiAttachAllowed``: no mode says otherwise)."""
        return self.one_pod or (bool(self.modes) and not set(self.modes) & set(MANY_NODES))

    @property
    def mode(self) -> str:
        return READ_WRITE_ONCE_POD if self.one_pod else READ_WRITE_ONCE

    @property
    def pins_nodes(self) -> bool:
        """Only named nodes can ever mount it (a local volume's, a chosen one): never a new one."""
        return bool(self.node_name) or (self.terms is not None and all(
            any(r.key == HOSTNAME_LABEL and r.operator == "In" for r in term) for term in self.terms))

    def refusal(self, node: Mapping) -> str | None:
        """Why a pod of it cannot go to ``node``; None if it can."""
        metadata = node.get("metadata") or {}
        labels = metadata.get("labels") or {}
        allowed = (not self.node_name or metadata.get("name") == self.node_name) and (
            self.terms is None or any(term and all(r.matches(labels) for r in term) for term in self.terms)) and (
            _in_zones(self.zones, labels))
        return None if allowed else f"{CANNOT_MOUNT} {self.name} ({self.where})"


def _in_zones(zones: tuple[tuple[str, frozenset[str]], ...], labels: Mapping[str, str]) -> bool:
    """VolumeZone: a node without any zone or region label takes any volume (one zone)."""
    if not zones or not any(key in labels for key in ZONE_LABELS):
        return True
    return all(labels.get(key, labels.get(ZONE_LABELS[key])) in values for key, values in zones)


@dataclass(frozen=True)
class ClaimUse:
    """A pod that mounts a claim now, and its node (bound, or pinned on its way there)."""

    claim: str
    pod: str
    node: str


def read_claim(name: str, pvc: Mapping | None, pv: Mapping | None = UNREAD,
               storage_class: Mapping | None = UNREAD) -> Claim:
    """The claim ``name`` as the scheduler reads it. ``pv`` is its volume (None: absent),
    ``storage_class`` its class (None: absent); ``UNREAD`` where they could not be read.
    ``Unusable`` if no pod could ever mount it as it is; ``LookupError`` if it does not exist."""
    if pvc is None:
        raise LookupError(name)
    metadata, spec, status = pvc.get("metadata") or {}, pvc.get("spec") or {}, pvc.get("status") or {}
    if metadata.get("deletionTimestamp"):
        raise Unusable(f"claim {name} is being deleted")
    one_pod = READ_WRITE_ONCE_POD in (spec.get("accessModes") or ())
    volume = spec.get("volumeName") or ""
    if volume:
        if status.get("phase") == "Lost" or pv is None:
            raise Unusable(f"claim {name} is bound to PersistentVolume {volume}, which does not exist")
        bound = status.get("phase") == "Bound"
        modes = tuple((pv.get("spec") or {}).get("accessModes") or status.get("accessModes")
                      or spec.get("accessModes") or ())
        return Claim(name, **_volume_nodes(volume, pv), modes=modes, one_pod=one_pod,
                     pending="" if bound else f"claim {name} is not bound to PersistentVolume {volume} yet")
    modes = tuple(spec.get("accessModes") or ())
    return Claim(name, **_unbound_nodes(name, pvc, storage_class), modes=modes, one_pod=one_pod)


def _volume_nodes(volume: str, pv: Mapping) -> dict:
    """A bound claim's nodes: its PV's node affinity and zone labels."""
    required = ((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required")
    terms = None if required is None else tuple(
        tuple(_requirement(r) for r in term.get("matchExpressions") or ())
        for term in required.get("nodeSelectorTerms") or ()
        # A term of matchFields alone matches every node: they are not read here.
        if term.get("matchExpressions") or term.get("matchFields"))
    terms = None if terms is not None and any(not term for term in terms) else terms
    labels = (pv.get("metadata") or {}).get("labels") or {}
    zones = tuple((key, values) for key in ZONE_LABELS if (values := _zone_values(labels.get(key))))
    said = (["node affinity"] if terms is not None else []) + (
        [f"labels {', '.join(f'{key}={labels[key]}' for key, _ in zones)}"] if zones else [])
    return dict(terms=terms, zones=zones, where=f"PersistentVolume {volume}'s {' and '.join(said)}") if said else {}


def _zone_values(label: str | None) -> frozenset[str]:
    """A PV's zone label as VolumeZone reads it: values joined by ``__``; one empty value
    and the label is ignored (none returned)."""
    values = [value.strip() for value in (label or "").split(ZONE_DELIMITER)]
    return frozenset(values) if label and all(values) else frozenset()


def _requirement(expression: Mapping) -> Requirement:
    return Requirement(expression.get("key", ""), expression.get("operator", ""),
                       tuple(expression.get("values") or ()))


def class_of(pvc: Mapping) -> str:
    """The claim's StorageClass ("": none), the beta annotation first, as the scheduler reads it."""
    annotations = (pvc.get("metadata") or {}).get("annotations") or {}
    return annotations.get(CLASS_ANNOTATION, (pvc.get("spec") or {}).get("storageClassName") or "")


def _unbound_nodes(name: str, pvc: Mapping, storage_class: Mapping | None) -> dict:
    """An unbound claim's nodes: where its class would provision it, or why it waits."""
    annotations = (pvc.get("metadata") or {}).get("annotations") or {}
    class_name = class_of(pvc)
    if storage_class is UNREAD and class_name:
        return {}  # its class unknown: nothing to go by
    if not class_name or storage_class is None or storage_class.get("volumeBindingMode") != WAIT_FOR_FIRST_CONSUMER:
        why = (f"StorageClass {class_name} binds it at once" if storage_class else
               f"StorageClass {class_name} does not exist" if class_name else "it names no StorageClass")
        return dict(pending=f"claim {name} is not bound to a volume ({why}): no pod of it is scheduled until then")
    if selected := annotations.get(SELECTED_NODE_ANNOTATION):
        return dict(node_name=selected, where=f"being provisioned for node {selected}")
    if storage_class.get("provisioner", "") in NO_PROVISIONER:
        return {}
    topologies = storage_class.get("allowedTopologies") or ()
    if not topologies:
        return {}
    terms = tuple(tuple(Requirement(e.get("key", ""), "In", tuple(e.get("values") or ()))
                        for e in term.get("matchLabelExpressions") or ()) for term in topologies)
    return dict(terms=terms, where=f"StorageClass {class_name}'s allowedTopologies")


def mounted_claims(pod: Mapping) -> set[str]:
    """The claims a pod's volumes name."""
    return {(volume.get("persistentVolumeClaim") or {}).get("claimName", "")
            for volume in (pod.get("spec") or {}).get("volumes") or ()} - {""}


def mounts_now(pod: Mapping) -> bool:
    """Whether a pod keeps its volumes attached: not finished, and not on its way out (a pod
    being deleted lets them go within its grace period)."""
    return ((pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            and not (pod.get("metadata") or {}).get("deletionTimestamp"))


@dataclass(frozen=True)
class JobClaims:
    """What the claims of a job of ``gpus`` GPUs allow: nodes, and how many of them now."""

    claims: tuple[Claim, ...] = ()
    gpus: int = 0
    uses: tuple[ClaimUse, ...] = ()  # pods mounting its one-node claims now

    def refusal(self, node: Mapping) -> str | None:
        """The first claim that cannot be mounted on ``node``, and why; None if all can."""
        return next(filter(None, (claim.refusal(node) for claim in self.claims)), None)

    @property
    def one_node(self) -> Claim | None:
        """A claim that puts every pod of the job on one node."""
        return next((claim for claim in self.claims if claim.one_node), None)

    @property
    def one_pod(self) -> Claim | None:
        return next((claim for claim in self.claims if claim.one_pod), None)

    @property
    def pinned(self) -> Claim | None:
        """A claim no node the cluster adds could ever mount."""
        return next((claim for claim in self.claims if claim.pins_nodes), None)

    def new_nodes_may_mount(self) -> bool:
        """Whether a node the cluster adds now could take the job's pods: no claim names
        its nodes, and no one-node claim is mounted on a running node."""
        return self.pinned is None and not self.uses

    def lasting(self) -> JobClaims:
        """Without who mounts the claims now: what holds for as long as the claims do."""
        return JobClaims(self.claims, self.gpus)

    def candidates(self, free: Mapping[str, int]) -> dict[str, int]:
        """Of the GPUs free (or usable) per node, those the job's pods may take: where a
        one-node claim is mounted now, there only (nowhere while a ReadWriteOncePod claim
        is); else, with a one-node claim, only on nodes that hold the whole job."""
        if any(claim.one_pod for claim in self._used()):
            return {}
        nodes = self._mounted_on()
        if nodes is not None:
            return {node: gpus for node, gpus in free.items() if node in nodes}
        if self.one_node:
            return {node: gpus for node, gpus in free.items() if gpus >= self.gpus}
        return dict(free)

    def _used(self) -> list[Claim]:
        used = {use.claim for use in self.uses}
        return [claim for claim in self.claims if claim.name in used]

    def _mounted_on(self) -> set[str] | None:
        """The nodes where every one-node claim in use is mounted now (None: none is in use)."""
        nodes = None
        for claim in self._used():
            here = {use.node for use in self.uses if use.claim == claim.name}
            nodes = here if nodes is None else nodes & here
        return nodes

    def restrictions(self) -> list[str]:
        """Why ``candidates`` leaves nodes out, for the reasons a job waits."""
        said = []
        for claim in self._used():
            pods = sorted({f"{use.pod} on {use.node}" for use in self.uses if use.claim == claim.name})
            goes = "no pod of the job until it ends" if claim.one_pod else "the job's pods go there only"
            said.append(f"claim {claim.name} ({claim.mode}) is mounted by {', '.join(pods)}: {goes}")
        if not said and (claim := self.one_node):
            said.append(f"claim {claim.name} is {claim.mode}: only a node with all {self.gpus} GPUs free takes the job")
        return said


def job_claims(claims: Iterable[Claim], gpus: int, uses: Iterable[ClaimUse] = ()) -> JobClaims:
    """The claims of a job, with the pods that mount its one-node ones now."""
    claims = tuple(claims)
    one_node = {claim.name for claim in claims if claim.one_node}
    return JobClaims(claims, gpus, tuple(use for use in uses if use.claim in one_node))
