"""Free GPUs per node, from the API's raw node and pod objects.

Fixes the seeds' inventory: allocatable (not capacity); only Ready, schedulable nodes
whose taints the job tolerates (job pods always tolerate the taint keyed by the GPU
resource, GKE's default on GPU node pools); nodes without the resource are simply not candidates;
every container and init container counted by the Kubernetes rule; terminal pods free
their GPUs. Pods are folded in one at a time (``GpuLedger.add_pod``) so a paginated
list of 150,000 pods never has to sit in memory.

Given the job's pods (``podfit.JobFit``), a node offers only as many GPUs as one pod of
the job with that share fits besides them: its CPU, memory, ephemeral storage and pod
slots left, as the scheduler counts them (``podrequests``), and on a node of shared GPU
units one rank of the job (``gpusharing``). Given its PersistentVolumeClaims
(``volumeclaims``), a node where a pod could not mount one of them is never a candidate,
as one the node selector leaves out, and GPUs are free only on the nodes the claims'
access modes allow now (the whole job on one node; where one is mounted, there).

A node whose GPUs a DRA driver publishes advertises none: its GPUs are its devices of the
job's DeviceClass (``dracounting``), given as ``dra``; a job's pod there claims its share
(``gpuclaims``) and says how many devices in a label, so it counts as requesting them.

Pods not yet bound but pinned to one node by required affinity (a job's workers and
chief between creation and binding) are counted too: the scheduler does not see their
claim yet, and two managers must not plan on the same GPUs. So are pods awaiting a node
the cluster adds (another manager's scale-up), on the node that joins for them, until
they are bound (``awaitingpods``). Accepted mid-upgrade: an earlier release's manager booked
its chief's share in an annotation alone (read no more) between creating workers and chief.
"""

from __future__ import annotations
import dataclasses
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from distributetrain.core.placement import awaitingpods
from distributetrain.core import names
from distributetrain.core.placement.dracounting import ClassSelector, pod_devices
from distributetrain.core.placement.gpusharing import SharedUnits, shared_units
from distributetrain.core.placement.podfit import SHARED, JobFit
from distributetrain.core.placement.podrequests import (FIT_RESOURCES, NODE_RESOURCES, PODS, amount, node_allocatable,
                                                        pod_amounts, pod_request)
from distributetrain.core.settings import gpu_toleration
from distributetrain.core.placement.topology import Level, Path, node_path
from distributetrain.core.placement.volumeclaims import JobClaims

TERMINAL_PHASES = ("Succeeded", "Failed")
# Terminal pods hold nothing: lists leave them out on the server (a cluster's finished
# pods can outnumber its running ones many times).
ACTIVE_PODS_SELECTOR = ",".join(f"status.phase!={phase}" for phase in TERMINAL_PHASES)
BLOCKING_TAINT_EFFECTS = ("NoSchedule", "NoExecute")
NOT_SELECTED = "does not match the node selector"
DEVICES = "devices"  # any extended resource: counted in whole units
MAX_NODES_NAMED = 10  # in messages: a large cluster's node list would drown the reason


def gpu_count(quantity: object) -> int:
    """A resource quantity as a whole number of devices ("4", "4000m" and 4 are 4):
    devices are indivisible, so a fractional request still occupies a whole one."""
    return amount(DEVICES, quantity)


def pinned_node(spec: Mapping) -> str | None:
    """The single node a pod's required affinity allows, if any: by the Node's name, as
    manifests pins, or by the kubernetes.io/hostname label, as older managers did.

    The old form is still read because its pods can outlive an upgrade: a job started by
    an older manager image runs on while new managers plan beside it, and its workers not
    yet bound hold GPUs the scheduler does not see. Such pods only ever named nodes whose
    hostname label equals their name (elsewhere they could never be scheduled).
    """
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or []
    if len(terms) != 1:
        return None
    selectors = [("metadata.name", r) for r in terms[0].get("matchFields") or ()] + [
        (names.HOSTNAME_LABEL, r) for r in terms[0].get("matchExpressions") or ()]
    for key, requirement in selectors:
        if requirement.get("key") == key and requirement.get("operator") == "In" and len(
                requirement.get("values") or ()) == 1:
            return requirement["values"][0]
    return None


