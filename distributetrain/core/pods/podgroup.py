"""An attempt as one Kueue pod group (``--queue``): admitted all or nothing, placed after.

Kueue's plain-pod integration admits the pods that share a group name as one Workload
once all of them exist, against the LocalQueue's ClusterQueue quota (one podSet per pod
shape). The attempt's pods are therefore created in one burst, unpinned and held by a
scheduling gate of the job's own; Kueue adds its own gates and removes them at admission.
Only then is each pod given its node, from the inventory at that moment (a plan made
before hours in a queue is stale), and the job's gate removed, so the scheduler binds it.

Pod resource requests cannot change after creation, so the shares (the pods' GPU counts)
are chosen when the pods are created; admission chooses the nodes for them (``assign``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from distributetrain.core import errors, names
from distributetrain.core.pods import manifests
from distributetrain.core.settings import JobSettings
from distributetrain.core.pods.sshkeys import JobKeys

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
GROUP_COUNT_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"  # a WorkloadPriorityClass's name
# A failed or deleted pod would otherwise leave the Workload admitted, holding its quota
# while it waits for a replacement; with "false" the group ends with its first loss.
RETRIABLE_ANNOTATION = "kueue.x-k8s.io/retriable-in-group"
KUEUE_GATE_PREFIX = "kueue.x-k8s.io/"
PLACEMENT_GATE = f"{names.DOMAIN}/placement"


def gpu_quota(cluster_queue: Mapping, resource: str) -> int | None:
    """The most of ``resource`` a ClusterQueue can ever admit at once: its nominal quota
    and what it may borrow, over all flavors. None when no bound is known: it sets no
    quota for the resource, or it is in a cohort and may borrow without a limit."""
    spec = cluster_queue.get("spec") or {}
    in_cohort = bool(spec.get("cohortName") or spec.get("cohort"))
    quotas = [quota for group in spec.get("resourceGroups") or () for flavor in group.get("flavors") or ()
              for quota in flavor.get("resources") or () if quota.get("name") == resource]
    if not quotas or (in_cohort and any("borrowingLimit" not in quota for quota in quotas)):
        return None
    return sum(_count(quota.get("nominalQuota")) + (_count(quota.get("borrowingLimit")) if in_cohort else 0)
               for quota in quotas)


def _count(quantity: object) -> int:
    text = str(quantity or "0")
    return int(text) if text.isdigit() else 0


def group_name(job: str, attempt: int, token: str) -> str:
    """One Workload per group created: a later attempt's pods, or an attempt's started over,
    never join a group that has ended (Kueue keeps a finished Workload under its name).
    `token` (a few random characters) tells groups of the same attempt apart."""
    return f"{job}-r{attempt}-{token}"


def group_of(pod: Mapping) -> str:
    """The group a queued pod belongs to: Kueue names the group's Workload so."""
    return ((pod.get("metadata") or {}).get("labels") or {}).get(GROUP_LABEL, "")


def is_placed(pod: Mapping) -> bool:
    """The job has released the pod: it has been given its node."""
    return PLACEMENT_GATE not in gates(pod)


def queued(pod: dict, queue: str, group: str, group_size: int, priority_class: str = "") -> dict:
    """The (unpinned) pod as a member of its attempt's pod group, gated until placed;
    with `priority_class`, of that WorkloadPriorityClass."""
    if "affinity" in pod["spec"]:
        # Kueue accepts affinity added to a gated pod only if it had none.
        raise ValueError(f"pod {pod['metadata']['name']} is pinned: a queued pod gets its node at admission")
    metadata = dict(pod["metadata"])
    metadata["labels"] = {**metadata.get("labels", {}), QUEUE_LABEL: queue, GROUP_LABEL: group,
                          **({PRIORITY_CLASS_LABEL: priority_class} if priority_class else {})}
    metadata["annotations"] = {**metadata.get("annotations", {}), GROUP_COUNT_ANNOTATION: str(group_size),
                               RETRIABLE_ANNOTATION: "false"}
    spec = {**pod["spec"], "schedulingGates": [{"name": PLACEMENT_GATE}]}
    return {**pod, "metadata": metadata, "spec": spec}


