"""Pods waiting for a node the cluster adds (another manager's scale-up, ``core.placement.scaleup``),
counted on the node that joins for them.

Such a pod is pinned to no node and bound to none until the node its autoscaler launched
has joined, is Ready and untainted, and the scheduler's next try binds it: seconds, up to
the scheduler's backoff for a pod it failed before (10 s at most). Meanwhile the node
looks free to every other manager's inventory, which could plan its GPUs for itself; one
of the two pods would then wait for ever (or for its --worker-ready-timeout).

What shows which node a pod is for, before it is bound: Karpenter records a ``Nominated``
Event on the pod ("Pod should schedule on: nodeclaim/X, node/Y") on its next pass, in the
pod's namespace (reading it would take ``events: list`` in every namespace); its
NodeClaims name no pod, and ``karpenter.sh/nodepool`` says which pool a node is of, not
for whom; ``status.nominatedNodeName`` is the scheduler's for preemption (Karpenter v1.8
sets none). So the inventory reads the pod itself: a pod awaiting a new node that a
candidate node can take (its required node affinity allows the node's labels, and the
node has its GPUs free) is about to be bound there, since the scheduler binds it to the
first node that fits; it counts on the emptiest such node (one that holds no GPU pod yet,
as a node launched for the pod does; then the most GPUs free, as the scheduler's
spreading prefers), one node per pod. A pod no candidate can take counts nowhere: its
node has not joined yet, and no GPU of any running node is lost to it.

Pure: the ledger (``inventory.GpuLedger``) passes what it read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from distributetrain.core import names

SELECTOR_TERMS_PATH = ("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
                       "nodeSelectorTerms")


@dataclass(frozen=True, slots=True)
class AwaitingPod:
    """What a pod awaiting a new node claims: its GPUs (and requests), where it may go."""

    gpus: int
    terms: tuple  # its required node selector terms (any one must hold); () allows every node
    requested: tuple[tuple[str, int], ...] = ()  # its cpu, memory and ephemeral storage


def awaits_new_node(pod: Mapping) -> bool:
    """A pod made for a node the cluster adds, by its label (``names.LABEL_AWAITS_NEW_NODE``)."""
    return ((pod.get("metadata") or {}).get("labels") or {}).get(names.LABEL_AWAITS_NEW_NODE) == "true"


def awaiting_pod(spec: Mapping, gpus: int, requested: Mapping[str, int]) -> AwaitingPod:
    terms: object = spec
    for key in SELECTOR_TERMS_PATH:
        terms = (terms or {}).get(key) if isinstance(terms, Mapping) else None
    return AwaitingPod(gpus, tuple(terms or ()), tuple(requested.items()))


def allows(terms: Sequence[Mapping], node: str, labels: Mapping[str, str]) -> bool:
    """Kubernetes' required node affinity: any term whose every requirement holds (none: any node)."""
    return not terms or any(_term_holds(term, node, labels) for term in terms)


def _term_holds(term: Mapping, node: str, labels: Mapping[str, str]) -> bool:
    expressions = term.get("matchExpressions") or ()
    fields = term.get("matchFields") or ()
    if not expressions and not fields:
        return False  # an empty term matches no node (the API's rule)
    return (all(_holds(r, labels.get(r.get("key", ""))) for r in expressions)
            and all(_holds(r, node if r.get("key") == "metadata.name" else None) for r in fields))


def _holds(requirement: Mapping, value: str | None) -> bool:
    operator, values = requirement.get("operator"), list(requirement.get("values") or ())
    if operator == "In":
        return value in values
    if operator == "NotIn":
        return value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and value.lstrip("-").isdigit() and values:
        return int(value) > int(values[0]) if operator == "Gt" else int(value) < int(values[0])
    return False


def place(pods: Sequence[AwaitingPod], free: Mapping[str, int], held: Mapping[str, int],
          labels: Callable[[str], Mapping[str, str]]) -> tuple[Counter, dict[str, Counter]]:
    """Each pod on the candidate node it is about to be bound to, if any (see the module):
    ``free`` GPUs by candidate, ``held``, its GPUs other pods hold. Returns the GPUs and
    the requests the pods take, by node."""
    taken: Counter = Counter()
    requested: dict[str, Counter] = {}
    for pod in pods:
        fits = [node for node, gpus in free.items()
                if gpus - taken[node] >= pod.gpus and allows(pod.terms, node, labels(node))]
        if not fits:
            continue
        node = min(fits, key=lambda n: (held.get(n, 0) + taken[n] > 0, -(free[n] - taken[n]), n))
        taken[node] += pod.gpus
        requested.setdefault(node, Counter()).update(dict(pod.requested))
    return taken, requested