def tolerates(tolerations: Iterable[Mapping], taint: Mapping) -> bool:
    """Kubernetes' toleration rule for one taint."""
    for toleration in tolerations:
        effect = toleration.get("effect")
        if effect and effect != taint.get("effect"):
            continue
        key = toleration.get("key")
        operator = toleration.get("operator") or "Equal"
        if not key and operator == "Exists":
            return True
        if key != taint.get("key"):
            continue
        if operator == "Exists" or toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


def node_not_ready(node: Mapping) -> str | None:
    """Why a node is not Ready ("NodeStatusUnknown: Kubelet stopped posting node status."), None if it is."""
    status = node.get("status") or {}
    ready = next((c for c in status.get("conditions") or () if c.get("type") == "Ready"), None)
    if ready and ready.get("status") == "True":
        return None
    if not ready:
        return "no Ready condition"
    why = ready.get("reason") or f"Ready={ready.get('status')}"
    message = ready.get("message") or ""
    return " ".join((f"{why}: {message}" if message else why).split())  # one line, for logs and annotations


def node_refusal(
    node: Mapping, resource: str, tolerations: Iterable[Mapping] = (), node_selector: Mapping[str, str] = {},
    dra_devices: int = 0,
) -> str | None:
    """Why a node cannot take the job's pods, or None if it can (``dra_devices``: as ``node_gpus``)."""
    metadata, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    labels = metadata.get("labels") or {}
    if any(labels.get(k) != v for k, v in node_selector.items()):
        return NOT_SELECTED
    if spec.get("unschedulable"):
        return "is cordoned"
    if node_not_ready(node) is not None:
        return "is not Ready"
    # What the job's pods carry (manifests use JobSettings.pod_tolerations, the same rule).
    tolerations = [gpu_toleration(resource), *tolerations]
    for taint in spec.get("taints") or ():
        if taint.get("effect") in BLOCKING_TAINT_EFFECTS and not tolerates(tolerations, taint):
            return f"has taint {taint.get('key')}:{taint.get('effect')} the job does not tolerate"
    if resource not in (status.get("allocatable") or {}) and not dra_devices:
        return f"has no {resource}"
    return None


@dataclass(frozen=True)
class NodeGpus:
    """What one node adds to a ``GpuLedger``: the rule applied once, kept by node name
    where a watch replaces one node's part at a time (``freegpus``)."""

    name: str
    gpus: int | None  # allocatable GPUs; None: the node does not advertise the resource
    selected: bool  # its labels match the job's node selector
    refusal: str | None  # why the job's pods cannot go there now; None: a candidate
    room: tuple[tuple[str, int], ...] = ()  # allocatable cpu, memory, ephemeral storage, pods (``podrequests``)
    shared: SharedUnits | None = None  # how its GPU units share devices (``gpusharing``); None: they do not
    unmountable: str | None = None  # which claim of the job no pod there can mount, and why
    dra: bool = False  # its GPUs are devices a DRA driver publishes: a pod claims them (``gpuclaims``)
    # Where a queued pod may go is Kueue's to say (``kueuenodes``): read against these.
    # Not compared: a label that changes (GFD's timestamp) changes no node's GPUs.
    labels: Mapping[str, str] = field(default_factory=dict, compare=False)
    taints: tuple[Mapping, ...] = field(default=(), compare=False)


