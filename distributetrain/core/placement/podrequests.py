"""What a pod asks of its node, counted as the scheduler's NodeResourcesFit counts it.

A node takes a pod only if every resource the pod requests fits what is left of the
node's allocatable: its GPUs, but also its CPU, memory, ephemeral storage and pod slots.
Counting GPUs alone planned workers on nodes whose CPU other pods held, where they stayed
Pending ("Insufficient cpu") until the job timed out. So every pod's request is read by
the scheduler's rule: the larger of its containers (with sidecars) and its init
containers' peak, plus the pod's overhead; a pod-level request, where set, instead of
its containers'.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from decimal import InvalidOperation

from kubernetes.utils.quantity import parse_quantity

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"
# What NodeResourcesFit checks besides extended resources (GPUs). CPU in millicores,
# memory and ephemeral storage in bytes, pods in pods: whole numbers all.
FIT_RESOURCES = (CPU, MEMORY, EPHEMERAL_STORAGE, PODS)
NODE_RESOURCES = (CPU, MEMORY, EPHEMERAL_STORAGE)  # those a pod requests by amount (a pod is one slot)

Amounts = dict[str, int]  # resource -> amount in its whole unit (millicores for cpu)


@functools.lru_cache(maxsize=4096)  # a cluster's pods repeat a few quantities ("100m", "128Mi") many times
def amount(resource: str, quantity: object) -> int:
    """A quantity of ``resource`` in whole units, rounded up as the scheduler rounds it:
    millicores for cpu ("1.5" is 1500), bytes or devices otherwise ("4000m" GPUs are 4)."""
    try:
        value = parse_quantity(quantity)
    except (ValueError, InvalidOperation, TypeError) as e:
        raise ValueError(f"not a resource quantity: {quantity!r}") from e
    if value < 0:
        raise ValueError(f"negative resource quantity: {quantity!r}")
    if resource == CPU:
        value *= 1000
    return int(value.to_integral_value(rounding="ROUND_CEILING"))


def _declared(owner: Mapping) -> Mapping[str, object]:
    """What a container (or a pod's own ``resources``) requests, by resource. A request
    left out defaults to its limit (the API server's defaulting, per resource)."""
    resources = owner.get("resources")
    if not resources:
        return {}
    limits, requests = resources.get("limits"), resources.get("requests")
    if not limits:
        return requests or {}
    return {**limits, **requests} if requests else limits


def pod_amounts(spec: Mapping, resources: Iterable[str]) -> Amounts:
    """Effective requests of a pod, by the Kubernetes rule (sidecar init containers
    included), for each of ``resources`` at once: an inventory folds every pod of the
    cluster, so its containers are read once, not once per resource."""
    overhead = spec.get("overhead") or {}
    pod_level = _declared(spec)  # PodLevelResources: the pod's own request wins
    app = [_declared(c) for c in spec.get("containers") or ()]
    inits = [(_declared(c), c.get("restartPolicy") == "Always") for c in spec.get("initContainers") or ()]
    amounts = {}
    for resource in resources:
        extra = amount(resource, overhead[resource]) if resource in overhead else 0
        if resource in pod_level:
            amounts[resource] = amount(resource, pod_level[resource]) + extra
            continue
        total = sum(amount(resource, declared[resource]) for declared in app if resource in declared)
        sidecars = init_peak = 0
        for declared, sidecar in inits:
            request = amount(resource, declared[resource]) if resource in declared else 0
            if sidecar:  # a sidecar keeps running beside the app
                sidecars += request
                init_peak = max(init_peak, sidecars)
            else:
                init_peak = max(init_peak, sidecars + request)
        amounts[resource] = max(total + sidecars, init_peak) + extra
    return amounts


def requested_resources(spec: Mapping) -> set[str]:
    """Every resource a pod requests or limits, in any container, or as overhead."""
    owners = [spec, *(spec.get("containers") or ()), *(spec.get("initContainers") or ())]
    named = {resource for owner in owners for resource in _declared(owner)}
    return named | set(spec.get("overhead") or {})


def pod_request(spec: Mapping, resource: str) -> int:
    """Effective request of a pod for one resource (``pod_amounts``)."""
    return pod_amounts(spec, (resource,))[resource]


def pod_requests(spec: Mapping) -> Amounts:
    """What a pod takes of its node's FIT_RESOURCES: its requests, and one pod slot."""
    return {**pod_amounts(spec, NODE_RESOURCES), PODS: 1}


def node_allocatable(status: Mapping) -> Amounts:
    """A node's allocatable FIT_RESOURCES. A resource it does not report is left out, and
    so not a limit: every kubelet reports all four, but hand-made Node objects (tests,
    simulators) may carry only their GPUs, and the scheduler keeps the last word anyway."""
    allocatable = status.get("allocatable") or {}
    return {resource: amount(resource, allocatable[resource]) for resource in FIT_RESOURCES if resource in allocatable}