def queued_attempt(settings: JobSettings, shares: Sequence[int], keys: JobKeys, attempt: int, group: str) -> list[dict]:
    """Everything a queued attempt creates, in creation order: the Secret, then its pods
    (workers, the chief's share last) unpinned, as members of the pod group ``group``.
    The manager creates exactly these and ``render --queue`` prints them."""
    secret, *pods = manifests.job_objects(settings, [(None, share) for share in shares], keys, attempt)
    return [secret, *(queued(pod, settings.queue, group, len(pods), settings.priority_class) for pod in pods)]


def gates(pod: Mapping) -> list[str]:
    return [gate["name"] for gate in (pod.get("spec") or {}).get("schedulingGates") or ()]


def kueue_gated(pod: Mapping) -> bool:
    """Whether Kueue holds the pod (its webhook added a gate of its own)."""
    return any(gate.startswith(KUEUE_GATE_PREFIX) for gate in gates(pod))


def refuse_unqueued(settings: JobSettings, admitted_as: Mapping) -> None:
    """Where Kueue queues every pod, queue name or not (``manageJobsWithoutQueueName``: its
    webhook gated ``admitted_as``, a pod naming no queue as the API server admits it), a job
    without ``--queue`` is bad input: its manager and its pods would wait for ever."""
    if kueue_gated(admitted_as) and not settings.queue:
        raise errors.UsageError("--queue", f"Kueue queues every pod in namespace {settings.namespace!r}: "
                                           f"name the job's LocalQueue, --queue=NAME")


def is_admitted(pod: Mapping) -> bool:
    """Kueue has admitted the pod's group: none of its gates is left on the pod."""
    return not kueue_gated(pod)


def assign(shares: Sequence[int], free: Mapping[str, int], allowed: Sequence[Collection[str]] | None = None,
           stack: bool = False) -> list[str] | None:
    """A distinct node for each share, where that many GPUs are free (and, with
    ``allowed``, among the nodes allowed to that share's pod); None if none fits. With
    ``stack``, shares may share a node its free GPUs hold them all (Kueue's topology
    assignment may put two pods of a group on one node).

    Largest share first, each on the node with the fewest free GPUs that holds it: a node
    that holds a share holds every smaller one, so taking the tightest fit never takes a
    node a later (smaller) share needed, unless no assignment exists at all. Where pods
    are allowed different nodes (a topology domain each), the pod allowed the fewest
    nodes goes first among equal shares. Ties by node name, so the result is deterministic.
    """
    allowed = allowed if allowed is not None else [free.keys()] * len(shares)
    order = sorted(range(len(shares)), key=lambda i: (-shares[i], len(allowed[i])))
    left = dict(free)
    chosen: dict[int, str] = {}
    for index in order:
        fitting = [(gpus, node) for node, gpus in left.items() if gpus >= shares[index] and node in allowed[index]]
        if not fitting:
            return None
        _, node = min(fitting)
        chosen[index] = node
        if stack:
            left[node] -= shares[index]
        else:
            del left[node]
    return [chosen[index] for index in range(len(shares))]


def pin_patch(node: str) -> dict:
    """Merge patch: the pod's required affinity to ``node``, as a planned pod is created with."""
    return {"spec": {"affinity": manifests.pinned_to(node)}}


def ungate_patch(pod: Mapping) -> list[dict]:
    """JSON patch removing the job's gate, and only if it is still where it was read."""
    index = gates(pod).index(PLACEMENT_GATE)
    path = f"/spec/schedulingGates/{index}"
    return [{"op": "test", "path": f"{path}/name", "value": PLACEMENT_GATE}, {"op": "remove", "path": path}]