def node_gpus(
    node: Mapping, resource: str, tolerations: Iterable[Mapping] = (), node_selector: Mapping[str, str] = {},
    volume_claims: JobClaims | None = None, dra_devices: int = 0,
) -> NodeGpus:
    """``dra_devices``: its devices of the job's DeviceClass, its GPUs if it advertises no ``resource``."""
    metadata = node["metadata"]
    amounts = (node.get("status") or {}).get("allocatable") or {}
    labels = metadata.get("labels") or {}
    gpus = gpu_count(amounts[resource]) if resource in amounts else None
    gpus = dra_devices if (dra := not gpus and dra_devices > 0) else gpus
    refusal = node_refusal(node, resource, tolerations, node_selector, dra_devices)
    # Never a candidate, whatever its state: said in place of a passing one (cordoned...).
    unmountable = (volume_claims.refusal(node) if volume_claims and refusal != NOT_SELECTED and gpus is not None
                   else None)
    return NodeGpus(
        name=metadata["name"],
        gpus=gpus,
        selected=all(labels.get(k) == v for k, v in node_selector.items()),
        refusal=unmountable or refusal,
        room=tuple(node_allocatable(node.get("status") or {}).items()),
        shared=None if dra else shared_units(labels, resource, gpus or 0),  # sharing labels: the device plugin's
        unmountable=unmountable,
        dra=dra,
        labels=labels,
        taints=tuple((node.get("spec") or {}).get("taints") or ()),
    )


@dataclass(frozen=True, slots=True)
class PodClaim:
    """The GPUs one pod holds on its node, bound or pinned. Slotted: a manager waiting for
    GPUs keeps one per GPU pod of the cluster (``freegpus``)."""

    uid: str
    node: str
    gpus: int


def pod_claim(pod: Mapping, resource: str) -> PodClaim | None:
    """What a pod claims, or None if nothing (finished, on no node yet, or no GPU)."""
    metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return None
    node = spec.get("nodeName") or pinned_node(spec)
    gpus = pod_request(spec, resource) + pod_devices(metadata.get("labels") or {}) if node else 0
    return PodClaim(metadata.get("uid", ""), node, gpus) if gpus else None


