"""Free GPUs per node, from the API's raw node and pod objects.

Fixes the seeds' inventory: allocatable (not capacity); only Ready, schedulable nodes
whose taints the job tolerates (job pods always tolerate the taint keyed by the GPU
resource, GKE's default on GPU node pools); nodes without the resource are simply not candidates;
every container and init container counted by the Kubernetes rule; terminal pods free
their GPUs. Pods are folded in one at a time (``GpuLedger.add_pod``) so a paginated
list of 150,000 pods never has to sit in memory.

Pods not yet bound but pinned to one node by required affinity (a job's workers and
chief between creation and binding) are counted too: the scheduler does not see their
claim yet, and two managers must not plan on the same GPUs. Accepted mid-upgrade: a
manager of an earlier release booked its chief's share only in an annotation (read no
more) for the seconds between creating its workers and its chief.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import InvalidOperation

from kubernetes.utils.quantity import parse_quantity

from distributetrain.core import names
from distributetrain.core.settings import gpu_toleration

TERMINAL_PHASES = ("Succeeded", "Failed")
# Terminal pods hold nothing: lists leave them out on the server (a cluster's finished
# pods can outnumber its running ones many times).
ACTIVE_PODS_SELECTOR = ",".join(f"status.phase!={phase}" for phase in TERMINAL_PHASES)
BLOCKING_TAINT_EFFECTS = ("NoSchedule", "NoExecute")
NOT_SELECTED = "does not match the node selector"
MAX_NODES_NAMED = 10  # in messages: a large cluster's node list would drown the reason


def gpu_count(quantity: object) -> int:
    """A resource quantity as a whole number of devices ("4", "4000m" and 4 are 4)."""
    try:
        value = parse_quantity(quantity)
    except (ValueError, InvalidOperation, TypeError) as e:
        raise ValueError(f"not a resource quantity: {quantity!r}") from e
    if value < 0:
        raise ValueError(f"negative resource quantity: {quantity!r}")
    # Devices are indivisible: a fractional request still occupies a whole one.
    return int(value.to_integral_value(rounding="ROUND_CEILING"))


def _container_request(container: Mapping, resource: str) -> int:
    resources = container.get("resources") or {}
    # Extended resources may set only limits; the request then defaults to the limit.
    for kind in ("requests", "limits"):
        amounts = resources.get(kind) or {}
        if resource in amounts:
            return gpu_count(amounts[resource])
    return 0


def pod_request(spec: Mapping, resource: str) -> int:
    """Effective request of a pod, by the Kubernetes rule (sidecar init containers included)."""
    app = sum(_container_request(c, resource) for c in spec.get("containers") or ())
    sidecars = 0
    init_peak = 0
    for init in spec.get("initContainers") or ():
        request = _container_request(init, resource)
        if init.get("restartPolicy") == "Always":  # a sidecar keeps running beside the app
            sidecars += request
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, sidecars + request)
    overhead = gpu_count(((spec.get("overhead") or {}).get(resource, 0)))
    return max(app + sidecars, init_peak) + overhead


def pinned_node(spec: Mapping) -> str | None:
    """The single node a pod's required affinity allows, if any: by the Node's name, as
    manifests pins, or by the kubernetes.io/hostname label, as older managers did.

    The old form is still read because its pods can outlive an upgrade: a job started by
    an older manager image runs on while new managers plan beside it, and its workers not
    yet bound hold GPUs the scheduler does not see. Such pods only ever named nodes whose
    hostname label equals their name (elsewhere they could never be scheduled).
    """
    terms = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {})
        .get("nodeSelectorTerms")
    ) or []
    if len(terms) != 1:
        return None
    selectors = [("metadata.name", r) for r in terms[0].get("matchFields") or ()] + [
        (names.HOSTNAME_LABEL, r) for r in terms[0].get("matchExpressions") or ()]
    for key, requirement in selectors:
        if (
            requirement.get("key") == key
            and requirement.get("operator") == "In"
            and len(requirement.get("values") or ()) == 1
        ):
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
    node: Mapping, resource: str, tolerations: Iterable[Mapping] = (), node_selector: Mapping[str, str] = {}
) -> str | None:
    """Why a node cannot take the job's pods, or None if it can."""
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
    if resource not in (status.get("allocatable") or {}):
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


def node_gpus(
    node: Mapping, resource: str, tolerations: Iterable[Mapping] = (), node_selector: Mapping[str, str] = {}
) -> NodeGpus:
    metadata = node["metadata"]
    amounts = (node.get("status") or {}).get("allocatable") or {}
    labels = metadata.get("labels") or {}
    return NodeGpus(
        name=metadata["name"],
        gpus=gpu_count(amounts[resource]) if resource in amounts else None,
        selected=all(labels.get(k) == v for k, v in node_selector.items()),
        refusal=node_refusal(node, resource, tolerations, node_selector),
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
    gpus = pod_request(spec, resource) if node else 0
    return PodClaim(metadata.get("uid", ""), node, gpus) if gpus else None


@dataclass
class GpuLedger:
    """Allocatable GPUs of candidate nodes, minus what pods hold."""

    resource: str
    allocatable: dict[str, int] = field(default_factory=dict)
    used: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    refused: dict[str, str] = field(default_factory=dict)
    advertised: bool = False  # some node (candidate or not) has the resource at all
    # GPUs of every node the node selector allows, whatever its state: cordoned, NotReady
    # or tainted nodes may come back, so only a request beyond this is bad input.
    selectable: int = 0

    def add_node(self, node: Mapping, tolerations: Iterable[Mapping] = (), node_selector: Mapping[str, str] = {}) -> None:
        self.count_node(node_gpus(node, self.resource, tolerations, node_selector))

    def count_node(self, part: NodeGpus) -> None:
        if part.gpus is not None:
            self.advertised = True
            if part.selected:
                self.selectable += part.gpus
        if part.refusal:
            self.refused[part.name] = part.refusal
        else:
            self.allocatable[part.name] = part.gpus

    def add_pod(self, pod: Mapping) -> None:
        claim = pod_claim(pod, self.resource)
        if claim:
            self.count_claim(claim)

    def count_claim(self, claim: PodClaim) -> None:
        self.used[claim.node] += claim.gpus

    def unavailable(self) -> str:
        """Why GPU nodes the job may use are not candidates now (cordoned, NotReady, a
        taint), bounded; nodes it may never use (the selector, no GPUs) are only counted."""
        never = (NOT_SELECTED, f"has no {self.resource}")
        now = [f"{node} {why}" for node, why in sorted(self.refused.items()) if why not in never]
        shown = now[:MAX_NODES_NAMED] + ([f"{len(now) - MAX_NODES_NAMED} more"] if len(now) > MAX_NODES_NAMED else [])
        others = len(self.refused) - len(now)
        return "; ".join(shown or ["no node unavailable"]) + (
            f" ({others} other nodes are not selected or have no {self.resource})" if others else "")

    def free(self) -> dict[str, int]:
        return {node: max(0, count - self.used.get(node, 0)) for node, count in self.allocatable.items()}

