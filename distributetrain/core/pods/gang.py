"""An attempt's pods as one gang for the scheduler: a PodGroup of ``scheduling.k8s.io/v1beta1``.

Kubernetes 1.37 (beta, behind the GenericWorkload gate, its API version asked for) schedules
the pods that name one PodGroup (``spec.schedulingGroup.podGroupName``) whose policy is a gang
of ``minCount`` together: in one pod group scheduling cycle it binds them all, or none while
the cluster cannot hold them all (k8s.io/kubernetes v1.37.2, pkg/scheduler/
schedule_one_podgroup.go and its GangScheduling plugin). The placement Lease keeps two
managers from planning on the same free GPUs; the gang keeps any pod the Lease never saw (a
manager of another --lock-namespace, a tenant's pod after the survey) from leaving an attempt
half bound, its bound pods holding GPUs idle until --worker-ready-timeout (docs/architecture.md,
"Gang scheduling").

One PodGroup per attempt, of all its pods, owned and labelled as the job's other objects, so
teardown and the garbage collector delete it; created before its pods (a pod of a group not
there yet waits for it). Not for shares on nodes the cluster adds (``core.placement.scaleup``): the
shares on running nodes would then hold no GPUs while the nodes boot, and an autoscaler that
does not know PodGroups would see pods pending that fit where they are pinned.
"""

from __future__ import annotations

import copy

from distributetrain.core.pods import manifests
from distributetrain.core import names
from distributetrain.core.settings import JobSettings

API_VERSION = "scheduling.k8s.io/v1beta1"
KIND = "PodGroup"


def pod_group(settings: JobSettings, attempt: int, pods: int) -> dict:
    """The attempt's gang: every one of its ``pods`` scheduled together, or none."""
    metadata = {"name": names.gang_name(settings.job_name, attempt, settings.owner_uid),
                "namespace": settings.namespace,
                "labels": names.job_labels(settings.job_name, names.ROLE_GANG, settings.owner_uid)}
    if owners := manifests.owner_references(settings):
        metadata["ownerReferences"] = owners
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata,
            "spec": {"schedulingPolicy": {"gang": {"minCount": pods}}}}


def joining(pod: dict, group: str) -> dict:
    """A job pod, one of the gang ``group``."""
    pod = copy.deepcopy(pod)
    pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return pod


def job_objects(settings: JobSettings, objects: list[dict], attempt: int) -> list[dict]:
    """An attempt's objects in creation order (``placing.attempt_objects``), its PodGroup
    just before its pods, and each pod joining it."""
    pods = [obj for obj in objects if obj["kind"] == "Pod"]
    group = pod_group(settings, attempt, len(pods))
    rest = [obj for obj in objects if obj["kind"] != "Pod"]
    return [*rest, group, *(joining(pod, group["metadata"]["name"]) for pod in pods)]