@dataclass
class GpuLedger:
    """Allocatable GPUs of candidate nodes, minus what pods hold; with a job's ``fit``,
    also each candidate's room besides GPUs, so ``free`` says what the job can use."""

    resource: str
    allocatable: dict[str, int] = field(default_factory=dict)
    used: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    refused: dict[str, str] = field(default_factory=dict)
    advertised: bool = False  # some node (candidate or not) has the resource at all
    # GPUs of every node the node selector (and the job's claims) allow, whatever its state:
    # cordoned, NotReady or tainted nodes may come back, so only a request beyond this is bad input.
    selectable: int = 0
    fit: JobFit | None = None  # the job's pods; None: GPUs alone count
    selected: dict[str, NodeGpus] = field(default_factory=dict)  # those nodes' parts, by name
    requested: dict[str, dict[str, int]] = field(default_factory=dict)  # by candidate node: what pods take besides GPUs
    own_nodes: set[str] = field(default_factory=set)  # candidates holding a pod of this run of the job
    levels: tuple[Level, ...] = ()  # the job's --topology: read each node's place in the network
    paths: dict[str, Path] = field(default_factory=dict)  # by node: its label values at each level
    volume_claims: JobClaims | None = None  # the job's PersistentVolumeClaims: which nodes, how many now
    unmountable: dict[str, NodeGpus] = field(default_factory=dict)  # selected nodes a claim refuses, by name
    device_class: ClassSelector | None = None  # the job's --device-class, if it exists: DRA GPUs count
    dra: dict[str, int] = field(default_factory=dict)  # by node: its devices of that class (set before its node)
    labels: dict[str, Mapping[str, str]] = field(default_factory=dict)  # by candidate node
    awaiting: list[awaitingpods.AwaitingPod] = field(default_factory=list)  # pods awaiting a new node
    # ``awaiting`` placed (``awaitingpods.place``) and ``free``'s answer, until a pod or node changes
    _placed: tuple | None = field(default=None, repr=False, compare=False)
    _free: dict[str, int] | None = field(default=None, repr=False, compare=False)

    def add_node(self, node: Mapping, tolerations: Iterable[Mapping] = (), node_selector: Mapping[str, str] = {}) -> None:
        metadata = node["metadata"]
        self.count_node(node_gpus(node, self.resource, tolerations, node_selector, self.volume_claims,
                                  self.dra.get(metadata["name"], 0)))
        if self.levels:
            self.paths[metadata["name"]] = node_path(metadata.get("labels") or {}, self.levels)
        if metadata["name"] in self.allocatable:
            self.labels[metadata["name"]] = metadata.get("labels") or {}

    def count_node(self, part: NodeGpus) -> None:
        self._placed = self._free = None
        if part.gpus is not None:
            self.advertised = True
            if part.selected and part.unmountable:
                self.unmountable[part.name] = part
            elif part.selected:
                self.selectable += part.gpus
                self.selected[part.name] = part
        if part.refusal:
            self.refused[part.name] = part.refusal
        else:
            self.allocatable[part.name] = part.gpus

    def add_pod(self, pod: Mapping) -> None:
        """Count what a bound or pinned pod holds (``pod_claim``): its GPUs on any node,
        and on candidates, with a ``fit``, what else it takes there (nodes are listed
        first); finished pods hold nothing. Every pod of the cluster passes here, so its
        spec is read once."""
        spec = pod.get("spec") or {}
        node = spec.get("nodeName") or pinned_node(spec)
        if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
            return
        self._placed = self._free = None
        if not node:
            if awaitingpods.awaits_new_node(pod):
                amounts = pod_amounts(spec, (self.resource, *NODE_RESOURCES))
                if gpus := amounts.pop(self.resource):
                    self.awaiting.append(awaitingpods.awaiting_pod(spec, gpus, {**amounts, PODS: 1}))
            return
        fits = self.fit is not None and node in self.allocatable
        amounts = pod_amounts(spec, (self.resource, *NODE_RESOURCES) if fits else (self.resource,))
        amounts[self.resource] += pod_devices((pod.get("metadata") or {}).get("labels") or {})
        self.add_usage(node, {**amounts, PODS: 1})
        if fits and self.fit.is_own((pod.get("metadata") or {}).get("labels") or {}):
            self.own_nodes.add(node)

    def add_usage(self, node: str, amounts: Mapping[str, int]) -> None:
        """What pods request of ``node``, by resource (``PODS``: how many they are)."""
        self._placed = self._free = None
        if gpus := amounts.get(self.resource, 0):
            self.used[node] += gpus
        if self.fit is None or node not in self.allocatable:
            return
        # A new dict, never one changed in place: copies of the ledger share them (``copy``).
        requested = self.requested.get(node, {})
        self.requested[node] = {resource: total for resource in FIT_RESOURCES
                                if (total := requested.get(resource, 0) + amounts.get(resource, 0))}

    def copy(self) -> GpuLedger:
        """The same nodes and pods, in a ledger of its own to add more pods to (the nodes'
        parts are shared: nothing changes them once listed)."""
        return dataclasses.replace(self, used=defaultdict(int, self.used), own_nodes=set(self.own_nodes),
                                   requested=dict(self.requested),
                                   awaiting=list(self.awaiting), _placed=None, _free=None)

    def forget_pods(self) -> None:
        """Back to the nodes alone, with no pod added."""
        self.used.clear()
        self.requested.clear()
        self.own_nodes.clear()
        self.awaiting.clear()
        self._placed = self._free = None

    def count_claim(self, claim: PodClaim) -> None:
        self._placed = self._free = None
        self.used[claim.node] += claim.gpus

    def _awaiting_on(self, node: str) -> tuple[int, Counter]:
        """The GPUs and requests of pods awaiting a new node that this candidate is about to take."""
        if not self.awaiting:
            return 0, Counter()
        if self._placed is None:
            free = {name: self.allocatable[name] - self.used.get(name, 0) for name in self.allocatable}
            self._placed = awaitingpods.place(self.awaiting, free, self.used, lambda name: self.labels.get(name, {}))
        taken, requested = self._placed
        return taken[node], requested.get(node, Counter())

    def usable(self, node: str) -> tuple[int, int, str | None]:
        """A candidate's free GPUs, how many of them one pod of the job can take, and what
        caps that (a resource, or ``podfit.SHARED``; None: nothing)."""
        awaiting_gpus, awaiting_requested = self._awaiting_on(node)
        gpus = max(0, self.allocatable[node] - self.used.get(node, 0) - awaiting_gpus)
        if self.fit is None:
            return gpus, gpus, None
        part, requested = self.selected[node], self.requested.get(node, {})
        room = {resource: left - requested.get(resource, 0) - awaiting_requested[resource]
                for resource, left in part.room}
        return (gpus, *self.fit.usable(gpus, room, part.shared, node in self.own_nodes))

    def free(self) -> dict[str, int]:
        """GPUs free per candidate node: with a ``fit``, as many as one pod of the job takes
        there; with ``volume_claims``, on the nodes their access modes allow now."""
        if self._free is None:
            self._free = self._claimable({node: self.usable(node)[1] for node in self.allocatable})
        return dict(self._free)

    def idle(self) -> dict[str, int]:
        """What each candidate would give the job with no other pod on it (``when_idle``)."""
        return self._claimable({node: self.when_idle(self.selected[node])[0] for node in self.allocatable})

    def _claimable(self, gpus: dict[str, int]) -> dict[str, int]:
        return self.volume_claims.candidates(gpus) if self.volume_claims else gpus

    def when_idle(self, part: NodeGpus) -> tuple[int, str | None]:
        """The most of a node's GPUs one pod of the job could ever take, and what caps it."""
        if self.fit is None:
            return part.gpus, None
        return self.fit.usable(part.gpus, dict(part.room), part.shared, False)

    def most_for_job(self) -> tuple[int, str | None]:
        """The most GPUs the job's pods could ever take on the nodes the selector allows,
        one pod per node, and what holds back the most of the rest (None: nothing)."""
        held_back: Counter = Counter()
        most = 0
        for part in self.selected.values():
            share, limit = self.when_idle(part)
            most += share
            if limit:
                held_back[limit] += part.gpus - share
        return most, (held_back.most_common(1)[0][0] if held_back else None)

    def dra_nodes(self) -> set[str]:
        """The nodes the selector allows whose GPUs come through DRA claims (``gpuclaims``)."""
        return {name for name, part in self.selected.items() if part.dra}

    def sharing(self) -> list[SharedUnits]:
        """How the GPUs of the nodes the selector allows are shared, each way once."""
        return list(dict.fromkeys(self.selected[name].shared for name in sorted(self.selected)
                                  if self.selected[name].shared))

    def _capped(self) -> list[str]:
        """Candidates with GPUs free that the job's pod cannot take all of, and why."""
        reasons = []
        for node in sorted(self.allocatable):
            gpus, share, limit = self.usable(node)
            if limit == SHARED:
                shared = self.selected[node].shared
                flag = "" if shared.one_per_container else " (--allow-shared-gpus)"
                reasons.append(f"{node} has {gpus} GPUs free but they are {shared.why}: "
                               f"{share} for one rank of the job{flag}")
            elif limit:
                reasons.append(f"{node} has {gpus} GPUs free but {limit} for {share}")
        return reasons

    def unavailable(self) -> str:
        """Why GPU nodes the job may use are not candidates now (cordoned, NotReady, a
        taint) or offer fewer GPUs than they have free (cpu, memory, shared GPUs), bounded;
        nodes it may never use (the selector, no GPUs) are only counted."""
        never = (NOT_SELECTED, f"has no {self.resource}")
        refused_now = [f"{node} {why}" for node, why in sorted(self.refused.items())
                       if why not in never and node not in self.unmountable]
        now = (self.volume_claims.restrictions() if self.volume_claims else []) + refused_now + self._capped()
        shown = now[:MAX_NODES_NAMED] + ([f"{len(now) - MAX_NODES_NAMED} more"] if len(now) > MAX_NODES_NAMED else [])
        others = len(self.refused) - len(refused_now)
        claims = ", cannot mount the job's claims" if self.unmountable else ""
        return "; ".join(shown or ["no node unavailable"]) + (
            f" ({others} other nodes are not selected{claims} or have no {self.resource})" if others else "")
